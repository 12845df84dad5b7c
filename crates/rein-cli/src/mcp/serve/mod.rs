//! `rein mcp serve`: an agent's registry tools served to any MCP client,
//! over stdio or streamable HTTP, each call through the whole guarded
//! call.
//!
//! # What a client gets by changing only its server entry
//!
//! A desktop assistant or an IDE calls tools with no deadline, no key and
//! no ledger. Served by rein, its calls are one run of the agent
//! ([`rein_engine::run::RunHandle`]; over stdio its session's, over HTTP
//! its tenant's, see `runs`): the run's budget (steps, wall clock) bounds
//! them; every `tools/call` is validated against the tool's schema,
//! passes the breakers and the governor of its resource group, gets its
//! intent's idempotency key, is written to the ledger before it is sent
//! and retried only as its class allows; a failure comes back as
//! `isError` with rein's structured error (category, effect, whether to
//! retry). A call that needs a human's approval waits for it, never sent
//! without one: the client's user is asked through a form when the client
//! can show one (`--approve-via client`, see `elicit`), and a decision
//! made through rein (`rein approve`, the API, the dashboard) counts as
//! well. Calls of one run are made one at a time.
//!
//! When the stdio client disconnects, or SIGTERM or SIGINT comes, the
//! clients are cut off, a call in flight finishes (it holds its run until
//! it is recorded), and every run ends as the agent's failure policy says
//! (compensation of what a failed run left), its report in the store
//! (`rein runs show`), before the process exits (143 or 130 after a
//! signal). Killed without a word, a run would stay `running` until orphan
//! recovery found it.

mod handler;
mod http;
mod runs;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use rein_core::TenantId;
use rein_engine::run::AgentBinding;
use rein_engine::startup::Purpose;
use rmcp::ServiceExt as _;

use self::handler::{McpServer, mcp_tools};
use self::runs::Runs;
use crate::run::Session;
use crate::signal::Stop;

/// Arguments of `rein mcp serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The config: a TOML file or a directory of them.
    #[arg(long, short)]
    config: PathBuf,
    /// The agent whose tools are served; its budget bounds each run.
    #[arg(long, short)]
    agent: String,
    /// The SQLite file (or PostgreSQL URL) the runs are recorded in, as
    /// for `rein run`.
    #[arg(long, visible_alias = "db")]
    data: Option<PathBuf>,
    /// The tenant of the run over stdio, and over HTTP when the config
    /// has no keys (with keys, each key's tenant has its run).
    #[arg(long, default_value = "default")]
    tenant: String,
    /// Who decides a call that needs approval: `client` asks the MCP
    /// client's user through a form when the client can show one (a
    /// decision through rein counts too, the first one stands); `api`
    /// waits for `rein approve`, the API or the dashboard only.
    #[arg(long, value_enum, default_value_t = ApproveVia::Client)]
    approve_via: ApproveVia,
    /// Serve MCP's streamable HTTP at `http://ADDR/mcp` instead of stdio,
    /// guarded as `rein serve` is (`[[server.api_keys]]`, `[server]
    /// allowed_hosts`). A non-loopback address needs keys; port 0 picks a
    /// free one (the address is printed on stderr).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
}

/// Who decides a served call that needs approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApproveVia {
    /// The MCP client's user, when the client supports elicitation, or
    /// a human through rein.
    Client,
    /// A human through rein only.
    Api,
}

/// Runs `rein mcp serve` until the stdio client closes its end or a signal
/// stops it. Exit status: 0 when every run succeeded (or none made a
/// call), 1 when one ended otherwise (its report says how), 2 when it
/// could not start, 143 or 130 when SIGTERM or SIGINT ended it (after its
/// runs).
pub fn run(args: ServeArgs) -> Result<ExitCode> {
    let runtime = crate::run::runtime()?;
    let served = runtime.block_on(serve(args));
    // A signal leaves the stdin reader blocked in a read that only the
    // client's closing ends; dropping the runtime would wait for it.
    runtime.shutdown_background();
    served
}

async fn serve(args: ServeArgs) -> Result<ExitCode> {
    let mut signals = crate::signal::Listener::install()?;
    let startup = crate::run::start(&args.config, Purpose::Run)?;
    let data = crate::store::chosen(args.data.as_deref(), startup.registry.store());
    let mut session = Session::open(startup, &data, &args.config)?;
    let binding = session.bind(&args.agent)?;
    let tools = mcp_tools(&session.registry, &binding)?;
    let tenant = TenantId::new(args.tenant).context("invalid --tenant")?;
    let settings = session.registry.server().clone();
    if let Some(listen) = args.listen {
        http::check(listen, &settings)?;
    }
    // The session, its agent and its runs live as long as this process
    // serves: made static here once, so that the MCP service's tasks may
    // hold them.
    let session: &'static Session = Box::leak(Box::new(session));
    let binding: &'static AgentBinding = Box::leak(Box::new(binding));
    let transport = if args.listen.is_some() {
        "streamable HTTP"
    } else {
        "stdio"
    };
    let runs = Arc::new(Runs::new(session, binding, tenant, transport));
    crate::log::note(
        crate::log::Level::Info,
        &format!(
            "rein mcp serve: serving {} of agent `{}` over {transport}",
            rein_core::plural::count(tools.len(), "tool"),
            binding.name
        ),
    );
    let server = McpServer::new(binding, tools, args.approve_via, runs.clone());
    let stopped = match args.listen {
        Some(listen) => Some(http::serve(server, settings, listen, &mut signals).await?),
        None => stdio(server, &runs, &mut signals).await?,
    };
    let ended = runs.end_all().await?;
    session.engine.leave_shared_limits().await;
    let all_succeeded = ended
        .iter()
        .all(|output| output.report.outcome == rein_core::Outcome::Succeeded);
    Ok(match stopped {
        Some(stop) => ExitCode::from(stop.exit_code()),
        None if all_succeeded => ExitCode::SUCCESS,
        None => ExitCode::from(1),
    })
}

/// Serves the one client on stdio until it leaves (`None`) or a signal
/// comes (which).
async fn stdio(
    server: McpServer,
    runs: &Runs,
    signals: &mut crate::signal::Listener,
) -> Result<Option<Stop>> {
    // Begun at once: the session is the run, and its id is on stderr
    // before the client's first call.
    let tenant = runs.default_tenant().clone();
    let slot = runs.slot(&tenant);
    runs.open(&mut *slot.lock().await, &tenant)
        .await
        .map_err(anyhow::Error::msg)?;
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .context("the MCP handshake with the client failed")?;
    let connection = running.cancellation_token();
    Ok(tokio::select! {
        quit = running.waiting() => {
            tracing::debug!("the MCP session ended: {quit:?}");
            None
        }
        stop = signals.next() => {
            crate::log::note(
                crate::log::Level::Info,
                &format!("rein mcp serve: {}, ending the session", stop.name()),
            );
            connection.cancel();
            Some(stop)
        }
    })
}
