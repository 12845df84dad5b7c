//! `rein handoff`: the package a human needs to take over a run.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use rein_core::handoff::{Decision, HandoffPackage};
use rein_core::{IntentId, RunId};
use rein_engine::handoff::{DecisionRequest, Resolution, ResolveError, Resolver};
use rein_store::Store;

use crate::run::runtime;

/// Arguments of `rein handoff`.
#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "\
Examples:
  rein handoff 0193c1d2-…                          # the package: what awaits your decision
  REIN_API_KEY=… rein handoff RUN --server https://rein.example.com --json
  rein handoff resolve 0193c1d2-… 0193c1d2-…/2/0 --undone --reason \"refunded by hand\" --by alice
  rein handoff resolve RUN INTENT --compensate --config rein.toml
  rein handoff resolve RUN INTENT --retry --config rein.toml     # an idempotent write, same key
  REIN_API_KEY=… rein handoff resolve RUN INTENT --accepted --server https://rein.example.com"
)]
pub struct HandoffArgs {
    #[command(subcommand)]
    command: Option<HandoffCommand>,
    /// The run that was handed off.
    #[arg(required = true)]
    run_id: Option<String>,
    /// The SQLite file the run is recorded in.
    /// Or a PostgreSQL database: `postgres://user[:password]@host[:port]/db`.
    #[arg(long, visible_alias = "db", default_value = "rein-data/rein.db")]
    data: PathBuf,
    /// Read the package from a `rein serve` at this URL instead of a file
    /// (`GET /v1/runs/{id}/handoff`).
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// The API key for --server (never printed).
    #[arg(long, env = crate::runs::API_KEY_ENV, hide_env_values = true)]
    api_key: Option<String>,
    /// Print the package as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum HandoffCommand {
    /// Record a human's decision on one record the run left awaiting one
    /// (the package's "awaiting your decision"); the run's report follows,
    /// and the last decision a handed-off run awaited closes it with what
    /// then stands.
    ///
    /// Exits 0 when the decision was applied (or had been already), 1 when
    /// it was refused (the record does not await one, another decision
    /// stands, the decision does not apply) or the compensation or retry it
    /// asked for failed (the record still awaits a decision), 2 on error.
    Resolve(ResolveArgs),
}

/// Arguments of `rein handoff resolve`.
#[derive(Debug, Args)]
#[command(
    group(clap::ArgGroup::new("decision").required(true).args(["undone", "accepted", "compensate", "retry"])),
    after_help = "\
Examples:
  rein handoff RUN_ID                             # the records awaiting a decision, with their intent ids
  rein handoff resolve RUN_ID INTENT_ID --undone --reason \"refunded by hand\" --by alice
  rein handoff resolve RUN_ID INTENT_ID --compensate --config examples/order-desk
  REIN_API_KEY=… rein handoff resolve RUN_ID INTENT_ID --accepted --server https://rein.example.com"
)]
struct ResolveArgs {
    /// The run.
    run: String,
    /// The record: its intent id, as `rein handoff RUN` lists it.
    intent: String,
    /// You undid the effect by hand: the record becomes `compensated`.
    #[arg(long)]
    undone: bool,
    /// The effect stands: the record becomes `accepted`.
    #[arg(long)]
    accepted: bool,
    /// Run the tool's registered compensation now (needs --config on a
    /// file); once it worked the record becomes `compensated`.
    #[arg(long)]
    compensate: bool,
    /// Send the call again with its recorded arguments under its original
    /// idempotency key: idempotent writes only (needs --config on a file);
    /// once it answered the record becomes `accepted`.
    #[arg(long)]
    retry: bool,
    /// Why, recorded with the decision.
    #[arg(long)]
    reason: Option<String>,
    /// Who decides, recorded with the decision: on a file, or a server
    /// without API keys (with keys, the key's name is recorded).
    #[arg(long, env = "USER", hide_env_values = true, default_value = "operator")]
    by: String,
    /// The config the run was made with: its tools and compensations are
    /// what --compensate and --retry call (on a file).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The SQLite file the run is recorded in, or a PostgreSQL database.
    #[arg(long, visible_alias = "db", default_value = "rein-data/rein.db")]
    data: PathBuf,
    /// Go through a `rein serve` at this URL instead of a file.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// The API key for --server (never printed).
    #[arg(long, env = crate::runs::API_KEY_ENV, hide_env_values = true)]
    api_key: Option<String>,
    /// Print the decision as applied, as JSON.
    #[arg(long)]
    json: bool,
}

