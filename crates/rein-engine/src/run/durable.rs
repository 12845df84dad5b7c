//! Writes that must land: a run's commits offered again while the store is
//! briefly away, and the ledger marks a run could not write held until
//! the store takes them.
//!
//! # Why
//!
//! A database that blinks (a failover, a restart, a proxy dropping its
//! connections, `pg_terminate_backend`) refuses the writes in flight with
//! a transient [`StoreError::Unavailable`]. Each one is a write-ahead step
//! of the ledger (seed 000: "record intent → execute → mark result; none
//! of the three may be missing"), so none of them may be given up at the
//! first refusal:
//!
//! - every commit of a run ([`Engine::commit`]) is offered again with full
//!   jitter (a pause drawn in `[0, cap]`, the cap doubling from
//!   [`FIRST_PAUSE`] to [`MAX_PAUSE`]) for up to [`STORE_PATIENCE`] (or
//!   the engine's own patience), each
//!   time on a connection the backend hands out afresh;
//! - a commit still refused after that stops the run at its next safe
//!   point, handed on unfinished ([`RunCtx::store_away`]), never ended
//!   `failed` for a store fault;
//! - a ledger mark still refused is the one write whose content exists
//!   nowhere else: the process holds the call's result. It is kept in
//!   [`HeldMarks`] and written as soon as the store is back, without the
//!   run's claim (a mark is checked against the ledger's state machine,
//!   so it applies whoever drives the run now, or is refused once a later
//!   status is recorded).
//!
//! # Why repeating a commit is safe
//!
//! A backend answers [`StoreError::Unavailable`] only when nothing of the
//! commit was applied (the store's contract on
//! [`RunStore::commit_step`](rein_store::RunStore::commit_step)); a commit
//! whose outcome the backend cannot learn is [`StoreError::InDoubt`],
//! never offered again: the run stops at a safe point and is handed on,
//! and whoever drives it next reads what the store holds.
//! The ledger's parts are idempotent besides: a planned intent and a
//! declaration are first-write-wins, and a mark to the status a record
//! already holds leaves the record as it is (its events, though, would be
//! stored again: a held mark reads the ledger before it is written).
//!
//! # Events never ahead of the ledger
//!
//! The events of a commit that did not land go back to the run's emitter
//! for its next commit, except those that state what a record holds
//! ([`EventData::states_record`]): a `ledger_recorded succeeded` stored
//! with a later commit that does not carry the mark would say what the
//! ledger does not. They are written with their state or not at all.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use rein_core::{Event, IntentId, RunId};
use rein_store::{Committed, LedgerMark, StepCommit, Store, StoreError};

use super::ctx::RunCtx;
use super::engine::Engine;
use crate::Timer;

/// How long a run's commit is offered to a store that refuses it as
/// unavailable before the run stops at a safe point and is handed on: a
/// failover or a restart of the database takes seconds, and a run that
/// waits longer only holds its slot.
pub const STORE_PATIENCE: Duration = Duration::from_secs(15);
/// The cap of the first pause before a refused commit is offered again.
pub const FIRST_PAUSE: Duration = Duration::from_millis(20);
/// The largest cap of a pause between two offers.
pub const MAX_PAUSE: Duration = Duration::from_secs(1);

/// The cap of the pause after `offers` refused offers: [`FIRST_PAUSE`]
/// doubled each time, at most [`MAX_PAUSE`].
pub(crate) fn pause_cap(offers: u32) -> Duration {
    let doublings = offers.saturating_sub(1).min(16);
    FIRST_PAUSE.saturating_mul(1 << doublings).min(MAX_PAUSE)
}

