//! The invariant checker: DESIGN.md's ten invariants as code over a
//! scenario's [`Evidence`].
//!
//! # Why invariants, not pass rates
//!
//! Under injected faults, whether a run succeeds is itself uncertain, so a
//! suite that asserts success is flaky by construction. The invariants hold
//! whatever is injected — "an idempotency key produced at most one side
//! effect" is true or the mechanism is broken — so a violation is a defect
//! and blocks the merge, while an ordinary failed run is only counted
//! (seed 000, "Running chaos in CI without going flaky").
//!
//! Each check reads the most independent witness available: the order
//! desk's own side-effect log for effects, the fault proxy's trace for what
//! reached a tool, the messages the model actually received for what it
//! was told; rein's events and ledger only where they are the subject.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rein_core::{EventKind, FailurePolicy, LedgerStatus, Outcome, ToolClass};
use rein_engine::provider::Message;
use rein_testkit::order_desk::{EffectKind, RequestRecord};
use serde::Serialize;
use serde_json::Value;

use crate::evidence::{Evidence, RunEvidence};

/// Text that only ever appears in raw error bodies: a model that receives
/// any of it was handed raw error text.
pub const RAW_ERROR_MARKERS: [&str; 3] = [
    "injected by rein-chaos",
    "RAW-UPSTREAM-ERROR",
    "Traceback (most recent call last)",
];

/// Slack on the wall-clock limit: the end of a run (report, settlement
/// bookkeeping, the final commit) happens after the last deadline check.
pub const WALL_CLOCK_SLACK_MS: u64 = 750;

/// One of DESIGN.md's invariants, by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Invariant {
    /// 1. Each idempotency key produces at most one external side effect.
    OneEffectPerKey,
    /// 2. No budget is breached; reaching one gives an explicit outcome.
    BudgetsHold,
    /// 3. Every succeeded side effect of a run that did not succeed ends
    ///    compensated, uncompensatable or manual.
    NothingDangles,
    /// 4. Compensation runs in strict reverse order of execution.
    ReverseCompensation,
    /// 5. No unhandled error escapes a run; every failure is structured.
    StructuredFailures,
    /// 6. While a breaker is open, the run makes no call to its target.
    OpenBreakerBlocks,
    /// 7. Peak concurrency never exceeds its ceiling; no tenant starves.
    ConcurrencyCeiling,
    /// 8. A resume reuses the original intent ids; completed steps never
    ///    run again.
    ResumeReusesIntents,
    /// 9. Irreversible tools are never retried automatically.
    IrreversibleNotRetried,
    /// 10. The model never receives raw error text.
    NoRawErrorText,
}

impl Invariant {
    /// All ten, in DESIGN.md's order.
    pub const ALL: [Invariant; 10] = [
        Invariant::OneEffectPerKey,
        Invariant::BudgetsHold,
        Invariant::NothingDangles,
        Invariant::ReverseCompensation,
        Invariant::StructuredFailures,
        Invariant::OpenBreakerBlocks,
        Invariant::ConcurrencyCeiling,
        Invariant::ResumeReusesIntents,
        Invariant::IrreversibleNotRetried,
        Invariant::NoRawErrorText,
    ];

    /// Its number in DESIGN.md.
    pub fn number(self) -> u8 {
        match self {
            Invariant::OneEffectPerKey => 1,
            Invariant::BudgetsHold => 2,
            Invariant::NothingDangles => 3,
            Invariant::ReverseCompensation => 4,
            Invariant::StructuredFailures => 5,
            Invariant::OpenBreakerBlocks => 6,
            Invariant::ConcurrencyCeiling => 7,
            Invariant::ResumeReusesIntents => 8,
            Invariant::IrreversibleNotRetried => 9,
            Invariant::NoRawErrorText => 10,
        }
    }

