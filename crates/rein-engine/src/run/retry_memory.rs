//! The retry outcomes of every process on the store, as one engine knows
//! them: what a retry's worth is decided on (`retry_worth`; issue 16
//! items 4 and 6).
//!
//! # Why in the store
//!
//! Counted in one process only, every `rein run` (one process per run)
//! would decide its first retries from the prior (½) and never learn that
//! a target's retries keep failing, and a cluster would learn it once
//! per node. So the counts are kept like observed latency
//! (`run/latency.rs`): each target keeps the stored sum, as last read or
//! merged, and what this process counted since its last flush (the
//! delta). A flush adds the deltas to the store in one write
//! ([`Store::merge_retry_outcomes`]) and takes the sums back, so the
//! other processes' outcomes arrive with every flush.
//!
//! # Old outcomes fade
//!
//! A retry's success rate moves with the fault of the moment, so the
//! counts are halved once per window of
//! [`RETRY_RATE_HALF_LIFE`](rein_core::retry::RETRY_RATE_HALF_LIFE) (ten
//! minutes; windows aligned on the Unix epoch, so every process halves at
//! the same instants): the store decays what it holds at each read and
//! merge, and the engine decays the sum it holds to the wall clock of
//! each decision. After an hour an outcome weighs 1/64: a target that
//! failed during an outage is judged from (almost) the prior again.
//!
//! # When
//!
//! The stored sums are read once, before the first worth decision of the
//! engine ([`RetryMemory::load`], called where a tool or model call is
//! planned). Flushes happen at the end of every run (so `rein run`
//! contributes), at most every `flush_every` in the background (default
//! [`DEFAULT_RETRY_FLUSH`], for `rein serve`), and on
//! [`Engine::flush_retry_outcomes`](super::Engine::flush_retry_outcomes)
//! (a server's drain). A store that cannot be read or written is logged:
//! the deltas are kept for the next flush, and the process goes on with
//! what it has.
//!
//! [`Store::merge_retry_outcomes`]: rein_store::Store::merge_retry_outcomes

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rein_core::retry::{RetryRecord, SuccessRate};
use rein_core::{Clock, Instant, Timestamp};
use rein_store::{RetryOutcomes, Store};
use tokio::sync::OnceCell;

use super::emitter::unix_ms;

/// How often at most the engine adds its counted retry outcomes to the
/// store in the background (besides at every run's end).
pub const DEFAULT_RETRY_FLUSH: Duration = Duration::from_secs(10);

/// One target's counts.
#[derive(Debug, Default)]
struct Entry {
    /// The stored sum as last read or merged, as of `as_of_ms`.
    stored: RetryRecord,
    /// The wall clock `stored` was decayed to (ms since the Unix epoch).
    as_of_ms: u64,
    /// Counted here since the last flush.
    delta: RetryRecord,
}

impl Entry {
    /// The counts as of `now_ms`: the stored sum decayed since it was read,
    /// plus the delta (younger than one flush interval: not decayed).
    fn at(&self, now_ms: u64) -> RetryRecord {
        let mut sum = self.stored.decayed(self.as_of_ms, now_ms);
        sum.merge(&self.delta);
        sum
    }
}

#[derive(Debug)]
struct State {
    entries: HashMap<String, Entry>,
    flushed_at: Instant,
}

/// The retry outcomes of one engine: see the module docs.
pub(crate) struct RetryMemory {
    flush_every: Duration,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    loaded: OnceCell<()>,
    /// Set while a background flush runs, so records start no other.
    flushing: AtomicBool,
    /// Held by a flush from taking the deltas to taking the sums in, so
    /// that an older sum never replaces a newer one.
    flush_lock: tokio::sync::Mutex<()>,
}

/// Clears the flushing flag even if the flush is dropped.
struct Flushing<'a>(&'a AtomicBool);