impl ResolveArgs {
    fn decision(&self) -> Decision {
        if self.undone {
            Decision::Undone
        } else if self.accepted {
            Decision::Accepted
        } else if self.compensate {
            Decision::Compensate
        } else {
            Decision::Retry
        }
    }
}

/// Runs `rein handoff`: exit 0 with the package, 1 when none of the run's
/// records awaits a human, 2 when it cannot be read.
pub fn run(args: HandoffArgs) -> Result<ExitCode> {
    if let Some(HandoffCommand::Resolve(resolve)) = args.command {
        return self::resolve(resolve);
    }
    let run_id = RunId::new(args.run_id.clone().unwrap_or_default()).context("invalid RUN_ID")?;
    runtime()?.block_on(async {
        let found = match &args.server {
            Some(base) => package_on_server(&args, base, &run_id).await?,
            None => package_on_store(&args, &run_id).await?,
        };
        let package = match found {
            Ok(package) => package,
            Err(why) => {
                crate::log::note(
                    crate::log::Level::Warn,
                    &format!("run {run_id} has no handoff package: {why}"),
                );
                return Ok(ExitCode::from(1));
            }
        };
        if args.json {
            println!("{}", serde_json::to_string_pretty(&package)?);
        } else {
            print!("{}", render(&package));
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The run's package from the store, from the ledger as it stands (as
/// `GET /v1/runs/{id}/handoff`): `Ok(Err)` with why when there is none.
async fn package_on_store(
    args: &HandoffArgs,
    run_id: &RunId,
) -> Result<Result<HandoffPackage, String>> {
    let store: Arc<dyn Store> = crate::store::open_existing(&args.data)?;
    let Some(record) = store.get_run(run_id).await? else {
        bail!("no run {run_id} in {}", crate::store::shown(&args.data));
    };
    let ledger = rein_engine::run::tree_records(store.as_ref(), run_id).await?;
    let fresh = rein_engine::run::revise(store.as_ref(), &record, &ledger).await?;
    let status = record.status.as_str();
    Ok(fresh
        .or(record.report)
        .and_then(|r| r.handoff)
        .ok_or_else(|| format!("it is {status} and none of its records awaits a human")))
}

/// The run's package from a `rein serve`: `Ok(Err)` with the server's
/// reason when there is none (its 404 `no-handoff`).
async fn package_on_server(
    args: &HandoffArgs,
    base: &str,
    run_id: &RunId,
) -> Result<Result<HandoffPackage, String>> {
    let client = rein_engine::run::http_client().context("cannot build the HTTP client")?;
    let base = base.trim_end_matches('/');
    let url = format!(
        "{base}/v1/runs/{}/handoff",
        crate::runs::source::encode(run_id.as_str())
    );
    let (status, value) = exchange(client.get(url), base, args.api_key.as_deref()).await?;
    if status.is_success() {
        let package = serde_json::from_value(value)
            .with_context(|| format!("{base} answered a package rein cannot read"))?;
        return Ok(Ok(package));
    }
    let detail = value["detail"].as_str().unwrap_or("no detail").to_owned();
    if value["type"]
        .as_str()
        .is_some_and(|t| t.ends_with("no-handoff"))
    {
        return Ok(Err(detail));
    }
    Err(anyhow!("{base} answered {status}: {detail}"))
}

/// Sends `request` to the server at `base` with `api_key`: its status and
/// JSON body.
async fn exchange(
    request: reqwest::RequestBuilder,
    base: &str,
    api_key: Option<&str>,
) -> Result<(reqwest::StatusCode, serde_json::Value)> {
    let request = match api_key {
        Some(key) => request.bearer_auth(key),
        None => request,
    };
    let response = request
        .send()
        .await
        .with_context(|| format!("cannot reach {base}"))?;
    let status = response.status();
    let value = response
        .json()
        .await
        .with_context(|| format!("{base} answered {status} with a body that is not JSON"))?;
    Ok((status, value))
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
    if let Some(first) = p.awaiting_decision.first() {
        let _ = writeln!(
            out,
            "    decide each: rein handoff resolve {} {} --undone|--accepted|--compensate|--retry --reason …",
            p.run_id, first.intent_id
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

/// Runs `rein handoff resolve`.
fn resolve(args: ResolveArgs) -> Result<ExitCode> {
    let decision = args.decision();
    runtime()?.block_on(async {
        let resolved = match &args.server {
            Some(base) => resolve_on_server(&args, base, decision).await?,
            None => resolve_on_store(&args, decision).await?,
        };
        let resolution = match resolved {
            Ok(resolution) => resolution,
            Err(refused) => {
                crate::log::note(crate::log::Level::Error, &format!("refused: {refused}"));
                return Ok(ExitCode::from(1));
            }
        };
        if args.json {
            println!("{}", serde_json::to_string_pretty(&resolution)?);
        } else {
            print!("{}", describe(&resolution));
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Applies the decision to the store file (or database) directly: `Ok(Err)`
/// when it was refused, with why.
async fn resolve_on_store(
    args: &ResolveArgs,
    decision: Decision,
) -> Result<Result<Resolution, String>> {
    let run_id = RunId::new(args.run.clone()).context("invalid RUN")?;
    let intent_id = IntentId::new(args.intent.clone()).context("invalid INTENT")?;
    let (tools, compensations) = match &args.config {
        Some(config) => {
            // The same steps as `rein check`: what it refuses, a decision does.
            let registry = crate::run::start(config, rein_engine::startup::Purpose::Run)?.registry;
            (
                rein_engine::bind::bind_tools(&registry)?,
                rein_engine::bind::bind_compensations(&registry)?,
            )
        }
        None if matches!(decision, Decision::Compensate | Decision::Retry) => bail!(
            "--{decision} calls a tool of the config the run was made with: pass --config (or --server)"
        ),
        None => Default::default(),
    };
    let store: Arc<dyn Store> = crate::store::open_existing(&args.data)?;
    let resolver = Resolver::new(
        store,
        Arc::new(rein_engine::SystemClock::new()),
        rein_engine::run::http_client().context("cannot build the HTTP client")?,
        tools,
        compensations,
    );
    let request = DecisionRequest {
        intent_id,
        decision,
        by: args.by.clone(),
        reason: args.reason.clone(),
    };
    match resolver.resolve(&run_id, &request).await {
        Ok(resolution) => Ok(Ok(resolution)),
        Err(ResolveError::Store(e)) => Err(e.into()),
        Err(refused) => Ok(Err(refused.to_string())),
    }
}

/// Sends the decision to a `rein serve`: `Ok(Err)` when it was refused
/// (a 4xx or 502 answer), with the server's reason.
async fn resolve_on_server(
    args: &ResolveArgs,
    base: &str,
    decision: Decision,
) -> Result<Result<Resolution, String>> {
    let client = rein_engine::run::http_client().context("cannot build the HTTP client")?;
    let base = base.trim_end_matches('/');
    let mut body = serde_json::json!({
        "intent_id": args.intent,
        "decision": decision,
        "reason": args.reason,
    });
    if args.api_key.is_none() {
        body["by"] = serde_json::Value::from(args.by.clone());
    }
    let url = format!(
        "{base}/v1/runs/{}/handoff/decisions",
        crate::runs::source::encode(&args.run)
    );
    let (status, value) =
        exchange(client.post(url).json(&body), base, args.api_key.as_deref()).await?;
    if status.is_success() {
        let resolution = serde_json::from_value(value)
            .with_context(|| format!("{base} answered a decision rein cannot read"))?;
        return Ok(Ok(resolution));
    }
    let detail = value["detail"].as_str().unwrap_or("no detail").to_owned();
    if status.is_client_error() && status != reqwest::StatusCode::UNAUTHORIZED
        || status == reqwest::StatusCode::BAD_GATEWAY
    {
        return Ok(Err(detail));
    }
    Err(anyhow!("{base} answered {status}: {detail}"))
}

/// A decision as applied, for a human.
fn describe(r: &Resolution) -> String {
    let mut out = String::new();
    let again = if r.repeated {
        " (decided so before)"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "{} {} ({}) of run {}: {} → {} by {}{again}",
        r.decision, r.intent_id, r.tool, r.run_id, r.from, r.status, r.by
    );
    if let Some(result) = &r.result {
        let _ = writeln!(out, "  the tool answered: {result}");
    }
    match (r.closed, r.still_awaiting) {
        (Some(outcome), _) => {
            let _ = writeln!(
                out,
                "nothing awaits a decision any more: run {} is closed {outcome} (rein runs show {})",
                r.run_id, r.run_id
            );
        }
        (None, 0) => {
            let _ = writeln!(
                out,
                "nothing of run {} awaits a decision any more",
                r.run_id
            );
        }
        (None, n) => {
            let _ = writeln!(
                out,
                "{} still {} a decision: rein handoff {}",
                rein_core::plural::count(n, "record"),
                if n == 1 { "awaits" } else { "await" },
                r.run_id
            );
        }
    }
    out
}
