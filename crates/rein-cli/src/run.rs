//! `rein run`: run an agent from a config to its end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};
use clap::Args;
use rein_core::{Outcome, RunId, RunReport, TenantId, Timestamp};
use rein_engine::bind::{bind_agent, process_env};
use rein_engine::config::{CompiledSchemas, Loader, Registry};
use rein_engine::run::{
    AgentBinding, DEFAULT_SHARED_BREAKERS_REFRESH, Engine, EngineError, Observer, RetryTiming,
    RunOutput, RunRequest, http_client,
};
use rein_engine::startup::{Purpose, Startup};
use rein_store::Store;
use serde_json::json;

use crate::signal::{Listener, Stop};
use crate::timeline;

/// Arguments of `rein run`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein run --config examples/order-desk --agent order_desk --input \"Move order A-1001 to 2026-01-08T14:00:00Z\"
  rein run -c examples/order-desk -a order_desk_live -i \"Move order A-1001 to 2026-01-08T14:00:00Z\" --json
  rein run -c examples/order-desk -a order_desk -i \"Move order A-1001 to 2026-01-08T14:00:00Z\" \\
    --run-id order-A-1001 --data /tmp/x.db          # a name to resume it by: rein resume order-A-1001 …

The example's tools (and order_desk_live's model) are `rein dev`'s: start it in another
terminal and paste the exports it prints.")]
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
    /// Or a PostgreSQL database: `postgres://user[:password]@host[:port]/db`.
    /// Overrides `[store] url`; without either, `rein-data/rein.db`.
    #[arg(long, visible_alias = "db")]
    data: Option<PathBuf>,
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
/// otherwise (the report says how), 2 when it could not run, 76 when it
/// paused for a human's approval, 130 (SIGINT)
/// or 143 (SIGTERM) when a signal interrupted it (it is left resumable and
/// the command that resumes it is printed).
pub fn run(args: RunArgs) -> Result<ExitCode> {
    let runtime = runtime()?;
    runtime.block_on(async {
        let mut signals = Listener::install()?;
        let startup = start(&args.config, Purpose::Run)?;
        let tenant = TenantId::new(args.tenant).context("invalid --tenant")?;
        let run_id = match args.run_id {
            Some(id) => RunId::new(id).context("invalid --run-id")?,
            None => RunId::new(uuid::Uuid::now_v7().to_string()).context("no run id")?,
        };
        let data = crate::store::chosen(args.data.as_deref(), startup.registry.store());
        let mut session = Session::open(startup, &data, &args.config)?;
        let binding = session.bind(&args.agent)?;
        let resume = resume_command(&run_id, &args.config, &data);
        crate::log::note(
            crate::log::Level::Info,
            &format!("rein run: run {run_id} started (if it stops: {resume})"),
        );
        // Every ceiling the run is held to, rein's defaults included.
        let reserved = binding
            .compensation_reserve
            .of_duration(binding.budget.wall_clock());
        crate::log::note(
            crate::log::Level::Info,
            &format!(
                "rein run: budget: {}",
                crate::limits::budget_line(&binding.budget, reserved)
            ),
        );
        let run = session.engine.run(
            &binding,
            &session.schemas,
            request(Some(run_id.clone()), tenant, args.input, args.json),
        );
        let ended = session
            .finish(&run_id, run, &mut signals, args.json, &resume)
            .await;
        // The other processes on the store take this one's part of each
        // resource group's limits back now, not when its leases expire.
        session.engine.leave_shared_limits().await;
        ended
    })
}

/// Runs every step of a start for `purpose` ([`crate::check::prepare`],
/// as `rein check` does), logging its warnings.
///
/// # Errors
///
/// Every problem of the config, one per line, each naming its file and
/// field.
pub fn start(config: &Path, purpose: Purpose) -> Result<Startup> {
    start_with(&Loader::new(), config, purpose)
}

/// [`start`] with `loader`'s environment for the config.
///
/// # Errors
///
/// As [`start`].
pub fn start_with(loader: &Loader<'_>, config: &Path, purpose: Purpose) -> Result<Startup> {
    let startup = crate::check::prepare_with(loader, config, purpose).map_err(|e| {
        for warning in e.warnings() {
            tracing::warn!("{warning}");
        }
        anyhow::anyhow!("the config {} has problems:\n{e}", config.display())
    })?;
    for warning in &startup.warnings {
        tracing::warn!("{warning}");
    }
    Ok(startup)
}

/// How long `rein run` waits, before it exits, for ledger marks the store
/// would not take to be written.
const HELD_MARKS_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// The exit code of a run stopped because the store stayed away
/// (`EX_TEMPFAIL`: try again later, with the resume command).
const STORE_AWAY_EXIT: u8 = 75;

