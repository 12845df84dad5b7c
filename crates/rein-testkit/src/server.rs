//! Starting and stopping a loopback axum server: shared by both services.

use std::future::IntoFuture;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::serve::ListenerExt;
use futures_util::stream;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::TestkitError;

/// How long `shutdown()` waits for in-flight requests (for example one held
/// by a long injected delay) before it stops waiting and cuts them.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A running server task bound to `127.0.0.1:<port>`.
///
/// Dropping it drops the stop sender, which starts the same graceful
/// shutdown as [`Server::shutdown`] without waiting for it.
#[derive(Debug)]
pub(crate) struct Server {
    service: &'static str,
    addr: SocketAddr,
    base_url: String,
    stop: oneshot::Sender<()>,
    task: JoinHandle<io::Result<()>>,
}

impl Server {
    /// Binds `127.0.0.1:<port>` (`0`: any free port, as tests want; a
    /// fixed one for `rein dev`) and serves `router` on a spawned task,
    /// with `TCP_NODELAY` on every accepted socket (without it small
    /// responses stall ~40 ms on Nagle plus delayed ACK).
    pub(crate) async fn start(
        service: &'static str,
        port: u16,
        router: Router,
    ) -> Result<Server, TestkitError> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| TestkitError::Bind {
                service,
                addr,
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| TestkitError::LocalAddr { service, source })?;
        let listener = listener.tap_io(move |tcp| {
            if let Err(err) = tcp.set_nodelay(true) {
                tracing::warn!(service, %err, "cannot set TCP_NODELAY on an accepted socket");
            }
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let serve = axum::serve(listener, router).with_graceful_shutdown(async move {
            // A send or a dropped sender both mean "stop".
            let _ = stopped.await;
        });
        let task = tokio::spawn(serve.into_future());
        tracing::debug!(service, %addr, "test service started");
        Ok(Server {
            service,
            addr,
            base_url: format!("http://{addr}"),
            stop,
            task,
        })
    }

    /// The bound address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`, without a trailing slash.
    pub(crate) fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Stops accepting connections, lets in-flight requests finish for up
    /// to [`SHUTDOWN_GRACE`], then returns.
    pub(crate) async fn shutdown(self) -> Result<(), TestkitError> {
        let Server {
            service,
            stop,
            mut task,
            ..
        } = self;
        let _ = stop.send(());
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut task).await {
            Ok(Ok(Ok(()))) => {
                tracing::debug!(service, "test service stopped");
                Ok(())
            }
            Ok(Ok(Err(source))) => Err(TestkitError::Serve { service, source }),
            Ok(Err(_)) => Err(TestkitError::Task { service }),
            Err(_) => {
                task.abort();
                tracing::warn!(
                    service,
                    grace = ?SHUTDOWN_GRACE,
                    "in-flight requests did not finish in the grace period; stopped waiting"
                );
                Ok(())
            }
        }
    }
}

/// A response body that sends the first bytes of `full` and then fails,
/// which makes hyper abort the connection: the client has the status line
/// and headers but never a complete body.
///
/// # Why
///
/// This is the "lost response" of seed 000: the effect happened, the answer
/// did not arrive. Failing after the headers (rather than before) is the
/// harder case for a client, which must not trust a 200 it never finished
/// reading.
pub(crate) fn aborting_body(full: &[u8]) -> Body {
    let prefix = Bytes::copy_from_slice(&full[..full.len() / 2]);
    let chunks = stream::unfold(0u8, move |step| {
        let prefix = prefix.clone();
        async move {
            match step {
                0 => Some((Ok(prefix), 1)),
                1 => {
                    // Return Pending once so hyper flushes the headers and
                    // the prefix before it sees the error.
                    tokio::task::yield_now().await;
                    Some((
                        Err(io::Error::new(
                            io::ErrorKind::ConnectionAborted,
                            "rein-testkit: response lost by an injected fault",
                        )),
                        2,
                    ))
                }
                _ => None,
            }
        }
    });
    Body::from_stream(chunks)
}
