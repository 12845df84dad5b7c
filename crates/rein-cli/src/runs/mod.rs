//! `rein runs`: list runs and inspect one (its report, events, ledger),
//! from a store file or from a `rein serve`.
//!
//! | command | shows |
//! | --- | --- |
//! | `list` | runs, newest first, a page at a time (`--status`, `--agent`, `--limit`, `--cursor`); `--follow` keeps it live ([`follow`]) |
//! | `show RUN_ID` | the run and its report |
//! | `events RUN_ID` | its events: kind, time, step and data as stored; `--follow` waits for more |
//! | `ledger RUN_ID` | its side-effect ledger in execution order |
//!
//! Tables go to stdout, with `--json` one JSON document instead; a note
//! (the next page's cursor) goes to stderr, so a pipe reads data only.

pub(crate) mod follow;
pub(crate) mod render;
pub(crate) mod source;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use rein_core::TenantId;
use rein_store::{RunFilter, RunStatus, Timestamp};
use serde_json::json;

use crate::run::runtime;
use source::Source;

/// The environment variable `--api-key` defaults to.
pub const API_KEY_ENV: &str = "REIN_API_KEY";

/// Runs per page of `rein runs list` unless `--limit` says otherwise.
pub const DEFAULT_LIST_LIMIT: usize = 20;

/// The largest `--limit` (the API's own bound).
pub const MAX_LIST_LIMIT: usize = rein_server::api::listing::MAX_LIMIT;

/// How often `rein runs events --follow` looks for new events, and
/// `rein runs list --follow` for new runs and changes.
pub const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// Arguments of `rein runs`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein runs list                                  # newest runs in rein-data/rein.db
  rein runs list --status running --agent order_desk
  rein runs list --follow                         # new runs and status changes, live
  rein runs list --data /var/lib/rein/rein.db --limit 100 --json
  rein runs show 0193c1d2-…                       # the run and its report
  rein runs events 0193c1d2-… --follow            # its events, then new ones live
  rein runs ledger 0193c1d2-…                     # its side effects
  REIN_API_KEY=… rein runs list --server https://rein.example.com")]
pub struct RunsArgs {
    #[command(subcommand)]
    command: RunsCommand,
    /// The SQLite file runs are recorded in (as `rein run --data`); read
    /// directly, every tenant's runs.
    #[arg(
        long,
        visible_alias = "db",
        global = true,
        default_value = "rein-data/rein.db"
    )]
    data: PathBuf,
    /// Read from a `rein serve` at this URL instead of a file: the runs of
    /// the API key's tenant.
    #[arg(long, global = true, value_name = "URL")]
    server: Option<String>,
    /// The API key for --server (never printed).
    #[arg(long, global = true, env = API_KEY_ENV, hide_env_values = true)]
    api_key: Option<String>,
    /// Print one JSON document instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum RunsCommand {
    /// List runs, newest first, a page at a time; the cursor of the next
    /// page is printed on stderr (in `next_cursor` with --json).
    #[command(after_help = "\
Examples:
  rein runs list                                  # newest runs in rein-data/rein.db
  rein runs list --status handed_off --agent order_desk --since 7d
  rein runs list --follow                         # new runs and status changes, live
  rein runs list --data /tmp/x.db --limit 100 --json")]
    List {
        /// Only runs with this status: queued, running, succeeded,
        /// partial_success, failed, budget_exhausted, cancelled, handed_off.
        #[arg(long, value_parser = parse_status)]
        status: Option<RunStatus>,
        /// Only runs of this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Only this tenant's runs (a file holds every tenant's; a server
        /// shows only its key's tenant).
        #[arg(long)]
        tenant: Option<String>,
        /// Only runs created within this long before now (`30m`, `2h`, `7d`).
        #[arg(long, value_parser = humantime::parse_duration)]
        since: Option<Duration>,
        /// Runs per page, from 1 to 500.
        #[arg(long, default_value_t = DEFAULT_LIST_LIMIT)]
        limit: usize,
        /// Where the page starts: the next cursor a previous listing printed.
        #[arg(long)]
        cursor: Option<String>,
        /// Keep the listing live: the newest runs, then a line for each new
        /// run and each status change as it happens (one JSON object per
        /// line with --json), until Ctrl-C.
        #[arg(long, conflicts_with = "cursor")]
        follow: bool,
    },
    /// Show one run: its status, times, parent and children, and its report.
    #[command(after_help = "\
Examples:
  rein runs show RUN_ID                           # from rein-data/rein.db
  rein runs show RUN_ID --data /tmp/x.db --json
  REIN_API_KEY=… rein runs show RUN_ID --server https://rein.example.com")]
    Show {
        /// The run.
        run_id: String,
    },
    /// Show a run's events: their kind, time, step and data as stored.
    #[command(after_help = "\
Examples:
  rein runs events RUN_ID                         # from rein-data/rein.db
  rein runs events RUN_ID --follow                # then new ones, until the run ends
  rein runs events RUN_ID --after 12 --json       # only those after sequence number 12")]
    Events {
        /// The run.
        run_id: String,
        /// Only events after this sequence number.
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// Keep printing new events until the run ends (Ctrl-C stops).
        #[arg(long)]
        follow: bool,
    },
    /// Show a run's side-effect ledger in execution order.
    #[command(after_help = "\
