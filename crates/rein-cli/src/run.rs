//! `rein run`: run an agent from a config to its end.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};
use clap::Args;
use rein_core::{Outcome, RunReport, TenantId};
use rein_engine::bind::bind_agent;
use rein_engine::config::{CompiledSchemas, Loader, Registry};
use rein_engine::run::{Engine, Observer, RunOutput, RunRequest, http_client};
use rein_store::{SqliteStore, Store};
use serde_json::json;

use crate::timeline;

/// Arguments of `rein run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The config: a TOML file or a directory of them.
    #[arg(long, short)]
    config: PathBuf,
    /// The agent to run, as named in the config.
    #[arg(long, short)]
    agent: String,
    /// The task for the agent.
    #[arg(long, short)]
    input: String,
    /// The SQLite file runs are recorded in (created on first use).
    #[arg(long, default_value = "rein-data/rein.db")]
    data: PathBuf,
    /// The tenant the run belongs to.
    #[arg(long, default_value = "default")]
    tenant: String,
    /// Print one JSON document (run id, report, events) instead of the
    /// live timeline.
    #[arg(long)]
    json: bool,
}

/// Runs `rein run`. Exit status: 0 when the run succeeded, 1 when it ended
/// otherwise (the report says how), 2 when it could not run.
pub fn run(args: RunArgs) -> Result<ExitCode> {
    let runtime = runtime()?;
    runtime.block_on(async {
        let loader = Loader::new();
        let registry = loader
            .load(&args.config)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("the config {} has problems", args.config.display()))?;
        let tenant = TenantId::new(args.tenant).context("invalid --tenant")?;
        let out = execute(
            &registry,
            &args.agent,
            &args.input,
            &args.data,
            tenant,
            args.json,
        )
        .await?;
        Ok(if out.report.outcome == Outcome::Succeeded {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

/// The tokio runtime of a CLI command.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Binds and runs an agent, printing the live timeline (or, with `json`,
/// one document at the end) and the report.
pub async fn execute(
    registry: &Registry,
    agent: &str,
    input: &str,
    data: &Path,
    tenant: TenantId,
    json_output: bool,
) -> Result<RunOutput> {
    let schemas = CompiledSchemas::compile(registry).map_err(|e| anyhow::anyhow!("{e}"))?;
    let client = http_client().context("cannot build the HTTP client")?;
    let env = |name: &str| std::env::var(name).ok();
    let binding = bind_agent(registry, agent, &client, &env)?;
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(data)
            .with_context(|| format!("cannot open the run store {}", data.display()))?,
    );
    let engine = Engine::builder(store.clone())
        .http_client(client)
        .breakers(registry.breakers().clone())
        .build()?;
    let observer: Option<Observer> = if json_output {
        None
    } else {
        let started = Arc::new(AtomicU64::new(0));
        Some(Arc::new(move |event: &rein_core::Event| {
            let _ = started.compare_exchange(0, event.at_ms, Ordering::AcqRel, Ordering::Acquire);
            println!("{}", timeline::line(event, started.load(Ordering::Acquire)));
        }))
    };
    let out = engine
        .run(
            &binding,
            &schemas,
            RunRequest {
                tenant: Some(tenant),
                input: input.to_owned(),
                observer,
                ..RunRequest::default()
            },
        )
        .await?;
    if json_output {
        let events = store.events(&out.run_id, 0).await?;
        let ledger = store.ledger(&out.run_id).await?;
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "run_id": out.run_id, "report": out.report, "ledger": ledger, "events": events,
            }))?
        );
    } else {
        println!();
        println!("run {}", out.run_id);
        print!("{}", timeline::report(&out.report));
    }
    Ok(out)
}

/// Whether a report is the one the order-desk demo is designed to end with.
pub fn is_demo_outcome(report: &RunReport) -> bool {
    report.outcome == Outcome::PartialSuccess && report.recoverable
}
