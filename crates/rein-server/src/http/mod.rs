//! What every request passes through: keys and tenants, `Host` and
//! `Origin`, media types, request ids and the access log, problems,
//! extractors, query strings, the request metrics, the caller's trace
//! context, and the state every handler shares.

pub mod access;
pub mod auth;
pub mod exposure;
pub mod extract;
pub mod media;
pub mod pointer;
pub mod problem;
pub mod query;
pub mod request_metrics;
pub mod state;
pub(crate) mod trace_context;
