//! Runs: [`NewRun`], [`RunRecord`], [`RunStatus`] and [`StatusChange`];
//! listing them: [`RunFilter`], [`RunCursor`] and [`RunPage`].

use rein_core::Timestamp;
use std::fmt;

use rein_core::{Outcome, RunId, RunReport, TenantId};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::trace::SpanRef;

/// Where a run stands.
///
/// Stored and serialized as one name: `queued`, `running`,
/// `awaiting_approval`, or the
/// [`Outcome`] name of a finished run (`succeeded`, `partial_success`,
/// `failed`, `budget_exhausted`, `cancelled`, `handed_off`).
///
/// ```text
///   queued ⇄ running ──► finished(outcome)   (final: never changes again)
///               │  ▲
///               ▼  │ the last decision of its turn
///        awaiting_approval ──► finished(cancelled)
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
    /// Paused durably before a call a human must approve: no worker, no
    /// claim, no connection; the decision that completes its turn moves
    /// it back to `running`.
    AwaitingApproval,
    /// It ended; the outcome is final.
    Finished(Outcome),
}

impl RunStatus {
    /// The status's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::AwaitingApproval => "awaiting_approval",
            RunStatus::Finished(outcome) => outcome.as_str(),
        }
    }

    /// Reads a stored name.
    pub fn parse(text: &str) -> Option<RunStatus> {
        match text {
            "queued" => Some(RunStatus::Queued),
            "running" => Some(RunStatus::Running),
            "awaiting_approval" => Some(RunStatus::AwaitingApproval),
            other => Outcome::parse(other).map(RunStatus::Finished),
        }
    }

    /// The final outcome, once finished.
    pub fn outcome(self) -> Option<Outcome> {
        match self {
            RunStatus::Finished(outcome) => Some(outcome),
            RunStatus::Queued | RunStatus::Running | RunStatus::AwaitingApproval => None,
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
                "run status must be queued, running, awaiting_approval or an outcome name, but it is {text:?}"
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
    pub created_at_ms: Timestamp,
    /// The caller's trace context (its `traceparent`), for a run accepted
    /// now and driven later: the parent of the run span of whichever
    /// process drives it.
    #[serde(default)]
    pub trace_parent: Option<SpanRef>,
}

/// A place in a list of runs ordered by (`created_at_ms`, run id): where
/// the next page starts. Oldest first in [`RunStore::runs_with_status`] order
/// (the next page of [`RunStore::runs_with_status_after`] holds the runs it
/// [`precedes`](RunCursor::precedes)); newest first in a listing (the next
/// page of [`RunStore::list_runs_page`] holds the runs it
/// [`is_newer_than`](RunCursor::is_newer_than)).
///
/// [`RunStore::runs_with_status`]: crate::RunStore::runs_with_status
/// [`RunStore::runs_with_status_after`]: crate::RunStore::runs_with_status_after
/// [`RunStore::list_runs_page`]: crate::RunStore::list_runs_page
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunCursor {
    /// The last run's creation time.
    pub created_at_ms: Timestamp,
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

impl RunCursor {
    /// Whether `run` comes after this cursor in a newest-first listing
    /// ([`RunStore::list_runs_page`]): it is older, ties on the creation time
    /// broken by the run id, descending.
    ///
    /// [`RunStore::list_runs_page`]: crate::RunStore::list_runs_page
    pub fn is_newer_than(&self, run: &RunRecord) -> bool {
        (run.created_at_ms, run.run_id.as_str()) < (self.created_at_ms, self.run_id.as_str())
    }

    /// The cursor as an opaque token for a client: base64url (no padding)
    /// of `v1:<created_at_ms>:<run_id>`.
    ///
    /// # Why opaque
    ///
    /// A client hands the token back unchanged; keeping its shape private
    /// (and versioned) lets the order or the key change without breaking
    /// clients that store tokens.
    pub fn to_token(&self) -> String {
        use base64::Engine as _;
        let plain = format!("{CURSOR_VERSION}:{}:{}", self.created_at_ms, self.run_id);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(plain)
    }

    /// Reads a token made by [`RunCursor::to_token`].
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] (`what = "run cursor"`) for anything else.
    ///
    /// [`StoreError::Invalid`]: crate::StoreError::Invalid
    pub fn from_token(token: &str) -> Result<RunCursor, crate::StoreError> {
        use base64::Engine as _;
        let invalid = |why: &str| crate::StoreError::Invalid {
            what: "run cursor",
            expected: "a cursor token from a previous page".to_owned(),
            found: format!("{why} ({} bytes)", token.len()),
        };
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| invalid("not base64url"))?;
        let text = String::from_utf8(bytes).map_err(|_| invalid("not UTF-8"))?;
        let mut parts = text.splitn(3, ':');
        if parts.next() != Some(CURSOR_VERSION) {
            return Err(invalid("an unknown version"));
        }
        let created_at_ms = parts
            .next()
            .and_then(|ms| ms.parse::<Timestamp>().ok())
            .filter(|at| i64::try_from(at.as_millis()).is_ok())
            .ok_or_else(|| invalid("no creation time"))?;
        let run_id = parts
            .next()
            .and_then(|id| RunId::new(id.to_owned()).ok())
            .ok_or_else(|| invalid("no run id"))?;
        Ok(RunCursor {
            created_at_ms,
            run_id,
        })
    }
}

