//! rein-store: the Store trait and its backends (SQLite embedded default, PostgreSQL).
//!
//! This crate is laid out by the foundation issue so that the workspace has
//! its final shape; a later issue fills it. See `DESIGN.md` for its job and
//! the direction of its dependencies.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