impl Engine {
    /// Commits `commit` for the run of `ctx`, offered again while the store
    /// answers that it is briefly unavailable, for up to
    /// the engine's patience ([`STORE_PATIENCE`] unless
    /// [`EngineBuilder::store_patience`](super::EngineBuilder::store_patience)
    /// says otherwise); see the module docs.
    ///
    /// # Errors
    ///
    /// The store's error once it is not transient, once the claim is lost
    /// (nothing more is written from here), or once the patience is spent;
    /// in the last case the run is also stopped at its next safe point
    /// ([`RunCtx::store_away`]).
    pub(super) async fn commit(
        &self,
        ctx: &RunCtx<'_>,
        commit: StepCommit,
    ) -> Result<Committed, StoreError> {
        let began = self.clock.now();
        let mut offers = 0u32;
        loop {
            offers += 1;
            let error = match ctx.commit_once(commit.clone()).await {
                Ok(committed) => return Ok(committed),
                Err(e) => e,
            };
            let spent = self.clock.now().saturating_duration_since(began);
            if let StoreError::InDoubt(_) = error {
                // It may have landed: never offered again. Its events are
                // not put back (they may be stored already), and the run
                // stops so that whoever drives it next reads what the
                // store holds.
                tracing::error!(run = %ctx.run_id, "the store cannot say whether a commit landed: stopping the run at a safe point: {error}");
                ctx.stop_for_store(&error);
                return Err(error);
            }
            // Sabotage hook `commit_without_retry`: offered once, as before
            // the store could blink; a transient refusal fails the write.
            #[cfg(feature = "sabotage")]
            if self.sabotage.commit_without_retry {
                self.put_back(ctx, &commit.events);
                return Err(StoreError::Backend(error.to_string()));
            }
            if !error.is_transient() || ctx.lost.is_cancelled() {
                self.put_back(ctx, &commit.events);
                return Err(error);
            }
            if spent >= self.store_patience {
                tracing::error!(run = %ctx.run_id, offers, "the store stayed unavailable for {:.1?}: stopping the run at a safe point: {error}", spent);
                self.put_back(ctx, &commit.events);
                ctx.stop_for_store(&error);
                return Err(error);
            }
            let pause = self
                .full_jitter(pause_cap(offers))
                .min(self.store_patience - spent);
            tracing::warn!(run = %ctx.run_id, offers, "the store refused a commit; offering it again in {pause:?}: {error}");
            tokio::select! {
                () = self.clock.sleep(pause) => {}
                () = ctx.lost.cancelled() => {
                    self.put_back(ctx, &commit.events);
                    return Err(error);
                }
            }
        }
    }

    /// Commits a commit carrying ledger marks ([`Engine::commit`]); once the
    /// store stays away, its marks and the events that state them are held
    /// ([`HeldMarks`]) and written when it is back, and `Err` says the
    /// ledger does not hold them yet.
    pub(super) async fn commit_marks(
        &self,
        ctx: &RunCtx<'_>,
        commit: StepCommit,
    ) -> Result<Committed, StoreError> {
        let marks = commit.marks.clone();
        let statements: Vec<Event> = commit
            .events
            .iter()
            .filter(|e| e.data.states_record())
            .cloned()
            .collect();
        let result = self.commit(ctx, commit).await;
        // A mark in doubt is held too: the writer reads the ledger first,
        // and writes it only if it did not land.
        if let Err(e) = &result
            && (e.is_transient() || matches!(e, StoreError::InDoubt(_)))
        {
            self.shared.held_marks.hold(
                self.store.clone(),
                self.clock.clone(),
                HeldMark {
                    run_id: ctx.run_id.clone(),
                    marks,
                    events: statements,
                },
            );
        }
        result
    }

    /// Puts back the events of a commit that did not land
    /// ([`RunCtx::settle_events`]).
    fn put_back(&self, ctx: &RunCtx<'_>, events: &[Event]) {
        // Sabotage hook `events_ahead_of_ledger`: every event goes back for
        // the run's next commit, those stating a record too, so they land
        // without it.
        #[cfg(feature = "sabotage")]
        if self.sabotage.events_ahead_of_ledger {
            ctx.emitter.requeue(events.to_vec());
            return;
        }
        ctx.settle_events(events);
    }