impl Drop for Flushing<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl RetryMemory {
    pub(crate) fn new(flush_every: Duration, store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        // The first background flush waits a whole interval: a process
        // that retries a few times writes once, at its run's end.
        let state = State {
            entries: HashMap::new(),
            flushed_at: clock.now(),
        };
        RetryMemory {
            flush_every,
            store,
            clock,
            state: Mutex::new(state),
            loaded: OnceCell::new(),
            flushing: AtomicBool::new(false),
            flush_lock: tokio::sync::Mutex::new(()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ms(&self) -> u64 {
        unix_ms(self.clock.system_now()).as_millis()
    }

    /// Reads the stored sums, once per engine (later calls return at once).
    pub(crate) async fn load(&self) {
        self.loaded
            .get_or_init(|| async {
                let now_ms = self.now_ms();
                match self
                    .store
                    .retry_outcomes(Timestamp::from_millis(now_ms))
                    .await
                {
                    Ok(rows) => self.absorb(rows, now_ms),
                    Err(e) => tracing::warn!(
                        "cannot read the stored retry outcomes; starting from the prior: {e}"
                    ),
                }
            })
            .await;
    }

    /// Takes stored sums in, as of `now_ms`: each becomes its target's
    /// stored part (the delta counted since stays apart).
    fn absorb(&self, rows: Vec<RetryOutcomes>, now_ms: u64) {
        let mut state = self.state();
        for row in rows {
            let entry = state.entries.entry(row.target).or_default();
            entry.stored = row.record;
            entry.as_of_ms = now_ms;
        }
    }

    /// The measured success rate of attempt `next_attempt` of `target`,
    /// as of now.
    pub(crate) fn rate(&self, target: &str, next_attempt: u32) -> SuccessRate {
        let now_ms = self.now_ms();
        self.state()
            .entries
            .get(target)
            .map(|e| e.at(now_ms))
            .unwrap_or_default()
            .rate(next_attempt)
    }

    /// Counts how attempt `attempt` of `target` ended (a first attempt is
    /// not a retry and counts nothing).
    pub(crate) fn record(self: &Arc<Self>, target: &str, attempt: u32, succeeded: bool) {
        if attempt < 2 {
            return;
        }
        self.state()
            .entries
            .entry(target.to_owned())
            .or_default()
            .delta
            .record(attempt, succeeded);
        self.flush_if_due();
    }

    /// Starts a background flush when the last one is older than
    /// `flush_every` and none runs.
    fn flush_if_due(self: &Arc<Self>) {
        let now = self.clock.now();
        {
            let mut state = self.state();
            if now.saturating_duration_since(state.flushed_at) < self.flush_every
                || self.flushing.swap(true, Ordering::AcqRel)
            {
                return;
            }
            state.flushed_at = now;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.flushing.store(false, Ordering::Release);
            return;
        };
        let memory = self.clone();
        runtime.spawn(async move {
            let _flag = Flushing(&memory.flushing);
            memory.flush_now().await;
        });
    }

    /// Adds every delta to the store and takes the sums back. On failure
    /// the deltas are kept for the next flush.
    pub(crate) async fn flush_now(&self) {
        // The stored sums are read before any is written back: reading
        // them after would count this process's deltas twice.
        self.load().await;
        let _serial = self.flush_lock.lock().await;
        let deltas: Vec<(String, RetryRecord)> = {
            let mut state = self.state();
            state.flushed_at = self.clock.now();
            state
                .entries
                .iter_mut()
                .filter(|(_, e)| !e.delta.is_empty())
                .map(|(k, e)| (k.clone(), std::mem::take(&mut e.delta)))
                .collect()
        };
        if deltas.is_empty() {
            return;
        }
        let now_ms = self.now_ms();
        match self
            .store
            .merge_retry_outcomes(&deltas, Timestamp::from_millis(now_ms))
            .await
        {
            Ok(rows) => self.absorb(rows, now_ms),
            Err(e) => {
                tracing::warn!(
                    "cannot add the retry outcomes to the store; keeping them for the next flush: {e}"
                );
                let mut state = self.state();
                for (target, delta) in deltas {
                    state.entries.entry(target).or_default().delta.merge(&delta);
                }
            }
        }
    }
}
