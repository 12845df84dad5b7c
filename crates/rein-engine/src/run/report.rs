//! Wiring of the run report: a run's facts, gathered from the process that
//! drove it or from the store, handed with the ledger as it stands to
//! [`rein_core::report::derive`], the one function every report comes from.
//!
//! | the run | facts from | ledger |
//! | --- | --- | --- |
//! | ended in this process | the loop's calls, budget and settlement | read after settlement |
//! | closed from outside ([`super::close`]) | its last checkpoint and events | as it stands |
//! | finished, a record changed since ([`revise`]) | its stored report's basis and its last checkpoint | with the change |

use rein_core::Timestamp;
use std::collections::BTreeMap;

use rein_core::FailurePolicy;
use rein_core::call::CallResult;
use rein_core::deadline::Usage;
use rein_core::handoff::ToolOwner;
use rein_core::report::{RunFacts, derive};
use rein_core::{EventData, LedgerRecord, ReportNote, RunId, RunReport};
use rein_store::{RunRecord, Store, StoreError};
use serde::Deserialize;

pub use rein_core::report::End;
use rein_core::report::Settled;

use super::AgentBinding;

/// What rein deliberately did not try, given the agent's policy.
pub(super) fn strategies_not_tried(agent: &AgentBinding) -> Vec<String> {
    if agent.on_failure == FailurePolicy::Compensate {
        Vec::new()
    } else {
        vec![format!(
            "automatic compensation: the agent's policy is {:?}",
            agent.on_failure
        )]
    }
}

/// The ledger records of `run` and of every run below it in its agent
/// tree, the run's own first: what its report (and its handoff package)
/// is derived from.
///
/// # Errors
///
/// The store's, when a ledger or the children cannot be read.
pub async fn tree_records(store: &dyn Store, run: &RunId) -> Result<Vec<LedgerRecord>, StoreError> {
    let mut records = store.ledger(run).await?;
    let mut below = vec![run.clone()];
    let mut seen = std::collections::HashSet::from([run.clone()]);
    while let Some(parent) = below.pop() {
        for child in store.children_of(&parent).await? {
            // Ids derive from intents, so a cycle cannot be written; a
            // damaged store must still not loop.
            if seen.insert(child.run_id.clone()) {
                records.extend(store.ledger(&child.run_id).await?);
                below.push(child.run_id);
            }
        }
    }
    Ok(records)
}

/// What a run's last checkpoint says of it, for a report derived from the
/// store.
#[derive(Debug, Default)]
struct Checkpointed {
    /// The calls it made (the calls of a step interrupted before its
    /// checkpoint are in the ledger only).
    calls: Vec<CallResult>,
    /// What it had consumed by then.
    consumed: Usage,
    /// Set when the checkpoint's calls could not be decoded: the report
    /// says so instead of listing none.
    unreadable: Option<ReportNote>,
}

/// Reads `run`'s last checkpoint for its report.
///
/// # Why a note and not an error
///
/// Restoring a run from an undecodable checkpoint is refused
/// (`NotResumable`): continuing with lost history would repeat work. A
/// report is different: closing a run from outside must still close it,
/// and the ledger lists every write it made. So the calls are left out
/// *and the report says so* ([`ReportNote::CheckpointUnreadable`]) — never
/// a silently empty list that reads as "nothing else happened".
async fn checkpointed(store: &dyn Store, run: &RunId) -> Result<Checkpointed, StoreError> {
    let Some(checkpoint) = store.latest_checkpoint(run).await? else {
        return Ok(Checkpointed::default());
    };
    // NOTE: `checkpoint::checkpoint` writes `state.calls`; they change
    // together.
    let decoded = match checkpoint.state.get("calls") {
        Some(calls) => Vec::<CallResult>::deserialize(calls)
            .map_err(|e| format!("`state.calls` does not decode: {e}")),
        None => Err("`state.calls` is missing".to_owned()),
    };
    let (calls, unreadable) = match decoded {
        Ok(calls) => (calls, None),
        Err(reason) => {
            tracing::warn!(run = %run, step = checkpoint.step, "a report without its checkpoint's calls: {reason}");
            (
                Vec::new(),
                Some(ReportNote::CheckpointUnreadable {
                    step: checkpoint.step,
                    reason,
                }),
            )
        }
    };
    Ok(Checkpointed {
        calls,
        consumed: checkpoint.consumed,
        unreadable,
    })
}

