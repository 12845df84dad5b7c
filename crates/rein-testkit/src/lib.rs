//! rein-testkit: test services shared by rein's tests and demo: order desk, mock model server.
//!
//! This crate is laid out by the foundation issue so that the workspace has
//! its final shape; a later issue fills it. See `DESIGN.md` for its job and
//! the direction of its dependencies.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
