//! One connection to an MCP server, started on first use and again after
//! it closed.
//!
//! # Why process-wide sessions
//!
//! A registry is bound many times (`rein serve` binds an agent for every
//! run), and starting an MCP server is expensive (often a whole `npx` or
//! `uvx` start). A session is therefore a process resource, like a
//! connection pool: [`McpSession::shared`] keeps one per server spec, so
//! every binding of the same server shares one child process, and a
//! changed spec (another command, another URL) gets its own.
//!
//! # Why a dead server is started again lazily
//!
//! A stdio server that died (killed, crashed, out of memory) fails the
//! calls it was serving with their effect unknown: the guarded call
//! decides by class what happens to them. The next attempt finds the
//! connection closed and starts the server again, so a read retried after
//! the crash is served; nothing is re-sent here.

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rein_core::registry::{McpServerSpec, McpTransport};

use super::discover::{DiscoverError, McpToolDefinition};
use http::{HeaderName, HeaderValue};
use rmcp::ServiceExt as _;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The server's program could not be started.
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The MCP handshake failed.
    #[error("the MCP handshake failed: {0}")]
    Handshake(String),
    /// Neither the start nor the handshake finished in time.
    #[error("the server did not complete the MCP handshake within {0:?}")]
    Timeout(std::time::Duration),
    /// The transport is not one this build can reach.
    #[error("{0}")]
    Unsupported(String),
}

type Service = RunningService<RoleClient, Client>;

/// rein's side of a connection: who it says it is, and the flag a server's
/// `notifications/tools/list_changed` raises, so that the next look at the
/// tools lists them again (a changed definition is then caught without
/// waiting for a reconnect).
#[derive(Debug, Clone)]
struct Client {
    config: ClientConfig,
    tools_changed: Arc<AtomicBool>,
}

impl rmcp::ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        self.config.clone()
    }

    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.tools_changed.store(true, Ordering::SeqCst);
    }
}

/// The process group of a stdio server (its pid, which leads it).
///
/// # Why rein kills the group itself
///
/// A server that exits when its stdin closes leaves behind what it started
/// (`npx` starts node; a server may start workers), and the SDK only stops
/// the process it spawned. Dropped with the connection, the whole group is
/// killed, whether the server exited cleanly, died, or is still running.
#[derive(Debug)]
struct ServerGroup(Option<u32>);

impl Drop for ServerGroup {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.0.and_then(|pid| i32::try_from(pid).ok()) {
            // ESRCH (already gone) is the common case and fine.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// An open connection, and what its server listed on it.
#[derive(Debug)]
struct Open {
    /// Dropped after the service (field order): the server first sees its
    /// stdin close, then its group is killed.
    service: Service,
    /// The server's tools by name, listed on this connection (a server
    /// started again may have changed them).
    tools: Option<Arc<BTreeMap<String, McpToolDefinition>>>,
    /// When they were listed: trusted for the server's `refresh`.
    listed_at: Option<tokio::time::Instant>,
    /// Raised by the server's `notifications/tools/list_changed`.
    tools_changed: Arc<AtomicBool>,
    _group: Option<ServerGroup>,
}

/// The HTTP client of the streamable HTTP transport: rustls on the ring
/// provider with the Mozilla roots, as rein's other clients, configured
/// here because rmcp's client is on another reqwest than rein's (0.13, built
/// without a TLS provider of its own).
fn http_client() -> Result<reqwest_013::Client, ConnectError> {
    let roots = rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| ConnectError::Unsupported(format!("TLS: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest_013::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(reqwest_013::redirect::Policy::none())
        .build()
        .map_err(|e| ConnectError::Unsupported(format!("cannot build the HTTP client: {e}")))
}

/// A connection to one MCP server.
#[derive(Debug)]
pub struct McpSession {
    spec: McpServerSpec,
    open: tokio::sync::Mutex<Option<Open>>,
}

impl McpSession {
    /// A session of its own for `spec` (not shared): opened on first use.
    pub fn new(spec: McpServerSpec) -> Arc<McpSession> {
        Arc::new(McpSession {
            spec,
            open: tokio::sync::Mutex::new(None),
        })
    }

    /// The process's session for `spec`: the same one for every call with
    /// an equal spec.
    pub fn shared(spec: &McpServerSpec) -> Arc<McpSession> {
        static SESSIONS: OnceLock<Mutex<BTreeMap<McpServerSpec, Arc<McpSession>>>> =
            OnceLock::new();
        let sessions = SESSIONS.get_or_init(|| Mutex::new(BTreeMap::new()));
        let mut sessions = sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            sessions
                .entry(spec.clone())
                .or_insert_with(|| McpSession::new(spec.clone())),
        )
    }

    /// The server this session reaches.
    pub fn spec(&self) -> &McpServerSpec {
        &self.spec
    }

    /// A handle to send requests on: the open connection, or a new one
    /// when there is none or it closed.
    ///
    /// # Errors
    ///
    /// [`ConnectError`] when the server cannot be started or reached.
    pub async fn peer(&self) -> Result<Peer<RoleClient>, ConnectError> {
        let mut open = self.open.lock().await;
        Ok(self.opened(&mut open).await?.service.peer().clone())
    }

    /// The server's tools by name, as it lists them on the open connection:
    /// listed again when the server announced a change, or when the last
    /// listing is older than the server's `refresh` (a server that changes
    /// a definition without a word is caught within it).
    ///
    /// # Errors
    ///
    /// [`DiscoverError`] when the server cannot be reached or refuses.
    pub async fn tools(&self) -> Result<Arc<BTreeMap<String, McpToolDefinition>>, DiscoverError> {
        self.listed(false).await
    }

    /// The server's tools by name, listed now (discovery refresh).
    ///
    /// # Errors
    ///
    /// [`DiscoverError`] when the server cannot be reached or refuses.
    pub async fn refresh(&self) -> Result<Arc<BTreeMap<String, McpToolDefinition>>, DiscoverError> {
        self.listed(true).await
    }

    async fn listed(
        &self,
        now: bool,
    ) -> Result<Arc<BTreeMap<String, McpToolDefinition>>, DiscoverError> {
        let mut open = self.open.lock().await;
        let opened = self.opened(&mut open).await?;
        let changed = opened.tools_changed.swap(false, Ordering::SeqCst);
        let fresh = opened
            .listed_at
            .is_some_and(|at| at.elapsed() < self.spec.refresh);
        if let (Some(tools), false, true, false) = (&opened.tools, changed, fresh, now) {
            return Ok(Arc::clone(tools));
        }
        let listed = opened
            .service
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| DiscoverError::List(e.to_string()))?;
        let tools: Arc<BTreeMap<String, McpToolDefinition>> = Arc::new(
            listed
                .iter()
                .map(|tool| {
                    let definition = McpToolDefinition::from_tool(tool);
                    (definition.name.clone(), definition)
                })
                .collect(),
        );
        opened.tools = Some(Arc::clone(&tools));
        opened.listed_at = Some(tokio::time::Instant::now());
        Ok(tools)
    }

    /// The open connection, opened again when there is none or it closed.
    async fn opened<'s>(&self, open: &'s mut Option<Open>) -> Result<&'s mut Open, ConnectError> {
        let alive = open
            .as_ref()
            .is_some_and(|o| !o.service.is_transport_closed() && !o.service.is_closed());
        if !alive {
            // A closed one is dropped first: its child is killed and reaped.
            *open = None;
            let timeout = self.spec.connect_timeout;
            let tools_changed = Arc::new(AtomicBool::new(false));
            let (service, group) =
                tokio::time::timeout(timeout, self.connect(Arc::clone(&tools_changed)))
                    .await
                    .map_err(|_| ConnectError::Timeout(timeout))??;
            *open = Some(Open {
                service,
                tools: None,
                listed_at: None,
                tools_changed,
                _group: group,
            });
        }
        open.as_mut()
            .ok_or_else(|| ConnectError::Handshake("the connection closed at once".to_owned()))
    }

