//! Invariants 11 and 12 (issue 31, "a database that blinks loses nothing
//! and misreports nothing"): what the ledger, the event log and the tool's
//! own log say of each effect agree, at the end and at the moment a run's
//! call returned; and a store that refuses writes for a while neither
//! fails a run nor lets one end with a record in doubt.
//!
//! # Why at the moment the call returned too
//!
//! Whatever repairs a run later — held marks written when the store is
//! back, a resume, the reconciler — can hide a moment at which the event
//! log said more than the ledger (a `ledger_recorded succeeded` stored
//! while the record was `pending`), or at which a run the store held as
//! ended still had a record `pending`. Each run's
//! [`RunEvidence::at_return`] is what the store held right after its call
//! returned, before any of that ran.

use std::collections::BTreeMap;

use rein_core::{EventData, LedgerRecord, LedgerStatus};
use rein_testkit::order_desk::EffectKind;

use super::{Invariant, Violation, request_intent, violation};
use crate::evidence::{Evidence, RunEvidence};

/// What the events state of each intent's record, in order: (event seq,
/// status, whether it is a `ledger_recorded`).
fn statements(events: &[rein_core::Event]) -> BTreeMap<String, Vec<(u64, LedgerStatus, bool)>> {
    let mut out: BTreeMap<String, Vec<(u64, LedgerStatus, bool)>> = BTreeMap::new();
    for e in events {
        let (status, recorded) = match &e.data {
            EventData::LedgerRecorded(r) => (r.status, true),
            EventData::CompensationFinished(c) => (c.status, false),
            _ => continue,
        };
        if let Some(intent) = &e.intent_id {
            out.entry(intent.as_str().to_owned())
                .or_default()
                .push((e.seq, status, recorded));
        }
    }
    out
}

/// Checks what `events` state against `ledger`, as the store held both at
/// one moment (`when` names it in the details).
fn agree(
    run: &RunEvidence,
    events: &[rein_core::Event],
    ledger: &[LedgerRecord],
    when: &str,
    out: &mut Vec<Violation>,
) {
    let records: BTreeMap<&str, &LedgerRecord> =
        ledger.iter().map(|r| (r.intent_id.as_str(), r)).collect();
    for (intent, stated) in statements(events) {
        let Some(record) = records.get(intent.as_str()) else {
            violation(
                out,
                Invariant::LedgerAgreesWithEvents,
                Some(run),
                format!(
                    "{when}: events state {} of {intent}, which has no ledger record",
                    names(&stated)
                ),
            );
            continue;
        };
        // The same outcome stated twice in a row by `ledger_recorded`: one
        // of them was written apart from its mark. (`pending` is stated
        // again on purpose: a resume declares its call again, first write
        // wins, and a call that may have applied is marked `pending`.)
        let recorded: Vec<&(u64, LedgerStatus, bool)> = stated.iter().filter(|s| s.2).collect();
        if let Some(w) = recorded
            .windows(2)
            .find(|w| w[0].1 == w[1].1 && w[1].1 != LedgerStatus::Pending)
        {
            violation(
                out,
                Invariant::LedgerAgreesWithEvents,
                Some(run),
                format!(
                    "{when}: events {} and {} both record {intent} ({}) {}: one was stored apart from its mark",
                    w[0].0,
                    w[1].0,
                    record.tool,
                    w[1].1.as_str()
                ),
            );
        }
        // Each statement a step the record's state machine allows.
        let mut path: Vec<LedgerStatus> = Vec::new();
        for &(_, status, _) in &stated {
            if path.last() != Some(&status) {
                path.push(status);
            }
        }
        if let Some(w) = path.windows(2).find(|w| w[0].transition(w[1]).is_err()) {
            violation(
                out,
                Invariant::LedgerAgreesWithEvents,
                Some(run),
                format!(
                    "{when}: events state {intent} ({}) {} then {}, which its record cannot do",
                    record.tool,
                    w[0].as_str(),
                    w[1].as_str()
                ),
            );
        }
        if let Some(last) = path.last()
            && *last != record.status
        {
            let ahead = record.status.transition(*last).is_ok();
            violation(
                out,
                Invariant::LedgerAgreesWithEvents,
                Some(run),
                format!(
                    "{when}: the events say {intent} ({}) is {}, the ledger says {}{}",
                    record.tool,
                    last.as_str(),
                    record.status.as_str(),
                    if ahead {
                        ": the event log is ahead of the ledger"
                    } else {
                        ""
                    }
                ),
            );
        }
    }
    // Every record is stated: its declaration at least.
    let stated = statements(events);
    for record in ledger {
        if !stated.contains_key(record.intent_id.as_str()) {
            violation(
                out,
                Invariant::LedgerAgreesWithEvents,
                Some(run),
                format!(
                    "{when}: {} ({}) is {} in the ledger, and no event says so",
                    record.intent_id,
                    record.tool,
                    record.status.as_str()
                ),
            );
        }
    }
}