    /// One line.
    pub fn describe(self) -> &'static str {
        match self {
            Invariant::OneEffectPerKey => "each idempotency key produces at most one side effect",
            Invariant::BudgetsHold => "no budget is breached; reaching one is explicit",
            Invariant::NothingDangles => "no succeeded effect of a failed run is left dangling",
            Invariant::ReverseCompensation => "compensation runs in strict reverse order",
            Invariant::StructuredFailures => "no unhandled error escapes a run",
            Invariant::OpenBreakerBlocks => "no call reaches a target while its breaker is open",
            Invariant::ConcurrencyCeiling => "peak concurrency stays under its ceiling",
            Invariant::ResumeReusesIntents => "a resume reuses intent ids and skips done steps",
            Invariant::IrreversibleNotRetried => "irreversible tools are never retried",
            Invariant::NoRawErrorText => "the model never receives raw error text",
        }
    }
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "I{}", self.number())
    }
}

/// One broken invariant, with what shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The invariant.
    pub invariant: Invariant,
    /// The run it concerns, when it concerns one.
    pub run_id: Option<String>,
    /// What was observed, for a human.
    pub detail: String,
}

/// Checks every invariant over `evidence`; empty when all hold.
pub fn check(evidence: &Evidence) -> Vec<Violation> {
    let mut out = Vec::new();
    one_effect_per_key(evidence, &mut out);
    for run in &evidence.runs {
        budgets_hold(run, &mut out);
        nothing_dangles(run, &mut out);
        reverse_compensation(evidence, run, &mut out);
        structured_failures(run, &mut out);
        if !evidence.concurrent_runs {
            open_breaker_blocks(evidence, run, &mut out);
        }
        resume_reuses_intents(run, &mut out);
        no_raw_error_text(run, &mut out);
    }
    calls_accounted_for(evidence, &mut out);
    concurrency_ceiling(evidence, &mut out);
    irreversible_not_retried(evidence, &mut out);
    out
}

fn violation(
    out: &mut Vec<Violation>,
    invariant: Invariant,
    run: Option<&RunEvidence>,
    detail: String,
) {
    out.push(Violation {
        invariant,
        run_id: run.map(|r| r.run_id.to_string()),
        detail,
    });
}

/// The forward intent a desk request belongs to (a compensation carries
/// `<intent>/compensation`).
fn request_intent(request: &RequestRecord) -> Option<&str> {
    request.headers.intent_id.as_deref()
}

fn one_effect_per_key(evidence: &Evidence, out: &mut Vec<Violation>) {
    let requests: HashMap<u64, &RequestRecord> =
        evidence.desk.requests.iter().map(|r| (r.seq, r)).collect();
    let mut by_key: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut by_intent: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for effect in &evidence.desk.side_effects {
        if effect.effect != EffectKind::Applied {
            continue;
        }
        if let Some(key) = effect.idempotency_key.as_deref() {
            *by_key.entry((effect.tool.as_str(), key)).or_default() += 1;
        }
        if let Some(intent) = requests
            .get(&effect.request_seq)
            .and_then(|r| request_intent(r))
        {
            *by_intent.entry((effect.tool.as_str(), intent)).or_default() += 1;
        }
    }
    for ((tool, key), n) in by_key.into_iter().filter(|(_, n)| *n > 1) {
        violation(
            out,
            Invariant::OneEffectPerKey,
            None,
            format!("key {key} of {tool} was applied {n} times at the desk"),
        );
    }
    for ((tool, intent), n) in by_intent.into_iter().filter(|(_, n)| *n > 1) {
        violation(
            out,
            Invariant::OneEffectPerKey,
            None,
            format!("intent {intent} of {tool} was applied {n} times at the desk"),
        );
    }
    // Every attempt of a keyed intent carries the key its ledger record
    // was declared with: a key that changes between attempts makes the
    // tool's deduplication useless even when no duplicate happened to land.
    for run in &evidence.runs {
        for record in &run.ledger {
            let Some(key) = &record.idempotency_key else {
                continue;
            };
            for request in evidence.desk.requests.iter().filter(|r| {
                r.method == "POST"
                    && r.tool == record.tool
                    && request_intent(r) == Some(record.intent_id.as_str())
            }) {
                if request.headers.idempotency_key.as_deref() != Some(key.as_str()) {
                    violation(
                        out,
                        Invariant::OneEffectPerKey,
                        Some(run),
                        format!(
                            "request {} of intent {} carried key {:?}, not its ledger key {}",
                            request.seq,
                            record.intent_id,
                            request.headers.idempotency_key,
                            key.as_str()
                        ),
                    );
                }
            }
        }
    }
}