    /// Closes the connection (a stdio server is stopped); the next call
    /// opens a new one.
    pub async fn close(&self) {
        if let Some(mut open) = self.open.lock().await.take() {
            let _ = open.service.close().await;
        }
    }

    async fn connect(
        &self,
        tools_changed: Arc<AtomicBool>,
    ) -> Result<(Service, Option<ServerGroup>), ConnectError> {
        let client = Client {
            config: ClientConfig::new(
                ClientCapabilities::default(),
                Implementation::new("rein", env!("CARGO_PKG_VERSION")),
            ),
            tools_changed,
        };
        match &self.spec.transport {
            McpTransport::Stdio {
                program,
                args,
                env,
                working_dir,
            } => {
                let mut command = tokio::process::Command::new(program);
                command.args(args).env_clear();
                for name in crate::tool::INHERITED_ENV {
                    if let Some(value) = std::env::var_os(name) {
                        command.env(name, value);
                    }
                }
                command.envs(env);
                if let Some(dir) = working_dir {
                    command.current_dir(dir);
                }
                // Its own process group, stopped as a whole when the
                // connection goes (`ServerGroup`): a terminal's Ctrl-C
                // reaches rein, which then stops the server, and what the
                // server started (`npx`'s node) goes with it.
                #[cfg(unix)]
                command.process_group(0);
                let spawn_error = |source| ConnectError::Spawn {
                    program: program.display().to_string(),
                    source,
                };
                let (transport, stderr) = TokioChildProcess::builder(command)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(spawn_error)?;
                let group = ServerGroup(transport.id());
                if let Some(stderr) = stderr {
                    let server = self.spec.name.clone();
                    tokio::spawn(async move {
                        let mut lines = BufReader::new(stderr).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            tracing::debug!(server = %server, "mcp server stderr: {line}");
                        }
                    });
                }
                let service = client
                    .serve(transport)
                    .await
                    .map_err(|e| ConnectError::Handshake(e.to_string()))?;
                Ok((service, Some(group)))
            }
            McpTransport::Http { url, headers } => {
                let mut custom = HashMap::new();
                for (name, value) in headers {
                    let header = HeaderName::from_bytes(name.as_bytes())
                        .map_err(|e| ConnectError::Unsupported(format!("header `{name}`: {e}")))?;
                    let value = HeaderValue::from_str(value)
                        .map_err(|e| ConnectError::Unsupported(format!("header `{name}`: {e}")))?;
                    custom.insert(header, value);
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom);
                let transport = StreamableHttpClientTransport::with_client(http_client()?, config);
                let service = client
                    .serve(transport)
                    .await
                    .map_err(|e| ConnectError::Handshake(e.to_string()))?;
                Ok((service, None))
            }
            other => Err(ConnectError::Unsupported(format!(
                "the transport {other:?} is not supported"
            ))),
        }
    }
}