/// The version prefix of a [`RunCursor::to_token`] token.
const CURSOR_VERSION: &str = "v1";

/// Which runs [`RunStore::list_runs_page`] lists. The default lists every run
/// of every tenant; each setting narrows it, and all of them hold together.
///
/// # Why the tenant is a filter, not a parameter
///
/// An operator reading the store file sees every tenant; the API always
/// sets it to the caller's tenant ([`RunFilter::of_tenant`]), so a page
/// never holds another tenant's run whatever else the request asks.
///
/// [`RunStore::list_runs_page`]: crate::RunStore::list_runs_page
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunFilter {
    /// Only this tenant's runs.
    pub tenant: Option<TenantId>,
    /// Only runs with this status (a finished status matches its outcome
    /// only, as in [`RunStore::runs_with_status`]).
    ///
    /// [`RunStore::runs_with_status`]: crate::RunStore::runs_with_status
    pub status: Option<RunStatus>,
    /// Only this agent's runs (its exact name).
    pub agent: Option<String>,
    /// Only runs created strictly after this time.
    pub created_after_ms: Option<Timestamp>,
    /// Only runs created strictly before this time.
    pub created_before_ms: Option<Timestamp>,
}

impl RunFilter {
    /// Every run.
    pub fn all() -> RunFilter {
        RunFilter::default()
    }

    /// Only `tenant`'s runs.
    pub fn of_tenant(mut self, tenant: TenantId) -> RunFilter {
        self.tenant = Some(tenant);
        self
    }

    /// Only runs with `status`.
    pub fn with_status(mut self, status: RunStatus) -> RunFilter {
        self.status = Some(status);
        self
    }

    /// Only runs of the agent named `agent`.
    pub fn of_agent(mut self, agent: impl Into<String>) -> RunFilter {
        self.agent = Some(agent.into());
        self
    }

    /// Only runs created strictly after `at`.
    pub fn created_after(mut self, at: Timestamp) -> RunFilter {
        self.created_after_ms = Some(at);
        self
    }

    /// Only runs created strictly before `at`.
    pub fn created_before(mut self, at: Timestamp) -> RunFilter {
        self.created_before_ms = Some(at);
        self
    }

    /// Whether `run` passes the filter: what a backend's query must
    /// select, for checks and for stores that filter in memory.
    pub fn matches(&self, run: &RunRecord) -> bool {
        self.tenant.as_ref().is_none_or(|t| &run.tenant == t)
            && self.status.is_none_or(|s| run.status == s)
            && self.agent.as_ref().is_none_or(|a| &run.agent == a)
            && self
                .created_after_ms
                .is_none_or(|ms| run.created_at_ms > ms)
            && self
                .created_before_ms
                .is_none_or(|ms| run.created_at_ms < ms)
    }
}

/// One page of a run listing, newest (`created_at_ms`, then run id,
/// descending) first.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPage {
    /// The runs of this page.
    pub runs: Vec<RunRecord>,
    /// Where the next page starts; `None` when this page is the last.
    pub next: Option<RunCursor>,
}

