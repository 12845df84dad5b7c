//! `rein approvals list`, `rein approve` and `rein reject`: the calls
//! waiting for a human, and the decisions, on a store file or through a
//! `rein serve`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use rein_core::TenantId;
use rein_core::approval::{Approval, Decision, Verdict};

use crate::run::runtime;
use crate::runs::source::Source;

/// Where the approvals are: a store file, or a `rein serve`.
#[derive(Debug, Args)]
pub struct Place {
    /// The SQLite file runs are recorded in (as `rein run --data`), or a
    /// PostgreSQL database: `postgres://user[:password]@host[:port]/db`.
    #[arg(
        long,
        visible_alias = "db",
        global = true,
        default_value = "rein-data/rein.db"
    )]
    data: PathBuf,
    /// Go through a `rein serve` at this URL instead of a file: the
    /// approvals of the API key's tenant, decided in the key's name.
    #[arg(long, global = true, value_name = "URL")]
    server: Option<String>,
    /// The API key for --server (never printed).
    #[arg(long, global = true, env = crate::runs::API_KEY_ENV, hide_env_values = true)]
    api_key: Option<String>,
}

impl Place {
    fn source(&self) -> Result<Source> {
        match &self.server {
            Some(url) => Source::server(url, self.api_key.clone()),
            None => Source::open_store(&self.data),
        }
    }
}

/// Arguments of `rein approvals`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein approvals list                             # calls waiting, in rein-data/rein.db
  rein approvals list --run 0193c1d2-… --all      # one run's, decided ones too
  REIN_API_KEY=… rein approvals list --server https://rein.example.com --json")]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    command: ApprovalsCommand,
    #[command(flatten)]
    place: Place,
}

#[derive(Debug, Subcommand)]
enum ApprovalsCommand {
    /// List the calls waiting for a decision, oldest first.
    #[command(after_help = "\
Examples:
  rein approvals list                             # calls waiting, in rein-data/rein.db
  rein approvals list --run RUN_ID --all          # one run's, decided ones too
  rein approvals list --tenant acme --limit 10 --json
  REIN_API_KEY=… rein approvals list --server https://rein.example.com")]
    List {
        /// Only this run's.
        #[arg(long, value_name = "RUN_ID")]
        run: Option<String>,
        /// Decided ones too.
        #[arg(long)]
        all: bool,
        /// Only this tenant's (a file holds every tenant's).
        #[arg(long)]
        tenant: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: u16,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Arguments of `rein approve` and `rein reject`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein approvals list
  rein approve 0193c1d2-… 0193c1d2-…/3/0 --by alice
  rein reject 0193c1d2-… 0193c1d2-…/3/0 --reason \"wrong buyer\" --by alice
  REIN_API_KEY=… rein approve RUN INTENT --server https://rein.example.com")]
pub struct DecideArgs {
    /// The run.
    run: String,
    /// The call: its intent id, as `rein approvals list` shows it.
    intent: String,
    /// Why (for a rejection, what the model is told).
    #[arg(long)]
    reason: Option<String>,
    /// Who decides, recorded with the decision: on a file, or a server
    /// without API keys (with keys, the key's name is recorded).
    #[arg(long, env = "USER", hide_env_values = true, default_value = "operator")]
    by: String,
    #[command(flatten)]
    place: Place,
    /// Print the decided approval as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `rein approvals`.
pub fn run(args: ApprovalsArgs) -> Result<ExitCode> {
    runtime()?.block_on(async {
        let source = args.place.source()?;
        match args.command {
            ApprovalsCommand::List {
                run,
                all,
                tenant,
                limit,
                json,
            } => {
                let tenant = tenant
                    .map(TenantId::new)
                    .transpose()
                    .context("invalid --tenant")?;
                let approvals = source
                    .approvals(run.as_deref(), all, tenant, usize::from(limit))
                    .await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&approvals)?);
                } else {
                    print!("{}", table(&approvals));
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

/// Runs `rein approve` (`verdict` approved) or `rein reject`.
pub fn decide(args: DecideArgs, verdict: Verdict) -> Result<ExitCode> {
    runtime()?.block_on(async {
        let source = args.place.source()?;
        let decision = Decision {
            verdict,
            by: args.by,
            at_ms: rein_core::Timestamp::from_system_time(std::time::SystemTime::now()),
            reason: args.reason,
        };
        let (approval, continues) = source.decide(&args.run, &args.intent, decision).await?;
        if args.json {
            let mut doc = serde_json::to_value(&approval)?;
            doc["continues"] = serde_json::Value::from(continues);
            println!("{}", serde_json::to_string_pretty(&doc)?);
            return Ok(ExitCode::SUCCESS);
        }
        let r = &approval.request;
        let d = approval.decision.as_ref();
        println!(
            "{} {} ({}) of run {}{}",
            d.map_or("decided", |d| d.verdict.as_str()),
            r.intent_id,
            r.tool,
            r.run_id,
            d.map_or(String::new(), |d| format!(" by {}", d.by))
        );
        if continues {
            match &args.place.server {
                Some(_) => println!(
                    "every call of its turn is decided: the server continues it"
                ),
                // The run recorded its config when it started: the command
                // runs as printed from any directory.
                None => println!(
                    "every call of its turn is decided: a `rein serve` on this store continues it, or `{}` does",
                    crate::run::resume_recorded(&r.run_id, &args.place.data)
                ),
            }
        } else {
            println!("its turn still waits for other calls: rein approvals list --run {}", r.run_id);
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The approvals as a table: run, intent, tool, state, why, and the
/// arguments a decision binds to (cut to a line; `--json` has them whole,
/// with their digest).
fn table(approvals: &[Approval]) -> String {
    if approvals.is_empty() {
        return "no calls waiting for approval\n".to_owned();
    }
    let mut out = format!(
        "{:<38} {:<44} {:<16} {:<28} {}\n",
        "run", "intent", "tool", "state", "why / arguments"
    );
    for a in approvals {
        let r = &a.request;
        let state = match &a.decision {
            Some(d) => format!("{} by {}", d.verdict.as_str(), d.by),
            None => format!("waiting until {}", r.expires_at_ms),
        };
        let args = r.args.to_string();
        let args = if args.chars().count() > 100 {
            format!("{}…", args.chars().take(100).collect::<String>())
        } else {
            args
        };
        out.push_str(&format!(
            "{:<38} {:<44} {:<16} {:<28} {}\n{:<38} {:<44} {:<16} {:<28} {}\n",
            r.run_id.as_str(),
            r.intent_id.as_str(),
            r.tool,
            state,
            r.why,
            "",
            "",
            "",
            "",
            args
        ));
    }
    out
}
