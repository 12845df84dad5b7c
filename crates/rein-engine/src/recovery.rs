//! Runs whose process died: what the store says of a `running` run nobody
//! may be driving ([`Standing`]), the decision to close it from outside
//! (orphaned, dead-lettered), and the close itself, through
//! [`crate::run::close_run`] like every close.
//!
//! # Why two answers
//!
//! Work accepted with `mode: queued` was promised to be done: a worker
//! resumes it from its checkpoint, and idempotency keys keep every effect
//! single; only after `max_attempts` deaths is it dead-lettered. A direct
//! (sync) run belonged to a caller who is gone with the process: once
//! nobody renewed its claim for the orphan threshold it is reported
//! failed, honestly (its report lists what its ledger says it did), and
//! its ledger is left to the ledger reconciler.
//!
//! # Why in the engine
//!
//! The decision and the commit are the engine's, so an embedder that runs
//! agents without `rein serve` closes its orphans with the same report
//! the server would write. The host keeps only *when* to scan (an
//! interval, a singleton among nodes) and *which* work is its to take over.
//!
//! | decision | function | closes with |
//! | --- | --- | --- |
//! | a direct run's claim went silent | [`Standing::orphaned`], [`Engine::scan_orphans`] | `failed`, `orphaned` |
//! | queued work's workers died too often | [`Standing::dead_letter`], [`Engine::close_dead_letter`] | `failed`, `dead_letter` |

use rein_core::Timestamp;
use std::num::NonZeroU32;
use std::time::Duration;

use rein_core::registry::ReconciliationSettings;
use rein_core::{EventData, EventKind, Outcome, RunId, RunReport};
use rein_store::{Lease, LeaseKind, RunCursor, RunRecord, RunStatus, StoreError, StoreExt};

use crate::run::{Closing, End, Engine, HandOn, close_run, unix_ms};

/// The `error_type` of a direct run closed because its process died.
pub const ORPHANED: &str = "orphaned";

/// The `error_type` of queued work closed after too many deliveries.
pub const DEAD_LETTER: &str = "dead_letter";

/// What the store says of a `running` run, for deciding whether its owner
/// is gone and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// Whether it was accepted as queued work.
    pub enqueued: bool,
    /// Whether its last process stopped it at a safe point
    /// (`run_interrupted`, or `approval_requested`, after its last start
    /// or resume), and who may continue it: it waits to be resumed, not
    /// to be closed.
    pub interrupted: Option<HandOn>,
    /// Its claim, if any.
    pub claim: Option<Lease>,
    /// How many times it was resumed after its process died (resumes of a
    /// run a drain handed on, or that paused for a human, do not count).
    pub resumes: u32,
}

/// A run whose claim nobody renewed for the orphan threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Orphaned {
    /// How long ago its process last signalled.
    pub silent_for: Duration,
    /// The threshold it passed.
    pub threshold: Duration,
}

impl Orphaned {
    /// The reason its report gives.
    pub fn reason(&self) -> String {
        format!(
            "its process stopped signalling {} s ago (threshold {} s)",
            self.silent_for.as_secs(),
            self.threshold.as_secs()
        )
    }
}

/// Queued work whose workers died `attempts` times, `max_attempts` allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetter {
    /// Deliveries so far, this one included.
    pub attempts: u32,
    /// `server.queue.max_attempts`.
    pub max_attempts: u32,
}

impl DeadLetter {
    /// The reason its report gives.
    pub fn reason(&self) -> String {
        format!(
            "its workers died {} times (max_attempts {})",
            self.attempts, self.max_attempts
        )
    }
}

/// How an orphan scan decides and how much it reads at once.
///
/// | field | from | default |
/// | --- | --- | --- |
/// | `threshold` | `server.reconciliation.orphan_threshold` | [`DEFAULT_ORPHAN_THRESHOLD`](rein_core::registry::DEFAULT_ORPHAN_THRESHOLD) |
/// | `lease` | `server.queue.lease` (the claim lease, [`EngineBuilder::claim_lease`](crate::run::EngineBuilder::claim_lease)) | [`DEFAULT_QUEUE_LEASE`](rein_core::registry::DEFAULT_QUEUE_LEASE) |
/// | `page` | `server.reconciliation.max_runs_per_scan` | [`DEFAULT_MAX_RUNS_PER_SCAN`](rein_core::registry::DEFAULT_MAX_RUNS_PER_SCAN) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrphanScan {
    /// How long a claim may go unrenewed before its run is an orphan.
    pub threshold: Duration,
    /// The claim lease: a claim's last renewal is its expiry minus this.
    pub lease: Duration,
    /// Running runs read per scan.
    pub page: NonZeroU32,
}