fn names(stated: &[(u64, LedgerStatus, bool)]) -> String {
    stated
        .iter()
        .map(|s| s.1.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Invariant 11 for one run.
pub(super) fn ledger_agrees_with_events(
    evidence: &Evidence,
    run: &RunEvidence,
    out: &mut Vec<Violation>,
) {
    agree(run, &run.events, &run.ledger, "at the end", out);
    if let Some(at) = &run.at_return {
        agree(
            run,
            &at.events,
            &at.ledger,
            "when the run's call returned",
            out,
        );
    }
    // The desk's log: every write it applied for the run has its record,
    // and the record does not say it certainly did not happen.
    let requests: BTreeMap<u64, &rein_testkit::order_desk::RequestRecord> =
        evidence.desk.requests.iter().map(|r| (r.seq, r)).collect();
    for effect in &evidence.desk.side_effects {
        let Some(request) = requests.get(&effect.request_seq) else {
            continue;
        };
        if request.headers.run_id.as_deref() != Some(run.run_id.as_str()) {
            continue;
        }
        let Some(intent) = request_intent(request) else {
            continue;
        };
        if intent.ends_with("/compensation") || effect.effect != EffectKind::Applied {
            continue;
        }
        match run.ledger.iter().find(|r| r.intent_id.as_str() == intent) {
            None => violation(
                out,
                Invariant::LedgerAgreesWithEvents,
                Some(run),
                format!(
                    "the desk applied {} for {intent} (request {}), which has no ledger record",
                    effect.tool, effect.request_seq
                ),
            ),
            Some(record) if record.status == LedgerStatus::Failed => violation(
                out,
                Invariant::LedgerAgreesWithEvents,
                Some(run),
                format!(
                    "the desk applied {} for {intent} (request {}), yet the ledger says it failed",
                    effect.tool, effect.request_seq
                ),
            ),
            Some(_) => {}
        }
    }
    // And every record that says its effect happened shows it at the desk.
    for record in run.ledger.iter().filter(|r| {
        matches!(
            r.status,
            LedgerStatus::Succeeded | LedgerStatus::Compensated | LedgerStatus::Uncompensatable
        )
    }) {
        let seen = evidence.desk.side_effects.iter().any(|e| {
            requests.get(&e.request_seq).and_then(|r| request_intent(r))
                == Some(record.intent_id.as_str())
        });
        if !seen {
            violation(
                out,
                Invariant::LedgerAgreesWithEvents,
                Some(run),
                format!(
                    "{} ({}) is {} in the ledger, but the desk never applied it",
                    record.intent_id,
                    record.tool,
                    record.status.as_str()
                ),
            );
        }
    }
}

/// Text only a transient store refusal carries: the display of
/// `StoreError::Unavailable` (a store that failed for good, an I/O error,
/// may fail a run, with its reason).
const STORE_REFUSAL: [&str; 1] = ["store is unavailable"];

/// Invariant 12 for one run.
pub(super) fn no_transient_failure(run: &RunEvidence, out: &mut Vec<Violation>) {
    if let Some(at) = &run.at_return {
        let ended = at
            .stored_status
            .as_deref()
            .is_some_and(|s| s != "running" && s != "queued");
        if ended {
            for record in at
                .ledger
                .iter()
                .filter(|r| r.status == LedgerStatus::Pending)
            {
                violation(
                    out,
                    Invariant::NoTransientFailure,
                    Some(run),
                    format!(
                        "the run ended {} with {} ({}) still pending",
                        at.stored_status.as_deref().unwrap_or_default(),
                        record.intent_id,
                        record.tool
                    ),
                );
            }
        }
    }
    if let Some(refused) = &run.refused
        && STORE_REFUSAL.iter().any(|m| refused.contains(m))
    {
        violation(
            out,
            Invariant::NoTransientFailure,
            Some(run),
            format!("the run was refused for a store that blinked: {refused}"),
        );
    }
    let Some(report) = &run.report else {
        return;
    };
    if report.outcome == rein_core::Outcome::Succeeded {
        return;
    }
    // The failure's own account: the report, and the run's end event.
    let mut told = serde_json::to_string(report).unwrap_or_default();
    for e in run.events.iter().filter(|e| {
        matches!(
            &e.data,
            EventData::RunFinished(_) | EventData::ToolCallFinished(_)
        )
    }) {
        told.push_str(&serde_json::to_string(e).unwrap_or_default());
    }
    if let Some(marker) = STORE_REFUSAL.iter().find(|m| told.contains(*m)) {
        violation(
            out,
            Invariant::NoTransientFailure,
            Some(run),
            format!(
                "the run ended {} for a store that blinked (its account says {marker:?})",
                report.outcome.as_str()
            ),
        );
    }
}
