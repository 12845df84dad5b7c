//! The process's heartbeat: one task renews the claims of every run this
//! process drives, and reads their cancel requests, together.
//!
//! # Why one task, not one per run
//!
//! A claim must be renewed while its run is driven, or another process
//! takes the run over. Renewed by a task of its own, each run cost a
//! spawned task, a timer and a store write per beat: a thousand runs in
//! flight made a thousand commits every beat. Here a run registers its
//! claim ([`Heartbeats::beat`]) and the one task renews every registered
//! claim in one call ([`LeaseStore::renew_leases_of`]: one transaction on
//! SQLite, one per 128 claims on PostgreSQL) and reads every cancel request
//! in one read ([`rein_store::RunStore::cancel_requests`]), whatever the
//! number of runs.
//!
//! # What a run sees, as before
//!
//! - Its cancel request is read when it registers (the task wakes for it)
//!   and at every beat after: a cancel taken by any process sharing the
//!   store fires the run's cancel token.
//! - A renewal the store refuses (another process took the claim over
//!   after a stall) fires the run's `lost` token: it stops without
//!   recording anything more.
//! - A store briefly away fails the whole beat: the next is tried sooner
//!   than a beat (`durable`'s pauses, at most a beat), so a blink does not
//!   let the claims lapse. A claim the store refuses otherwise (a row it
//!   cannot read) makes that beat renew each claim alone, so only its run
//!   misses its renewal.
//! - Dropping the [`Heartbeat`] (the run ended, or its future was dropped)
//!   stops renewing its claim; the task ends at the first beat that finds
//!   no run left, and the next registration starts it again, as it does
//!   when the runtime that ran the task has shut down. A process runs its
//!   runs on one runtime; an engine shared between runtimes (tests) gets
//!   its task back at its next registration.
//!
//! [`LeaseStore::renew_leases_of`]: rein_store::LeaseStore::renew_leases_of

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rein_core::RunId;
use rein_store::Store;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::claim::claim_id;
use super::emitter::unix_ms;
use crate::Timer;

/// The claims this process renews, and the task renewing them.
pub(super) struct Heartbeats {
    store: Arc<dyn Store>,
    clock: Arc<dyn Timer>,
    /// How long a renewal holds the claim.
    lease: Duration,
    /// How often the claims are renewed (at most a third of `lease`).
    every: Duration,
    state: Mutex<State>,
    /// Wakes the task for a newly registered run's first cancel read.
    fresh: Notify,
}

#[derive(Default)]
struct State {
    beats: HashMap<u64, Beat>,
    next_key: u64,
    /// The task, while it runs: cleared by the task itself when no claim
    /// is left (under the lock, so a registration either finds it running
    /// or starts another), and found finished when its runtime dropped it.
    task: Option<tokio::task::JoinHandle<()>>,
}

/// One registered claim.
struct Beat {
    run: RunId,
    lease_id: String,
    owner: String,
    /// Fired when the claim was taken over.
    lost: CancellationToken,
    /// Fired when a cancel is requested through the store.
    cancel: Option<CancellationToken>,
    /// Not yet read for a cancel request.
    fresh: bool,
}

/// Keeps a run's claim renewed while it lives.
pub(super) struct Heartbeat {
    heartbeats: Arc<Heartbeats>,
    key: u64,
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.heartbeats.lock().beats.remove(&self.key);
    }
}

