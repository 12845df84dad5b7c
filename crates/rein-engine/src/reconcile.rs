//! The reconciler: the backstop beneath compensation and resume.
//!
//! # Why
//!
//! Compensation and resume run when a process gets the chance. A process
//! that died and is never resumed leaves records in doubt; a run that ended
//! without settling leaves effects nobody concluded about; a tool's own
//! state may drift from the ledger. The reconciler sweeps the ledger on its
//! own schedule (seed 000, "Reconciliation"), fixes what is decidable —
//! a `pending` record the tool has no trace of never executed, one it has
//! a result for did — and hands the rest to a human as `manual`. A record
//! whose run's settlement started compensating it is not handed off while
//! what became of that compensation can be learned: asked by the
//! compensation's own key, or read from the run's events. Idempotent
//! records are cheap to check and swept often; irreversible ones need a
//! human anyway and are swept rarely.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rein_core::event::{LedgerRecorded, ToolCallFinished};
use rein_core::registry::CompensationGrade;
use rein_core::{
    Clock, Event, EventData, LedgerRecord, LedgerStatus, Outcome, Timestamp, ToolClass,
};
use rein_store::{LedgerMark, RunRecord, RunStatus, StepCommit, Store, StoreError, StoreExt};
use serde::Serialize;

use crate::Timer;
use crate::lease::{ReapReport, Reaper};
use crate::run::{CompensationBinding, CompensationCall, ToolBinding};
use crate::tool::http::HttpToolAdapter;

/// How long a `pending` record may stay pending before the reconciler
/// treats its process as gone.
pub const DEFAULT_PENDING_TIMEOUT: Duration = Duration::from_secs(300);
/// How often idempotent records are swept.
pub const DEFAULT_IDEMPOTENT_EVERY: Duration = Duration::from_secs(30);
/// How often irreversible records are swept.
pub const DEFAULT_IRREVERSIBLE_EVERY: Duration = Duration::from_secs(600);
/// Records examined per sweep.
pub const DEFAULT_BATCH: usize = 500;

/// Reconciler settings.
///
/// | setting | default |
/// | --- | --- |
/// | `pending_timeout` | 5 min |
/// | `idempotent_every` | 30 s |
/// | `irreversible_every` | 10 min |
/// | `batch` | 500 |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileConfig {
    /// Age after which a `pending` record is considered abandoned.
    pub pending_timeout: Duration,
    /// Sweep interval for idempotent (and read) records.
    pub idempotent_every: Duration,
    /// Sweep interval for irreversible records.
    pub irreversible_every: Duration,
    /// Records examined per sweep.
    pub batch: usize,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        ReconcileConfig {
            pending_timeout: DEFAULT_PENDING_TIMEOUT,
            idempotent_every: DEFAULT_IDEMPOTENT_EVERY,
            irreversible_every: DEFAULT_IRREVERSIBLE_EVERY,
            batch: DEFAULT_BATCH,
        }
    }
}

/// Which records a sweep covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepClasses {
    /// Idempotent writes (and anything not irreversible).
    pub idempotent: bool,
    /// Irreversible effects.
    pub irreversible: bool,
}

impl SweepClasses {
    /// Every class.
    pub const ALL: SweepClasses = SweepClasses {
        idempotent: true,
        irreversible: true,
    };

    fn covers(&self, class: ToolClass) -> bool {
        match class {
            ToolClass::Irreversible => self.irreversible,
            _ => self.idempotent,
        }
    }
}

/// One record the reconciler changed or handed off.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reconciled {
    /// The run.
    pub run_id: String,
    /// The intent.
    pub intent_id: String,
    /// The tool.
    pub tool: String,
    /// The status before.
    pub from: LedgerStatus,
    /// The status after.
    pub to: LedgerStatus,
    /// Why.
    pub reason: String,
}

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReconcileReport {
    /// Records whose state was decided: from the tool's own answer, or
    /// (`to` `compensated`) from what became of the compensation their
    /// run's settlement started or the reconciler retried.
    pub fixed: Vec<Reconciled>,
    /// Records handed to a human (`manual`).
    pub handed_off: Vec<Reconciled>,
    /// Records left alone, with why (still in flight, not due, unknown tool).
    pub skipped: usize,
    /// Leases of crashed processes that were reclaimed.
    pub leases: Option<ReapReport>,
}

