//! `rein`: run LLM agents safely against the real world.
//!
//! The binary is thin: it parses arguments into a validated command, calls
//! library code, prints data to stdout and diagnostics to stderr, and maps
//! errors to exit codes in one place.
#![forbid(unsafe_code)]

mod key;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// rein — a runtime that makes LLM agents safe to run against the real world.
///
/// rein governs every action an agent's model proposes: one deadline and one
/// triple budget per run, idempotency keys bound to intent, classified and
/// budgeted retries, circuit breakers, a write-ahead side-effect ledger with
/// compensation, and honest outcomes.
#[derive(Debug, Parser)]
#[command(name = "rein", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Derive the idempotency key rein sends for a tool call.
    ///
    /// The key is digest(tenant | intent | tool | normalized arguments),
    /// identical in every process and release. Use it to find a call in a
    /// tool's deduplication store, or to check another implementation.
    Key(key::KeyArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Key(args) => key::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