/// The models that answered a run's turns, from its events.
/// What a run's events say of it: the models that answered it, and who
/// answers for each tool it started (the `owner` and `side_effect_tier`
/// each `tool_call_started` carries), so a run closed from outside names
/// its effects' owners as one its process closed does.
async fn from_events(
    store: &dyn Store,
    run: &RunId,
) -> Result<(Vec<String>, BTreeMap<String, ToolOwner>), StoreError> {
    let mut models: Vec<String> = Vec::new();
    let mut owners = BTreeMap::new();
    for e in store.events(run, 0).await? {
        match &e.data {
            EventData::ModelCallFinished(f) if f.ok() => {
                let name = format!("{}/{}", f.provider, f.model);
                if !models.contains(&name) {
                    models.push(name);
                }
            }
            EventData::ToolCallStarted(started) => {
                if let (Some(owner), Some(side_effect_tier)) =
                    (&started.owner, started.side_effect_tier)
                {
                    owners.insert(
                        started.tool.clone(),
                        ToolOwner {
                            owner: owner.clone(),
                            side_effect_tier,
                        },
                    );
                }
            }
            _ => {}
        }
    }
    Ok((models, owners))
}

/// The facts of a run its driving process no longer holds, from the store:
/// its last checkpoint's calls and consumption, and the models and tool
/// owners its events name. `elapsed_ms` is until `at_ms`.
///
/// # Errors
///
/// The store's.
pub(super) async fn stored_facts(
    store: &dyn Store,
    run: &RunRecord,
    end: End,
    at_ms: Timestamp,
) -> Result<RunFacts, StoreError> {
    let Checkpointed {
        calls,
        consumed,
        unreadable,
    } = checkpointed(store, &run.run_id).await?;
    let (models, owners) = from_events(store, &run.run_id).await?;
    Ok(RunFacts {
        run_id: run.run_id.clone(),
        agent: run.agent.clone(),
        input: run.input.clone(),
        end,
        settled: Settled::Kept,
        outcome: None,
        calls,
        consumed,
        elapsed_ms: super::guarded::millis(at_ms.saturating_duration_since(run.created_at_ms)),
        steps: consumed.steps,
        models,
        compensations: Vec::new(),
        resume: None,
        in_flight: Vec::new(),
        strategies_not_tried: Vec::new(),
        notes: unreadable.into_iter().collect(),
        hint: Default::default(),
        owners,
    })
}

/// The report of the finished `run` derived again from its stored report's
/// basis and `ledger` (its tree's records as they stand, with a change not
/// yet stored applied): the report the run has once the change lands.
/// `None` when the run is not finished, or its report predates reports
/// that keep their basis.
///
/// A caller that stores it reads `run` (its `ledger_revision`) before the
/// ledger and commits with [`StepCommit::expect_ledger_revision`] set to
/// that revision ([`revise_stored`] does): a ledger write in between makes
/// the commit a conflict instead of storing a report that missed it.
///
/// [`StepCommit::expect_ledger_revision`]: rein_store::StepCommit::expect_ledger_revision
///
/// Its outcome is the run's (outcomes are final); everything the ledger
/// decides (what completed, what awaits a human, the handoff package, the
/// summary and recommendation) follows the ledger.
///
/// # Errors
///
/// The store's, when the run's checkpoint cannot be read.
pub async fn revise(
    store: &dyn Store,
    run: &RunRecord,
    ledger: &[LedgerRecord],
) -> Result<Option<RunReport>, StoreError> {
    Ok(revision_facts(store, run)
        .await?
        .map(|facts| derive(&facts, ledger)))
}

