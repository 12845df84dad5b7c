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
use rein_core::{LedgerStatus, RunId};
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
    /// Offers `nth ..= nth + count - 1` (1-based) of the commits of kind
    /// `write` are refused with `flavour`: a blink, absorbed by the
    /// engine's retry when `count` is small. Every offer counts, so a
    /// write refused three times is offers 1, 2 and 3 of its kind.
    Refuses {
        /// Which kind of write.
        write: Write,
        /// The first refused offer of that kind.
        nth: u32,
        /// How many are refused.
        count: u32,
        /// What the refusal looks like.
        flavour: Flavour,
    },
    /// From the `nth` offer of a commit of kind `write` on, every commit
    /// of that kind is refused until the store is healed
    /// ([`StoreFaults::heal`]): an outage longer than a run's patience.
    /// The run must be handed on, never failed, and finish on a later
    /// resume (the runner heals the store once the runs returned).
    Outage {
        /// Which kind of write.
        write: Write,
        /// The first refused offer of that kind.
        nth: u32,
        /// What the refusal looks like.
        flavour: Flavour,
    },
}

/// A kind of run commit, by what it carries; one commit may be of several
/// kinds (a mark and a checkpoint together).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Write {
    /// It persists planned intents (a turn's calls).
    Plans,
    /// It declares ledger records `pending`, before their calls.
    Declares,
    /// It marks a record `succeeded`: the call's result.
    Succeeded,
    /// It marks a record `compensated`, `uncompensatable` or `manual`:
    /// settlement's result.
    Compensation,
    /// It writes a checkpoint.
    Checkpoint,
    /// It ends the run (a status change to an outcome).
    End,
}

impl Write {
    /// Whether `commit` is of this kind.
    pub fn matches(self, commit: &StepCommit) -> bool {
        let marks = |f: fn(LedgerStatus) -> bool| commit.marks.iter().any(|(_, m)| f(m.status));
        match self {
            Write::Plans => !commit.intents.is_empty(),
            Write::Declares => !commit.declares.is_empty(),
            Write::Succeeded => marks(|s| s == LedgerStatus::Succeeded),
            Write::Compensation => marks(|s| {
                matches!(
                    s,
                    LedgerStatus::Compensated
                        | LedgerStatus::Uncompensatable
                        | LedgerStatus::Manual
                )
            }),
            Write::Checkpoint => commit.writes_checkpoint(),
            Write::End => commit
                .status
                .as_ref()
                .is_some_and(|s| s.status.is_finished()),
        }
    }

    /// Its name in fault lines.
    pub fn name(self) -> &'static str {
        match self {
            Write::Plans => "plans",
            Write::Declares => "declares",
            Write::Succeeded => "succeeded mark",
            Write::Compensation => "compensation mark",
            Write::Checkpoint => "checkpoint",
            Write::End => "end",
        }
    }

    const ALL: [Write; 6] = [
        Write::Plans,
        Write::Declares,
        Write::Succeeded,
        Write::Compensation,
        Write::Checkpoint,
        Write::End,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// What a refused write looks like to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Flavour {
    /// The connection was closed under the commit (a failover, a proxy
    /// dropping connections): [`StoreError::Unavailable`].
    Closed,
    /// The database is busy or locked (SQLite's `SQLITE_BUSY` past its
    /// busy timeout): [`StoreError::Unavailable`], as the SQLite backend
    /// maps it.
    Busy,
    /// The connection was refused (a PostgreSQL server restarting):
    /// [`StoreError::Unavailable`], as the PostgreSQL backend maps it.
    Refused,
    /// On PostgreSQL (with a terminator, see [`StoreFaults::terminator`]):
    /// the scenario database's backends are terminated from a side
    /// connection and the commit is then forwarded, so it meets a dead
    /// connection for real. Elsewhere: [`Flavour::Closed`].
    Terminated,
    /// A disk I/O error (SQLite's `SQLITE_IOERR`): not transient
    /// ([`StoreError::Backend`], as the SQLite backend maps it), so never
    /// offered again. The run may fail, with the store's reason, and what
    /// it says must still agree with the ledger.
    Io,
}

