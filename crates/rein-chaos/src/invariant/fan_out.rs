//! Invariant 7 at planning time, measured where the calls arrive (the
//! proxy in front of the order desk): no turn sends more calls than its
//! agent's `max_calls_per_turn`, and writes naming the same resource are
//! never in flight at the same time.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{Invariant, Violation, violation};
use crate::evidence::Evidence;
use crate::proxy::TraceRecord;

/// How far two writes of one resource may seem to overlap at the proxy and
/// still be one after the other: the proxy stamps a request's end after
/// writing its answer, and the next request of the lane may be parsed in
/// the same millisecond or, on a loaded machine, a little before that
/// stamp. A real overlap lasts as long as the write (the scenarios delay
/// writes far longer than this).
pub(crate) const OVERLAP_SLACK_MS: u64 = 50;

/// The requests runs made (the reconciler's excluded), first attempt of
/// every intent only.
fn run_requests(evidence: &Evidence) -> impl Iterator<Item = &TraceRecord> {
    evidence
        .tool_trace
        .iter()
        .take(evidence.reconcile_from)
        .filter(|r| r.tool.is_some() && r.method == "POST")
}

/// No (run, step) sent more distinct intents than the cap.
pub(super) fn fan_out_capped(evidence: &Evidence, out: &mut Vec<Violation>) {
    for run in &evidence.runs {
        let step_of: BTreeMap<&str, u32> = run
            .intents
            .iter()
            .map(|(step, i)| (i.intent_id.as_str(), *step))
            .collect();
        let mut sent: BTreeMap<u32, BTreeSet<&str>> = BTreeMap::new();
        for r in run_requests(evidence).filter(|r| r.run_id.as_deref() == Some(run.run_id.as_str()))
        {
            let Some(intent) = r.intent_id.as_deref() else {
                continue;
            };
            if let Some(step) = step_of.get(intent) {
                sent.entry(*step).or_default().insert(intent);
            }
        }
        for (step, intents) in sent {
            if intents.len() > evidence.fan_out_cap as usize {
                violation(
                    out,
                    Invariant::ConcurrencyCeiling,
                    Some(run),
                    format!(
                        "step {step} sent {} calls, but its agent allows {} per turn",
                        intents.len(),
                        evidence.fan_out_cap
                    ),
                );
            }
        }
    }
}

/// Writes that name the same resource (tool group and key value) never
/// overlap at the proxy by more than [`OVERLAP_SLACK_MS`].
pub(super) fn same_resource_serial(evidence: &Evidence, out: &mut Vec<Violation>) {
    let mut by_resource: BTreeMap<(String, String), Vec<&TraceRecord>> = BTreeMap::new();
    for r in run_requests(evidence) {
        let Some(key) = r.tool.as_deref().and_then(|t| evidence.write_keys.get(t)) else {
            continue;
        };
        let Ok(args) = serde_json::from_str::<Value>(&r.request_body) else {
            continue;
        };
        let value = key
            .path
            .iter()
            .try_fold(&args, |v, segment| v.get(segment.as_str()));
        if let Some(value) = value.filter(|v| !v.is_null()) {
            by_resource
                .entry((key.group.clone(), value.to_string()))
                .or_default()
                .push(r);
        }
    }
    for ((group, value), mut requests) in by_resource {
        requests.sort_by_key(|r| r.at_ms);
        for pair in requests.windows(2) {
            let (first, next) = (pair[0], pair[1]);
            if next.at_ms + OVERLAP_SLACK_MS < first.finished_ms {
                violation(
                    out,
                    Invariant::ConcurrencyCeiling,
                    None,
                    format!(
                        "two writes of {value} in {group} were in flight together for {} ms \
                         (requests {} and {}): writes of one resource run one at a time",
                        first.finished_ms - next.at_ms,
                        first.seq,
                        next.seq
                    ),
                );
            }
        }
    }
}
