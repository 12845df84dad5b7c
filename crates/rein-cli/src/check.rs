//! `rein check CONFIG [--json]`: load a config and report every problem.
//!
//! Runs exactly what `rein run` runs at start — file reading, `${ENV}`
//! interpolation, JSON Schema compilation and the registry's integrity check —
//! so a config that passes here loads there (with the same environment).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use rein_engine::config::{self, ConfigProblem, Registry};
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

/// Checks the config; exit 0 when it loads, 1 when it has problems.
///
/// The problems are data when `--json` is given (stdout) and diagnostics
/// otherwise (stderr, one `FILE[:LINE:COLUMN]: FIELD: MESSAGE` per line).
pub fn run(args: CheckArgs) -> ExitCode {
    let loaded = config::load(&args.config);
    if args.json {
        let problems: Vec<Value> = match &loaded {
            Ok(_) => Vec::new(),
            Err(errors) => errors.problems().iter().map(problem_json).collect(),
        };
        let doc = json!({ "ok": loaded.is_ok(), "problems": problems });
        println!("{doc}");
    } else {
        match &loaded {
            Ok(registry) => println!("ok: {}", summary(registry)),
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