impl OrphanScan {
    /// The scan `[server.reconciliation]` configures, over claims of
    /// `lease`.
    pub fn new(settings: &ReconciliationSettings, lease: Duration) -> Self {
        OrphanScan {
            threshold: settings.orphan_threshold,
            lease,
            page: settings.max_runs_per_scan,
        }
    }
}

impl Default for OrphanScan {
    fn default() -> Self {
        OrphanScan::new(
            &ReconciliationSettings::default(),
            rein_core::registry::DEFAULT_QUEUE_LEASE,
        )
    }
}

impl Standing {
    /// Reads `run_id`'s origin, last interruption, claim and resume count
    /// from its events and leases.
    ///
    /// # Errors
    ///
    /// The store's.
    pub async fn read(store: &dyn rein_store::Store, run_id: &RunId) -> Result<Self, StoreError> {
        let events = store.events(run_id, 0).await?;
        let enqueued = events
            .iter()
            .find_map(|e| match &e.data {
                EventData::RunStarted(started) => Some(started.enqueued),
                _ => None,
            })
            .unwrap_or(false);
        let interrupted = events
            .iter()
            .rev()
            .find(|e| {
                matches!(
                    e.kind(),
                    EventKind::RunStarted
                        | EventKind::RunResumed
                        | EventKind::RunInterrupted
                        | EventKind::ApprovalRequested
                )
            })
            .and_then(|e| match &e.data {
                // An interruption that names nobody: the caller's, the safe
                // reading (nobody takes it over, nobody closes it).
                EventData::RunInterrupted(i) => Some(i.hand_on().unwrap_or(HandOn::Caller)),
                // A pause for a human is a stop at a safe point too: the
                // decision hands it to whoever it names.
                EventData::ApprovalRequested(a) => Some(a.continue_with),
                _ => None,
            });
        // A resume after a drain handed the run on is not a death of its
        // worker: rolling restarts must not dead-letter work.
        let mut resumes = 0u32;
        let mut after_hand_on = false;
        for e in &events {
            match e.kind() {
                EventKind::RunInterrupted | EventKind::ApprovalRequested => after_hand_on = true,
                EventKind::RunResumed => {
                    if !after_hand_on {
                        resumes = resumes.saturating_add(1);
                    }
                    after_hand_on = false;
                }
                _ => {}
            }
        }
        let claim = store
            .leases_of_run(run_id)
            .await?
            .into_iter()
            .find(|l| l.kind == LeaseKind::Run);
        Ok(Standing {
            enqueued,
            interrupted,
            claim,
            resumes,
        })
    }

    /// Whether `record` (this standing's run, not driven by this process)
    /// is an orphan at `now_ms`: a direct run, not stopped at a safe
    /// point, whose claim nobody renewed for `scan.threshold`.
    ///
    /// Its last heartbeat is when its claim was last renewed (the claim's
    /// expiry minus one lease), or the run's last change when it holds no
    /// claim. Queued work and interrupted runs are resumed, never closed
    /// as orphans.
    pub fn orphaned(
        &self,
        record: &RunRecord,
        now_ms: Timestamp,
        scan: &OrphanScan,
    ) -> Option<Orphaned> {
        if self.enqueued || self.interrupted.is_some() {
            return None;
        }
        let last_beat = self.claim.as_ref().map_or(record.updated_at_ms, |c| {
            c.expires_at_ms.saturating_sub(scan.lease)
        });
        let silent_for = now_ms.saturating_duration_since(last_beat);
        (silent_for >= scan.threshold).then_some(Orphaned {
            silent_for,
            threshold: scan.threshold,
        })
    }

    /// Whether taking this run over once more would be one delivery too
    /// many: the delivery being decided counts, so a run resumed
    /// `max_attempts - 1` times is dead-lettered.
    pub fn dead_letter(&self, max_attempts: u32) -> Option<DeadLetter> {
        let attempts = self.resumes.saturating_add(1);
        (attempts >= max_attempts).then_some(DeadLetter {
            attempts,
            max_attempts,
        })
    }
}