/// The exit status of a run that paused for a human's approval: not an
/// outcome, and nothing failed; the decision, then `rein resume`, goes on.
pub const AWAITING_APPROVAL_EXIT: u8 = 76;

/// How a run driven from the command line ended.
pub enum Ended {
    /// It ended; its report says how.
    Finished(RunOutput),
    /// A signal interrupted it at a safe point: it is resumable.
    Interrupted(RunOutput, Stop),
    /// A second signal while it was stopping: the process quits at once.
    Quit(Stop),
}

/// Drives `run` to its end. On SIGINT or SIGTERM the engine interrupts it
/// at its next safe point (a model call or read in flight is aborted, a
/// write already sent finishes; the run is left `running`, its claim
/// released, and kept for the user's `rein resume`: no server on the same
/// store takes it over); a second signal quits at once.
pub async fn until_signal(
    engine: &Engine,
    run: impl std::future::Future<Output = Result<RunOutput, EngineError>>,
    signals: &mut Listener,
) -> Result<Ended> {
    tokio::pin!(run);
    let stop = tokio::select! {
        out = &mut run => return Ok(Ended::Finished(out?)),
        stop = signals.next() => stop,
    };
    crate::log::note(
        crate::log::Level::Warn,
        &format!(
            "rein: {}: stopping the run at a safe point (send it again to quit at once)",
            stop.name()
        ),
    );
    engine.interrupt(rein_engine::run::HandOn::Caller);
    tokio::select! {
        out = &mut run => {
            let out = out?;
            Ok(if out.interrupted { Ended::Interrupted(out, stop) } else { Ended::Finished(out) })
        }
        again = signals.next() => Ok(Ended::Quit(again)),
    }
}

/// The exact command that resumes `run_id`: absolute paths, quoted for a
/// POSIX shell where needed, so it works when pasted from any directory.
pub fn resume_command(run_id: &RunId, config: &Path, data: &Path) -> String {
    let path = |p: &Path| {
        shell_quote(
            &std::path::absolute(p)
                .unwrap_or_else(|_| p.to_path_buf())
                .to_string_lossy(),
        )
    };
    // A database URL is printed as every message prints it: without its
    // password, which the operator supplies again.
    let data = match crate::store::Data::parse(data) {
        Ok(crate::store::Data::Postgres(url)) => shell_quote(&url.to_string()),
        _ => path(data),
    };
    format!(
        "rein resume {} --config {} --data {}",
        shell_quote(run_id.as_str()),
        path(config),
        data
    )
}

/// The command that resumes `run_id` from `data` with the config the run
/// recorded when it started (no `--config`): absolute, quoted as
/// [`resume_command`] quotes.
pub fn resume_recorded(run_id: &RunId, data: &Path) -> String {
    let data_word = match crate::store::Data::parse(data) {
        Ok(crate::store::Data::Postgres(url)) => shell_quote(&url.to_string()),
        _ => shell_quote(
            &std::path::absolute(data)
                .unwrap_or_else(|_| data.to_path_buf())
                .to_string_lossy(),
        ),
    };
    format!(
        "rein resume {} --data {data_word}",
        shell_quote(run_id.as_str())
    )
}

/// `text` as one POSIX shell word.
fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:@%,".contains(&b));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
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
    /// The registry.
    pub registry: Registry,
    /// The compiled argument schemas.
    pub schemas: CompiledSchemas,
    /// The agents the start bound, each taken once by [`Session::bind`].
    agents: BTreeMap<String, AgentBinding>,
    /// The run store.
    pub store: Arc<dyn Store>,
    /// The engine.
    pub engine: Engine,
    /// The HTTP client shared by tools and providers.
    pub client: reqwest::Client,
}

impl Session {
    /// Opens the store at `data` and builds the engine for the prepared
    /// config.
    ///
    /// `config` is the config it was prepared from: recorded in each run's
    /// `run_started` (as an absolute path), so that `rein resume RUN` finds
    /// it again.
    pub fn open(startup: Startup, data: &Path, config: &Path) -> Result<Session> {
        Session::open_with(
            startup,
            data,
            rein_core::outcome::ContractPolicy::default(),
            config,
            RetryTiming::default(),
        )
    }