fn budgets_hold(run: &RunEvidence, out: &mut Vec<Violation>) {
    let Some(report) = &run.report else {
        return;
    };
    let used = report.consumed;
    if let Some(steps) = run.limits.steps()
        && (used.steps > steps || report.steps > steps)
    {
        violation(
            out,
            Invariant::BudgetsHold,
            Some(run),
            format!(
                "{} steps taken, limit {steps}",
                report.steps.max(used.steps)
            ),
        );
    }
    if let Some(tokens) = run.limits.tokens()
        && used.tokens > tokens
    {
        violation(
            out,
            Invariant::BudgetsHold,
            Some(run),
            format!("{} tokens used, limit {tokens}", used.tokens),
        );
    }
    if let Some(cost) = run.limits.cost()
        && used.cost > cost
    {
        violation(
            out,
            Invariant::BudgetsHold,
            Some(run),
            format!("cost {} used, limit {}", used.cost.usd(), cost.usd()),
        );
    }
    let wall = u64::try_from(run.limits.wall_clock().as_millis()).unwrap_or(u64::MAX);
    if report.elapsed_ms > wall.saturating_add(WALL_CLOCK_SLACK_MS) {
        violation(
            out,
            Invariant::BudgetsHold,
            Some(run),
            format!(
                "the run took {} ms, limit {wall} ms (+{WALL_CLOCK_SLACK_MS} ms slack)",
                report.elapsed_ms
            ),
        );
    }
    // The runner's own stopwatch, around the whole call: it also covers
    // what rein's report could leave out (settlement, the final commit).
    if let Some(observed) = run.observed_ms
        && observed > wall.saturating_add(WALL_CLOCK_SLACK_MS)
    {
        violation(
            out,
            Invariant::BudgetsHold,
            Some(run),
            format!(
                "the run held its caller for {observed} ms, limit {wall} ms (+{WALL_CLOCK_SLACK_MS} ms slack)"
            ),
        );
    }
    // Reaching a budget must be explicit: never a success, and a success
    // never hides an action that did not complete.
    let run_level_exhaustion = run.events.iter().any(|e| {
        e.kind == EventKind::BudgetExhausted
            && matches!(e.data["scope"].as_str(), Some("model_turn" | "model_call"))
    });
    if run_level_exhaustion && report.outcome == Outcome::Succeeded {
        violation(
            out,
            Invariant::BudgetsHold,
            Some(run),
            "the run's budget ran out, yet it reported success".into(),
        );
    }
    if report.outcome == Outcome::Succeeded && !report.incomplete.is_empty() {
        violation(
            out,
            Invariant::BudgetsHold,
            Some(run),
            format!(
                "reported success with {} incomplete actions (a silent truncation)",
                report.incomplete.len()
            ),
        );
    }
}

fn nothing_dangles(run: &RunEvidence, out: &mut Vec<Violation>) {
    let Some(report) = &run.report else {
        return;
    };
    for record in &run.ledger {
        if record.status == LedgerStatus::Pending {
            violation(
                out,
                Invariant::NothingDangles,
                Some(run),
                format!(
                    "{} ({}) is still pending after the run ended and reconciliation ran",
                    record.intent_id, record.tool
                ),
            );
        }
    }
    if report.outcome == Outcome::Succeeded {
        return;
    }
    // A recoverable run (a rate limit, a spent budget: a resume continues
    // from its effects) and an agent whose policy is `continue` keep their
    // completed effects on purpose; the report must list each of them.
    let kept = report.recoverable || run.policy == FailurePolicy::Continue;
    for record in run
        .ledger
        .iter()
        .filter(|r| r.status == LedgerStatus::Succeeded)
    {
        let listed = report
            .completed
            .iter()
            .any(|c| c.intent_id == record.intent_id);
        if kept && listed {
            continue;
        }
        violation(
            out,
            Invariant::NothingDangles,
            Some(run),
            format!(
                "{} ({}) succeeded in a run that ended {} and was left {}",
                record.intent_id,
                record.tool,
                report.outcome.as_str(),
                if kept {
                    "out of the report"
                } else {
                    "unsettled"
                }
            ),
        );
    }
}