/// How a run that was `running` is closed from outside as `error_type`.
fn failed_closing(error_type: &str, reason: String) -> Closing {
    Closing {
        outcome: Outcome::Failed,
        end: End::Closed {
            error_type: Some(error_type.to_owned()),
            reason,
        },
        events: Vec::new(),
        expect: Some(RunStatus::Running),
    }
}

impl Engine {
    /// Ends `record` from outside with `closing` at this engine's clock's
    /// time (see [`close_run`]).
    ///
    /// # Errors
    ///
    /// The store's refusal, e.g. `StatusChanged` when `closing.expect` no
    /// longer holds.
    pub async fn close(
        &self,
        record: &RunRecord,
        closing: Closing,
    ) -> Result<RunReport, StoreError> {
        let at_ms = unix_ms(self.clock().system_now());
        let report = close_run(self.store().as_ref(), record, closing, at_ms).await?;
        self.count_closed(record, &report, at_ms);
        Ok(report)
    }

    /// Counts in the metrics what closing `record` from outside decided:
    /// its handoff package, as a run's own emitter counts one (no run
    /// process saw this close, so no emitter did).
    fn count_closed(&self, record: &RunRecord, report: &RunReport, at_ms: Timestamp) {
        let Some(package) = &report.handoff else {
            return;
        };
        let handoff = rein_core::event::HandoffCreated {
            package: Some(rein_core::event::HandoffSummary {
                reason: package.reason.clone(),
                awaiting_decision: package.awaiting_decision.len(),
                uncertain: package.uncertain.len(),
            }),
        };
        let event = rein_core::Event {
            run_id: record.run_id.clone(),
            seq: 0,
            step: 0,
            intent_id: None,
            attempt_id: None,
            idempotency_key: None,
            at_ms,
            data: handoff.into(),
        };
        let metrics = self.metrics();
        metrics.record(
            &event,
            &metrics.scope(record.tenant.as_str(), &record.agent),
        );
    }

    /// Closes the orphaned direct run `record`: `failed`, `orphaned`, its
    /// report derived from its ledger as it stands. Only while it is still
    /// `running`.
    ///
    /// # Errors
    ///
    /// As [`Engine::close`].
    pub async fn close_orphan(
        &self,
        record: &RunRecord,
        orphaned: &Orphaned,
    ) -> Result<RunReport, StoreError> {
        self.close(record, failed_closing(ORPHANED, orphaned.reason()))
            .await
    }

    /// Closes the queued work `record` whose deliveries ran out: `failed`,
    /// `dead_letter`, its report derived from its ledger as it stands.
    /// Only while it is still `running`.
    ///
    /// # Errors
    ///
    /// As [`Engine::close`].
    pub async fn close_dead_letter(
        &self,
        record: &RunRecord,
        dead: &DeadLetter,
    ) -> Result<RunReport, StoreError> {
        self.close(record, failed_closing(DEAD_LETTER, dead.reason()))
            .await
    }

