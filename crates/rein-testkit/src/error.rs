//! The one error type of the testkit.

use std::io;
use std::net::SocketAddr;

/// Why a test service could not start, stop, or accept a setting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// The loopback listener could not be bound.
    #[error("cannot bind the {service} to {addr}")]
    Bind {
        /// The service that tried to start.
        service: &'static str,
        /// The address it asked for.
        addr: SocketAddr,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
    /// The bound listener could not report its port.
    #[error("cannot read the local address of the {service}")]
    LocalAddr {
        /// The service that tried to start.
        service: &'static str,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
    /// The server loop ended with an I/O error.
    #[error("the {service} stopped with an error")]
    Serve {
        /// The service that stopped.
        service: &'static str,
        /// The I/O error it stopped with.
        #[source]
        source: io::Error,
    },
    /// The server task panicked or was cancelled before it could stop
    /// gracefully.
    #[error("the {service}'s server task panicked or was cancelled")]
    Task {
        /// The service whose task ended.
        service: &'static str,
    },
    /// A fault names an HTTP status that is not an error status.
    #[error(
        "a fault for tool {tool:?} must carry an HTTP status in 400..=599, but it carries {code}"
    )]
    InvalidFault {
        /// The tool the fault was meant for.
        tool: String,
        /// The refused status code.
        code: u16,
    },
}
