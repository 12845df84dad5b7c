//! Handoff decisions: a human settles, record by record, what a run left
//! awaiting one, and the run closes with what happened.
//!
//! # Why
//!
//! rein stops honestly: a run whose effects are in doubt ends `handed_off`
//! with a package that says "awaiting your decision". Without a way to
//! record the decision the record stays `manual`, the reconciler keeps
//! flagging it, and the run's outcome keeps saying a human is needed long
//! after one acted. Each decision here is durable and attributed (a
//! `handoff_decided` event in the commit that marks the record), settles
//! the record for good (`compensated` or `accepted`: nothing automatic
//! touches it again, so the reconciler leaves it alone), and the run's
//! report is derived again from the ledger as it then stands. The last
//! decision a handed-off run awaited closes it with the outcome that then
//! stands ([`crate::run::closing`]).
//!
//! | decision | what rein does | the record ends |
//! | --- | --- | --- |
//! | `undone` | nothing: the human undid it by hand | `compensated` |
//! | `accepted` | nothing: the effect stands | `accepted` |
//! | `compensate` | runs the tool's registered compensation once, under the key the settlement would use | `compensated` |
//! | `retry` | sends the call again with its recorded arguments under its original key (idempotent writes only) | `accepted`, with the result |
//!
//! A `compensate` or `retry` whose call fails changes nothing: the attempt
//! is recorded (`handoff_decided` with `failed`), and the record still
//! awaits a decision.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rein_core::event::HandoffDecided;
use rein_core::handoff::Decision;
use rein_core::report::awaits_human;
use rein_core::{
    AttemptId, Event, EventData, IntentId, LedgerRecord, LedgerStatus, Outcome, RunId, RunReport,
    Timestamp, ToolClass,
};
use rein_store::{LedgerMark, RunRecord, RunStatus, StepCommit, Store, StoreError};
use serde_json::Value;

use crate::Timer;
use crate::run::{CompensationBinding, ToolBinding, ToolTarget};
use crate::tool::http::HttpToolAdapter;
use crate::tool::{Attempt, ToolOutput};

/// How long a compensation or retry sent for a decision may take when the
/// tool declares no latency profile: a human is waiting for the answer.
const DECISION_CALL_ALLOWANCE: Duration = Duration::from_secs(30);

/// How often a decision is derived and offered again when another writer
/// moved the run's ledger in between (see [`crate::run::REPORT_WRITE_TRIES`]).
const DECISION_TRIES: u32 = crate::run::REPORT_WRITE_TRIES;

/// What a human decided about one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRequest {
    /// The record's intent.
    pub intent_id: IntentId,
    /// The decision.
    pub decision: Decision,
    /// Who decided: the API key's name, or the CLI's `--by`.
    pub by: String,
    /// Why, in the decider's words.
    pub reason: Option<String>,
}

/// A decision as it was applied (the answer of
/// `POST /v1/runs/{id}/handoff/decisions`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Resolution {
    /// The run whose record was decided.
    pub run_id: RunId,
    /// The record's intent.
    pub intent_id: IntentId,
    /// The record's tool.
    pub tool: String,
    /// The decision.
    pub decision: Decision,
    /// Who decided.
    pub by: String,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The record's status before the decision.
    pub from: LedgerStatus,
    /// The record's status now.
    pub status: LedgerStatus,
    /// The tool's answer, for a `retry`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Whether the same decision had already been applied (a repeated
    /// request changes nothing).
    pub repeated: bool,
    /// Records of the run (and its child runs) that still await a
    /// decision.
    pub still_awaiting: usize,
    /// The run's status now: its new outcome when this decision closed it.
    pub run_status: RunStatus,
    /// The outcome this decision closed the run with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<Outcome>,
}