Examples:
  rein runs ledger RUN_ID                         # from rein-data/rein.db
  rein runs ledger RUN_ID --data /tmp/x.db --json
  REIN_API_KEY=… rein runs ledger RUN_ID --server https://rein.example.com")]
    Ledger {
        /// The run.
        run_id: String,
    },
}

fn parse_status(text: &str) -> Result<RunStatus, String> {
    RunStatus::parse(text).ok_or_else(|| {
        format!(
            "expected queued, running, succeeded, partial_success, failed, budget_exhausted, cancelled or handed_off, but found {text:?}"
        )
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Runs `rein runs`: exit 0 with what was asked, 2 when it cannot be read.
pub fn run(args: RunsArgs) -> Result<ExitCode> {
    runtime()?.block_on(async {
        let source = match &args.server {
            Some(url) => Source::server(url, args.api_key.clone())?,
            None => Source::open_store(&args.data)?,
        };
        match args.command {
            RunsCommand::List {
                status,
                agent,
                tenant,
                since,
                limit,
                cursor,
                follow,
            } => {
                if !(1..=MAX_LIST_LIMIT).contains(&limit) {
                    bail!("--limit must be from 1 to {MAX_LIST_LIMIT}, but it is {limit}");
                }
                let mut filter = RunFilter::all();
                if let Some(tenant) = tenant {
                    if args.server.is_some() {
                        bail!("--tenant reads a file; a server shows its API key's tenant only");
                    }
                    filter = filter.of_tenant(TenantId::new(tenant).context("invalid --tenant")?);
                }
                if let Some(status) = status {
                    filter = filter.with_status(status);
                }
                if let Some(agent) = agent {
                    filter = filter.of_agent(agent);
                }
                if let Some(since) = since {
                    filter = filter.created_after(Timestamp::from_millis(now_ms()) - since);
                }
                if follow {
                    follow::follow(&source, filter, limit, args.json).await?;
                    return Ok(ExitCode::SUCCESS);
                }
                let page = source.list(&filter, cursor.as_deref(), limit).await?;
                if args.json {
                    println!("{}", serde_json::to_string_pretty(&page)?);
                } else if page.runs.is_empty() {
                    println!("no runs");
                } else {
                    print!("{}", render::runs(&page.runs, now_ms()));
                }
                if let (Some(next), false) = (&page.next_cursor, args.json) {
                    crate::log::note(
                        crate::log::Level::Info,
                        &format!("more runs: add --cursor {next}"),
                    );
                }
            }
            RunsCommand::Show { run_id } => {
                let detail = source.show(&run_id).await?;
                if args.json {
                    let doc = json!({
                        "run": detail.summary,
                        "children": detail.children,
                        "report": detail.report,
                    });
                    println!("{}", serde_json::to_string_pretty(&doc)?);
                } else {
                    // The command as it runs from here: this store, and the
                    // config the run recorded (or a placeholder to fill in
                    // when it recorded none, or that file is gone).
                    let resume = args.server.is_none().then(|| {
                        let id = rein_core::RunId::new(run_id.clone());
                        let command = match id {
                            Ok(id) => crate::run::resume_recorded(&id, &args.data),
                            Err(_) => format!("rein resume {run_id}"),
                        };
                        match &detail.config {
                            Some(config) if std::path::Path::new(config).exists() => command,
                            _ => format!("{command} --config <the config it was started with>"),
                        }
                    });
                    print!("{}", render::run(&detail, now_ms(), resume.as_deref()));
                }
            }
            RunsCommand::Events {
                run_id,
                after,
                follow,
            } => events(&source, &run_id, after, follow, args.json).await?,
            RunsCommand::Ledger { run_id } => {
                let records = source.ledger(&run_id).await?;
                if args.json {
                    println!("{}", serde_json::to_string_pretty(&records)?);
                } else if records.is_empty() {
                    println!("no ledger records: run {run_id} declared no side effect");
                } else {
                    print!("{}", render::ledger(&records));
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `rein runs events`: the events after `after`; with `follow`, new ones
/// as they are stored, until the run has ended and nothing follows. With
/// `--json`, one JSON array, or with `follow` one event per line.
async fn events(
    source: &Source,
    run_id: &str,
    after: u64,
    follow: bool,
    as_json: bool,
) -> Result<()> {
    let mut after = after;
    let mut started_ms = None;
    let mut printed_header = false;
    loop {
        let batch = source.events(run_id, after).await?;
        if let Some(last) = batch.last() {
            after = last.seq;
        }
        let started = *started_ms
            .get_or_insert_with(|| batch.first().map_or(Timestamp::UNIX_EPOCH, |e| e.at_ms));
        if as_json && !follow {
            println!("{}", serde_json::to_string_pretty(&batch)?);
            return Ok(());
        }
        if as_json {
            for event in &batch {
                println!("{}", serde_json::to_string(event)?);
            }
        } else if !batch.is_empty() {
            let table = render::events(&batch, started);
            // The header once, when following.
            let body = if printed_header {
                table.split_once('\n').map_or("", |(_, rest)| rest)
            } else {
                &table
            };
            print!("{body}");
            printed_header = true;
        } else if !follow && !printed_header {
            println!("no events after {after}");
        }
        if !follow {
            return Ok(());
        }
        if batch.is_empty() && source.is_finished(run_id).await? {
            // Its last events are written with its end: read once more.
            let rest = source.events(run_id, after).await?;
            if rest.is_empty() {
                return Ok(());
            }
            continue;
        }
        if batch.is_empty() {
            tokio::time::sleep(FOLLOW_POLL).await;
        }
    }
}
