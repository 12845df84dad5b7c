//! `rein resume`: continue a run that stopped mid-way.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use rein_core::{EventData, RunId};
use rein_engine::run::{EngineError, RetryTiming};
use rein_engine::startup::Purpose;

use crate::run::{Session, observer, runtime, start};

/// Arguments of `rein resume`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein resume RUN_ID                                     # with the config the run was started with
  rein resume RUN_ID --now                               # retry what was refused before its Retry-After ends
  rein resume RUN_ID --config examples/order-desk       # as `rein run` printed when it stopped
  rein resume RUN_ID -c examples/order-desk --data postgres://rein@db.internal/rein --json
  rein resume RUN_ID -c examples/order-desk --on-contract-change refuse   # not if the prompt or a tool changed")]
pub struct ResumeArgs {
    /// The run to continue.
    run_id: String,
    /// The config the run was started with (its tools and agent).
    /// Without it, the config the run recorded when it started, if that
    /// file is still there.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The SQLite file the run is recorded in.
    /// Or a PostgreSQL database: `postgres://user[:password]@host[:port]/db`.
    #[arg(long, visible_alias = "db", default_value = "rein-data/rein.db")]
    data: PathBuf,
    /// Print one JSON document instead of the timeline.
    #[arg(long)]
    json: bool,
    /// What to do when the system prompt or a tool definition changed
    /// since the run started: `warn` continues and records the change in
    /// the report's resume marker; `refuse` does not continue (exit 2).
    #[arg(long, value_enum, default_value = "warn")]
    on_contract_change: ContractChangeArg,
    /// Send again what the run's report said to retry later (a call
    /// refused with a Retry-After or by an open breaker) now, before the
    /// time it was asked to wait has passed. Without it, a resume before
    /// then says how long is left and exits 75.
    #[arg(long)]
    now: bool,
}

/// `--on-contract-change`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ContractChangeArg {
    Warn,
    Refuse,
}

/// The exit status of a resume that came too early: what it would send
/// again was refused for a time that has not passed (`EX_TEMPFAIL`).
const NOT_YET_EXIT: u8 = 75;

/// Runs `rein resume`. Exit status as for `rein run` (130/143 when a
/// signal interrupts it again, resumable again); 75 when the run's retry
/// is not due yet.
pub fn run(args: ResumeArgs) -> Result<ExitCode> {
    let run_id = RunId::new(args.run_id).context("invalid RUN_ID")?;
    runtime()?.block_on(async {
        let mut signals = crate::signal::Listener::install()?;
        let config = match &args.config {
            Some(config) => config.clone(),
            None => recorded_config(&run_id, &args.data).await?,
        };
        // The same steps as `rein check`: a resume is a start.
        let startup = start(&config, Purpose::Run)?;
        let policy = match args.on_contract_change {
            ContractChangeArg::Warn => rein_core::outcome::ContractPolicy::Warn,
            ContractChangeArg::Refuse => rein_core::outcome::ContractPolicy::Refuse,
        };
        let timing = if args.now {
            RetryTiming::Now
        } else {
            RetryTiming::AfterWait
        };
        let mut session = Session::open_with(startup, &args.data, policy, &config, timing)?;
        let record = session
            .store
            .get_run(&run_id)
            .await?
            .with_context(|| format!("no run {run_id} in {}", args.data.display()))?;
        let binding = session.bind(&record.agent)?;
        let resume = crate::run::resume_command(&run_id, &config, &args.data);
        let run = session
            .engine
            .resume(&binding, &session.schemas, &run_id, observer(args.json));
        let ended = session
            .finish(&run_id, run, &mut signals, args.json, &resume)
            .await;
        match ended {
            Err(e) => match e.downcast_ref::<EngineError>() {
                Some(not_yet @ EngineError::NotYet { .. }) => {
                    crate::log::note(
                        crate::log::Level::Warn,
                        &format!(
                            "rein: {not_yet}. Nothing was sent. Resume it once that time has passed with:\n  {resume}\nor now, sending it before the wait it was asked for, with:\n  {resume} --now"
                        ),
                    );
                    Ok(ExitCode::from(NOT_YET_EXIT))
                }
                _ => Err(e),
            },
            ended => ended,
        }
    })
}

/// The config `run_id` recorded when it started (its `run_started`), if
/// that file is still there.
///
/// # Errors
///
/// When the store or the run cannot be read, the run recorded no config,
/// or the file it recorded is gone (named, with what to pass instead).
async fn recorded_config(run_id: &RunId, data: &Path) -> Result<PathBuf> {
    let store = crate::store::open_existing(data)?;
    if store.get_run(run_id).await?.is_none() {
        bail!("no run {run_id} in {}", crate::store::shown(data));
    }
    let events = store.events(run_id, 0).await?;
    let recorded = events.iter().find_map(|e| match &e.data {
        EventData::RunStarted(started) => Some(started.config.clone()),
        _ => None,
    });
    let Some(Some(config)) = recorded else {
        bail!(
            "run {run_id} did not record the config it was started with (it started before rein recorded it, or not from a config file): pass --config with that config"
        );
    };
    let path = PathBuf::from(&config);
    if !path.exists() {
        bail!(
            "run {run_id} was started with the config {config}, which is no longer there: pass --config with the config to resume it with"
        );
    }
    Ok(path)
}
