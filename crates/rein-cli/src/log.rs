//! The log subscriber: levels from `--log-level` and `RUST_LOG`, text or
//! JSON lines on stderr, colour only on a terminal, every line redacted;
//! and the CLI's own notes ([`note`]).
//!
//! # Precedence
//!
//! `--log-level` sets the level of everything `RUST_LOG` does not mention;
//! `RUST_LOG` (the `tracing_subscriber::EnvFilter` syntax, e.g.
//! `rein_engine=debug,hyper=warn`, or just `debug`) is layered on top: the
//! filter is `LEVEL,RUST_LOG`, so a directive for a target wins for that
//! target only, and a bare level in `RUST_LOG` replaces `--log-level`.
//! Without either, `rein serve` logs `info` (what a server decides:
//! takeovers, orphans, breakers, fallbacks) and every other command
//! `warn`.
//!
//! # Redaction
//!
//! Every line, whichever crate wrote it (the server's access log
//! included), passes [`rein_engine::log::RedactingWriter`] before it
//! reaches stderr — JSON lines field by field, so they stay JSON — and a
//! panic is reported redacted ([`rein_engine::log::install_panic_hook`]).
//!
//! # What is JSON
//!
//! With `--log-format json` every line on stderr is one JSON object: log
//! lines, and the CLI's own notes and errors (`rein run: run … started`,
//! `rein check`'s problems, `error: …`), which are then events of target
//! `rein::cli`, always shown whatever the level. With `text` the notes are
//! plain lines, as a person reads them.

use std::io::IsTerminal;
use std::sync::OnceLock;

use clap::{Args, ValueEnum};
use rein_engine::log::RedactingWriter;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

/// The global logging flags.
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// The level of log lines on stderr: off, error, warn, info, debug or
    /// trace (default: info for `serve`, warn otherwise). `RUST_LOG`
    /// directives are layered on top of it (`RUST_LOG=rein_engine=debug`
    /// raises that crate only).
    #[arg(long, global = true, value_name = "LEVEL")]
    log_level: Option<LevelFilter>,
    /// The shape of stderr: `text` for people, `json` (one object a line,
    /// the CLI's own notes included) for log shippers.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Whether log lines and help use color: `auto` (on a terminal, unless
    /// `NO_COLOR` is set), `always` or `never`.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = ColorWhen::Auto)]
    pub color: ColorWhen,
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorWhen {
    /// On a terminal, unless `NO_COLOR` is set to anything but nothing
    /// (<https://no-color.org>).
    Auto,
    /// Always, even into a pipe.
    Always,
    /// Never.
    Never,
}

