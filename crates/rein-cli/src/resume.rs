//! `rein resume`: continue a run that stopped mid-way.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use rein_core::RunId;
use rein_engine::startup::Purpose;

use crate::run::{Session, observer, runtime, start};

/// Arguments of `rein resume`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein resume RUN_ID --config examples/order-desk       # as `rein run` printed when it stopped
  rein resume RUN_ID -c examples/order-desk --data postgres://rein@db.internal/rein --json
  rein resume RUN_ID -c examples/order-desk --on-contract-change refuse   # not if the prompt or a tool changed")]
pub struct ResumeArgs {
    /// The run to continue.
    run_id: String,
    /// The config the run was started with (its tools and agent).
    #[arg(long, short)]
    config: PathBuf,
    /// The SQLite file the run is recorded in.
    /// Or a PostgreSQL database: `postgres://user[:password]@host[:port]/db`.
    #[arg(long, default_value = "rein-data/rein.db")]
    data: PathBuf,
    /// Print one JSON document instead of the timeline.
    #[arg(long)]
    json: bool,
    /// What to do when the system prompt or a tool definition changed
    /// since the run started: `warn` continues and records the change in
    /// the report's resume marker; `refuse` does not continue (exit 2).
    #[arg(long, value_enum, default_value = "warn")]
    on_contract_change: ContractChangeArg,
}

/// `--on-contract-change`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ContractChangeArg {
    Warn,
    Refuse,
}

/// Runs `rein resume`. Exit status as for `rein run` (130/143 when a
/// signal interrupts it again, resumable again).
pub fn run(args: ResumeArgs) -> Result<ExitCode> {
    let run_id = RunId::new(args.run_id).context("invalid RUN_ID")?;
    runtime()?.block_on(async {
        let mut signals = crate::signal::Listener::install()?;
        // The same steps as `rein check`: a resume is a start.
        let startup = start(&args.config, Purpose::Run)?;
        let policy = match args.on_contract_change {
            ContractChangeArg::Warn => rein_core::outcome::ContractPolicy::Warn,
            ContractChangeArg::Refuse => rein_core::outcome::ContractPolicy::Refuse,
        };
        let mut session = Session::open_with(startup, &args.data, policy)?;
        let record = session
            .store
            .get_run(&run_id)
            .await?
            .with_context(|| format!("no run {run_id} in {}", args.data.display()))?;
        let binding = session.bind(&record.agent)?;
        let resume = crate::run::resume_command(&run_id, &args.config, &args.data);
        let run = session
            .engine
            .resume(&binding, &session.schemas, &run_id, observer(args.json));
        session
            .finish(&run_id, run, &mut signals, args.json, &resume)
            .await
    })
}
