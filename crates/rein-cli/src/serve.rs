//! `rein serve`: the HTTP API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use rein_engine::run::http_client;
use rein_engine::startup::Startup;
use rein_server::AppState;
use rein_store::{SqliteStore, Store};
use tokio::sync::Notify;

use crate::run::{runtime, start};

/// Arguments of `rein serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The config: a TOML file or a directory of them (its `[server]`
    /// section sets the listen address, limits and API keys).
    #[arg(long, short)]
    config: PathBuf,
    /// Where to listen; overrides `server.listen` (default 127.0.0.1:8787).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// The SQLite file runs are recorded in (created on first start, 0600
    /// in a 0700 directory: it holds prompts and tool results).
    #[arg(long, default_value = "rein-data/rein.db")]
    data: PathBuf,
}

/// Runs `rein serve` until SIGTERM or SIGINT, then drains (see
/// `rein_server::drain`) and exits 0.
pub fn run(args: ServeArgs) -> Result<ExitCode> {
    runtime()?.block_on(async {
        // The same steps as `rein check`, with the listen address this
        // start uses (a non-loopback one needs API keys).
        let Startup {
            registry, schemas, ..
        } = start(&args.config, args.listen)?;
        let settings = registry.server().clone();
        let listen = args.listen.unwrap_or(settings.listen);
        // The store creates its directory 0700 and the file 0600; one that
        // exists keeps its mode, and anyone may read it.
        if rein_store::is_world_readable(&args.data) {
            tracing::warn!(
                path = %args.data.display(),
                "the run store is readable by every local user (it holds prompts, tool results \
                 and completions); `chmod 600` it and its -wal and -shm files"
            );
        }
        let store: Arc<dyn Store> = Arc::new(
            SqliteStore::open(&args.data)
                .with_context(|| format!("cannot open the run store {}", args.data.display()))?,
        );
        let client = http_client().context("cannot build the HTTP client")?;
        let engine = rein_server::build_engine(&registry, store.clone(), client.clone(), None)?;
        // Answers name this process by its node id only; the log says
        // which process that is.
        tracing::info!(
            node = engine.node(),
            pid = std::process::id(),
            host = rein_engine::lease::local_host(),
            "node id of this process"
        );
        let workers = usize::try_from(settings.queue.workers.get()).unwrap_or(1);
        let keys = settings.api_keys.len();
        let models = rein_server::bind_models(&registry, &client)
            .context("cannot bind the [models.*] bindings")?;
        let state = Arc::new(AppState {
            registry,
            schemas,
            store,
            engine: Arc::new(engine),
            client,
            settings,
            workers,
            queue: Notify::new(),
            node: rein_server::state::node_id(),
            models,
            health: Default::default(),
            drain: Default::default(),
            connections: Default::default(),
        });
        // Installed before the address is announced: from then on a signal
        // drains instead of killing the process.
        let mut signals = crate::signal::Listener::install()?;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        let addr = listener.local_addr().context("no local address")?;
        let auth = if keys == 0 {
            "no API keys: open mode, every caller acts for tenant `default`".to_owned()
        } else {
            format!("{keys} API keys")
        };
        eprintln!(
            "rein serve: listening on http://{addr} ({auth}); runs in {}; OpenAPI at /openapi.json",
            args.data.display()
        );
        // A second signal skips what is left of the grace: the runs in
        // flight are handed on at once.
        let hurried = state.clone();
        let shutdown = async move {
            let signal = signals.next().await;
            tracing::info!(
                "{}: draining (send it again to hand the runs in flight on now)",
                signal.name()
            );
            tokio::spawn(async move {
                let again = signals.next().await;
                tracing::warn!("{}: handing the runs in flight on now", again.name());
                hurried.engine.interrupt();
            });
        };
        rein_server::serve(state, listener, shutdown)
            .await
            .context("the server failed")?;
        Ok(ExitCode::SUCCESS)
    })
}