    /// [`Session::open`], with what a resume does when the run's contract
    /// changed, and when it sends again what a report said to retry later.
    pub fn open_with(
        startup: Startup,
        data: &Path,
        contract_change: rein_core::outcome::ContractPolicy,
        config: &Path,
        retry_timing: RetryTiming,
    ) -> Result<Session> {
        let client = http_client().context("cannot build the HTTP client")?;
        let store: Arc<dyn Store> = crate::store::open_configured(data, startup.registry.store())?;
        // Configured as `rein serve` configures its engine, so that agent
        // tools start their child runs here too.
        // Breaker openings and Retry-After cooldowns are shared with every
        // process on the store (health memory across runs): this run does
        // not call a tool another process just found down, and what it
        // finds down the next one does not call either.
        let node = uuid::Uuid::now_v7().simple().to_string();
        let engine = Engine::builder(store.clone())
            .registry(&startup.registry, &client, process_env())
            .node(node.clone())
            .shared_breakers(node, DEFAULT_SHARED_BREAKERS_REFRESH)
            // Resource group limits hold for every process on the store.
            .shared_limits(rein_engine::run::DEFAULT_SHARE_RENEWAL)
            .contract_change(contract_change)
            .retry_timing(retry_timing)
            .config_source(
                std::path::absolute(config)
                    .unwrap_or_else(|_| config.to_path_buf())
                    .to_string_lossy(),
            )
            .build()?;
        Ok(Session {
            registry: startup.registry,
            schemas: startup.schemas,
            agents: startup.agents,
            store,
            engine,
            client,
        })
    }

    /// The binding of `agent` the start made (its providers built once);
    /// bound again with the process environment if it was taken already.
    pub fn bind(&mut self, agent: &str) -> Result<AgentBinding> {
        if let Some(binding) = self.agents.remove(agent) {
            return Ok(binding);
        }
        let env = |name: &str| std::env::var(name).ok();
        Ok(bind_agent(&self.registry, agent, &self.client, &env)?)
    }

    /// Drives `run` (of `run_id`) until it ends or a signal interrupts it,
    /// prints what happened (with `json_output`, always one JSON document
    /// on stdout), and says how the command exits.
    pub async fn finish(
        &self,
        run_id: &RunId,
        run: impl std::future::Future<Output = Result<RunOutput, EngineError>>,
        signals: &mut Listener,
        json_output: bool,
        resume: &str,
    ) -> Result<ExitCode> {
        let ended = until_signal(&self.engine, run, signals).await;
        // The run's spans are exported before the process exits
        // (`[telemetry]`), unless a second signal asked to quit at once.
        if let (Some(telemetry), false) =
            (self.engine.telemetry(), matches!(ended, Ok(Ended::Quit(_))))
        {
            telemetry.shutdown().await;
        }
        // Ledger marks the store would not take are written before the
        // process exits, when it comes back in time.
        let held = self.engine.flush_held_marks(HELD_MARKS_PATIENCE).await;
        if held > 0 {
            crate::log::note(
                crate::log::Level::Warn,
                &format!(
                    "rein: {} could not be written: the store is still unavailable; `rein reconcile` settles them from the tools' status once it is back",
                    rein_core::plural::count(held, "ledger mark")
                ),
            );
        }
        match ended? {
            // Stopped at a safe point because the store stayed away: not
            // an outcome, and the store cannot be read for the events.
            Ended::Finished(out) if out.interrupted => {
                crate::log::note(
                    crate::log::Level::Warn,
                    &format!(
                        "rein: run {} stopped at a safe point: the run store is unavailable. It is resumable and nothing it did will be repeated. Once the store is back, continue it with:\n  {resume}",
                        out.run_id
                    ),
                );
                if json_output {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&json!({
                            "run_id": out.run_id, "status": "running", "handed_on": true,
                            "resume": resume, "report": out.report,
                        }))?
                    );
                } else {
                    println!();
                    println!("run {}", out.run_id);
                    print!("{}", timeline::report(&out.report, None));
                }
                Ok(ExitCode::from(STORE_AWAY_EXIT))
            }
            Ended::Finished(out) if !out.awaiting_approval.is_empty() => {
                let data = resume
                    .rsplit_once(" --data ")
                    .map_or(String::new(), |(_, data)| format!(" --data {data}"));
                let decide: Vec<String> = out
                    .awaiting_approval
                    .iter()
                    .map(|r| {
                        format!(
                            "  {} ({}): {}
    rein approve {} {}{data}
    rein reject {} {} --reason …{data}",
                            r.tool,
                            r.intent_id,
                            r.why,
                            r.run_id,
                            r.intent_id,
                            r.run_id,
                            r.intent_id
                        )
                    })
                    .collect();
                crate::log::note(
                    crate::log::Level::Warn,
                    &format!(
                        "rein: run {} is waiting for a human's approval; nothing of its turn was sent. Decide each call:
{}
then continue it with:
  {resume}",
                        out.run_id,
                        decide.join("\n")
                    ),
                );
                if json_output {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&json!({
                            "run_id": out.run_id, "status": "awaiting_approval",
                            "awaiting_approval": out.awaiting_approval,
                            "resume": resume, "report": out.report,
                        }))?
                    );
                } else {
                    println!();
                    println!("run {}", out.run_id);
                    let limits = self.limits(&out.run_id).await;
                    print!("{}", timeline::report(&out.report, limits.as_ref()));
                }
                Ok(ExitCode::from(AWAITING_APPROVAL_EXIT))
            }
            Ended::Finished(out) => {
                self.print(&out, json_output).await?;
                Ok(if out.report.outcome == Outcome::Succeeded {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                })
            }
            Ended::Interrupted(out, stop) => {
                crate::log::note(
                    crate::log::Level::Warn,
                    &format!(
                        "rein: run {} was interrupted ({}) and is resumable: nothing it did will be repeated. Continue it with:\n  {resume}",
                        out.run_id,
                        stop.name()
                    ),
                );
                if json_output {
                    println!(
                        "{}",
                        interrupted_document(run_id, stop, resume, Some(&out.report))?
                    );
                }
                Ok(ExitCode::from(stop.exit_code()))
            }
            Ended::Quit(stop) => {
                crate::log::note(
                    crate::log::Level::Warn,
                    &format!(
                        "rein: {}: quitting at once; the run resumes from its last checkpoint with:\n  {resume}",
                        stop.name()
                    ),
                );
                if json_output {
                    println!("{}", interrupted_document(run_id, stop, resume, None)?);
                }
                Ok(ExitCode::from(stop.exit_code()))
            }
        }
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
            let limits = self.limits(&out.run_id).await;
            print!("{}", timeline::report(&out.report, limits.as_ref()));
        }
        Ok(())
    }

    /// The budget `run_id` runs under, as its record holds it (`None` when
    /// it cannot be read: the report is printed without its ceilings).
    pub async fn limits(&self, run_id: &RunId) -> Option<rein_core::deadline::BudgetLimits> {
        let record = self.store.get_run(run_id).await.ok()??;
        serde_json::from_value(record.budget).ok()
    }
}

