//! Storage faults: a [`Store`] whose writes fail on a plan.
//!
//! # Why a wrapper and not a broken database
//!
//! The faults the orchestration layer must survive are "the store is
//! briefly unreachable" and "a checkpoint write failed". A wrapper makes
//! them exact and reproducible — the n-th commit fails, and only it —
//! while every write that does go through lands in the real SQLite file,
//! so recovery is tested against real durable state. Reads are never
//! faulted: the checker reads the truth through the same store.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rein_core::RunId;
use rein_store::{Committed, Intercept, Intercepted, StepCommit, Store, StoreError};
use serde::{Deserialize, Serialize};

/// One planned storage fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoreFault {
    /// Commits number `from ..= from + count - 1` (1-based, every
    /// `commit_step` counted) fail as [`StoreError::Unavailable`]: the
    /// store is down for a window.
    Unavailable {
        /// The first failing commit.
        from: u32,
        /// How many fail.
        count: u32,
    },
    /// The `nth` commit that carries a checkpoint fails (1-based).
    CheckpointFails {
        /// Which checkpoint write.
        nth: u32,
    },
    /// The first `count` commits that end a run (a status change to an
    /// outcome) fail as [`StoreError::Unavailable`]: the one write of a
    /// run that must land is refused, whoever offers it.
    EndsUnavailable {
        /// How many fail.
        count: u32,
    },
}

/// A [`Store`] that fails writes according to its plan: the real store
/// wrapped, every call forwarded but the commits the plan refuses.
pub type FaultyStore = Intercepted<StoreFaults>;

/// Wraps `inner` in a [`FaultyStore`] that fails writes per `faults`.
pub fn faulty(inner: Arc<dyn Store>, faults: Vec<StoreFault>) -> FaultyStore {
    Intercepted::new(inner, StoreFaults::new(faults))
}

/// The plan of a [`FaultyStore`] and what it has counted and refused.
pub struct StoreFaults {
    faults: Vec<StoreFault>,
    commits: AtomicU32,
    checkpoints: AtomicU32,
    ends: AtomicU32,
    /// Set once the store is back for good ([`StoreFaults::heal`]).
    healed: AtomicBool,
    injected: Mutex<Vec<String>>,
}

impl StoreFaults {
    /// A plan with nothing counted yet.
    pub fn new(faults: Vec<StoreFault>) -> StoreFaults {
        StoreFaults {
            faults,
            commits: AtomicU32::new(0),
            checkpoints: AtomicU32::new(0),
            ends: AtomicU32::new(0),
            healed: AtomicBool::new(false),
            injected: Mutex::new(Vec::new()),
        }
    }

    /// What was injected, one line per refused write.
    pub fn injected(&self) -> Vec<String> {
        self.injected
            .lock()
            .map(|v| v.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Brings the store back: no write is refused from now on, whatever
    /// the plan still holds. For an outage that lasts until the test says
    /// it is over (a count would depend on how often a writer offers).
    pub fn heal(&self) {
        self.healed.store(true, Ordering::SeqCst);
    }

    fn refuse(&self, what: String) -> StoreError {
        match self.injected.lock() {
            Ok(mut v) => v.push(what.clone()),
            Err(p) => p.into_inner().push(what.clone()),
        }
        StoreError::Unavailable(format!("injected by rein-chaos: {what}"))
    }

    /// The fault for this commit, if any.
    fn fault_for(&self, commit: &StepCommit) -> Option<String> {
        if self.healed.load(Ordering::SeqCst) {
            return None;
        }
        let n = self.commits.fetch_add(1, Ordering::SeqCst) + 1;
        let checkpoint = if commit.writes_checkpoint() {
            Some(self.checkpoints.fetch_add(1, Ordering::SeqCst) + 1)
        } else {
            None
        };
        let end = commit
            .status
            .as_ref()
            .is_some_and(|s| s.status.is_finished())
            .then(|| self.ends.fetch_add(1, Ordering::SeqCst) + 1);
        self.faults.iter().find_map(|f| match *f {
            StoreFault::Unavailable { from, count } if n >= from && n - from < count => {
                Some(format!("commit {n} refused (store unavailable)"))
            }
            StoreFault::CheckpointFails { nth } if checkpoint == Some(nth) => {
                Some(format!("checkpoint write {nth} (commit {n}) refused"))
            }
            StoreFault::EndsUnavailable { count } if end.is_some_and(|e| e <= count) => {
                Some(format!("the end of a run (commit {n}) refused"))
            }
            _ => None,
        })
    }
}

#[async_trait]
impl Intercept for StoreFaults {
    async fn commit_step(
        &self,
        inner: &dyn Store,
        run_id: &RunId,
        commit: StepCommit,
    ) -> Result<Committed, StoreError> {
        if let Some(what) = self.fault_for(&commit) {
            return Err(self.refuse(what));
        }
        inner.commit_step(run_id, commit).await
    }
}