    /// A pause drawn in `[0, cap]` from the engine's jitter source.
    fn full_jitter(&self, cap: Duration) -> Duration {
        let mut rng = self.shared.rng.lock().unwrap_or_else(|p| p.into_inner());
        let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.random_range(0..=nanos))
    }

    /// How many ledger marks this process holds because the store would
    /// not take them (written as soon as it is back): for readiness and
    /// the operator.
    pub fn held_marks(&self) -> usize {
        self.shared.held_marks.len()
    }

    /// Waits until every held mark is written, for up to `within`: what a
    /// process that is about to exit (a `rein run`) owes the ledger.
    /// Returns how many are still held.
    pub async fn flush_held_marks(&self, within: Duration) -> usize {
        self.shared
            .held_marks
            .flushed(self.clock.as_ref(), within)
            .await
    }
}

/// Ledger marks of one run that the store would not take, with the
/// events that state them.
#[derive(Debug, Clone)]
pub(crate) struct HeldMark {
    run_id: RunId,
    marks: Vec<(IntentId, LedgerMark)>,
    events: Vec<Event>,
}

impl HeldMark {
    /// The commit that writes what the ledger does not hold yet, `None`
    /// when it holds every mark.
    ///
    /// # Why read first
    ///
    /// A mark whose commit was in doubt may have landed, and the ledger
    /// takes a mark to the status a record already holds (a no-op): its
    /// events would be stored twice. A record already at the held status
    /// is left out with its events; one that moved on refuses the mark.
    async fn still_owed(&self, store: &dyn Store) -> Result<Option<StepCommit>, StoreError> {
        let ledger = store.ledger(&self.run_id).await?;
        let landed = |intent: &IntentId, status| {
            ledger
                .iter()
                .any(|r| &r.intent_id == intent && r.status == status)
        };
        let marks: Vec<(IntentId, LedgerMark)> = self
            .marks
            .iter()
            .filter(|(intent, mark)| !landed(intent, mark.status))
            .cloned()
            .collect();
        if marks.is_empty() {
            return Ok(None);
        }
        let events = self
            .events
            .iter()
            .filter(|e| {
                e.intent_id
                    .as_ref()
                    .is_none_or(|i| marks.iter().any(|(owed, _)| owed == i))
            })
            .cloned()
            .collect();
        Ok(Some(StepCommit {
            marks,
            events,
            ..StepCommit::default()
        }))
    }
}

/// The ledger marks this process holds because the store would not take
/// them, written by one task as soon as it is back.
///
/// # Why without the claim
///
/// The run that made the call has stopped (or been taken over) by the time
/// its mark lands. The mark is a fact about the world, not a step of
/// whoever drives the run: the ledger's state machine applies it to a
/// record still `pending` and refuses it once a later status was recorded
/// (a reconciler's `manual`, a resumed run's own mark), and a mark the
/// ledger already holds is left out ([`HeldMark::still_owed`]), so it is
/// written without a claim fence.
#[derive(Default)]
pub(crate) struct HeldMarks {
    inner: Mutex<Held>,
    /// Signalled each time the held list empties.
    emptied: tokio::sync::Notify,
}

#[derive(Default)]
struct Held {
    marks: Vec<HeldMark>,
    writing: bool,
}

impl HeldMarks {
    /// Holds `mark` and starts the writer if it is not running (on the
    /// current tokio runtime; without one the mark is logged and lost to
    /// reconciliation).
    pub(crate) fn hold(
        self: &Arc<Self>,
        store: Arc<dyn Store>,
        clock: Arc<dyn Timer>,
        mark: HeldMark,
    ) {
        tracing::warn!(run = %mark.run_id, marks = mark.marks.len(), "holding ledger marks the store would not take; they are written when it is back");
        let start = {
            let mut held = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            held.marks.push(mark);
            !std::mem::replace(&mut held.writing, true)
        };
        if !start {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(
                "no runtime to write held ledger marks; reconciliation finds them pending"
            );
            return;
        };
        let this = self.clone();
        runtime.spawn(async move { this.write(store, clock).await });
    }

