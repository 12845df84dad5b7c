//! Runs: [`NewRun`], [`RunRecord`], [`RunStatus`] and [`StatusChange`].

use std::fmt;

use rein_core::{Outcome, RunId, RunReport, TenantId};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Where a run stands.
///
/// Stored and serialized as one name: `queued`, `running`, or the
/// [`Outcome`] name of a finished run (`succeeded`, `partial_success`,
/// `failed`, `budget_exhausted`, `cancelled`, `handed_off`).
///
/// ```text
///   queued ⇄ running ──► finished(outcome)   (final: never changes again)
/// ```
///
/// # Why one flat name
///
/// Dashboards, the HTTP API and SQL filters all ask "which runs are
/// `partial_success`?"; one column holding one name answers that without
/// a second, nullable outcome column that could disagree with the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStatus {
    /// Created, not yet picked up.
    Queued,
    /// A worker is executing it.
    Running,
    /// It ended; the outcome is final.
    Finished(Outcome),
}

impl RunStatus {
    /// The status's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Finished(outcome) => outcome.as_str(),
        }
    }

    /// Reads a stored name.
    pub fn parse(text: &str) -> Option<RunStatus> {
        match text {
            "queued" => Some(RunStatus::Queued),
            "running" => Some(RunStatus::Running),
            other => Outcome::parse(other).map(RunStatus::Finished),
        }
    }

    /// The final outcome, once finished.
    pub fn outcome(self) -> Option<Outcome> {
        match self {
            RunStatus::Finished(outcome) => Some(outcome),
            RunStatus::Queued | RunStatus::Running => None,
        }
    }

    /// Whether the run has ended (its status can no longer change).
    pub fn is_finished(self) -> bool {
        self.outcome().is_some()
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for RunStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RunStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        RunStatus::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "run status must be queued, running or an outcome name, but it is {text:?}"
            ))
        })
    }
}

/// A run to create.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewRun {
    /// The run's id; must be new to the store.
    pub run_id: RunId,
    /// The tenant it runs for.
    pub tenant: TenantId,
    /// The agent's name in the configuration.
    pub agent: String,
    /// The user input that started it.
    pub input: String,
    /// The run that spawned it, for a child agent.
    pub parent_run_id: Option<RunId>,
    /// Its budget limits. Opaque to the store: the engine owns the shape, so
    /// the store never has to change when a budget dimension is added.
    pub budget: Value,
    /// When it was created, ms since the Unix epoch.
    pub created_at_ms: u64,
}

/// A place in a list of runs in [`Store::runs_with_status`] order (oldest
/// `created_at_ms` first, then run id): where the next page of
/// [`Store::runs_with_status_after`] starts.
///
/// [`Store::runs_with_status`]: crate::Store::runs_with_status
/// [`Store::runs_with_status_after`]: crate::Store::runs_with_status_after
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunCursor {
    /// The last run's creation time.
    pub created_at_ms: u64,
    /// The last run's id.
    pub run_id: RunId,
}

impl RunCursor {
    /// The cursor just after `run`.
    pub fn after(run: &RunRecord) -> RunCursor {
        RunCursor {
            created_at_ms: run.created_at_ms,
            run_id: run.run_id.clone(),
        }
    }

    /// Whether `run` comes after this cursor.
    pub fn precedes(&self, run: &RunRecord) -> bool {
        (run.created_at_ms, run.run_id.as_str()) > (self.created_at_ms, self.run_id.as_str())
    }
}

/// A stored run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's id.
    pub run_id: RunId,
    /// The tenant it runs for.
    pub tenant: TenantId,
    /// The agent's name in the configuration.
    pub agent: String,
    /// The user input that started it.
    pub input: String,
    /// The run that spawned it, for a child agent.
    pub parent_run_id: Option<RunId>,
    /// Its budget limits (engine-opaque).
    pub budget: Value,
    /// Where it stands.
    pub status: RunStatus,
    /// The report, once finished (every outcome but success carries one).
    pub report: Option<RunReport>,
    /// When it was created, ms since the Unix epoch.
    pub created_at_ms: u64,
    /// When its status last changed, ms since the Unix epoch.
    pub updated_at_ms: u64,
    /// Its ledger's revision: bumped by every commit that declares or marks
    /// a record of this run or of a run below it in its agent tree (whose
    /// records its report also reflects). A report derived from a ledger
    /// read after this revision is stored only while it holds
    /// ([`StepCommit::expect_ledger_revision`]), and carries the revision it
    /// reflects in its basis.
    ///
    /// [`StepCommit::expect_ledger_revision`]: crate::StepCommit::expect_ledger_revision
    #[serde(default)]
    pub ledger_revision: u64,
}

impl RunRecord {
    /// The record of a run just created: `queued`, no report.
    pub fn new(run: NewRun) -> RunRecord {
        RunRecord {
            run_id: run.run_id,
            tenant: run.tenant,
            agent: run.agent,
            input: run.input,
            parent_run_id: run.parent_run_id,
            budget: run.budget,
            status: RunStatus::Queued,
            report: None,
            created_at_ms: run.created_at_ms,
            updated_at_ms: run.created_at_ms,
            ledger_revision: 0,
        }
    }
}

/// A change of a run's status, with its report when it finishes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusChange {
    /// The new status.
    pub status: RunStatus,
    /// The report; only for a finished status, and its outcome must match.
    pub report: Option<RunReport>,
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_round_trip_through_serde_and_parse() {
        let all = [
            RunStatus::Queued,
            RunStatus::Running,
            RunStatus::Finished(Outcome::Succeeded),
            RunStatus::Finished(Outcome::PartialSuccess),
            RunStatus::Finished(Outcome::Failed),
            RunStatus::Finished(Outcome::BudgetExhausted),
            RunStatus::Finished(Outcome::Cancelled),
            RunStatus::Finished(Outcome::HandedOff),
        ];
        for status in all {
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, status.as_str());
            assert_eq!(serde_json::from_value::<RunStatus>(json).unwrap(), status);
            assert_eq!(RunStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(
            serde_json::to_value(RunStatus::Finished(Outcome::PartialSuccess)).unwrap(),
            "partial_success"
        );
    }

    #[test]
    fn unknown_status_name_is_refused_with_the_value() {
        let err = serde_json::from_str::<RunStatus>("\"paused\"").unwrap_err();
        assert!(err.to_string().contains("\"paused\""), "{err}");
        assert_eq!(RunStatus::parse("paused"), None);
    }

    #[test]
    fn only_finished_statuses_are_final() {
        assert!(!RunStatus::Queued.is_finished());
        assert!(!RunStatus::Running.is_finished());
        assert!(RunStatus::Finished(Outcome::Cancelled).is_finished());
    }
}