/// The one JSON document of a run a signal stopped: its id, that it was
/// interrupted (and by which signal), the command that resumes it, and
/// what it had done (its provisional report, unless the process quit
/// before the run reached a safe point).
fn interrupted_document(
    run_id: &RunId,
    stop: Stop,
    resume: &str,
    report: Option<&RunReport>,
) -> Result<String> {
    Ok(serde_json::to_string_pretty(&json!({
        "run_id": run_id,
        "status": "interrupted",
        "interrupted": {
            "signal": stop.name(),
            "at_safe_point": report.is_some(),
            "resumable": true,
        },
        "resume": resume,
        "report": report,
    }))?)
}

/// The request of a run started from the command line: the live timeline
/// unless the output is one JSON document.
fn request(
    run_id: Option<RunId>,
    tenant: TenantId,
    input: String,
    json_output: bool,
) -> RunRequest {
    RunRequest {
        run_id,
        tenant: Some(tenant),
        input,
        observer: observer(json_output),
        enqueued: false,
        cancel: None,
        reservation: None,
        trace_parent: None,
        picked: None,
    }
}

/// The live timeline printer, unless the output is one JSON document.
pub fn observer(json_output: bool) -> Option<Observer> {
    if json_output {
        return None;
    }
    let started = Arc::new(AtomicU64::new(0));
    Some(Arc::new(move |event: &rein_core::Event| {
        let at_ms = event.at_ms.as_millis();
        let _ = started.compare_exchange(0, at_ms, Ordering::AcqRel, Ordering::Acquire);
        let started = Timestamp::from_millis(started.load(Ordering::Acquire));
        println!("{}", timeline::line(event, started));
    }))
}

/// Binds and runs an agent under a fresh run id, printing the live
/// timeline (or, with `json`, one document at the end) and the report.
pub async fn execute(
    startup: Startup,
    config: &Path,
    agent: &str,
    input: &str,
    data: &Path,
    tenant: TenantId,
    json_output: bool,
) -> Result<RunOutput> {
    let mut session = Session::open(startup, data, config)?;
    let binding = session.bind(agent)?;
    let out = session
        .engine
        .run(
            &binding,
            &session.schemas,
            request(None, tenant, input.to_owned(), json_output),
        )
        .await?;
    session.print(&out, json_output).await?;
    Ok(out)
}

/// Whether a report is the one the order-desk demo is designed to end with.
pub fn is_demo_outcome(report: &RunReport) -> bool {
    report.outcome == Outcome::PartialSuccess && report.recoverable
}
