//! `rein mcp serve --listen`: the server over MCP's streamable HTTP, at
//! `/mcp`.
//!
//! # Who may call
//!
//! The tools act on the world, so the endpoint is guarded as `rein
//! serve`'s API is: with `[[server.api_keys]]` configured, every request
//! presents one (`Authorization: Bearer …` or `x-api-key`), and its tenant
//! is the tenant of the run its calls go to (see `runs`). Without keys
//! only a loopback address is served: anyone who can reach a public port
//! could otherwise send the email.
//!
//! `Host` and `Origin` are checked as `rein serve` checks them, by the
//! same code and the same `[server] allowed_hosts`: loopback names, the
//! address listened on and the configured names; a browser page of
//! another origin is refused (a web page may not reach a local server
//! through a name it controls, DNS rebinding). The SDK's own host check
//! is off: one policy, one setting. A request body is bounded by `[server]
//! body_limit`. The other `[server]` settings (quotas, run slots, limits,
//! the shutdown grace) govern `rein serve`'s runs API, which this is not:
//! its calls are bounded by the agent's budget, breakers and governor.

use std::future::IntoFuture as _;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rein_core::TenantId;
use rein_core::registry::ServerSpec;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::handler::McpServer;
use crate::signal::{Listener, Stop};

/// The tenant an HTTP request was authenticated as, for the handler.
#[derive(Debug, Clone)]
pub struct Caller(pub TenantId);

/// Refuses to serve `listen` when nothing would guard it.
///
/// # Errors
///
/// A non-loopback address without `[[server.api_keys]]`.
pub fn check(listen: SocketAddr, settings: &ServerSpec) -> Result<()> {
    if !listen.ip().is_loopback() && settings.api_keys.is_empty() {
        bail!(
            "--listen {listen} is not a loopback address, and the config has no [[server.api_keys]]: anyone who can reach it could call the tools. Add keys (each request then presents one, and its tenant's run takes its calls), or listen on 127.0.0.1"
        );
    }
    Ok(())
}

/// Serves `server` on `listen` until a signal comes: which one.
///
/// # Errors
///
/// When the address cannot be bound.
pub async fn serve(
    server: McpServer,
    settings: ServerSpec,
    listen: SocketAddr,
    signals: &mut Listener,
) -> Result<Stop> {
    check(listen, &settings)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let bound = listener.local_addr().context("the bound address")?;
    // Hosts are checked by `guard` below, as `rein serve` checks them;
    // bodies are bounded as its API's are.
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(Vec::<String>::new())
        .with_max_request_body_bytes(settings.body_limit);
    let sessions = config.cancellation_token.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let exposure = Arc::new(Exposure {
        hosts: rein_server::http::exposure::listen_hosts(&settings.allowed_hosts, bound),
        settings,
    });
    let app = axum::Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(exposure, guard));
    crate::log::note(
        crate::log::Level::Info,
        &format!("rein mcp serve: listening on http://{bound}/mcp"),
    );
    let (shutdown, shutting_down) = tokio::sync::oneshot::channel::<()>();
    let serving = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = shutting_down.await;
        })
        .into_future();
    tokio::pin!(serving);
    let stop = tokio::select! {
        stop = signals.next() => stop,
        served = &mut serving => {
            served.context("the MCP endpoint failed")?;
            bail!("the MCP endpoint stopped without a signal");
        }
    };
    crate::log::note(
        crate::log::Level::Info,
        &format!("rein mcp serve: {}, ending the sessions", stop.name()),
    );
    // Sessions' streams end, requests in flight finish: each holds its
    // run until its call is recorded.
    sessions.cancel();
    let _ = shutdown.send(());
    serving.await.context("the MCP endpoint failed")?;
    Ok(stop)
}

/// What a request must pass before the MCP service sees it.
struct Exposure {
    settings: ServerSpec,
    /// `[server] allowed_hosts` and the address listened on.
    hosts: Vec<rein_core::registry::AllowedHost>,
}

/// Lets through a request sent to an allowed host (from no page, or one
/// of the same or a configured origin) that presents a configured key,
/// recording its tenant for the handler; without keys, any such request.
async fn guard(
    State(exposure): State<Arc<Exposure>>,
    mut request: Request,
    next: Next,
) -> Response {
    let settings = &exposure.settings;
    if let Err(refusal) = rein_server::http::exposure::admit(
        &exposure.hosts,
        settings.cors.as_ref(),
        "/mcp",
        request.method(),
        request.uri(),
        request.headers(),
    ) {
        tracing::warn!(refusal = ?refusal, "rein mcp serve: refused a request: host or origin not allowed");
        return refusal.problem().into_response();
    }
    if settings.api_keys.is_empty() {
        return next.run(request).await;
    }
    match rein_server::http::auth::tenant_of(settings, request.headers()) {
        Ok(tenant) => {
            request.extensions_mut().insert(Caller(tenant));
            next.run(request).await
        }
        Err(failure) => {
            tracing::warn!("rein mcp serve: refused a request: {}", failure.as_str());
            failure.problem().into_response()
        }
    }
}