/// The report that closes the handed-off `run` once a human has decided
/// every record its tree awaited (`ledger`, as it stands with the last
/// decision applied): its outcome is what then stands, derived as if the
/// settlement had concluded so (every effect of its own undone: `Undone`;
/// any of them standing: `Kept`), with a [`ReportNote::ClosedByHuman`]
/// that keeps why it was handed off. `None` while it may not close: it is
/// not `handed_off`, a record still awaits a human, or something may still
/// be running (a held lease), which whoever took over must check first.
///
/// `decisions` is how many decisions closed it, for the note.
///
/// # Errors
///
/// The store's, when the run's checkpoint cannot be read.
pub async fn closing(
    store: &dyn Store,
    run: &RunRecord,
    ledger: &[LedgerRecord],
    decisions: u32,
) -> Result<Option<RunReport>, StoreError> {
    if run.status.outcome() != Some(rein_core::Outcome::HandedOff)
        || ledger.iter().any(rein_core::report::awaits_human)
    {
        return Ok(None);
    }
    let Some(mut facts) = revision_facts(store, run).await? else {
        return Ok(None);
    };
    if !facts.in_flight.is_empty() {
        return Ok(None);
    }
    let handed_off = match &facts.settled {
        Settled::HandedOff(reason) => reason.clone(),
        _ => "it was handed to a human".to_owned(),
    };
    let stands = ledger.iter().any(|r| {
        r.run_id == run.run_id
            && matches!(
                r.status,
                rein_core::LedgerStatus::Succeeded | rein_core::LedgerStatus::Accepted
            )
    });
    facts.settled = if stands {
        Settled::Kept
    } else {
        Settled::Undone
    };
    facts.outcome = None;
    facts.notes.push(ReportNote::ClosedByHuman {
        handed_off,
        decisions,
    });
    Ok(Some(derive(&facts, ledger)))
}

/// The facts a finished run's report is derived again from: its stored
/// report's basis, and its last checkpoint's calls. `None` when the run is
/// not finished, or its report predates reports that keep their basis.
async fn revision_facts(
    store: &dyn Store,
    run: &RunRecord,
) -> Result<Option<RunFacts>, StoreError> {
    let (Some(outcome), Some(stored)) = (run.status.outcome(), run.report.as_ref()) else {
        return Ok(None);
    };
    let Some(basis) = stored.basis.clone() else {
        return Ok(None);
    };
    let Checkpointed {
        calls, unreadable, ..
    } = checkpointed(store, &run.run_id).await?;
    // A closing's note stays true of the run; an unreadable checkpoint is
    // judged afresh.
    let mut notes: Vec<ReportNote> = unreadable.into_iter().collect();
    notes.extend(
        stored
            .notes
            .iter()
            .filter(|n| matches!(n, ReportNote::ClosedByHuman { .. }))
            .cloned(),
    );
    Ok(Some(RunFacts {
        run_id: run.run_id.clone(),
        agent: run.agent.clone(),
        input: run.input.clone(),
        end: basis.end,
        settled: basis.settled,
        outcome: Some(outcome),
        calls,
        consumed: stored.consumed,
        elapsed_ms: stored.elapsed_ms,
        steps: stored.steps,
        models: stored.models.clone(),
        compensations: stored.compensations.clone(),
        resume: stored.resume.clone(),
        // What was still held, and what was not tried, stays true of the
        // run; calls in doubt are judged afresh from the ledger.
        in_flight: basis.in_flight,
        strategies_not_tried: basis.strategies_not_tried,
        notes,
        hint: basis.hint,
        owners: basis.owners,
    }))
}

/// How often a report write that lost a race with a ledger write (a
/// `ledger revision` conflict) is derived and offered again before giving
/// up: each try reads the ledger anew, so only a ledger that changes on
/// every try exhausts it.
pub const REPORT_WRITE_TRIES: u32 = 8;

/// Derives the finished run `run_id`'s report again from its ledger as it
/// stands and stores it, fenced on the ledger revision read before the
/// ledger (and derived again on a conflict, up to [`REPORT_WRITE_TRIES`]).
/// Returns whether a revised report was stored (`false` for a run that has
/// not finished or whose report keeps no basis).
///
/// # Errors
///
/// The store's; [`StoreError::LedgerChanged`] when the ledger changed on every
/// try.
pub async fn revise_stored(store: &dyn Store, run_id: &RunId) -> Result<bool, StoreError> {
    let mut tries = 0;
    loop {
        tries += 1;
        let Some(run) = store.get_run(run_id).await? else {
            return Ok(false);
        };
        let ledger = tree_records(store, run_id).await?;
        let Some(revised) = revise(store, &run, &ledger).await? else {
            return Ok(false);
        };
        let commit = rein_store::StepCommit {
            revised_report: Some(revised),
            expect_ledger_revision: Some(run.ledger_revision),
            ..rein_store::StepCommit::default()
        };
        match store.commit_step(run_id, commit).await {
            Ok(_) => return Ok(true),
            Err(e) if is_revision_conflict(&e) && tries < REPORT_WRITE_TRIES => {}
            Err(e) => return Err(e),
        }
    }
}

/// Whether `e` says the ledger changed since it was read.
pub fn is_revision_conflict(e: &StoreError) -> bool {
    matches!(e, StoreError::LedgerChanged { .. })
}
