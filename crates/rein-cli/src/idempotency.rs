//! `rein idempotency`: the operator's path for submissions whose outcome is
//! uncertain (a process died after reserving a key and before completing).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use rein_core::TenantId;
use rein_store::IdempotencyState;
use serde_json::json;

use crate::run::runtime;

/// Arguments of `rein idempotency`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein idempotency list --in-progress                     # reservations a crash may have left, in rein-data/rein.db
  rein idempotency list --tenant acme --json --data postgres://rein@db.internal/rein
  rein idempotency clear --tenant acme order-A-1001-move  # after checking the run and the tools' state")]
pub struct IdempotencyArgs {
    #[command(subcommand)]
    command: IdempotencyCommand,
    /// The SQLite file `rein serve` records in.
    /// Or a PostgreSQL database: `postgres://user[:password]@host[:port]/db`.
    #[arg(
        long,
        visible_alias = "db",
        global = true,
        default_value = "rein-data/rein.db"
    )]
    data: PathBuf,
    /// Print JSON.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum IdempotencyCommand {
    /// List idempotency records, oldest first, with the run each started
    /// (a reservation whose process died is resolved by the next retry of
    /// its key: answered from that run, or released when nothing ran).
    #[command(after_help = "\
Examples:
  rein idempotency list                             # every tenant's, in rein-data/rein.db
  rein idempotency list --in-progress               # reservations a crash may have left
  rein idempotency list --tenant acme --json --data postgres://rein@db.internal/rein")]
    List {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
        /// Only reservations still in progress (a crash may have left them).
        #[arg(long)]
        in_progress: bool,
    },
    /// Delete one record so the key can be used again. Check first (the
    /// run's status, the tools' own state) whether the original request
    /// took effect: rein cannot know.
    #[command(after_help = "\
Examples:
  rein idempotency list --tenant acme --in-progress       # the record, and the run it started
  rein runs show RUN_ID                                   # did it take effect?
  rein idempotency clear --tenant acme order-A-1001-move  # the key, as the client sent it")]
    Clear {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The key.
        key: String,
    },
}

/// Runs `rein idempotency`.
pub fn run(args: IdempotencyArgs) -> Result<ExitCode> {
    runtime()?.block_on(async {
        let store = crate::store::open_existing(&args.data)?;
        match args.command {
            IdempotencyCommand::List {
                tenant,
                in_progress,
            } => {
                let tenant = tenant.map(TenantId::new).transpose().context("invalid --tenant")?;
                let state = in_progress.then_some(IdempotencyState::InProgress);
                let records = store
                    .idempotency_records(tenant.as_ref(), state, 1000)
                    .await?;
                if args.json {
                    let doc: Vec<_> = records
                        .iter()
                        .map(|r| {
                            json!({"tenant": r.tenant, "key": r.key, "state": r.state.as_str(),
                                   "run_id": r.run_id, "holder": r.owner,
                                   "holder_until_ms": r.holder_until_ms,
                                   "status": r.response.as_ref().map(|s| s.status),
                                   "location": r.response.as_ref().and_then(|s| s.location.clone()),
                                   "created_at_ms": r.created_at_ms, "expires_at_ms": r.expires_at_ms})
                        })
                        .collect();
                    println!("{}", serde_json::to_string_pretty(&doc)?);
                } else if records.is_empty() {
                    println!("no idempotency records");
                } else {
                    println!("{:<16} {:<12} {:<7} {:<38} key", "tenant", "state", "status", "run");
                    for r in &records {
                        let status = r.response.as_ref().map_or("-".to_owned(), |s| s.status.to_string());
                        let run = r.run_id.as_ref().map_or("-", |id| id.as_str());
                        println!(
                            "{:<16} {:<12} {:<7} {:<38} {}",
                            r.tenant.as_str(),
                            r.state.as_str(),
                            status,
                            run,
                            r.key
                        );
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            IdempotencyCommand::Clear { tenant, key } => {
                let tenant = TenantId::new(tenant).context("invalid --tenant")?;
                let cleared = store.clear_idempotency(&tenant, &key).await?;
                if args.json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(
                            &json!({"tenant": tenant, "key": key, "cleared": cleared})
                        )?
                    );
                }
                if cleared {
                    if !args.json {
                        println!("cleared {key} for tenant {tenant}");
                    }
                    Ok(ExitCode::SUCCESS)
                } else {
                    crate::log::note(
                        crate::log::Level::Warn,
                        &format!("no record of {key} for tenant {tenant}"),
                    );
                    Ok(ExitCode::from(1))
                }
            }
        }
    })
}