impl RunPage {
    /// The page of `limit` runs out of `rows`, up to `limit + 1` runs in
    /// listing order: a row beyond the limit says there is a next page.
    pub fn of(mut rows: Vec<RunRecord>, limit: usize) -> RunPage {
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = more.then(|| rows.last().map(RunCursor::after)).flatten();
        RunPage { runs: rows, next }
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
    pub created_at_ms: Timestamp,
    /// When its status last changed, ms since the Unix epoch.
    pub updated_at_ms: Timestamp,
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
    /// The caller's trace context it was created with ([`NewRun::trace_parent`]).
    #[serde(default)]
    pub trace_parent: Option<SpanRef>,
    /// The run span of its first drive, set once
    /// ([`StepCommit::first_span`]): what the span of each later drive (a
    /// resume, a takeover) links to.
    ///
    /// [`StepCommit::first_span`]: crate::StepCommit::first_span
    #[serde(default)]
    pub first_span: Option<SpanRef>,
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
            trace_parent: run.trace_parent,
            first_span: None,
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
    pub at_ms: Timestamp,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_round_trip_through_serde_and_parse() {
        let all = [
            RunStatus::Queued,
            RunStatus::Running,
            RunStatus::AwaitingApproval,
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

    fn record(id: &str, created_at_ms: Timestamp) -> RunRecord {
        RunRecord::new(NewRun {
            run_id: RunId::new(id.to_owned()).unwrap(),
            tenant: TenantId::new("t").unwrap(),
            agent: "a".to_owned(),
            input: String::new(),
            parent_run_id: None,
            budget: Value::Null,
            created_at_ms,
            trace_parent: None,
        })
    }

    #[test]
    fn cursor_tokens_round_trip_and_foreign_tokens_are_invalid() {
        let cursor = RunCursor::after(&record(
            "run:with:colons",
            Timestamp::from_millis(1_700_000_000_123),
        ));
        let token = cursor.to_token();
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "{token}"
        );
        assert_eq!(RunCursor::from_token(&token).unwrap(), cursor);
        use base64::Engine as _;
        let encode = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        for bad in [
            String::new(),
            "not base64!".to_owned(),
            encode("v2:1:r"),
            encode("v1:x:r"),
            encode("v1:1"),
            encode("v1:9223372036854775808:r"),
            encode("v1:1:"),
        ] {
            assert!(
                matches!(
                    RunCursor::from_token(&bad),
                    Err(crate::StoreError::Invalid {
                        what: "run cursor",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn newest_first_cursor_orders_by_time_then_id_descending() {
        let cursor = RunCursor::after(&record("b", Timestamp::from_millis(10)));
        assert!(cursor.is_newer_than(&record("a", Timestamp::from_millis(10))));
        assert!(cursor.is_newer_than(&record("z", Timestamp::from_millis(9))));
        assert!(!cursor.is_newer_than(&record("b", Timestamp::from_millis(10))));
        assert!(!cursor.is_newer_than(&record("c", Timestamp::from_millis(10))));
        assert!(!cursor.is_newer_than(&record("a", Timestamp::from_millis(11))));
    }

    #[test]
    fn a_page_has_a_next_cursor_only_when_a_row_is_left_over() {
        let rows = vec![
            record("c", Timestamp::from_millis(3)),
            record("b", Timestamp::from_millis(2)),
            record("a", Timestamp::from_millis(1)),
        ];
        let page = RunPage::of(rows.clone(), 2);
        assert_eq!(page.runs.len(), 2);
        assert_eq!(page.next, Some(RunCursor::after(&rows[1])));
        assert_eq!(RunPage::of(rows.clone(), 3).next, None);
        assert_eq!(RunPage::of(rows, 5).next, None);
    }

    #[test]
    fn filter_matches_every_setting_together() {
        let run = record("r", Timestamp::from_millis(10));
        assert!(RunFilter::all().matches(&run));
        assert!(
            RunFilter::all()
                .created_after(Timestamp::from_millis(9))
                .created_before(Timestamp::from_millis(11))
                .matches(&run)
        );
        assert!(
            !RunFilter::all()
                .created_after(Timestamp::from_millis(10))
                .matches(&run)
        );
        assert!(
            !RunFilter::all()
                .created_before(Timestamp::from_millis(10))
                .matches(&run)
        );
        assert!(!RunFilter::all().of_agent("b").matches(&run));
        assert!(
            !RunFilter::all()
                .of_tenant(TenantId::new("u").unwrap())
                .matches(&run)
        );
        assert!(
            !RunFilter::all()
                .with_status(RunStatus::Running)
                .matches(&run)
        );
        assert!(
            RunFilter::all()
                .of_tenant(TenantId::new("t").unwrap())
                .with_status(RunStatus::Queued)
                .of_agent("a")
                .matches(&run)
        );
    }

    #[test]
    fn only_finished_statuses_are_final() {
        assert!(!RunStatus::Queued.is_finished());
        assert!(!RunStatus::Running.is_finished());
        assert!(RunStatus::Finished(Outcome::Cancelled).is_finished());
    }
}