    /// One orphan scan: reads up to `scan.page` running runs after
    /// `cursor` (oldest first, moving `cursor` on past them, back to the
    /// start after the last page, so a scan that passes over many runs
    /// still looks at every one in turn) and closes each direct run this
    /// engine does not drive whose claim went silent
    /// ([`Standing::orphaned`]). Returns how many it closed.
    ///
    /// A run it cannot read or close is logged and left for the next scan.
    pub async fn scan_orphans(&self, scan: &OrphanScan, cursor: &mut Option<RunCursor>) -> usize {
        let limit = usize::try_from(scan.page.get()).unwrap_or(usize::MAX);
        let page = match self
            .store()
            .runs_with_status_after(RunStatus::Running, cursor.as_ref(), limit)
            .await
        {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!("orphan scan: cannot list running runs: {e}");
                return 0;
            }
        };
        *cursor = if page.len() < limit {
            None
        } else {
            page.last().map(RunCursor::after)
        };
        let mut closed = 0;
        for record in page {
            if self.is_live(&record.run_id) {
                continue;
            }
            let standing = match Standing::read(self.store().as_ref(), &record.run_id).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(run = %record.run_id, "orphan scan: cannot read the run: {e}");
                    continue;
                }
            };
            let now_ms = unix_ms(self.clock().system_now());
            let Some(orphaned) = standing.orphaned(&record, now_ms, scan) else {
                continue;
            };
            match self.close_orphan(&record, &orphaned).await {
                Ok(_) => {
                    tracing::warn!(run = %record.run_id, error_type = ORPHANED, "{}", orphaned.reason());
                    closed += 1;
                }
                Err(e) => {
                    tracing::warn!(run = %record.run_id, "cannot close the run as {ORPHANED}: {e}");
                }
            }
        }
        closed
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rein_core::TenantId;

    fn record(updated_at_ms: Timestamp) -> RunRecord {
        RunRecord {
            run_id: RunId::new("r").unwrap(),
            tenant: TenantId::new("t").unwrap(),
            agent: "a".into(),
            input: String::new(),
            status: RunStatus::Running,
            parent_run_id: None,
            budget: serde_json::Value::Null,
            report: None,
            created_at_ms: Timestamp::from_millis(0),
            updated_at_ms,
            ledger_revision: 0,
            trace_parent: None,
            first_span: None,
        }
    }

    fn claim(expires_at_ms: Timestamp) -> Lease {
        Lease {
            lease_id: "run:r".into(),
            run_id: RunId::new("r").unwrap(),
            intent_id: None,
            kind: LeaseKind::Run,
            pgid: None,
            path: None,
            owner: "node#1.h".into(),
            acquired_at_ms: Timestamp::from_millis(0),
            expires_at_ms,
        }
    }

    fn direct(claim: Option<Lease>) -> Standing {
        Standing {
            enqueued: false,
            interrupted: None,
            claim,
            resumes: 0,
        }
    }

    const SCAN: OrphanScan = OrphanScan {
        threshold: Duration::from_secs(30),
        lease: Duration::from_secs(60),
        page: NonZeroU32::MIN,
    };

    #[test]
    fn orphaned_when_the_claim_was_last_renewed_a_threshold_ago() {
        // Renewed at 100 s (expiry 160 s minus the 60 s lease).
        let standing = direct(Some(claim(Timestamp::from_millis(160_000))));
        assert_eq!(
            standing.orphaned(
                &record(Timestamp::from_millis(0)),
                Timestamp::from_millis(129_999),
                &SCAN
            ),
            None
        );
        assert_eq!(
            standing.orphaned(
                &record(Timestamp::from_millis(0)),
                Timestamp::from_millis(130_000),
                &SCAN
            ),
            Some(Orphaned {
                silent_for: Duration::from_secs(30),
                threshold: Duration::from_secs(30),
            })
        );
    }

    #[test]
    fn orphaned_without_a_claim_counts_from_the_runs_last_change() {
        let standing = direct(None);
        assert_eq!(
            standing.orphaned(
                &record(Timestamp::from_millis(5_000)),
                Timestamp::from_millis(34_999),
                &SCAN
            ),
            None
        );
        assert!(
            standing
                .orphaned(
                    &record(Timestamp::from_millis(5_000)),
                    Timestamp::from_millis(35_000),
                    &SCAN
                )
                .is_some()
        );
    }

    #[test]
    fn orphaned_never_for_queued_work_or_a_run_stopped_at_a_safe_point() {
        let queued = Standing {
            enqueued: true,
            ..direct(None)
        };
        let stopped = Standing {
            interrupted: Some(HandOn::Caller),
            ..direct(None)
        };
        for standing in [queued, stopped] {
            assert_eq!(
                standing.orphaned(
                    &record(Timestamp::from_millis(0)),
                    Timestamp::from_millis(u64::MAX),
                    &SCAN
                ),
                None
            );
        }
    }

    #[test]
    fn dead_letter_counts_the_delivery_being_decided() {
        let resumed = |resumes| Standing {
            resumes,
            ..direct(None)
        };
        assert_eq!(resumed(1).dead_letter(3), None);
        assert_eq!(
            resumed(2).dead_letter(3),
            Some(DeadLetter {
                attempts: 3,
                max_attempts: 3
            })
        );
        assert_eq!(
            resumed(2).dead_letter(3).unwrap().reason(),
            "its workers died 3 times (max_attempts 3)"
        );
    }
}
