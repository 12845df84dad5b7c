//! A [`Store`] whose calls keep paused tokio time still while they wait.
//!
//! # Why
//!
//! Under `start_paused`, tokio moves time forward whenever the runtime has
//! nothing to do — to the next timer. The SQLite store answers from its own
//! thread, so while a run awaits a commit the runtime looks idle, and time
//! would jump to the next timer (a first-byte limit, a heartbeat) in the
//! middle of a step. Tokio does not advance paused time while a
//! `spawn_blocking` task is alive, so each call here keeps one parked on a
//! channel until the store answered. Outside paused time it only costs a
//! blocking-pool thread per call.

use std::future::Future;
use std::sync::Arc;

use rein_store::intercept::Call;
use rein_store::{Intercept, Intercepted, Store};

/// Forwards every call to the store it wraps, holding paused time still
/// until the call returns.
pub type PauseSafeStore = Intercepted<HoldPausedTime>;

/// Wraps `inner` in a [`PauseSafeStore`].
pub fn pause_safe(inner: Arc<dyn Store>) -> PauseSafeStore {
    Intercepted::new(inner, HoldPausedTime)
}

/// The hook of a [`PauseSafeStore`]: every call [`held`].
pub struct HoldPausedTime;

impl Intercept for HoldPausedTime {
    fn around<'a, T: Send + 'a>(&'a self, call: Call<'a, T>) -> Call<'a, T> {
        Box::pin(held(call))
    }
}

/// Awaits `op` while a blocking task is alive (paused time cannot advance).
async fn held<T>(op: impl Future<Output = T>) -> T {
    let (done, parked) = std::sync::mpsc::channel::<()>();
    let blocker = tokio::task::spawn_blocking(move || {
        let _ = parked.recv();
    });
    let out = op.await;
    drop(done);
    let _ = blocker.await;
    out
}
