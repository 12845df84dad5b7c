//! `rein check CONFIG [--json]`: load a config and report every problem.
//!
//! Runs exactly what `rein run` and `rein serve` run at start —
//! [`rein_engine::startup::prepare`]: file reading, `${ENV}` interpolation,
//! the integrity check and numeric ranges, JSON Schema compilation, every
//! provider (scripts read), tool adapter, agent and model binding bound —
//! so a config that passes here starts there (with the same environment).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use rein_engine::config::{ConfigErrors, ConfigProblem, Loader, Registry};
use rein_engine::run::http_client;
use rein_engine::startup::{self, Startup};
use serde_json::{Value, json};

/// Arguments of `rein check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// A config file, or a directory whose `*.toml` files form one config.
    config: PathBuf,
    /// Print one JSON document on stdout:
    /// `{"ok": bool, "problems": [{"file", "field", "message", "line"?, "column"?}]}`.
    #[arg(long)]
    json: bool,
}

/// Checks the config; exit 0 when it starts, 1 when it has problems.
///
/// The problems are data when `--json` is given (stdout) and diagnostics
/// otherwise (stderr, one `FILE[:LINE:COLUMN]: FIELD: MESSAGE` per line).
/// Warnings (a secret too short to be redacted) do not fail the check;
/// they are printed as `warning: FILE: FIELD: MESSAGE`, or listed under
/// `"warnings"`.
pub fn run(args: CheckArgs) -> ExitCode {
    let loaded = prepare(&args.config);
    if args.json {
        let (problems, warnings): (Vec<Value>, Vec<Value>) = match &loaded {
            Ok(startup) => (
                Vec::new(),
                startup.warnings.iter().map(problem_json).collect(),
            ),
            Err(errors) => (
                errors.problems().iter().map(problem_json).collect(),
                Vec::new(),
            ),
        };
        let doc = json!({ "ok": loaded.is_ok(), "problems": problems, "warnings": warnings });
        println!("{doc}");
    } else {
        match &loaded {
            Ok(startup) => {
                for warning in &startup.warnings {
                    eprintln!("warning: {warning}");
                }
                println!("ok: {}", summary(&startup.registry));
            }
            Err(errors) => {
                for problem in errors.problems() {
                    eprintln!("{problem}");
                }
                eprintln!(
                    "error: {} in {}",
                    count(errors.len(), "problem", "problems"),
                    args.config.display()
                );
            }
        }
    }
    if loaded.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The start's own checks, as `rein run` and `rein serve` run them.
fn prepare(path: &std::path::Path) -> Result<Startup, ConfigErrors> {
    let client = http_client().map_err(|e| {
        ConfigErrors::new(vec![ConfigProblem::new(
            path,
            "",
            format!("cannot build the HTTP client: {e}"),
        )])
    })?;
    let env = |name: &str| std::env::var(name).ok();
    startup::prepare(&Loader::new(), path, &client, &env, None)
}

fn problem_json(problem: &ConfigProblem) -> Value {
    let mut doc = json!({
        "file": problem.file.display().to_string(),
        "field": problem.field,
        "message": problem.message,
    });
    if let (Some(position), Some(map)) = (problem.position, doc.as_object_mut()) {
        map.insert("line".into(), json!(position.line));
        map.insert("column".into(), json!(position.column));
    }
    doc
}

/// "4 tools, 1 agent, 2 providers, 1 resource group".
fn summary(registry: &Registry) -> String {
    [
        count(registry.tools().len(), "tool", "tools"),
        count(registry.agents().len(), "agent", "agents"),
        count(registry.providers().len(), "provider", "providers"),
        count(
            registry.resource_groups().len(),
            "resource group",
            "resource groups",
        ),
    ]
    .join(", ")
}

fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