impl ColorWhen {
    /// Whether a stream that `is_terminal` gets color, `NO_COLOR` being
    /// `no_color`.
    pub fn enabled(self, is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
        match self {
            ColorWhen::Always => true,
            ColorWhen::Never => false,
            ColorWhen::Auto => is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty),
        }
    }

    /// The same choice for clap's help and errors.
    pub fn for_clap(self) -> clap::ColorChoice {
        match self {
            // clap's own `auto` reads the terminal and `NO_COLOR`.
            ColorWhen::Auto => clap::ColorChoice::Auto,
            ColorWhen::Always => clap::ColorChoice::Always,
            ColorWhen::Never => clap::ColorChoice::Never,
        }
    }

    /// The choice written among `args` (`--color WHEN` or
    /// `--color=WHEN`), read before clap parses them so that its own help
    /// and errors follow it; `Auto` when absent or not a choice (clap then
    /// names the mistake).
    pub fn scan(args: &[std::ffi::OsString]) -> ColorWhen {
        let mut found = ColorWhen::Auto;
        let mut args = args.iter().map(|a| a.to_str().unwrap_or(""));
        while let Some(arg) = args.next() {
            let value = match arg.strip_prefix("--color") {
                Some("") => args.next().unwrap_or(""),
                Some(rest) => match rest.strip_prefix('=') {
                    Some(value) => value,
                    None => continue,
                },
                None if arg == "--" => break,
                None => continue,
            };
            if let Ok(when) = ColorWhen::from_str(value, true) {
                found = when;
            }
        }
        found
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields`, `target`.
    Json,
}

/// The format chosen at [`init`], for [`note`].
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// The targets of the CLI's own notes and of panics: always shown.
const ALWAYS: &str = "rein::cli=trace,rein::panic=trace";

/// The filter: `level`, then `rust_log` layered on it (later directives
/// win per target), then the notes that are always shown.
fn filter(level: LevelFilter, rust_log: Option<&str>) -> EnvFilter {
    let mut directives = level.to_string();
    if let Some(extra) = rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        directives.push(',');
        directives.push_str(extra);
    }
    directives.push(',');
    directives.push_str(ALWAYS);
    EnvFilter::builder().parse_lossy(directives)
}

/// Installs the subscriber and the panic hook for this process; `default`
/// is the command's level when neither `--log-level` nor `RUST_LOG` says
/// otherwise.
pub fn init(args: &LogArgs, default: LevelFilter) {
    let _ = FORMAT.set(args.log_format);
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = filter(args.log_level.unwrap_or(default), rust_log.as_deref());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(args.log_format == LogFormat::Json);
    let result = match args.log_format {
        LogFormat::Text => builder
            .with_writer(|| RedactingWriter::new(std::io::stderr()))
            .with_ansi(args.color.enabled(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            ))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_writer(|| RedactingWriter::json_lines(std::io::stderr()))
            .with_ansi(false)
            .try_init(),
    };
    if let Err(e) = result {
        eprintln!("warning: logging is not set up: {e}");
    }
    rein_engine::log::install_panic_hook();
}

/// How important a note is, in JSON lines.
#[derive(Debug, Clone, Copy)]
pub enum Level {
    /// What the command is doing.
    Info,
    /// Something to look at.
    Warn,
    /// Why the command failed.
    Error,
}

/// Writes one of the CLI's own notes on stderr: a plain line in text mode,
/// a JSON log line (target `rein::cli`) with `--log-format json`; redacted
/// either way.
pub fn note(level: Level, text: &str) {
    if FORMAT.get() == Some(&LogFormat::Json) {
        match level {
            Level::Info => tracing::info!(target: "rein::cli", "{text}"),
            Level::Warn => tracing::warn!(target: "rein::cli", "{text}"),
            Level::Error => tracing::error!(target: "rein::cli", "{text}"),
        }
    } else {
        use std::io::Write as _;
        let mut stderr = RedactingWriter::new(std::io::stderr());
        let _ = writeln!(stderr, "{text}");
    }
}

#[cfg(test)]
mod color_tests {
    use std::ffi::{OsStr, OsString};

    use super::ColorWhen;

    fn args(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn the_choice_is_read_in_either_spelling_and_the_last_wins() {
        assert_eq!(ColorWhen::scan(&args("rein runs list")), ColorWhen::Auto);
        assert_eq!(
            ColorWhen::scan(&args("rein --color never runs list")),
            ColorWhen::Never
        );
        assert_eq!(
            ColorWhen::scan(&args("rein runs list --color=always")),
            ColorWhen::Always
        );
        assert_eq!(
            ColorWhen::scan(&args("rein --color never runs --color=always")),
            ColorWhen::Always
        );
        // Not a choice, or past `--`: clap decides.
        assert_eq!(
            ColorWhen::scan(&args("rein --color=sometimes")),
            ColorWhen::Auto
        );
        assert_eq!(
            ColorWhen::scan(&args("rein run -- --color never")),
            ColorWhen::Auto
        );
        assert_eq!(
            ColorWhen::scan(&args("rein --colorful never")),
            ColorWhen::Auto
        );
    }

    #[test]
    fn auto_is_a_terminal_without_no_color() {
        assert!(ColorWhen::Auto.enabled(true, None));
        assert!(ColorWhen::Auto.enabled(true, Some(OsStr::new(""))));
        assert!(!ColorWhen::Auto.enabled(true, Some(OsStr::new("1"))));
        assert!(!ColorWhen::Auto.enabled(false, None));
        assert!(ColorWhen::Always.enabled(false, Some(OsStr::new("1"))));
        assert!(!ColorWhen::Never.enabled(true, None));
    }
}
