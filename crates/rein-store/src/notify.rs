//! Notifications: [`Notification`], what a backend tells the processes
//! sharing it as soon as it happens, so that they need not poll for it.
//!
//! # Why a hint, not the truth
//!
//! A notification is delivered at most once, to the receivers subscribed
//! at the moment, and a backend may drop some (a listener connection that
//! broke, a receiver that lagged). It only says "read again now": the
//! state itself is always read from the store, and every reader keeps a
//! slower poll of its own (a run's claim renewal reads its cancel
//! request), so a lost notification delays, never loses. After a gap the
//! backend sends [`Notification::Resync`]: whatever a receiver waits on,
//! it reads it again.

use rein_core::RunId;

/// One change announced to every process sharing the store.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notification {
    /// A cancel request of the run was recorded
    /// ([`RunStore::request_cancel`](crate::RunStore::request_cancel)).
    CancelRequested(RunId),
    /// A commit added events to the run or changed its status: a live
    /// event stream of it reads the store again.
    RunChanged(RunId),
    /// A shared breaker opening or Retry-After cooldown of this arm was
    /// published or cleared ([`HealthStore`](crate::HealthStore)): an
    /// engine sharing breakers reads the openings again at its next call
    /// instead of waiting out its refresh interval.
    HealthChanged(String),
    /// Notifications may have been missed (the listener reconnected, or
    /// this receiver lagged): read again whatever you wait on.
    Resync,
}