fn reverse_compensation(evidence: &Evidence, run: &RunEvidence, out: &mut Vec<Violation>) {
    // What rein started, in order (a resumed settlement may start one
    // again: first occurrences count).
    let mut started: Vec<u64> = Vec::new();
    for e in run
        .events
        .iter()
        .filter(|e| e.kind == EventKind::CompensationStarted)
    {
        if let Some(seq) = e.data["forward_seq"].as_u64()
            && !started.contains(&seq)
        {
            started.push(seq);
        }
    }
    if started.windows(2).any(|w| w[0] <= w[1]) {
        violation(
            out,
            Invariant::ReverseCompensation,
            Some(run),
            format!("compensations started for forward records {started:?}, not in reverse"),
        );
    }
    // What the desk actually undid, in order, mapped to the forward
    // record's position.
    let seq_of: HashMap<&str, u64> = run
        .ledger
        .iter()
        .map(|r| (r.intent_id.as_str(), r.seq))
        .collect();
    let requests: HashMap<u64, &RequestRecord> =
        evidence.desk.requests.iter().map(|r| (r.seq, r)).collect();
    let mut undone: Vec<u64> = Vec::new();
    for effect in evidence
        .desk
        .side_effects
        .iter()
        .filter(|e| e.effect == EffectKind::Applied)
    {
        let Some(intent) = requests
            .get(&effect.request_seq)
            .and_then(|r| request_intent(r))
        else {
            continue;
        };
        let Some(forward) = intent.strip_suffix("/compensation") else {
            continue;
        };
        if let Some(seq) = seq_of.get(forward)
            && !undone.contains(seq)
        {
            undone.push(*seq);
        }
    }
    if undone.windows(2).any(|w| w[0] <= w[1]) {
        violation(
            out,
            Invariant::ReverseCompensation,
            Some(run),
            format!("the desk undid forward records {undone:?}, not in reverse"),
        );
    }
}

fn structured_failures(run: &RunEvidence, out: &mut Vec<Violation>) {
    if let Some(escaped) = &run.escaped {
        violation(
            out,
            Invariant::StructuredFailures,
            Some(run),
            format!("escaped the run: {escaped}"),
        );
    }
    if run.report.is_none() && run.escaped.is_none() && run.refused.is_none() {
        violation(
            out,
            Invariant::StructuredFailures,
            Some(run),
            "the run never produced a report".into(),
        );
    }
    if run.report.is_some() && !run.events.iter().any(|e| e.kind == EventKind::RunFinished) {
        violation(
            out,
            Invariant::StructuredFailures,
            Some(run),
            "the run ended without a run_finished event".into(),
        );
    }
    for e in run.events.iter().filter(|e| {
        matches!(
            e.kind,
            EventKind::ToolCallFinished | EventKind::ModelCallFinished
        ) && e.data["ok"] == Value::Bool(false)
    }) {
        if e.data["category"].as_str().is_none_or(str::is_empty) {
            violation(
                out,
                Invariant::StructuredFailures,
                Some(run),
                format!("event {} reports a failure without a category", e.seq),
            );
        }
    }
}

/// Which tools an arm covers.
fn arm_covers(evidence: &Evidence, arm: &str, name: &str, tool: &str) -> bool {
    match arm {
        "tool" => name == tool,
        // Every tool of the world is in the one resource group.
        "resource_group" => evidence.classes.contains_key(tool),
        _ => false,
    }
}

fn open_breaker_blocks(evidence: &Evidence, run: &RunEvidence, out: &mut Vec<Violation>) {
    let mut open: BTreeSet<(String, String)> = BTreeSet::new();
    for e in &run.events {
        match e.kind {
            EventKind::BreakerStateChanged => {
                let arm = e.data["arm"].as_str().unwrap_or_default().to_owned();
                let name = e.data["name"].as_str().unwrap_or_default().to_owned();
                match e.data["transition"]["transition"].as_str() {
                    Some("opened") => {
                        open.insert((arm, name));
                    }
                    Some("half_opened" | "closed") => {
                        open.remove(&(arm, name));
                    }
                    _ => {}
                }
            }
            EventKind::ToolCallStarted => {
                let tool = e.data["tool"].as_str().unwrap_or_default();
                if let Some((arm, name)) = open
                    .iter()
                    .find(|(arm, name)| arm_covers(evidence, arm, name, tool))
                {
                    violation(
                        out,
                        Invariant::OpenBreakerBlocks,
                        Some(run),
                        format!(
                            "event {}: {tool} was called while the {arm} breaker {name} was open",
                            e.seq
                        ),
                    );
                }
            }
            _ => {}
        }
    }
}

