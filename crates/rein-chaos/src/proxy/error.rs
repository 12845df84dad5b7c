//! Why a proxy could not start.

/// Why [`FaultProxy::start`](super::FaultProxy::start) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The upstream base URL is not an absolute `http://` URL.
    #[error(
        "upstream must be an absolute http URL like \"http://127.0.0.1:4321\", but {url:?} is not: {reason}"
    )]
    InvalidUpstream {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No loopback port could be bound.
    #[error("cannot bind the fault proxy on 127.0.0.1")]
    Bind(#[source] std::io::Error),
    /// The bound address could not be read back.
    #[error("cannot read the fault proxy's bound address")]
    LocalAddr(#[source] std::io::Error),
    /// The HTTP client for the upstream could not be built.
    #[error("cannot build the fault proxy's upstream client")]
    Client(#[source] reqwest::Error),
}