    /// How many marks are held now.
    pub(crate) fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .marks
            .len()
    }

    /// Writes the held marks, oldest first, until none is left.
    async fn write(self: Arc<Self>, store: Arc<dyn Store>, clock: Arc<dyn Timer>) {
        let mut offers = 0u32;
        loop {
            let next = {
                let mut held = self.inner.lock().unwrap_or_else(|p| p.into_inner());
                match held.marks.first() {
                    Some(mark) => mark.clone(),
                    None => {
                        held.writing = false;
                        drop(held);
                        self.emptied.notify_waiters();
                        return;
                    }
                }
            };
            let written = match next.still_owed(store.as_ref()).await {
                Ok(None) => Ok(()),
                Ok(Some(commit)) => store.commit_step(&next.run_id, commit).await.map(|_| ()),
                Err(e) => Err(e),
            };
            match written {
                // Away, or in doubt: the ledger is read again before the
                // next offer, so a mark that did land is not written twice.
                Err(e) if e.is_transient() || matches!(e, StoreError::InDoubt(_)) => {
                    offers += 1;
                    // No jitter source here: one writer per process, and
                    // its pauses are capped like a run's.
                    clock.sleep(pause_cap(offers)).await;
                    continue;
                }
                Ok(_) => {
                    tracing::info!(run = %next.run_id, "held ledger marks written");
                }
                Err(e) => {
                    // Refused for good: a later status was recorded (the
                    // mark is moot) or the run is gone.
                    tracing::warn!(run = %next.run_id, "held ledger marks not written: {e}");
                }
            }
            offers = 0;
            let mut held = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            if !held.marks.is_empty() {
                held.marks.remove(0);
            }
        }
    }

    /// Waits until no mark is held, for up to `within`; how many are left.
    async fn flushed(&self, clock: &dyn Timer, within: Duration) -> usize {
        let until = clock.now() + within;
        loop {
            let emptied = self.emptied.notified();
            let left = self.len();
            if left == 0 {
                return 0;
            }
            tokio::select! {
                () = emptied => {}
                () = clock.sleep_until(until) => return self.len(),
            }
        }
    }
}

impl RunCtx<'_> {
    /// Puts back, for the run's next commit, the events of a commit that
    /// did not land, except those that state what a record holds: they
    /// are stored with their state or not at all.
    pub(super) fn settle_events(&self, events: &[Event]) {
        let kept: Vec<Event> = events
            .iter()
            .filter(|e| !e.data.states_record())
            .cloned()
            .collect();
        let dropped = events.len() - kept.len();
        if dropped > 0 {
            tracing::warn!(run = %self.run_id, dropped, "events stating records the store did not take are not written");
        }
        self.emitter.requeue(kept);
    }

    /// Stops the run at its next safe point because the store stayed
    /// away: handed on unfinished, as on an interrupt, never failed.
    pub(super) fn stop_for_store(&self, error: &StoreError) {
        let mut why = self.store_away.lock().unwrap_or_else(|p| p.into_inner());
        if why.is_none() {
            *why = Some(error.to_string());
        }
        drop(why);
        self.interrupt.cancel();
    }

    /// Why the run stopped for the store, when it did.
    pub(super) fn store_away(&self) -> Option<String> {
        self.store_away
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_cap_doubles_from_the_first_to_the_largest() {
        assert_eq!(pause_cap(1), FIRST_PAUSE);
        assert_eq!(pause_cap(2), FIRST_PAUSE * 2);
        assert_eq!(pause_cap(3), FIRST_PAUSE * 4);
        assert_eq!(pause_cap(10), MAX_PAUSE);
        assert_eq!(pause_cap(u32::MAX), MAX_PAUSE);
    }
}