/// Every request that reached a tool is one of rein's recorded attempts: no
/// call bypassed the guarded path (and so its breaker). Only judged when
/// every attempt event is known (no crashed process lost its tail).
fn calls_accounted_for(evidence: &Evidence, out: &mut Vec<Violation>) {
    if evidence.runs.iter().any(|r| r.crashed) {
        return;
    }
    let mut attempts: BTreeMap<String, usize> = BTreeMap::new();
    for run in &evidence.runs {
        for e in run
            .events
            .iter()
            .filter(|e| e.kind == EventKind::ToolCallStarted)
        {
            let tool = e.data["tool"].as_str().unwrap_or_default().to_owned();
            *attempts.entry(tool).or_default() += 1;
        }
    }
    let mut requests: BTreeMap<String, usize> = BTreeMap::new();
    for t in evidence.tool_trace.iter().take(evidence.reconcile_from) {
        if let Some(tool) = &t.tool
            && !tool.contains('/')
        {
            *requests.entry(tool.clone()).or_default() += 1;
        }
    }
    for (tool, n) in &requests {
        let seen = attempts.get(tool).copied().unwrap_or(0);
        if *n > seen {
            violation(
                out,
                Invariant::OpenBreakerBlocks,
                None,
                format!("{n} requests reached {tool} but rein recorded {seen} attempts"),
            );
        }
    }
}

fn concurrency_ceiling(evidence: &Evidence, out: &mut Vec<Violation>) {
    for (group, ceiling) in &evidence.ceilings {
        let peak = evidence.peaks.get(group).copied().unwrap_or(0);
        if peak > *ceiling as usize {
            violation(
                out,
                Invariant::ConcurrencyCeiling,
                None,
                format!("{peak} calls in flight in {group}, ceiling {ceiling}"),
            );
        }
    }
    // No tenant starves: every tenant whose runs wanted a tool got one.
    let mut served: BTreeMap<&str, bool> = BTreeMap::new();
    for run in &evidence.runs {
        let planned = run.events.iter().any(|e| e.kind == EventKind::PlanCreated);
        let called = run
            .events
            .iter()
            .any(|e| e.kind == EventKind::ToolCallStarted);
        if planned {
            let entry = served.entry(run.tenant.as_str()).or_insert(false);
            *entry |= called;
        }
    }
    for (tenant, _) in served.into_iter().filter(|(_, s)| !*s) {
        violation(
            out,
            Invariant::ConcurrencyCeiling,
            None,
            format!("tenant {tenant} planned calls but none of them ever ran"),
        );
    }
}

fn resume_reuses_intents(run: &RunEvidence, out: &mut Vec<Violation>) {
    let mut per_slot: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for (step, intent) in &run.intents {
        *per_slot.entry((*step, intent.ordinal)).or_default() += 1;
    }
    for ((step, ordinal), n) in per_slot.into_iter().filter(|(_, n)| *n > 1) {
        violation(
            out,
            Invariant::ResumeReusesIntents,
            Some(run),
            format!("step {step} call {ordinal} was planned {n} times"),
        );
    }
    let Some(resumed_at) = run
        .events
        .iter()
        .position(|e| e.kind == EventKind::RunResumed)
    else {
        return;
    };
    let done_step = run
        .report
        .as_ref()
        .and_then(|r| r.resume.as_ref())
        .map(|m| m.continued_from_step)
        .or_else(|| {
            run.events[resumed_at].data["continued_from_step"]
                .as_u64()
                .and_then(|s| u32::try_from(s).ok())
        })
        .unwrap_or(0);
    let planned: BTreeSet<&str> = run
        .intents
        .iter()
        .map(|(_, i)| i.intent_id.as_str())
        .collect();
    for e in &run.events[resumed_at..] {
        let forward = e
            .intent_id
            .as_ref()
            .is_some_and(|i| !i.as_str().ends_with("/compensation"));
        match e.kind {
            EventKind::ModelCallStarted if e.step <= done_step && e.step > 0 => violation(
                out,
                Invariant::ResumeReusesIntents,
                Some(run),
                format!(
                    "step {} was completed before the crash, yet its model call ran again",
                    e.step
                ),
            ),
            EventKind::ToolCallStarted if forward => {
                let intent = e.intent_id.as_ref().map(|i| i.as_str()).unwrap_or_default();
                if e.step <= done_step {
                    violation(
                        out,
                        Invariant::ResumeReusesIntents,
                        Some(run),
                        format!(
                            "step {} was completed before the crash, yet {intent} ran again",
                            e.step
                        ),
                    );
                }
                if !planned.contains(intent) {
                    violation(
                        out,
                        Invariant::ResumeReusesIntents,
                        Some(run),
                        format!(
                            "the resumed run called intent {intent}, which no persisted plan holds"
                        ),
                    );
                }
            }
            _ => {}
        }
    }
}

