//! `rein run`: run an agent from a config to its end.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};
use clap::Args;
use rein_core::{Outcome, RunId, RunReport, TenantId};
use rein_engine::bind::bind_agent;
use rein_engine::config::{CompiledSchemas, Loader, Registry};
use rein_engine::run::{AgentBinding, Engine, Observer, RunOutput, RunRequest, http_client};
use rein_engine::startup::{self, Startup};
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
    /// The run's id (a fresh one when omitted); lets a caller resume it by
    /// name after a crash.
    #[arg(long)]
    run_id: Option<String>,
}

/// Runs `rein run`. Exit status: 0 when the run succeeded, 1 when it ended
/// otherwise (the report says how), 2 when it could not run.
pub fn run(args: RunArgs) -> Result<ExitCode> {
    let runtime = runtime()?;
    runtime.block_on(async {
        let registry = start(&args.config, None)?.registry;
        let tenant = TenantId::new(args.tenant).context("invalid --tenant")?;
        let run_id = args
            .run_id
            .map(RunId::new)
            .transpose()
            .context("invalid --run-id")?;
        let out = execute(
            &registry,
            &args.agent,
            &args.input,
            &args.data,
            tenant,
            args.json,
            run_id,
        )
        .await?;
        Ok(if out.report.outcome == Outcome::Succeeded {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

/// Runs every step of a start ([`startup::prepare`], as `rein check`
/// does), printing its warnings; `listen` is `rein serve --listen`.
///
/// # Errors
///
/// Every problem of the config, one per line, each naming its file and
/// field.
pub fn start(config: &Path, listen: Option<std::net::SocketAddr>) -> Result<Startup> {
    let client = http_client().context("cannot build the HTTP client")?;
    let env = |name: &str| std::env::var(name).ok();
    let startup = startup::prepare(&Loader::new(), config, &client, &env, listen)
        .map_err(|e| anyhow::anyhow!("the config {} has problems:\n{e}", config.display()))?;
    for warning in &startup.warnings {
        tracing::warn!("{warning}");
    }
    Ok(startup)
}

/// The tokio runtime of a CLI command.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// What a run needs: the agent bound from the registry, its schemas, the
/// store and the engine.
pub struct Session {
    /// The compiled argument schemas.
    pub schemas: CompiledSchemas,
    /// The run store.
    pub store: Arc<dyn Store>,
    /// The engine.
    pub engine: Engine,
    /// The HTTP client shared by tools and providers.
    pub client: reqwest::Client,
}

impl Session {
    /// Opens the store at `data` and builds the engine for `registry`.
    pub fn open(registry: &Registry, data: &Path) -> Result<Session> {
        let schemas = CompiledSchemas::compile(registry).map_err(|e| anyhow::anyhow!("{e}"))?;
        let client = http_client().context("cannot build the HTTP client")?;
        let store: Arc<dyn Store> = Arc::new(
            SqliteStore::open(data)
                .with_context(|| format!("cannot open the run store {}", data.display()))?,
        );
        let engine = Engine::builder(store.clone())
            .http_client(client.clone())
            .breakers(registry.breakers().clone())
            .build()?;
        Ok(Session {
            schemas,
            store,
            engine,
            client,
        })
    }

    /// Binds `agent` with the process environment (API keys).
    pub fn bind(&self, registry: &Registry, agent: &str) -> Result<AgentBinding> {
        let env = |name: &str| std::env::var(name).ok();
        Ok(bind_agent(registry, agent, &self.client, &env)?)
    }

    /// Prints the end of a run: one JSON document, or the report.
    pub async fn print(&self, out: &RunOutput, json_output: bool) -> Result<()> {
        if json_output {
            let events = self.store.events(&out.run_id, 0).await?;
            let ledger = self.store.ledger(&out.run_id).await?;
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
        Ok(())
    }
}

/// The live timeline printer, unless the output is one JSON document.
pub fn observer(json_output: bool) -> Option<Observer> {
    if json_output {
        return None;
    }
    let started = Arc::new(AtomicU64::new(0));
    Some(Arc::new(move |event: &rein_core::Event| {
        let _ = started.compare_exchange(0, event.at_ms, Ordering::AcqRel, Ordering::Acquire);
        println!("{}", timeline::line(event, started.load(Ordering::Acquire)));
    }))
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
    run_id: Option<RunId>,
) -> Result<RunOutput> {
    let session = Session::open(registry, data)?;
    let binding = session.bind(registry, agent)?;
    let out = session
        .engine
        .run(
            &binding,
            &session.schemas,
            RunRequest {
                run_id,
                tenant: Some(tenant),
                input: input.to_owned(),
                observer: observer(json_output),
                enqueued: false,
                cancel: None,
            },
        )
        .await?;
    session.print(&out, json_output).await?;
    Ok(out)
}

/// Whether a report is the one the order-desk demo is designed to end with.
pub fn is_demo_outcome(report: &RunReport) -> bool {
    report.outcome == Outcome::PartialSuccess && report.recoverable
}