impl Flavour {
    fn error(self, what: &str) -> StoreError {
        let injected = format!("(injected by rein-chaos: {what})");
        match self {
            Flavour::Closed | Flavour::Terminated => {
                StoreError::Unavailable(format!("connection closed {injected}"))
            }
            Flavour::Busy => {
                StoreError::Unavailable(format!("sqlite: database is locked {injected}"))
            }
            Flavour::Refused => {
                StoreError::Unavailable(format!("postgres pool: connection refused {injected}"))
            }
            Flavour::Io => StoreError::Backend(format!("sqlite: disk I/O error {injected}")),
        }
    }
}

/// Ends every other connection to the scenario's database (PostgreSQL's
/// `pg_terminate_backend`), from a side connection.
pub type Terminator = Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<u64, String>> + Send>>
        + Send
        + Sync,
>;

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
    /// Offers counted per [`Write`] kind.
    kinds: [AtomicU32; 6],
    /// Terminates the scenario database's backends, on PostgreSQL.
    terminator: Option<Terminator>,
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
            kinds: Default::default(),
            terminator: None,
            healed: AtomicBool::new(false),
            injected: Mutex::new(Vec::new()),
        }
    }

    /// Terminates the scenario database's backends for the
    /// [`Flavour::Terminated`] faults instead of refusing the commit.
    pub fn terminator(mut self, terminator: Terminator) -> StoreFaults {
        self.terminator = Some(terminator);
        self
    }

    /// Whether the plan holds an outage that lasts until [`Self::heal`].
    pub fn has_outage(&self) -> bool {
        self.faults
            .iter()
            .any(|f| matches!(f, StoreFault::Outage { .. }))
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

    fn note(&self, what: String) {
        match self.injected.lock() {
            Ok(mut v) => v.push(what),
            Err(p) => p.into_inner().push(what),
        }
    }

    fn refuse(&self, what: String, flavour: Flavour) -> StoreError {
        let error = flavour.error(&what);
        self.note(what);
        error
    }

    /// The fault for this commit, if any: what it was and how it fails.
    fn fault_for(&self, commit: &StepCommit) -> Option<(String, Flavour)> {
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
        let mut offers = [None; 6];
        for write in Write::ALL {
            if write.matches(commit) {
                offers[write.index()] =
                    Some(self.kinds[write.index()].fetch_add(1, Ordering::SeqCst) + 1);
            }
        }
        let offer = |write: Write| offers[write.index()];
        self.faults.iter().find_map(|f| match *f {
            StoreFault::Unavailable { from, count } if n >= from && n - from < count => Some((
                format!("commit {n} refused (store unavailable)"),
                Flavour::Closed,
            )),
            StoreFault::CheckpointFails { nth } if checkpoint == Some(nth) => Some((
                format!("checkpoint write {nth} (commit {n}) refused"),
                Flavour::Closed,
            )),
            StoreFault::EndsUnavailable { count } if end.is_some_and(|e| e <= count) => Some((
                format!("the end of a run (commit {n}) refused"),
                Flavour::Closed,
            )),
            StoreFault::Refuses {
                write,
                nth,
                count,
                flavour,
            } => offer(write)
                .filter(|&k| k >= nth && k - nth < count)
                .map(|k| {
                    (
                        format!("{} offer {k} (commit {n}) refused", write.name()),
                        flavour,
                    )
                }),
            StoreFault::Outage {
                write,
                nth,
                flavour,
            } => offer(write).filter(|&k| k >= nth).map(|k| {
                (
                    format!("{} offer {k} (commit {n}) refused: outage", write.name()),
                    flavour,
                )
            }),
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
        if let Some((what, flavour)) = self.fault_for(&commit) {
            match (&self.terminator, flavour) {
                // The real thing: the commit meets a connection the server
                // ended, and the backend says what it says.
                (Some(terminate), Flavour::Terminated) => {
                    let ended = terminate().await;
                    let result = inner.commit_step(run_id, commit).await;
                    let answer = match &result {
                        Ok(_) => "taken on a fresh connection".to_owned(),
                        Err(e) => format!("refused: {e}"),
                    };
                    self.note(format!(
                        "{}: backends terminated ({ended:?}); the commit was {answer}",
                        what.replace(" refused", "")
                    ));
                    return result;
                }
                _ => return Err(self.refuse(what, flavour)),
            }
        }
        inner.commit_step(run_id, commit).await
    }
}