/// Why a decision was not applied. Each names what stands, so the caller
/// can tell a human what to do instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// No such run.
    #[error("no run {0}")]
    RunNotFound(RunId),
    /// The run has not finished: its own process decides its records.
    #[error(
        "run {run_id} is {status}: its records are decided by the process that drives it, not by hand{hint}",
        hint = if *status == RunStatus::AwaitingApproval { " (it awaits an approval: rein approvals list)" } else { "" }
    )]
    NotFinished {
        /// The run.
        run_id: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// The run has no record of this intent (a read, or no such call).
    #[error("run {run_id} has no ledger record {intent_id}")]
    NoRecord {
        /// The run.
        run_id: RunId,
        /// The intent asked for.
        intent_id: IntentId,
    },
    /// The record belongs to a child run, which decides it.
    #[error(
        "record {intent_id} belongs to child run {child}: decide it there (rein handoff resolve {child} {intent_id})"
    )]
    OfChild {
        /// The intent.
        intent_id: IntentId,
        /// The child run that holds it.
        child: RunId,
    },
    /// The record does not await a decision, and no human decided it.
    #[error("record {intent_id} does not await a decision: it is {status}")]
    NotAwaiting {
        /// The intent.
        intent_id: IntentId,
        /// Its status.
        status: LedgerStatus,
    },
    /// A human already decided the record otherwise.
    #[error(
        "record {intent_id} was already decided {decision} by {by}: it is {status}, and a decision stands"
    )]
    AlreadyDecided {
        /// The intent.
        intent_id: IntentId,
        /// The decision that stands.
        decision: Decision,
        /// Who made it.
        by: String,
        /// The record's status.
        status: LedgerStatus,
    },
    /// The decision does not apply to this record (why).
    #[error("record {intent_id} cannot be decided {decision}: {why}")]
    NotApplicable {
        /// The intent.
        intent_id: IntentId,
        /// The refused decision.
        decision: Decision,
        /// Why, and what to decide instead.
        why: String,
    },
    /// The compensation or retry the decision asked for failed; the
    /// record still awaits a decision, and the attempt is recorded.
    #[error(
        "the {decision} of record {intent_id} failed: {reason}; the record still awaits a decision"
    )]
    ActionFailed {
        /// The intent.
        intent_id: IntentId,
        /// The decision whose action failed.
        decision: Decision,
        /// What the tool answered.
        reason: String,
    },
    /// The run's ledger kept changing under the decision (other writers
    /// on every try): nothing was stored; ask again.
    #[error(
        "the ledger kept changing while record {intent_id} was being decided: nothing was stored; try again"
    )]
    Contended {
        /// The intent.
        intent_id: IntentId,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Applies handoff decisions over a store, with the tools and
/// compensations of the config the runs were made with (a `compensate`
/// or `retry` calls them).
pub struct Resolver {
    store: Arc<dyn Store>,
    clock: Arc<dyn Timer>,
    http: HttpToolAdapter,
    tools: BTreeMap<String, ToolBinding>,
    compensations: BTreeMap<String, CompensationBinding>,
}

/// What a decision's action produced, before it is committed.
struct Applied {
    status: LedgerStatus,
    result: Option<Value>,
    attempts: u32,
}

impl Resolver {
    /// A resolver over `store` that knows `tools` and `compensations` by
    /// name (as [`crate::bind`] makes them from a registry).
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Timer>,
        client: reqwest::Client,
        tools: BTreeMap<String, ToolBinding>,
        compensations: BTreeMap<String, CompensationBinding>,
    ) -> Self {
        Resolver {
            store,
            http: HttpToolAdapter::new(client).with_clock(clock.clone()),
            clock,
            tools,
            compensations,
        }
    }

    /// Applies `request` to a record of the finished run `run_id`.
    ///
    /// # Errors
    ///
    /// [`ResolveError`]: each variant says what stands instead.
    pub async fn resolve(
        &self,
        run_id: &RunId,
        request: &DecisionRequest,
    ) -> Result<Resolution, ResolveError> {
        let (run, record) = self.awaiting(run_id, request).await?;
        let record = match record {
            Awaiting::Yes(record) => *record,
            Awaiting::Repeated(resolution) => return Ok(*resolution),
        };
        if let Some(why) = self.applicable(&record, request) {
            return Err(ResolveError::NotApplicable {
                intent_id: record.intent_id,
                decision: request.decision,
                why,
            });
        }
        let applied = match self.act(&run, &record, request).await {
            Ok(applied) => applied,
            Err(reason) => {
                // The attempt is part of the record's story: stored alone,
                // the record unchanged.
                let event = self.event(&record, request, record.status, Some(reason.clone()), None);
                let commit = StepCommit {
                    events: vec![event],
                    ..StepCommit::default()
                };
                self.store.commit_step(run_id, commit).await?;
                return Err(ResolveError::ActionFailed {
                    intent_id: record.intent_id.clone(),
                    decision: request.decision,
                    reason,
                });
            }
        };
        for _ in 0..DECISION_TRIES {
            match self.commit(&record, request, &applied).await {
                Ok(Some(resolution)) => return Ok(resolution),
                Ok(None) => {}
                Err(ResolveError::Store(e)) if is_read_stale(&e) => {}
                Err(e) => return Err(e),
            }
            // Another writer moved the ledger (maybe a second decision on
            // this very record): check it again.
            let (_, again) = self.awaiting(run_id, request).await?;
            if let Awaiting::Repeated(resolution) = again {
                return Ok(*resolution);
            }
        }
        Err(ResolveError::Contended {
            intent_id: record.intent_id,
        })
    }

    /// The run and whether `request`'s record awaits a decision.
    async fn awaiting(
        &self,
        run_id: &RunId,
        request: &DecisionRequest,
    ) -> Result<(RunRecord, Awaiting), ResolveError> {
        let run = self
            .store
            .get_run(run_id)
            .await?
            .ok_or_else(|| ResolveError::RunNotFound(run_id.clone()))?;
        if !run.status.is_finished() {
            return Err(ResolveError::NotFinished {
                run_id: run_id.clone(),
                status: run.status,
            });
        }
        let ledger = crate::run::tree_records(self.store.as_ref(), run_id).await?;
        let Some(record) = ledger
            .iter()
            .find(|r| r.intent_id == request.intent_id)
            .cloned()
        else {
            return Err(ResolveError::NoRecord {
                run_id: run_id.clone(),
                intent_id: request.intent_id.clone(),
            });
        };
        if &record.run_id != run_id {
            return Err(ResolveError::OfChild {
                intent_id: record.intent_id,
                child: record.run_id,
            });
        }
        if awaits_human(&record) {
            return Ok((run, Awaiting::Yes(Box::new(record))));
        }
        // Decided already? The decision that stands is its last applied
        // `handoff_decided`.
        let events = self.store.events(run_id, 0).await?;
        let stands = events.iter().rev().find_map(|e| match &e.data {
            EventData::HandoffDecided(d)
                if e.intent_id.as_ref() == Some(&record.intent_id) && d.failed.is_none() =>
            {
                Some(d.clone())
            }
            _ => None,
        });
        match stands {
            Some(d) if d.decision == request.decision => {
                let still_awaiting = ledger.iter().filter(|r| awaits_human(r)).count();
                let resolution = Resolution {
                    run_id: run_id.clone(),
                    intent_id: record.intent_id.clone(),
                    tool: record.tool.clone(),
                    decision: d.decision,
                    by: d.by,
                    reason: d.reason,
                    from: d.from,
                    status: record.status,
                    result: matches!(d.decision, Decision::Retry)
                        .then(|| record.result.clone())
                        .flatten(),
                    repeated: true,
                    still_awaiting,
                    run_status: run.status,
                    closed: None,
                };
                Ok((run, Awaiting::Repeated(Box::new(resolution))))
            }
            Some(d) => Err(ResolveError::AlreadyDecided {
                intent_id: record.intent_id,
                decision: d.decision,
                by: d.by,
                status: record.status,
            }),
            None => Err(ResolveError::NotAwaiting {
                intent_id: record.intent_id,
                status: record.status,
            }),
        }
    }

    /// Does what the decision asks of rein, if anything: the status the
    /// record then takes, or why the action failed (a reason for a human).
    /// Whether the decision applies at all was checked before
    /// ([`Resolver::applicable`]).
    async fn act(
        &self,
        run: &RunRecord,
        record: &LedgerRecord,
        request: &DecisionRequest,
    ) -> Result<Applied, String> {
        let settled = |result: Option<Value>, attempts: u32| Applied {
            status: request.decision.settles_as(),
            result,
            attempts,
        };
        match request.decision {
            Decision::Undone | Decision::Accepted => {
                Ok(settled(record.result.clone(), record.attempts))
            }
            Decision::Compensate => {
                let Some(binding) = self.compensations.get(&record.tool) else {
                    return Err(format!("{} has no registered compensation", record.tool));
                };
                let call = binding
                    .call_for(&run.tenant, record, record.result.as_ref())
                    .map_err(|e| format!("its compensation's arguments: {e}"))?;
                self.invoke(
                    &binding.tool,
                    &call.intent,
                    &call.args,
                    call.key.as_ref(),
                    run,
                )
                .await
                .map(|_| settled(record.result.clone(), record.attempts))
            }
            Decision::Retry => {
                let Some(tool) = self.tools.get(&record.tool) else {
                    return Err(format!("the config has no tool {}", record.tool));
                };
                let output = self
                    .invoke(
                        tool,
                        &record.intent_id,
                        &record.args,
                        record.idempotency_key.as_ref(),
                        run,
                    )
                    .await?;
                Ok(settled(
                    Some(output.result),
                    record.attempts.saturating_add(1),
                ))
            }
        }
    }

    /// Why `request` cannot apply to `record`, checked before anything is
    /// sent; `None` when it can.
    fn applicable(&self, record: &LedgerRecord, request: &DecisionRequest) -> Option<String> {
        match request.decision {
            Decision::Undone | Decision::Accepted => None,
            Decision::Compensate => {
                if record.status == LedgerStatus::Pending
                    || (record.status == LedgerStatus::Manual && record.result.is_none())
                {
                    return Some(
                        "whether it took effect is not known, and a compensation of an effect that never happened may do harm: check, then decide undone or accepted (or retry an idempotent write)"
                            .to_owned(),
                    );
                }
                match self.compensations.get(&record.tool) {
                    None => Some(format!(
                        "{} has no registered compensation in this config: undo it by hand and decide undone",
                        record.tool
                    )),
                    Some(b)
                        if !matches!(
                            b.tool.target,
                            ToolTarget::Http(_) | ToolTarget::Adapter(_)
                        ) =>
                    {
                        Some(format!(
                            "its compensation {} is not an HTTP or in-process tool, which is all a decision calls: run it by hand and decide undone",
                            b.tool.name
                        ))
                    }
                    Some(_) => None,
                }
            }
            Decision::Retry => {
                if record.class != ToolClass::IdempotentWrite || record.idempotency_key.is_none() {
                    return Some(format!(
                        "only an idempotent write with a key is retried (the tool deduplicates it by the key); {} is {}: decide undone or accepted",
                        record.tool,
                        record.class.as_str()
                    ));
                }
                match self.tools.get(&record.tool) {
                    None => Some(format!(
                        "the config has no tool {}: retry it with the config the run was made with",
                        record.tool
                    )),
                    Some(t)
                        if !matches!(t.target, ToolTarget::Http(_) | ToolTarget::Adapter(_)) =>
                    {
                        Some(format!(
                            "{} is not an HTTP or in-process tool, which is all a decision calls",
                            record.tool
                        ))
                    }
                    Some(_) => None,
                }
            }
        }
    }

    /// Calls `tool` once with `args` under `key`, within its allowance.
    async fn invoke(
        &self,
        tool: &ToolBinding,
        intent: &IntentId,
        args: &Value,
        key: Option<&rein_core::idempotency::IdempotencyKey>,
        run: &RunRecord,
    ) -> Result<ToolOutput, String> {
        let now = Timestamp::from_system_time(self.clock.system_now());
        let attempt_id = AttemptId::new(format!("handoff-{}", now.as_millis()))
            .map_err(|e| format!("attempt id: {e}"))?;
        let allowance = tool.allowance(DECISION_CALL_ALLOWANCE);
        let attempt = Attempt {
            run_id: &run.run_id,
            intent_id: intent,
            attempt_id: &attempt_id,
            number: 1,
            key,
            remaining: allowance,
            allowance,
        };
        let invoked = match crate::tool::Reach::of(&self.http, None, &tool.target) {
            Some(reach) => reach.invoke(args, &attempt).await,
            None => return Err(format!("{} is not an HTTP or in-process tool", tool.name)),
        };
        invoked.map_err(|f| f.human_message().to_owned())
    }

    /// Marks the record, stores the decision's event and the run's report
    /// derived again (or the report that closes it), in one commit fenced
    /// on the ledger revision read before the ledger. `None` when the
    /// record moved since it was read: the caller reads it again.
    async fn commit(
        &self,
        record: &LedgerRecord,
        request: &DecisionRequest,
        applied: &Applied,
    ) -> Result<Option<Resolution>, ResolveError> {
        let run_id = &record.run_id;
        let run = self
            .store
            .get_run(run_id)
            .await?
            .ok_or_else(|| ResolveError::RunNotFound(run_id.clone()))?;
        let mut ledger = crate::run::tree_records(self.store.as_ref(), run_id).await?;
        let Some(current) = ledger
            .iter_mut()
            .find(|r| &r.run_id == run_id && r.intent_id == record.intent_id)
        else {
            return Err(ResolveError::NoRecord {
                run_id: run_id.clone(),
                intent_id: record.intent_id.clone(),
            });
        };
        if current.status != record.status {
            return Ok(None);
        }
        current.status = applied.status;
        current.result = applied.result.clone();
        let still_awaiting = ledger.iter().filter(|r| awaits_human(r)).count();
        let decisions = self.decisions_of(run_id).await?.saturating_add(1);
        let closing = crate::run::closing(self.store.as_ref(), &run, &ledger, decisions).await?;
        let closed = closing.as_ref().map(|report| report.outcome);
        let revised: Option<RunReport> = match closing {
            Some(report) => Some(report),
            None => crate::run::revise(self.store.as_ref(), &run, &ledger).await?,
        };
        let at_ms = Timestamp::from_system_time(self.clock.system_now());
        let mark = |status: LedgerStatus| {
            (
                record.intent_id.clone(),
                LedgerMark {
                    status,
                    result: applied.result.clone(),
                    failure: record.failure.clone(),
                    attempts: applied.attempts,
                    at_ms,
                },
            )
        };
        // The ledger undoes only what happened: an effect in doubt that a
        // human undid is taken to have happened first (as the reconciler
        // does), both marks in this one commit.
        let marks = if record.status == LedgerStatus::Pending
            && applied.status == LedgerStatus::Compensated
        {
            vec![mark(LedgerStatus::Succeeded), mark(applied.status)]
        } else {
            vec![mark(applied.status)]
        };
        let commit = StepCommit {
            marks,
            events: vec![self.event(record, request, applied.status, None, closed)],
            revised_report: revised,
            expect_status: Some(run.status),
            expect_ledger_revision: Some(run.ledger_revision),
            ..StepCommit::default()
        };
        let committed = self.store.commit_step(run_id, commit).await?;
        let run_status = committed.run.map_or(run.status, |r| r.status);
        self.revise_ancestors(&run).await;
        Ok(Some(Resolution {
            run_id: run_id.clone(),
            intent_id: record.intent_id.clone(),
            tool: record.tool.clone(),
            decision: request.decision,
            by: request.by.clone(),
            reason: request.reason.clone(),
            from: record.status,
            status: applied.status,
            result: matches!(request.decision, Decision::Retry)
                .then(|| applied.result.clone())
                .flatten(),
            repeated: false,
            still_awaiting,
            run_status,
            closed,
        }))
    }

    /// How many decisions were applied to `run_id`'s records before.
    async fn decisions_of(&self, run_id: &RunId) -> Result<u32, StoreError> {
        let events = self.store.events(run_id, 0).await?;
        let n = events
            .iter()
            .filter(|e| matches!(&e.data, EventData::HandoffDecided(d) if d.failed.is_none()))
            .count();
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// The `handoff_decided` event of `request` on `record`.
    fn event(
        &self,
        record: &LedgerRecord,
        request: &DecisionRequest,
        status: LedgerStatus,
        failed: Option<String>,
        closed: Option<Outcome>,
    ) -> Event {
        Event {
            run_id: record.run_id.clone(),
            seq: 0,
            step: record.step,
            intent_id: Some(record.intent_id.clone()),
            attempt_id: None,
            idempotency_key: record.idempotency_key.clone(),
            at_ms: Timestamp::from_system_time(self.clock.system_now()),
            data: HandoffDecided {
                tool: record.tool.clone(),
                decision: request.decision,
                by: request.by.clone(),
                reason: request.reason.clone(),
                from: record.status,
                status,
                failed,
                closed,
            }
            .into(),
        }
    }

    /// Revises the reports of `run`'s finished ancestors, whose handoff
    /// packages list this run's records.
    async fn revise_ancestors(&self, run: &RunRecord) {
        let mut parent = run.parent_run_id.clone();
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
}

/// Whether a record awaits a decision, or the same decision was applied
/// already.
enum Awaiting {
    Yes(Box<LedgerRecord>),
    Repeated(Box<Resolution>),
}

/// Whether a commit was refused because what it was derived from moved.
fn is_read_stale(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::LedgerChanged { .. } | StoreError::StatusChanged { .. }
    )
}