impl Heartbeats {
    /// Claims held for `lease`, renewed every `every`.
    pub(super) fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Timer>,
        lease: Duration,
        every: Duration,
    ) -> Arc<Heartbeats> {
        Arc::new(Heartbeats {
            store,
            clock,
            lease,
            every,
            state: Mutex::new(State::default()),
            fresh: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the map whole (every
        // change is one insert or remove): the beats go on.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Renews the claim of `run` held by `owner` while the returned guard
    /// lives, firing `lost` if it is taken over and `cancel` (when given)
    /// if a cancel is requested through the store.
    pub(super) fn beat(
        self: &Arc<Self>,
        run: &RunId,
        owner: &str,
        lost: &CancellationToken,
        cancel: Option<&CancellationToken>,
    ) -> Heartbeat {
        let mut state = self.lock();
        let key = state.next_key;
        state.next_key += 1;
        state.beats.insert(
            key,
            Beat {
                run: run.clone(),
                lease_id: claim_id(run),
                owner: owner.to_owned(),
                lost: lost.clone(),
                cancel: cancel.cloned(),
                fresh: cancel.is_some(),
            },
        );
        if state.task.as_ref().is_none_or(|task| task.is_finished()) {
            state.task = Some(tokio::spawn(Arc::clone(self).run()));
        }
        drop(state);
        self.fresh.notify_one();
        Heartbeat {
            heartbeats: Arc::clone(self),
            key,
        }
    }

    /// The task: a beat every `every` while any claim is registered, and a
    /// cancel read as soon as one registers.
    async fn run(self: Arc<Self>) {
        let mut refused = 0u32;
        // A claim is made holding for a whole lease: the first renewal is
        // due a beat from now.
        let mut next = self.clock.now() + self.every;
        loop {
            // One wait per beat, however often runs register meanwhile: a
            // clock that measures a wait from its start (`ManualClock`)
            // must not see the beat put off by each registration.
            let beat = self.clock.sleep_until(next);
            tokio::pin!(beat);
            loop {
                self.read_cancels(true).await;
                tokio::select! {
                    () = &mut beat => break,
                    () = self.fresh.notified() => {}
                }
            }
            let held: Vec<(u64, (String, String))> = {
                let mut state = self.lock();
                if state.beats.is_empty() {
                    state.task = None;
                    return;
                }
                state
                    .beats
                    .iter()
                    .map(|(key, beat)| (*key, (beat.lease_id.clone(), beat.owner.clone())))
                    .collect()
            };
            let (keys, held): (Vec<u64>, Vec<(String, String)>) = held.into_iter().unzip();
            let until = unix_ms(self.clock.system_now()).saturating_add(self.lease);
            match self.store.renew_leases_of(&held, until).await {
                Ok(renewed) => {
                    refused = 0;
                    self.lose(&keys, &renewed);
                }
                // The store away: the whole beat is tried again soon.
                Err(e) if e.is_transient() => {
                    refused = refused.saturating_add(1);
                    tracing::warn!(claims = held.len(), "cannot renew the runs' claims: {e}");
                }
                // One claim the store refuses (a row it cannot read, an
                // expiry before the claim after the wall clock stepped
                // back) must not cost every other run its renewal: each
                // is renewed alone, as a heartbeat per run did.
                Err(e) => {
                    tracing::warn!(
                        claims = held.len(),
                        "cannot renew the runs' claims together, renewing each: {e}"
                    );
                    refused = 0;
                    let mut renewed = Vec::with_capacity(held.len());
                    for (key, (lease_id, owner)) in keys.iter().zip(&held) {
                        renewed.push(
                            match self.store.renew_lease_of(lease_id, owner, until).await {
                                Ok(renewed) => renewed,
                                Err(e) => {
                                    let run = self.lock().beats.get(key).map(|b| b.run.clone());
                                    tracing::warn!(run = ?run, "cannot renew the run's claim: {e}");
                                    true
                                }
                            },
                        );
                    }
                    self.lose(&keys, &renewed);
                }
            }
            let pause = match refused {
                0 => self.every,
                n => super::durable::pause_cap(n).min(self.every),
            };
            next = self.clock.now() + pause;
            self.read_cancels(false).await;
        }
    }

    /// Fires `lost` for each claim of `keys` not `renewed`: taken over after
    /// a stall, another process drives its run now. A claim whose run ended
    /// meanwhile (its guard dropped, its claim released) is not reported.
    fn lose(&self, keys: &[u64], renewed: &[bool]) {
        let mut state = self.lock();
        for (key, _) in keys.iter().zip(renewed).filter(|(_, renewed)| !**renewed) {
            if let Some(beat) = state.beats.remove(key) {
                tracing::warn!(run = %beat.run, "the run's claim was taken over; stopping here");
                beat.lost.cancel();
            }
        }
    }

    /// Reads the cancel requests of the registered runs (only those not
    /// read yet when `fresh_only`) and fires the cancel of each requested
    /// one. A read that fails is logged and tried again at the next beat.
    async fn read_cancels(&self, fresh_only: bool) {
        let runs: Vec<RunId> = {
            let mut state = self.lock();
            state
                .beats
                .values_mut()
                .filter(|beat| beat.fresh || !fresh_only)
                .filter_map(|beat| {
                    beat.fresh = false;
                    let cancel = beat.cancel.as_ref()?;
                    (!cancel.is_cancelled()).then(|| beat.run.clone())
                })
                .collect()
        };
        if runs.is_empty() {
            return;
        }
        let requests = match self.store.cancel_requests(&runs).await {
            Ok(requests) => requests,
            Err(e) => {
                tracing::warn!(
                    runs = runs.len(),
                    "cannot read the runs' cancel requests: {e}"
                );
                return;
            }
        };
        let state = self.lock();
        for request in requests {
            for beat in state.beats.values().filter(|b| b.run == request.run_id) {
                if let Some(cancel) = beat.cancel.as_ref().filter(|c| !c.is_cancelled()) {
                    tracing::info!(run = %request.run_id, requested_by = %request.requested_by, "cancel requested through the store; cancelling the run");
                    cancel.cancel();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::SystemClock;
    use rein_store::conformance::new_run;
    use rein_store::intercept::Call;
    use rein_store::{
        CancelRequest, Intercept, Intercepted, Lease, LeaseKind, LeaseStore, RunStore, StoreExt,
        Timestamp,
    };
    use rein_store_sqlite::SqliteStore;

    const LEASE: Duration = Duration::from_secs(30);
    const EVERY: Duration = Duration::from_secs(10);

    /// Counts the store calls, whichever they are, as they finish; and
    /// holds paused time still while one waits on the SQLite thread (tokio
    /// does not advance it while a blocking task lives), so a beat or a
    /// timeout never jumps ahead of an answer on its way.
    #[derive(Default)]
    struct Calls {
        finished: AtomicUsize,
        done: tokio::sync::Notify,
    }

    #[async_trait::async_trait]
    impl Intercept for Calls {
        fn around<'a, T: Send + 'a>(&'a self, call: Call<'a, T>) -> Call<'a, T> {
            Box::pin(async move {
                let (answered, parked) = std::sync::mpsc::channel::<()>();
                let blocker = tokio::task::spawn_blocking(move || {
                    let _ = parked.recv();
                });
                let out = call.await;
                drop(answered);
                let _ = blocker.await;
                self.finished.fetch_add(1, Ordering::SeqCst);
                self.done.notify_waiters();
                out
            })
        }
    }

    impl Calls {
        fn count(&self) -> usize {
            self.finished.load(Ordering::SeqCst)
        }

        /// Waits until `n` calls have finished.
        async fn reach(&self, n: usize) {
            loop {
                let done = self.done.notified();
                if self.count() >= n {
                    return;
                }
                done.await;
            }
        }
    }

    /// A store with the runs `names`, each claimed by `owner` for a lease.
    async fn claimed(
        dir: &tempfile::TempDir,
        names: &[&str],
        owner: &str,
    ) -> (Arc<Intercepted<Calls>>, Vec<RunId>) {
        let real: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("r.db")).unwrap());
        let now = unix_ms(std::time::SystemTime::now());
        let mut runs = Vec::new();
        for name in names {
            let run = new_run(name, now);
            let run_id = run.run_id.clone();
            let claim = Lease {
                lease_id: claim_id(&run_id),
                run_id: run_id.clone(),
                intent_id: None,
                kind: LeaseKind::Run,
                pgid: None,
                path: None,
                owner: owner.into(),
                acquired_at_ms: now,
                // Shorter than a renewal holds: a renewal is seen to
                // extend it even within the same wall-clock millisecond.
                expires_at_ms: now.saturating_add(LEASE / 2),
            };
            real.create_run_claimed(run, claim, None).await.unwrap();
            runs.push(run_id);
        }
        (Arc::new(Intercepted::new(real, Calls::default())), runs)
    }

    async fn expiry(store: &dyn Store, run: &RunId) -> Option<Timestamp> {
        let leases = store.leases_of_run(run).await.unwrap();
        leases.into_iter().next().map(|l| l.expires_at_ms)
    }

    #[tokio::test(start_paused = true)]
    async fn one_write_renews_every_claim_and_a_taken_claim_stops_only_its_run() {
        let dir = tempfile::tempdir().unwrap();
        let (store, runs) = claimed(&dir, &["r-1", "r-2"], "me").await;
        let heartbeats = Heartbeats::new(store.clone(), Arc::new(SystemClock::new()), LEASE, EVERY);
        let lost: Vec<CancellationToken> = runs.iter().map(|_| CancellationToken::new()).collect();
        let before: Vec<_> = {
            let mut e = Vec::new();
            for run in &runs {
                e.push(expiry(store.as_ref(), run).await);
            }
            e
        };
        let _beats: Vec<Heartbeat> = runs
            .iter()
            .zip(&lost)
            .map(|(run, lost)| heartbeats.beat(run, "me", lost, None))
            .collect();
        let calls = store.hooks().count();
        // The first beat: paused time runs to it.
        tokio::time::timeout(EVERY * 3, store.hooks().reach(calls + 1))
            .await
            .expect("the first beat renews");
        assert_eq!(
            store.hooks().count() - calls,
            1,
            "one write for both claims, no cancel read (no cancel token)"
        );
        for (run, before) in runs.iter().zip(before) {
            assert!(expiry(store.as_ref(), run).await > before, "{run} renewed");
        }
        // Another process takes r-1 over: only r-1's `lost` fires.
        let taken = claim_id(&runs[0]);
        assert!(store.release_lease_of(&taken, "me").await.unwrap());
        let mut other = store.leases_of_run(&runs[1]).await.unwrap().remove(0);
        other.lease_id = taken;
        other.run_id = runs[0].clone();
        other.owner = "them".into();
        store.acquire_lease(other).await.unwrap();
        tokio::time::timeout(LEASE * 10, lost[0].cancelled())
            .await
            .expect("r-1's claim is lost");
        assert!(!lost[1].is_cancelled(), "r-2 is still driven here");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancel_requested_elsewhere_is_read_when_the_run_registers() {
        let dir = tempfile::tempdir().unwrap();
        let (store, runs) = claimed(&dir, &["r-1", "r-2"], "me").await;
        let at = unix_ms(std::time::SystemTime::now());
        store
            .request_cancel(CancelRequest {
                run_id: runs[0].clone(),
                requested_by: "node-b".into(),
                requested_at_ms: at,
            })
            .await
            .unwrap();
        let heartbeats = Heartbeats::new(store.clone(), Arc::new(SystemClock::new()), LEASE, EVERY);
        let (lost, cancel) = (CancellationToken::new(), CancellationToken::new());
        let other = CancellationToken::new();
        let _first = heartbeats.beat(&runs[0], "me", &lost, Some(&cancel));
        let _second = heartbeats.beat(&runs[1], "me", &lost, Some(&other));
        // Well before the first beat is due.
        tokio::time::timeout(EVERY / 2, cancel.cancelled())
            .await
            .expect("the cancel is read as the run registers");
        assert!(!other.is_cancelled() && !lost.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn the_task_ends_with_the_last_run_and_starts_again_with_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let (store, runs) = claimed(&dir, &["r-1"], "me").await;
        let heartbeats = Heartbeats::new(store.clone(), Arc::new(SystemClock::new()), LEASE, EVERY);
        let lost = CancellationToken::new();
        let beat = heartbeats.beat(&runs[0], "me", &lost, None);
        drop(beat);
        assert!(heartbeats.lock().task.is_some(), "a task was started");
        // The first beat finds no run and ends the task.
        for _ in 0..3 {
            if heartbeats.lock().task.is_none() {
                break;
            }
            tokio::time::sleep(EVERY).await;
        }
        assert!(heartbeats.lock().task.is_none(), "no run, no task");
        let before = expiry(store.as_ref(), &runs[0]).await;
        let calls = store.hooks().count();
        let _again = heartbeats.beat(&runs[0], "me", &lost, None);
        // Renewed by the new task at its first beat: one call.
        tokio::time::timeout(EVERY * 3, store.hooks().reach(calls + 1))
            .await
            .expect("a new task renews the claim");
        assert!(expiry(store.as_ref(), &runs[0]).await > before);
        assert!(!lost.is_cancelled());
    }
}
