//! The log subscriber: levels from `--log-level` and `RUST_LOG`, text or
//! JSON lines on stderr, colour only on a terminal, every line redacted.
//!
//! # Precedence
//!
//! `--log-level` sets the level of everything `RUST_LOG` does not mention;
//! `RUST_LOG` (the `tracing_subscriber::EnvFilter` syntax, e.g.
//! `rein_engine=debug,hyper=warn`, or just `debug`) is applied on top, so
//! where it speaks it wins. Without either, `rein serve` logs `info` (what
//! a server decides: takeovers, orphans, breakers, fallbacks) and every
//! other command `warn`.
//!
//! # Redaction
//!
//! Every line, whichever crate wrote it (the server's access log
//! included), passes [`rein_core::redact::text`] before it reaches stderr:
//! the secrets the config holds, URL queries and userinfo never reach a
//! log file or a log shipper.

use std::io::{IsTerminal, Write};

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;

/// The global logging flags.
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// The level of log lines on stderr: error, warn, info, debug or trace
    /// (default: info for `serve`, warn otherwise). `RUST_LOG` directives
    /// apply on top of it.
    #[arg(long, global = true, value_name = "LEVEL")]
    log_level: Option<LevelFilter>,
    /// The shape of log lines: `text` for people, `json` (one object a
    /// line) for log shippers.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields`, `target`.
    Json,
}

/// Installs the subscriber for this process; `default` is the command's
/// level when neither `--log-level` nor `RUST_LOG` says otherwise.
pub fn init(args: &LogArgs, default: LevelFilter) {
    let filter = EnvFilter::builder()
        .with_default_directive(args.log_level.unwrap_or(default).into())
        .from_env_lossy();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(RedactingStderr)
        .with_target(false);
    let result = match args.log_format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
    if let Err(e) = result {
        eprintln!("warning: logging is not set up: {e}");
    }
}

/// Stderr, one redacted write per log line.
struct RedactingStderr;

impl<'a> MakeWriter<'a> for RedactingStderr {
    type Writer = RedactedLine;

    fn make_writer(&'a self) -> RedactedLine {
        RedactedLine(Vec::with_capacity(256))
    }
}

/// One log line, buffered so that it is redacted whole (a secret is never
/// split across two writes) and written when the formatter drops it.
struct RedactedLine(Vec<u8>);

impl Write for RedactedLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactedLine {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.0);
        let clean = rein_core::redact::text(&text);
        let mut stderr = std::io::stderr().lock();
        let _ = stderr.write_all(clean.as_bytes());
        let _ = stderr.flush();
    }
}
