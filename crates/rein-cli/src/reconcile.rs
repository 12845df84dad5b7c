//! `rein reconcile`: sweep the ledger for records in doubt or unconcluded.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use rein_engine::SystemClock;
use rein_engine::bind::{bind_compensations, bind_tools};
use rein_engine::reconcile::{ReconcileConfig, ReconcileReport, Reconciler, SweepClasses};
use rein_engine::run::http_client;
use rein_engine::startup::Purpose;
use rein_store::Store;

use crate::run::{runtime, start};

/// Arguments of `rein reconcile`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein reconcile --config examples/order-desk --once     # one sweep; exit 1 if records now await a human
  rein reconcile -c examples/order-desk --pending-timeout 2m --idempotent-every 10s   # on a schedule, until Ctrl-C
  rein reconcile -c examples/order-desk --data postgres://rein@db.internal/rein --once --json")]
pub struct ReconcileArgs {
    /// The config whose tools' status endpoints decide records in doubt.
    #[arg(long, short)]
    config: PathBuf,
    /// The SQLite file runs are recorded in.
    /// Or a PostgreSQL database: `postgres://user[:password]@host[:port]/db`.
    #[arg(long, visible_alias = "db", default_value = "rein-data/rein.db")]
    data: PathBuf,
    /// Sweep once and exit, instead of sweeping on a schedule.
    #[arg(long)]
    once: bool,
    /// Age after which a pending record counts as abandoned (e.g. 5m, 30s).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pending_timeout: Duration,
    /// Sweep interval for idempotent records (scheduled mode).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    idempotent_every: Duration,
    /// Sweep interval for irreversible records (scheduled mode).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    irreversible_every: Duration,
    /// Print each sweep's report as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `rein reconcile`. With `--once`: exit 0 when nothing was handed
/// off, 1 when records now wait for a human.
pub fn run(args: ReconcileArgs) -> Result<ExitCode> {
    runtime()?.block_on(async {
        // The same steps as `rein check`: what it refuses, a sweep does.
        let registry = start(&args.config, Purpose::Run)?.registry;
        let store: Arc<dyn Store> = crate::store::open(&args.data)?;
        let reconciler = Reconciler::new(
            store,
            Arc::new(SystemClock::new()),
            http_client().context("cannot build the HTTP client")?,
            bind_tools(&registry)?,
            bind_compensations(&registry)?,
            ReconcileConfig {
                pending_timeout: args.pending_timeout,
                idempotent_every: args.idempotent_every,
                irreversible_every: args.irreversible_every,
                ..ReconcileConfig::default()
            },
        );
        if args.once {
            let report = reconciler.sweep(SweepClasses::ALL).await?;
            print(&report, args.json)?;
            return Ok(if report.handed_off.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            });
        }
        reconciler
            .run_forever(|report| {
                if let Err(e) = print(report, args.json) {
                    crate::log::note(crate::log::Level::Error, &format!("error: {e:#}"));
                }
            })
            .await;
        Ok(ExitCode::SUCCESS)
    })
}

fn print(report: &ReconcileReport, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(report)?);
        return Ok(());
    }
    for r in &report.fixed {
        println!(
            "fixed     {} {} {}: {} → {} ({})",
            r.run_id, r.intent_id, r.tool, r.from, r.to, r.reason
        );
    }
    for r in &report.handed_off {
        println!(
            "handoff   {} {} {}: {} → {} ({})",
            r.run_id, r.intent_id, r.tool, r.from, r.to, r.reason
        );
    }
    let leases = report.leases.as_ref().map_or(0, |l| l.reclaimed.len());
    println!(
        "{} fixed, {} handed off, {} skipped, {} reclaimed",
        report.fixed.len(),
        report.handed_off.len(),
        report.skipped,
        rein_core::plural::count(leases, "lease")
    );
    Ok(())
}