fn irreversible_not_retried(evidence: &Evidence, out: &mut Vec<Violation>) {
    let mut per_intent: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for t in &evidence.tool_trace {
        let (Some(tool), Some(intent)) = (t.tool.as_deref(), t.intent_id.as_deref()) else {
            continue;
        };
        if evidence.class(tool) == Some(ToolClass::Irreversible) {
            *per_intent.entry((tool, intent)).or_default() += 1;
        }
    }
    for ((tool, intent), n) in per_intent.into_iter().filter(|(_, n)| *n > 1) {
        violation(
            out,
            Invariant::IrreversibleNotRetried,
            None,
            format!("irreversible {tool} was sent {n} times for intent {intent}"),
        );
    }
    for run in &evidence.runs {
        for e in run
            .events
            .iter()
            .filter(|e| e.kind == EventKind::RetryScheduled)
        {
            let tool = e.data["tool"].as_str().unwrap_or_default();
            if evidence.class(tool) == Some(ToolClass::Irreversible) {
                violation(
                    out,
                    Invariant::IrreversibleNotRetried,
                    Some(run),
                    format!(
                        "event {}: a retry of irreversible {tool} was scheduled",
                        e.seq
                    ),
                );
            }
        }
    }
}

/// Whether `content` is one of rein's structured tool replies: a fact
/// (`{"ok": true, ...}`) or a rendered failure placeholder.
fn is_structured_reply(content: &str) -> bool {
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(content) {
        return map.get("ok") == Some(&Value::Bool(true));
    }
    let Some(rest) = content.strip_prefix("tool_error target=") else {
        return false;
    };
    let Some((header, _instruction)) = rest.split_once(" | instruction: ") else {
        return false;
    };
    let mut fields = header.split(' ').skip(1);
    let expect = |field: Option<&str>, name: &str| field.is_some_and(|f| f.starts_with(name));
    expect(fields.next(), "category=")
        && expect(fields.next(), "effect=")
        && expect(fields.next(), "retryable=")
}

fn no_raw_error_text(run: &RunEvidence, out: &mut Vec<Violation>) {
    for (call, messages) in run.model_inputs.iter().enumerate() {
        for m in messages {
            let Message::Tool { call_id, content } = m else {
                continue;
            };
            let raw = RAW_ERROR_MARKERS
                .iter()
                .find(|marker| content.contains(*marker));
            if let Some(marker) = raw {
                violation(
                    out,
                    Invariant::NoRawErrorText,
                    Some(run),
                    format!(
                        "model call {} received raw error text ({marker:?}) for {call_id}",
                        call + 1
                    ),
                );
            } else if !is_structured_reply(content) {
                violation(
                    out,
                    Invariant::NoRawErrorText,
                    Some(run),
                    format!(
                        "model call {} received an unstructured reply for {call_id}: {}",
                        call + 1,
                        content.chars().take(120).collect::<String>()
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_replies_are_recognized() {
        assert!(is_structured_reply(
            r#"{"tool":"get_order","ok":true,"result":{}}"#
        ));
        let rendered = rein_core::Failure::new("send_email", rein_core::Category::Transient);
        assert!(is_structured_reply(rendered.model_message()));
        assert!(!is_structured_reply(
            "HTTP 500: Traceback (most recent call last)"
        ));
        assert!(!is_structured_reply(r#"{"error": "boom"}"#));
    }
}
