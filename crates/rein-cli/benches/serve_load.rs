//! The bounded load test of issue 6 as end-to-end figures: 1,000 queued
//! runs, 10% injected tool faults, two `rein serve` processes on one
//! SQLite file. Every run must end, none lost, none executed twice; the
//! report gives throughput and submission latency. The harness and what it
//! checks are described in `tests/load/mod.rs`.
//!
//! ```text
//! cargo bench -p rein-cli --bench serve_load [-- --runs N] [--workers N]
//!     [--concurrency N] [--fault-every N] [--timeout SECS] [--json]
//! ```
//!
//! `REIN_LOAD_RUNS` sets the number of runs when `--runs` is not given.
//! Exits 1 when a run is lost or executed twice, 2 when the harness fails.

use std::num::NonZeroU32;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};

#[path = "../tests/load/mod.rs"]
mod load;

/// Parses the arguments after `--`; `cargo bench` adds `--bench`, which is
/// ignored.
fn parse(args: impl Iterator<Item = String>) -> Result<(load::LoadConfig, bool)> {
    let mut config = load::LoadConfig::default();
    if let Ok(runs) = std::env::var("REIN_LOAD_RUNS") {
        config.runs = runs
            .parse()
            .with_context(|| format!("REIN_LOAD_RUNS must be a number, but it is {runs:?}"))?;
    }
    let mut json = false;
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--bench" => {}
            "--json" => json = true,
            "--runs" => config.runs = value("--runs")?.parse().context("--runs")?,
            "--workers" => config.workers = value("--workers")?.parse().context("--workers")?,
            "--servers" => config.servers = value("--servers")?.parse().context("--servers")?,
            "--concurrency" => {
                config.client_concurrency =
                    value("--concurrency")?.parse().context("--concurrency")?;
            }
            "--fault-every" => {
                config.fault_every = value("--fault-every")?
                    .parse::<NonZeroU32>()
                    .context("--fault-every must be at least 1")?;
            }
            "--timeout" => {
                config.timeout =
                    Duration::from_secs(value("--timeout")?.parse().context("--timeout")?);
            }
            other => bail!("unknown argument {other:?}"),
        }
    }
    Ok((config, json))
}

fn main() -> ExitCode {
    let (config, json) = match parse(std::env::args().skip(1)) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("serve_load: {e:#}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("serve_load: cannot start a runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let report = match runtime.block_on(load::run(config)) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("serve_load: {e:#}");
            return ExitCode::from(2);
        }
    };
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("serve_load: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{report}");
    }
    if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "serve_load: {} runs lost, {} executed twice",
            report.lost,
            report.duplicated()
        );
        ExitCode::from(1)
    }
}
