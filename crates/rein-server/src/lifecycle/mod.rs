//! The process around the API: the accept loop and its limits, readiness,
//! the drain on shutdown, and the periodic services one process of those
//! sharing the store runs (recovery, discovery refresh) under a singleton
//! lease.

pub mod connections;
pub mod drain;
pub mod mcp_discovery;
pub mod readiness;
pub mod recovery;
pub mod singleton;
