//! `rein handoff`: the package a human needs to take over a run.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use rein_core::RunId;
use rein_core::handoff::HandoffPackage;
use rein_store::Store;

use crate::run::runtime;

/// Arguments of `rein handoff`.
#[derive(Debug, Args)]
pub struct HandoffArgs {
    /// The run that was handed off.
    run_id: String,
    /// The SQLite file the run is recorded in.
    /// Or a PostgreSQL database: `postgres://user[:password]@host[:port]/db`.
    #[arg(long, default_value = "rein-data/rein.db")]
    data: PathBuf,
    /// Print the package as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `rein handoff`: exit 0 with the package, 1 when none of the run's
/// records awaits a human, 2 when it cannot be read.
pub fn run(args: HandoffArgs) -> Result<ExitCode> {
    let run_id = RunId::new(args.run_id).context("invalid RUN_ID")?;
    runtime()?.block_on(async {
        let store: Arc<dyn Store> = crate::store::open_existing(&args.data)?;
        let Some(record) = store.get_run(&run_id).await? else {
            bail!("no run {run_id} in {}", crate::store::shown(&args.data));
        };
        // From the ledger as it stands, as `GET /v1/runs/{id}/handoff`.
        let ledger = rein_engine::run::tree_records(store.as_ref(), &run_id).await?;
        let fresh = rein_engine::run::revise(store.as_ref(), &record, &ledger).await?;
        let Some(package) = fresh.or(record.report).and_then(|r| r.handoff) else {
            crate::log::note(
                crate::log::Level::Warn,
                &format!(
                    "run {run_id} has no handoff package: it is {} and none of its records awaits a human",
                    record.status.as_str()
                ),
            );
            return Ok(ExitCode::from(1));
        };
        if args.json {
            println!("{}", serde_json::to_string_pretty(&package)?);
        } else {
            print!("{}", render(&package));
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The package, for a human.
pub fn render(p: &HandoffPackage) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "handoff for run {} (agent {})", p.run_id, p.agent);
    let _ = writeln!(out, "  why: {}", p.reason);
    let _ = writeln!(out, "  task: {}", p.input);
    let _ = writeln!(out, "\n  awaiting your decision:");
    if p.awaiting_decision.is_empty() {
        let _ = writeln!(out, "    (nothing)");
    }
    for e in &p.awaiting_decision {
        let _ = writeln!(
            out,
            "    ! {} [{}] {} — {}",
            e.tool, e.status, e.intent_id, e.note
        );
    }
    let _ = writeln!(
        out,
        "\n  in flight (might still be running — check or cancel first):"
    );
    if p.in_flight.is_empty() {
        let _ = writeln!(out, "    (nothing)");
    }
    for f in &p.in_flight {
        let _ = writeln!(out, "    ~ {} — {}", f.what, f.advice);
    }
    let _ = writeln!(out, "\n  certain:");
    for e in &p.certain {
        let _ = writeln!(out, "    ✔ {} [{}] — {}", e.tool, e.status, e.note);
    }
    let _ = writeln!(out, "  uncertain:");
    for e in &p.uncertain {
        let _ = writeln!(out, "    ? {} [{}] — {}", e.tool, e.status, e.note);
    }
    let _ = writeln!(out, "\n  timeline:");
    for t in &p.timeline {
        let ledger = t.ledger.map(|l| format!(" [{l}]")).unwrap_or_default();
        let _ = writeln!(
            out,
            "    step {:<2} {}{ledger} input {} → {}",
            t.step, t.tool, t.input_digest, t.result
        );
    }
    let _ = writeln!(out, "\n  tried:");
    for s in &p.strategies_tried {
        let _ = writeln!(out, "    - {s}");
    }
    let _ = writeln!(out, "  not tried:");
    for s in &p.strategies_not_tried {
        let _ = writeln!(out, "    - {s}");
    }
    out
}
