//! One conformance check per test: [`Subject`] and
//! [`conformance_tests!`](crate::conformance_tests).
//!
//! # Why per check
//!
//! Run as one function, the suite's first failure hid every later one: a
//! backend author fixed one expectation per test run. The macro makes each
//! check its own `#[tokio::test]` on a fresh [`Subject`], so a run lists
//! every broken expectation at once, and a check can be run alone by name.

use std::any::Any;
use std::future::Future;
use std::panic::resume_unwind;
use std::pin::Pin;
use std::sync::Arc;

use crate::Store;

/// The cleanup of a [`Subject`]: removing its temporary file, dropping its
/// scratch database.
pub type Teardown = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A check's future, owning the handles it borrows.
pub type CheckFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What one conformance check runs against: two handles on the same,
/// fresh data (standing for two processes sharing the store) and how to
/// clean up after it.
pub struct Subject {
    store: Arc<dyn Store>,
    other: Arc<dyn Store>,
    teardown: Option<Teardown>,
}

impl Subject {
    /// A subject of `store` and `other`, two handles on the same data (two
    /// opens of one file, two pools on one database).
    pub fn new(store: Arc<dyn Store>, other: Arc<dyn Store>) -> Subject {
        Subject {
            store,
            other,
            teardown: None,
        }
    }

    /// Runs `teardown` after the check, whether it passed or panicked.
    #[must_use]
    pub fn with_teardown(mut self, teardown: impl Future<Output = ()> + Send + 'static) -> Subject {
        self.teardown = Some(Box::pin(teardown));
        self
    }

    /// Runs `check` (given both handles) on its own task, then the
    /// teardown; a panic of the check is raised again after the teardown,
    /// so a failed check still cleans up.
    ///
    /// # Panics
    ///
    /// When the check panics (that is how a check fails).
    pub async fn run(self, check: impl FnOnce(Arc<dyn Store>, Arc<dyn Store>) -> CheckFuture) {
        let Subject {
            store,
            other,
            teardown,
        } = self;
        let outcome = tokio::spawn(check(store, other)).await;
        if let Some(teardown) = teardown {
            teardown.await;
        }
        if let Err(error) = outcome {
            match error.try_into_panic() {
                Ok(payload) => resume_unwind(payload),
                Err(error) => resume_unwind(Box::new(error.to_string()) as Box<dyn Any + Send>),
            }
        }
    }
}

/// Instantiates every conformance check as its own `#[tokio::test]`, each
/// on the [`Subject`] that `$subject` (an expression of type
/// `impl Future<Output = Option<Subject>>`, evaluated once per test) gives.
/// `None` skips the test: the factory says why (and, under `CI=true`,
/// panics instead, so a missing server fails CI).
///
/// Call it inside a module of an integration test whose crate depends on
/// `tokio` with the `macros` and `rt-multi-thread` features:
///
/// ```ignore
/// mod conformance {
///     async fn subject() -> Option<rein_store::conformance::Subject> { /* ... */ }
///     rein_store::conformance_tests!(subject());
/// }
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($subject:expr) => {
        $crate::conformance_checks!(@tests ($subject));
    };
}
