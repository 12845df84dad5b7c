//! `rein serve`: the HTTP API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use rein_engine::run::http_client;
use rein_engine::startup::{Purpose, Startup};
use rein_server::AppState;
use rein_store::Store;

use crate::run::{runtime, start};

/// Arguments of `rein serve`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein serve --config examples/order-desk        # on 127.0.0.1:8787, runs in rein-data/rein.db
  rein serve -c examples/order-desk --listen 127.0.0.1:0 --data /tmp/x.db   # any free port
  rein serve -c /etc/rein --listen 0.0.0.0:8787 --data postgres://rein@db.internal/rein   # one node of several; needs [server] API keys")]
pub struct ServeArgs {
    /// The config: a TOML file or a directory of them (its `[server]`
    /// section sets the listen address, limits and API keys).
    #[arg(long, short)]
    config: PathBuf,
    /// Where to listen; overrides `server.listen` (default 127.0.0.1:8787).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Where runs are recorded: a SQLite file (created on first start,
    /// 0600 in a 0700 directory: it holds prompts and tool results), or a
    /// PostgreSQL database, `postgres://user[:password]@host[:port]/db`,
    /// shared by every node serving it (migrated at start). Overrides
    /// `[store] url`; without either, `rein-data/rein.db`.
    #[arg(long, visible_alias = "db")]
    data: Option<PathBuf>,
}

/// Runs `rein serve` until SIGTERM or SIGINT, then drains (see
/// `rein_server::lifecycle::drain`) and exits 0.
pub fn run(args: ServeArgs) -> Result<ExitCode> {
    runtime()?.block_on(async {
        // The same steps as `rein check`, with the listen address this
        // start uses (a non-loopback one needs API keys).
        let Startup {
            registry,
            schemas,
            models,
            ..
        } = start(
            &args.config,
            Purpose::Serve {
                listen: args.listen,
            },
        )?;
        let mut settings = registry.server().clone();
        let listen = args.listen.unwrap_or(settings.listen);
        for warning in rein_server::http::exposure::start_warnings(&settings, listen) {
            tracing::warn!("{warning}");
        }
        if let Some(warning) = rein_server::queue::floor::slots_warning(&settings) {
            tracing::warn!("{}: {warning}", rein_server::queue::floor::RUN_SLOTS_FIELD);
        }
        // A client reaching the specific address this listens on names it.
        settings.allowed_hosts =
            rein_server::http::exposure::listen_hosts(&settings.allowed_hosts, listen);
        // The store creates its directory 0700 and the file 0600, and warns
        // when an existing one is readable by every local user.
        let data = crate::store::chosen(args.data.as_deref(), registry.store());
        let store: Arc<dyn Store> = crate::store::open_configured(&data, registry.store())?;
        let client = http_client().context("cannot build the HTTP client")?;
        // Runs record the config they start from: `rein resume RUN` finds it.
        let engine = rein_server::engine_builder(&registry, store.clone(), client.clone(), None)
            .config_source(
                std::path::absolute(&args.config)
                    .unwrap_or_else(|_| args.config.clone())
                    .to_string_lossy(),
            )
            .build()?;
        // Answers name this process by its node id only; the log says
        // which process that is.
        tracing::info!(
            node = engine.node(),
            pid = std::process::id(),
            host = rein_engine::lease::local_host(),
            "node id of this process"
        );
        let keys = settings.api_keys.len();
        let mut state = AppState::new(registry, schemas, store, engine, client, models);
        state.settings = settings;
        state.store_shown = Some(crate::store::shown(&data));
        let state = Arc::new(state);
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
        crate::log::note(
            crate::log::Level::Info,
            &format!(
            "rein serve: listening on http://{addr} ({auth}); runs in {}; OpenAPI at /openapi.json; dashboard at /ui",
            crate::store::shown(&data)
            ),
        );
        // A second signal skips what is left of the finish phase: the runs
        // in flight are handed on at once. A third quits at once, like
        // `rein run`: the runs still driven here keep their claims until
        // their leases expire (or a server of this machine sees this
        // process gone).
        let hurried = state.clone();
        let shutdown = async move {
            let signal = signals.next().await;
            tracing::info!(
                "{}: draining (send it again to hand the runs in flight on now, a third time to quit at once)",
                signal.name()
            );
            tokio::spawn(async move {
                let again = signals.next().await;
                tracing::warn!(
                    "{}: handing the runs in flight on now (once more quits at once)",
                    again.name()
                );
                hurried
                    .engine
                    .interrupt(rein_engine::run::HandOn::AnyWorker);
                let last = signals.next().await;
                eprintln!(
                    "rein serve: {}: quitting at once; runs still in flight resume from their last checkpoint",
                    last.name()
                );
                std::process::exit(i32::from(last.exit_code()));
            });
        };
        rein_server::serve(state, listener, shutdown)
            .await
            .context("the server failed")?;
        Ok(ExitCode::SUCCESS)
    })
}