/// What became of the compensation a run's settlement started for a
/// record, as the reconciler learned it before handing the record off.
enum Undone<'b> {
    /// No settlement started compensating it.
    NotStarted,
    /// It ran: by which tool, and how that is known.
    Ran { by: String, how: String },
    /// The compensating tool has no trace of its key: it never ran.
    DidNotRun {
        binding: &'b CompensationBinding,
        call: CompensationCall,
    },
    /// The compensating tool could not answer now: ask again next sweep.
    AskLater,
    /// Nobody can say (why).
    Unknown(String),
}

/// Sweeps the ledger.
pub struct Reconciler {
    store: Arc<dyn Store>,
    clock: Arc<dyn Timer>,
    http: HttpToolAdapter,
    tools: BTreeMap<String, ToolBinding>,
    compensations: BTreeMap<String, CompensationBinding>,
    config: ReconcileConfig,
}

impl Reconciler {
    /// A reconciler over `store` that knows `tools` (every tool of the
    /// config, by name: their status endpoints decide records in doubt) and
    /// their `compensations` (a failed strong one is retried).
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Timer>,
        client: reqwest::Client,
        tools: BTreeMap<String, ToolBinding>,
        compensations: BTreeMap<String, CompensationBinding>,
        config: ReconcileConfig,
    ) -> Self {
        Reconciler {
            store,
            http: HttpToolAdapter::new(client).with_clock(clock.clone()),
            clock,
            tools,
            compensations,
            config,
        }
    }

    /// One sweep over the classes in `classes`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the ledger cannot be read; a record whose mark
    /// fails is counted as skipped and retried next sweep.
    // The contradiction check awaits a lookup, which a match guard cannot.
    #[allow(clippy::collapsible_match)]
    pub async fn sweep(&self, classes: SweepClasses) -> Result<ReconcileReport, StoreError> {
        let mut report = ReconcileReport::default();
        let now_ms = unix_ms(self.clock.system_now());
        let timeout = self.config.pending_timeout;

        // 1. Pending past the timeout: the process that declared it is gone.
        let mut driven: BTreeMap<String, bool> = BTreeMap::new();
        for record in self.store.pending_ledger(self.config.batch).await? {
            if !classes.covers(record.class)
                || now_ms.saturating_duration_since(record.updated_at_ms) < timeout
            {
                report.skipped += 1;
                continue;
            }
            // A run a live process is driving (or resuming) decides its own
            // records: deciding them here would race its re-execution.
            let live = match driven.get(record.run_id.as_str()) {
                Some(live) => *live,
                None => {
                    let live = self.is_driven(&record.run_id, now_ms).await;
                    driven.insert(record.run_id.to_string(), live);
                    live
                }
            };
            if live {
                report.skipped += 1;
                continue;
            }
            self.resolve_pending(&record, &mut report).await;
        }

        // 2. Effects of finished runs: never concluded, past their window,
        // or contradicted by the tool itself; and compensations to retry.
        for run in self.store.list_runs(self.config.batch).await? {
            let RunStatus::Finished(outcome) = run.status else {
                continue;
            };
            let events = self.store.events(&run.run_id, 0).await?;
            // Newest first: retried compensations keep strict reverse order.
            let mut records = self.store.ledger(&run.run_id).await?;
            records.sort_by_key(|r| std::cmp::Reverse(r.seq));
            for record in records {
                if !classes.covers(record.class) {
                    continue;
                }
                match record.status {
                    LedgerStatus::Succeeded
                        if matches!(
                            outcome,
                            Outcome::Failed | Outcome::Cancelled | Outcome::HandedOff
                        ) =>
                    {
                        let reason = format!(
                            "the run ended {outcome} and this effect was never concluded; a human decides"
                        );
                        self.hand_off(&run, &events, &record, reason, &mut report)
                            .await;
                    }
                    LedgerStatus::Succeeded
                        if outcome != Outcome::Succeeded && self.past_window(&record, now_ms) =>
                    {
                        let reason = format!(
                            "kept by a run that ended {outcome}, and now past its compensation window: it can no longer be undone automatically"
                        );
                        self.hand_off(&run, &events, &record, reason, &mut report)
                            .await;
                    }
                    LedgerStatus::Succeeded => {
                        if self.contradicted(&record).await {
                            let reason = "the ledger says it took effect, but the tool has no trace of its key".to_owned();
                            self.hand_off(&run, &events, &record, reason, &mut report)
                                .await;
                        }
                    }
                    // 3. A strong compensation that failed (its target was
                    // down) is safe to repeat: try it again.
                    LedgerStatus::Manual if failed_strong_compensation(&events, &record) => {
                        self.retry_compensation(&run, &record, &mut report).await;
                    }
                    _ => {}
                }
            }
        }

        // 4. Leases of crashed processes.
        match Reaper::new()
            .with_clock(self.clock.clone())
            .reap(self.store.as_ref(), now_ms)
            .await
        {
            Ok(reaped) => report.leases = Some(reaped),
            Err(e) => tracing::warn!("lease reaping failed: {e}"),
        }
        Ok(report)
    }

    /// Whether a process may still hold the run's claim: one of this
    /// machine that still runs (renewing or not), one elsewhere (another
    /// machine or container, whose processes cannot be seen from here)
    /// until its lease expires, and one whose id cannot be read. Only a
    /// provably gone owner drives nothing.
    async fn is_driven(&self, run_id: &rein_core::RunId, now_ms: Timestamp) -> bool {
        use crate::lease::Owner;
        let Ok(leases) = self.store.leases_of_run(run_id).await else {
            // Unknown: leave the run alone this sweep.
            return true;
        };
        leases
            .iter()
            .filter(|l| l.kind == rein_store::LeaseKind::Run)
            .any(|l| match Owner::parse(&l.owner) {
                None => true,
                Some(owner) if owner.is_gone() => false,
                Some(owner) if owner.is_alive() => true,
                Some(_) => l.expires_at_ms > now_ms,
            })
    }

    /// Whether a record's compensation window has passed.
    fn past_window(&self, record: &LedgerRecord, now_ms: Timestamp) -> bool {
        self.compensations
            .get(&record.tool)
            .and_then(|b| b.spec.window)
            .is_some_and(|window| now_ms > record.created_at_ms.saturating_add(window))
    }

    /// Whether the tool's own state contradicts a `succeeded` record: its
    /// status endpoint has no trace of the record's key. A lookup that
    /// fails says nothing.
    async fn contradicted(&self, record: &LedgerRecord) -> bool {
        let (Some(tool), Some(key)) = (self.tools.get(&record.tool), &record.idempotency_key)
        else {
            return false;
        };
        if !tool.target.has_status_lookup() {
            return false;
        }
        let allowance = tool.allowance(Duration::from_secs(30));
        matches!(
            crate::tool::lookup(&self.http, &tool.name, &tool.target, key, allowance).await,
            Ok(None)
        )
    }

    /// Repeats a failed strong compensation once with its original key.
    async fn retry_compensation(
        &self,
        run: &rein_store::RunRecord,
        record: &LedgerRecord,
        report: &mut ReconcileReport,
    ) {
        let Some(binding) = self.compensations.get(&record.tool) else {
            return;
        };
        // The settlement's own recipe: the same call under the same key.
        let Ok(call) = binding.call_for(&run.tenant, record, record.result.as_ref()) else {
            return;
        };
        match self.invoke_compensation(run, binding, &call).await {
            Some(Ok(())) => {
                let reason = format!(
                    "its strong compensation by {} failed earlier; retried with the same key and it worked",
                    binding.tool.name
                );
                self.apply(record, LedgerStatus::Compensated, None, reason, report)
                    .await;
            }
            Some(Err(e)) => {
                tracing::info!(intent = %record.intent_id, "compensation retry failed: {e}");
                report.skipped += 1;
            }
            None => {}
        }
    }

    /// Calls `binding`'s compensating tool once with `call` (its arguments
    /// and key) for `run`; `None` when it is not an HTTP tool, else whether
    /// it worked (why not, when not).
    async fn invoke_compensation(
        &self,
        run: &rein_store::RunRecord,
        binding: &CompensationBinding,
        call: &CompensationCall,
    ) -> Option<Result<(), String>> {
        let target = &binding.tool.target;
        let attempt_id =
            rein_core::AttemptId::new(format!("reconcile-{}", unix_ms(self.clock.system_now())))
                .ok()?;
        let allowance = binding.tool.allowance(Duration::from_secs(30));
        let attempt = crate::tool::Attempt {
            run_id: &run.run_id,
            intent_id: &call.intent,
            attempt_id: &attempt_id,
            number: 1,
            key: call.key.as_ref(),
            remaining: allowance,
            allowance,
        };
        let invoked = match crate::tool::Reach::of(&self.http, None, target) {
            Some(reach) => reach.invoke(&call.args, &attempt).await,
            // A compensation by command or child run is not repeated here.
            None => return None,
        };
        Some(
            invoked
                .map(|_| ())
                .map_err(|f| f.human_message().to_owned()),
        )
    }

    /// Decides a `pending` record from the tool's own state, or hands it
    /// off when the tool cannot say.
    async fn resolve_pending(&self, record: &LedgerRecord, report: &mut ReconcileReport) {
        let tool = self.tools.get(&record.tool);
        let lookup = match (tool, &record.idempotency_key) {
            (Some(tool), Some(key)) if tool.target.has_status_lookup() => {
                let allowance = tool.allowance(Duration::from_secs(30));
                Some(
                    crate::tool::lookup(&self.http, &tool.name, &tool.target, key, allowance).await,
                )
            }
            _ => None,
        };
        match lookup {
            Some(Ok(Some(result))) => {
                let reason = "the tool has a result for its key: it executed".to_owned();
                self.apply(
                    record,
                    LedgerStatus::Succeeded,
                    Some(result),
                    reason,
                    report,
                )
                .await;
            }
            Some(Ok(None)) => {
                let reason = "the tool has no trace of its key: it never executed".to_owned();
                self.apply(record, LedgerStatus::Failed, None, reason, report)
                    .await;
            }
            Some(Err(e)) => {
                // The tool could not answer now; try again next sweep.
                tracing::info!(intent = %record.intent_id, "status lookup failed: {e}");
                report.skipped += 1;
            }
            None => {
                let reason = match record.class {
                    ToolClass::Irreversible => {
                        "an irreversible call in doubt: only a human can check whether it happened"
                    }
                    _ => "in doubt and the tool has no status lookup: a human must check",
                };
                // Its run's settlement may have compensated it meanwhile:
                // read the run and its events to learn that first.
                let run = match self.store.get_run(&record.run_id).await {
                    Ok(Some(run)) => run,
                    Ok(None) => {
                        report.skipped += 1;
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(intent = %record.intent_id, "reconciler cannot read the run: {e}");
                        report.skipped += 1;
                        return;
                    }
                };
                let events = match self.store.events(&record.run_id, 0).await {
                    Ok(events) => events,
                    Err(e) => {
                        tracing::warn!(intent = %record.intent_id, "reconciler cannot read the run's events: {e}");
                        report.skipped += 1;
                        return;
                    }
                };
                self.hand_off(&run, &events, record, reason.to_owned(), report)
                    .await;
            }
        }
    }

    /// Hands `record` to a human with `reason` — unless its run's
    /// settlement started compensating it and what became of that
    /// compensation is known: it ran (`compensated`), or it did not and,
    /// being strong and keyed, is run now with the same key.
    async fn hand_off(
        &self,
        run: &RunRecord,
        events: &[Event],
        record: &LedgerRecord,
        reason: String,
        report: &mut ReconcileReport,
    ) {
        let manual = match self.compensation_outcome(run, events, record).await {
            Undone::NotStarted => reason,
            Undone::AskLater => {
                report.skipped += 1;
                return;
            }
            Undone::Ran { by, how } => {
                let reason = format!("undone by {by} ({how})");
                self.apply(record, LedgerStatus::Compensated, None, reason, report)
                    .await;
                return;
            }
            Undone::DidNotRun { binding, call } => {
                let by = &binding.tool.name;
                let again = binding.spec.grade == CompensationGrade::Strong && call.key.is_some();
                if !again {
                    format!(
                        "{reason}; its {} compensation by {by} never ran (no trace of its key) and is not run again",
                        binding.spec.grade.as_str()
                    )
                } else {
                    match self.invoke_compensation(run, binding, &call).await {
                        Some(Ok(())) => {
                            let reason = format!(
                                "undone by {by} (its settlement's compensation never ran; run again with the same key)"
                            );
                            self.apply(record, LedgerStatus::Compensated, None, reason, report)
                                .await;
                            return;
                        }
                        Some(Err(e)) => format!(
                            "{reason}; its strong compensation by {by} never ran, and running it again failed: {e}"
                        ),
                        None => reason,
                    }
                }
            }
            Undone::Unknown(why) => format!("{reason}; {why}"),
        };
        self.apply(record, LedgerStatus::Manual, None, manual, report)
            .await;
    }

    /// What became of the compensation `run`'s settlement started for
    /// `record`: asked by the compensation's key (derived by the
    /// settlement's own recipe, [`CompensationBinding::call_for`]) of the
    /// compensating tool's status lookup when it declares one, else read
    /// from the run's events (a `compensation_finished` that says
    /// `compensated`, or an attempt of the compensating call that
    /// succeeded).
    async fn compensation_outcome<'b>(
        &'b self,
        run: &RunRecord,
        events: &[Event],
        record: &LedgerRecord,
    ) -> Undone<'b> {
        let mine = |e: &&Event| e.intent_id.as_ref() == Some(&record.intent_id);
        let Some((started, used_key)) =
            events
                .iter()
                .filter(mine)
                .rev()
                .find_map(|e| match &e.data {
                    EventData::CompensationStarted(s) => Some((s, e.idempotency_key.as_ref())),
                    _ => None,
                })
        else {
            return Undone::NotStarted;
        };
        // A `compensation_finished compensated` is stored only with its
        // mark, so when the mark was lost the evidence is the compensating
        // call's own answer: an attempt under the compensation's intent
        // that succeeded (those events are not held back with a mark).
        let compensating = |e: &&Event| e.intent_id.as_ref() == Some(&started.compensation_intent);
        let finished = events.iter().filter(mine).any(|e| {
            matches!(&e.data, EventData::CompensationFinished(f) if f.status == LedgerStatus::Compensated)
        }) || events.iter().filter(compensating).any(|e| {
            matches!(&e.data, EventData::ToolCallFinished(ToolCallFinished::Succeeded(_)))
        });
        let by = started.compensation_tool.clone();
        let Some(binding) = self
            .compensations
            .get(&record.tool)
            .filter(|b| b.tool.name == started.compensation_tool)
        else {
            return Undone::Unknown(format!(
                "its settlement started compensating it by {by}, which this configuration no longer binds to {}",
                record.tool
            ));
        };
        let call = binding
            .call_for(&run.tenant, record, record.result.as_ref())
            .ok();
        // The key asked with: the recipe's; the one its settlement recorded
        // when the record no longer holds what the recipe needs (a result
        // found by its key whose mark was lost).
        let key = match (call.as_ref().and_then(|c| c.key.as_ref()), used_key) {
            (Some(derived), Some(used)) if derived != used => {
                return Undone::Unknown(format!(
                    "its compensation by {by} was started under another key than its record derives now"
                ));
            }
            (Some(derived), _) => Some(derived.clone()),
            (None, used) => used.cloned(),
        };
        let looks_up = binding.tool.target.has_status_lookup();
        let event_says = || Undone::Ran {
            by: by.clone(),
            how: "its settlement's compensation, finished as the run's events record".to_owned(),
        };
        match (looks_up, key) {
            (true, Some(key)) => {
                let tool = &binding.tool;
                let allowance = tool.allowance(Duration::from_secs(30));
                match crate::tool::lookup(&self.http, &tool.name, &tool.target, &key, allowance)
                    .await
                {
                    Ok(Some(_)) => Undone::Ran {
                        by,
                        how: "its settlement's compensation, found by its key".to_owned(),
                    },
                    Ok(None) => match call {
                        Some(call) => Undone::DidNotRun { binding, call },
                        None => Undone::Unknown(format!(
                            "its compensation by {by} never ran (no trace of its key), and its arguments cannot be built again"
                        )),
                    },
                    // The tool could not answer now: the events may say,
                    // else ask again next sweep.
                    Err(_) if finished => event_says(),
                    Err(e) => {
                        tracing::info!(intent = %record.intent_id, "compensation status lookup failed: {e}");
                        Undone::AskLater
                    }
                }
            }
            _ if finished => event_says(),
            _ => Undone::Unknown(format!(
                "its settlement started compensating it by {by}, and neither that tool nor the run's events can say whether it ran"
            )),
        }
    }

    async fn apply(
        &self,
        record: &LedgerRecord,
        to: LedgerStatus,
        result: Option<serde_json::Value>,
        reason: String,
        report: &mut ReconcileReport,
    ) {
        let at_ms = unix_ms(self.clock.system_now());
        // A `pending` record its settlement compensated was taken to have
        // executed first (the ledger moves to `compensated` only from
        // `succeeded`): both marks land in one commit, in order.
        let mut steps = Vec::with_capacity(2);
        if record.status == LedgerStatus::Pending && to == LedgerStatus::Compensated {
            steps.push((
                LedgerStatus::Succeeded,
                "assumed executed: its settlement compensated it".to_owned(),
            ));
        }
        steps.push((to, reason.clone()));
        let events: Vec<Event> = steps
            .iter()
            .map(|(status, reason)| Event {
                run_id: record.run_id.clone(),
                seq: 0,
                step: record.step,
                intent_id: Some(record.intent_id.clone()),
                attempt_id: None,
                idempotency_key: record.idempotency_key.clone(),
                at_ms,
                data: LedgerRecorded {
                    tool: Some(record.tool.clone()),
                    by: Some("reconciler".into()),
                    reason: Some(reason.clone()),
                    ..LedgerRecorded::new(*status)
                }
                .into(),
            })
            .collect();
        let marks: Vec<_> = steps
            .iter()
            .map(|(status, _)| {
                (
                    record.intent_id.clone(),
                    LedgerMark {
                        status: *status,
                        result: if *status == to { result.clone() } else { None },
                        failure: None,
                        attempts: 0,
                        at_ms,
                    },
                )
            })
            .collect();
        // The run's report follows its ledger: a finished run's report is
        // derived again with the change and lands with it, fenced on the
        // run's status and ledger revision as read before its ledger (so a
        // run closing meanwhile, or another reconciler's mark, makes this
        // a conflict: read again, derive again).
        let mut tries = 0;
        loop {
            tries += 1;
            let (run, revised) = match self.revised_with(record, to, result.as_ref()).await {
                Ok(read) => read,
                Err(e) => {
                    tracing::warn!(intent = %record.intent_id, "reconciler cannot read the run: {e}");
                    report.skipped += 1;
                    return;
                }
            };
            let Some(run) = run else {
                report.skipped += 1;
                return;
            };
            let commit = StepCommit {
                marks: marks.clone(),
                events: events.clone(),
                revised_report: revised,
                expect_status: Some(run.status),
                expect_ledger_revision: Some(run.ledger_revision),
                ..StepCommit::default()
            };
            match self.store.commit_step(&record.run_id, commit).await {
                Ok(_) => break,
                Err(e) if is_read_stale(&e) && tries < crate::run::REPORT_WRITE_TRIES => {
                    // Another writer changed the ledger (it may have settled
                    // this very record) or ended the run: look again.
                    match self.store.ledger(&record.run_id).await {
                        Ok(records)
                            if records.iter().any(|r| {
                                r.intent_id == record.intent_id && r.status == record.status
                            }) => {}
                        Ok(_) => {
                            tracing::info!(intent = %record.intent_id, "the record was settled by another writer meanwhile");
                            report.skipped += 1;
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(intent = %record.intent_id, "reconciler mark failed: {e}");
                            report.skipped += 1;
                            return;
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(intent = %record.intent_id, "reconciler mark failed: {e}");
                    report.skipped += 1;
                    return;
                }
            }
        }
        // Each ancestor's handoff package shows its children's records.
        self.revise_ancestors(&record.run_id).await;
        let entry = Reconciled {
            run_id: record.run_id.to_string(),
            intent_id: record.intent_id.to_string(),
            tool: record.tool.clone(),
            from: record.status,
            to,
            reason,
        };
        if to == LedgerStatus::Manual {
            report.handed_off.push(entry);
        } else {
            report.fixed.push(entry);
        }
    }

    /// `record`'s run as it stands (`None` when it vanished) and, when it
    /// finished, its report derived again with `record` marked `to` (the
    /// run read before its ledger, for the commit's fence); `None` while the
    /// run has not finished (it derives its report when it does).
    async fn revised_with(
        &self,
        record: &LedgerRecord,
        to: LedgerStatus,
        result: Option<&serde_json::Value>,
    ) -> Result<(Option<rein_store::RunRecord>, Option<rein_core::RunReport>), StoreError> {
        let Some(run) = self.store.get_run(&record.run_id).await? else {
            return Ok((None, None));
        };
        if !run.status.is_finished() {
            return Ok((Some(run), None));
        }
        let mut ledger = crate::run::tree_records(self.store.as_ref(), &run.run_id).await?;
        for r in ledger
            .iter_mut()
            .filter(|r| r.run_id == record.run_id && r.intent_id == record.intent_id)
        {
            r.status = to;
            if let Some(result) = result {
                r.result = Some(result.clone());
            }
        }
        let revised = crate::run::revise(self.store.as_ref(), &run, &ledger).await?;
        Ok((Some(run), revised))
    }

    /// Revises the reports of `run`'s finished ancestors, whose handoff
    /// packages list their children's records (each fenced on its own
    /// ledger revision, see [`crate::run::revise_stored`]).
    async fn revise_ancestors(&self, run: &rein_core::RunId) {
        let mut parent = match self.store.get_run(run).await {
            Ok(Some(record)) => record.parent_run_id,
            _ => None,
        };
        let mut hops = 0;
        while let Some(id) = parent.take() {
            hops += 1;
            if let Err(e) = crate::run::revise_stored(self.store.as_ref(), &id).await {
                tracing::warn!(run = %id, "cannot revise the run's report: {e}");
            }
            let Ok(Some(ancestor)) = self.store.get_run(&id).await else {
                break;
            };
            // A damaged store must not loop.
            if hops < 64 {
                parent = ancestor.parent_run_id;
            }
        }
    }

    /// Sweeps forever: idempotent records every `idempotent_every`,
    /// irreversible ones every `irreversible_every`, calling `on_report`
    /// after each sweep.
    pub async fn run_forever(&self, mut on_report: impl FnMut(&ReconcileReport)) {
        let mut last_irreversible: Option<rein_core::Instant> = None;
        loop {
            let irreversible_due = last_irreversible.is_none_or(|t| {
                self.clock.now().saturating_duration_since(t) >= self.config.irreversible_every
            });
            let classes = SweepClasses {
                idempotent: true,
                irreversible: irreversible_due,
            };
            match self.sweep(classes).await {
                Ok(report) => on_report(&report),
                Err(e) => tracing::warn!("reconcile sweep failed: {e}"),
            }
            if irreversible_due {
                last_irreversible = Some(self.clock.now());
            }
            self.clock.sleep(self.config.idempotent_every).await;
        }
    }
}

/// Whether a commit was refused because what it was derived from moved: the
/// run's ledger (another writer marked a record) or its status (it ended).
fn is_read_stale(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::LedgerChanged { .. } | StoreError::StatusChanged { .. }
    )
}

/// Whether the record went `manual` because its strong compensation failed
/// (not because a human was meant to decide: those events carry no
/// attempts).
fn failed_strong_compensation(events: &[Event], record: &LedgerRecord) -> bool {
    let mine = |e: &&Event| e.intent_id.as_ref() == Some(&record.intent_id);
    let started_strong = events.iter().filter(mine).any(|e| {
        matches!(&e.data, EventData::CompensationStarted(s) if s.grade == CompensationGrade::Strong)
    });
    let failed = events.iter().filter(mine).any(|e| {
        matches!(&e.data, EventData::CompensationFinished(f)
            if f.status == LedgerStatus::Manual && f.attempts.is_some_and(|n| n > 0))
    });
    started_strong && failed
}

fn unix_ms(time: SystemTime) -> Timestamp {
    Timestamp::from_system_time(time)
}
