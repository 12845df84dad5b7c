//! The invariant checker: DESIGN.md's ten invariants, and issue 31's two
//! about the store, as code over a
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

use rein_core::breaker::{ArmKind, Transition};
use rein_core::event::{BudgetScope, LinkName, ModelCallFinished, RetryTarget};
use rein_core::{Category, EventData, EventKind, FailurePolicy, LedgerStatus, Outcome, ToolClass};
use rein_engine::provider::Message;
use rein_testkit::order_desk::{EffectKind, RequestRecord};
use serde::Serialize;
use serde_json::Value;

use crate::evidence::{Evidence, RunEvidence};

mod adaptive;
mod approval;
mod fan_out;
mod model_rate;
mod model_side;
mod store;

/// Text that only ever appears in raw error bodies: a model that receives
/// any of it was handed raw error text.
pub const RAW_ERROR_MARKERS: [&str; 5] = [
    // The fault proxy's and the store fault's own error texts.
    "injected by rein-chaos",
    // The order desk's messages for the faults it injects.
    "(injected fault)",
    // Planted in scenario error bodies.
    "RAW-UPSTREAM-ERROR",
    "Traceback (most recent call last)",
    // The mock model server's error messages.
    "mock model",
];

/// Slack on the wall-clock limit: the end of a run (report, settlement
/// bookkeeping, the final commit) happens after the last deadline check.
pub const WALL_CLOCK_SLACK_MS: u64 = 750;

/// A tenant's worst wait for a concurrency slot below this never counts as
/// starvation, whatever the others waited.
pub const STARVATION_FLOOR_MS: u64 = 500;

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
    /// 11. The ledger, the events and the tool's own log agree: every
    ///     status an event states of a record is one the record held, in
    ///     its order, stated once, and never ahead of the ledger; every
    ///     effect the tool applied has its record, never `failed`.
    LedgerAgreesWithEvents,
    /// 12. No run is failed by a transient store fault, and no run the
    ///     store holds as ended has a record still `pending`.
    NoTransientFailure,
    /// 13. A call that needs a human's approval is sent only once
    ///     approved, at most once, with exactly the arguments approved; a
    ///     rejected or expired call is never sent.
    ApprovedCallsOnly,
}

impl Invariant {
    /// All thirteen, in DESIGN.md's order (11 and 12 from issue 31: a
    /// database that blinks loses nothing and misreports nothing; 13 from
    /// issue 33: a human's decision binds what is sent).
    pub const ALL: [Invariant; 13] = [
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
        Invariant::LedgerAgreesWithEvents,
        Invariant::NoTransientFailure,
        Invariant::ApprovedCallsOnly,
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
            Invariant::LedgerAgreesWithEvents => 11,
            Invariant::NoTransientFailure => 12,
            Invariant::ApprovedCallsOnly => 13,
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
            Invariant::LedgerAgreesWithEvents => "the ledger, the events and the tool's log agree",
            Invariant::NoTransientFailure => {
                "no run is failed by a store that blinks or ends with a record pending"
            }
            Invariant::ApprovedCallsOnly => {
                "a call needing approval is sent once, as approved, or never"
            }
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
        compensations_landed(evidence, run, &mut out);
        reverse_compensation(evidence, run, &mut out);
        structured_failures(run, &mut out);
        model_chain_rules(run, &mut out);
        if evidence.concurrent_runs {
            // Runs that overlap interleave on the shared breakers by
            // wall-clock time, which event timestamps cannot order exactly:
            // each run is judged on its own stream.
            open_breaker_blocks(evidence, Some(run), run.events.iter(), &mut out);
        }
        resume_reuses_intents(run, &mut out);
        no_raw_error_text(run, &mut out);
        store::ledger_agrees_with_events(evidence, run, &mut out);
        store::no_transient_failure(run, &mut out);
    }
    if !evidence.concurrent_runs {
        // Breakers are shared by every run of the engine: runs one after
        // another form one ordered stream.
        let all = evidence.runs.iter().flat_map(|r| r.events.iter());
        open_breaker_blocks(evidence, None, all, &mut out);
    }
    calls_accounted_for(evidence, &mut out);
    model_calls_accounted_for(evidence, &mut out);
    model_side::budgets(evidence, &mut out);
    concurrency_ceiling(evidence, &mut out);
    fan_out::fan_out_capped(evidence, &mut out);
    fan_out::same_resource_serial(evidence, &mut out);
    fan_out::rate_holds(evidence, &mut out);
    adaptive::limit_follows_load(evidence, &mut out);
    model_rate::tokens_hold(evidence, &mut out);
    model_rate::provider_wait_honoured(evidence, &mut out);
    irreversible_not_retried(evidence, &mut out);
    approval::approved_calls_only(evidence, &mut out);
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
    // Per run, a write lands at most once per intent the ledger holds for
    // it: independent of the intent and key headers, so an engine that
    // re-planned a call under a new intent (or sent it unkeyed) is caught.
    let mut applied: BTreeMap<(&str, &str, String), usize> = BTreeMap::new();
    for effect in evidence
        .desk
        .side_effects
        .iter()
        .filter(|e| e.effect == EffectKind::Applied)
    {
        let Some(run) = requests
            .get(&effect.request_seq)
            .and_then(|r| r.headers.run_id.as_deref())
        else {
            continue;
        };
        let intent = requests
            .get(&effect.request_seq)
            .and_then(|r| request_intent(r))
            .unwrap_or_default();
        if intent.ends_with("/compensation") {
            continue;
        }
        *applied
            .entry((run, effect.tool.as_str(), effect.args.to_string()))
            .or_default() += 1;
    }
    for ((run_id, tool, args), n) in applied {
        let Some(run) = evidence.runs.iter().find(|r| r.run_id.as_str() == run_id) else {
            continue;
        };
        let intents = run
            .ledger
            .iter()
            .filter(|r| {
                r.tool == tool
                    && serde_json::to_string(&r.args).ok().as_deref() == Some(args.as_str())
            })
            .count();
        if n > intents.max(1) {
            violation(
                out,
                Invariant::OneEffectPerKey,
                Some(run),
                format!("{tool} {args} was applied {n} times for {intents} intents of the run"),
            );
        }
    }
    // A submission retried under one Idempotency-Key starts one run, and
    // every replay names that run.
    let keys: BTreeSet<&str> = evidence
        .submissions
        .iter()
        .map(|a| a.key.as_str())
        .collect();
    if keys.len() == 1 && evidence.runs.len() > 1 {
        violation(
            out,
            Invariant::OneEffectPerKey,
            None,
            format!(
                "{} attempts under one Idempotency-Key started {} runs",
                evidence.submissions.len(),
                evidence.runs.len()
            ),
        );
    }
    let locations: BTreeSet<&str> = evidence
        .submissions
        .iter()
        .filter(|a| a.status.is_some_and(|s| (200..300).contains(&s)))
        .filter_map(|a| a.location.as_deref())
        .collect();
    if locations.len() > 1 {
        violation(
            out,
            Invariant::OneEffectPerKey,
            None,
            format!("one Idempotency-Key was answered with several runs: {locations:?}"),
        );
    }
    for location in &locations {
        let named = location.rsplit('/').next().unwrap_or_default();
        if !evidence.runs.iter().any(|r| r.run_id.as_str() == named) {
            violation(
                out,
                Invariant::OneEffectPerKey,
                None,
                format!(
                    "a submission was answered with {location}, which is not the run it started"
                ),
            );
        }
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
    // Recounted from the event stream, not taken from the report: the
    // steps the model was asked for, and the tokens it reported using.
    let steps_taken = run
        .events
        .iter()
        .filter(|e| e.kind() == EventKind::ModelCallStarted)
        .map(|e| e.step)
        .max()
        .unwrap_or(0)
        .max(report.steps)
        .max(used.steps);
    if let Some(steps) = run.limits.steps()
        && steps_taken > steps
    {
        violation(
            out,
            Invariant::BudgetsHold,
            Some(run),
            format!("{steps_taken} steps taken, limit {steps}"),
        );
    }
    // A call that failed after the provider accepted it (a stream cut
    // midway) still spent tokens: its `tokens_spent` counts too.
    let tokens_used: u64 = run
        .events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ModelCallFinished(f) => Some(f.tokens()),
            _ => None,
        })
        .sum::<u64>()
        .max(used.tokens);
    if let Some(tokens) = run.limits.tokens()
        && tokens_used > tokens
    {
        violation(
            out,
            Invariant::BudgetsHold,
            Some(run),
            format!("{tokens_used} tokens used, limit {tokens}"),
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
    // A tool call refused for want of budget is reported per action; any
    // other exhaustion (run, model turn, model call) ends the run.
    let run_level_exhaustion = run.events.iter().any(
        |e| matches!(&e.data, EventData::BudgetExhausted(b) if b.scope != BudgetScope::ToolCall),
    );
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
    shed_calls_left_no_record(run, out);
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
    // Two documented exceptions keep completed effects on purpose, and the
    // report must list each of them: an agent whose policy is `continue`,
    // and a recoverable run stopped by something time fixes (a spent
    // budget, a rate limit, an overloaded or unavailable target), which a
    // resume continues from its effects.
    let kept = run.policy == FailurePolicy::Continue
        || (report.recoverable && stopped_by_time(run, report));
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

/// A call the governor shed (`call_shed`) was never sent, so it must never
/// have been declared either: a ledger record of it — `pending`, or
/// settled by reconciliation afterwards — is a write left in doubt that
/// never went out (step 4 comes before step 6).
fn shed_calls_left_no_record(run: &RunEvidence, out: &mut Vec<Violation>) {
    for e in &run.events {
        let (EventData::CallShed(shed), Some(intent)) = (&e.data, &e.intent_id) else {
            continue;
        };
        if let Some(record) = run.ledger.iter().find(|r| &r.intent_id == intent) {
            violation(
                out,
                Invariant::NothingDangles,
                Some(run),
                format!(
                    "{intent} ({}) was shed by resource group {} but declared in the ledger (now {})",
                    shed.tool,
                    shed.resource_group,
                    record.status.as_str()
                ),
            );
        }
    }
}

/// Categories whose cause passes with time.
fn fixable_by_time(category: &str) -> bool {
    matches!(
        category,
        "transient"
            | "timeout"
            | "rate_limited"
            | "overloaded"
            | "circuit_open"
            | "budget_exhausted"
    )
}

/// Whether what stopped the run is something time fixes, from the facts:
/// a spent budget, the model failing with a passing cause, or only
/// actions that failed for passing causes.
fn stopped_by_time(run: &RunEvidence, report: &rein_core::RunReport) -> bool {
    if report.outcome == Outcome::BudgetExhausted {
        return true;
    }
    if run.events.iter().any(|e| {
        matches!(
            e.kind(),
            EventKind::LoopDetected | EventKind::SettlementStarted
        )
    }) {
        return false;
    }
    let model_gave_up = run
        .events
        .iter()
        .rev()
        .find_map(|e| match &e.data {
            EventData::ModelCallFinished(f) => Some(f),
            _ => None,
        })
        .and_then(ModelCallFinished::category);
    if let Some(category) = model_gave_up {
        return fixable_by_time(category.as_str());
    }
    report.incomplete.iter().all(|a| {
        serde_json::to_value(a.category)
            .ok()
            .and_then(|v| v.as_str().map(fixable_by_time))
            .unwrap_or(false)
    })
}

/// Compensated records must show their undoing at the desk: the
/// compensation's own request applied there (or replayed a stored
/// application), not merely rein saying so.
fn compensations_landed(evidence: &Evidence, run: &RunEvidence, out: &mut Vec<Violation>) {
    let requests: HashMap<u64, &RequestRecord> =
        evidence.desk.requests.iter().map(|r| (r.seq, r)).collect();
    for record in run
        .ledger
        .iter()
        .filter(|r| r.status == LedgerStatus::Compensated)
    {
        let wanted = format!("{}/compensation", record.intent_id);
        let undone = evidence.desk.side_effects.iter().any(|e| {
            requests.get(&e.request_seq).and_then(|r| request_intent(r)) == Some(wanted.as_str())
        });
        if !undone {
            violation(
                out,
                Invariant::NothingDangles,
                Some(run),
                format!(
                    "{} ({}) is marked compensated, but no compensation reached the desk",
                    record.intent_id, record.tool
                ),
            );
        }
    }
}

fn reverse_compensation(evidence: &Evidence, run: &RunEvidence, out: &mut Vec<Violation>) {
    // What rein started, in order (a resumed settlement may start one
    // again: first occurrences count).
    let mut started: Vec<u64> = Vec::new();
    for e in run.events.iter() {
        if let EventData::CompensationStarted(c) = &e.data
            && !started.contains(&c.forward_seq)
        {
            let seq = c.forward_seq;
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
    for effect in evidence.desk.side_effects.iter().filter(|e| {
        e.effect == EffectKind::Applied && e.request_seq <= evidence.desk_reconcile_from
    }) {
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
    if let Some(report) = &run.report
        && run.stored_status.as_deref() != Some(report.outcome.as_str())
    {
        violation(
            out,
            Invariant::StructuredFailures,
            Some(run),
            format!(
                "the run ended {} but the store holds it as {}",
                report.outcome.as_str(),
                run.stored_status.as_deref().unwrap_or("missing")
            ),
        );
    }
    if run.lost_events > 0 {
        violation(
            out,
            Invariant::StructuredFailures,
            Some(run),
            format!(
                "{} of the run's events never became durable",
                run.lost_events
            ),
        );
    }
    if run.report.is_some()
        && !run
            .events
            .iter()
            .any(|e| e.kind() == EventKind::RunFinished)
    {
        violation(
            out,
            Invariant::StructuredFailures,
            Some(run),
            "the run ended without a run_finished event".into(),
        );
    }
    for e in &run.events {
        let (ok, category) = match &e.data {
            EventData::ToolCallFinished(f) => (f.ok(), f.category()),
            EventData::ModelCallFinished(f) => (f.ok(), f.category()),
            _ => continue,
        };
        if !ok && category.is_none() {
            violation(
                out,
                Invariant::StructuredFailures,
                Some(run),
                format!("event {} reports a failure without a category", e.seq),
            );
        }
    }
}

/// A model link as events name it: (provider, model).
fn link_of(provider: &str, model: &str) -> (String, String) {
    (provider.to_owned(), model.to_owned())
}

/// Failures a turn must never leave its link for: a switch would hide a
/// misconfiguration (a bad key, a missing permission), override the
/// answering model's verdict (a content filter) or outlive the caller.
const NEVER_FALL_BACK_ON: [Category; 4] = [
    Category::Unauthorized,
    Category::Forbidden,
    Category::ContentBlocked,
    Category::Cancelled,
];

/// The rules of model chains, part of invariant 5 (a failure is handled
/// in the open, never masked), judged per turn (one step's model calls):
///
/// - a switch is never silent: a turn answered by a link other than the
///   one it first asked announces it with `model_fallback_used` naming
///   that link;
/// - a turn never moves on to another link after an auth, permission,
///   content-filter or cancellation failure;
/// - after a context overflow the same model is never asked again in that
///   turn.
fn model_chain_rules(run: &RunEvidence, out: &mut Vec<Violation>) {
    // Per step: the first link asked, the links announced as answering,
    // the links that overflowed, and whether a never-switch failure came.
    #[derive(Default)]
    struct Turn {
        first: Option<(String, String)>,
        announced: BTreeSet<(String, String)>,
        overflowed: BTreeSet<(String, String)>,
        pinned: Option<((String, String), String)>,
        switched: Vec<(u64, (String, String))>,
    }
    let mut turns: BTreeMap<u32, Turn> = BTreeMap::new();
    for e in &run.events {
        let turn = match e.kind() {
            EventKind::ModelCallStarted
            | EventKind::ModelCallFinished
            | EventKind::ModelFallbackUsed => turns.entry(e.step).or_default(),
            _ => continue,
        };
        match &e.data {
            EventData::ModelFallbackUsed(d) => {
                let LinkName { provider, model } = &d.answered;
                turn.announced.insert(link_of(provider, model));
            }
            EventData::ModelCallStarted(d) => {
                let link = link_of(&d.provider, &d.model);
                if turn.first.is_none() {
                    turn.first = Some(link.clone());
                }
                if turn.overflowed.contains(&link) {
                    violation(
                        out,
                        Invariant::StructuredFailures,
                        Some(run),
                        format!(
                            "event {}: {}/{} was asked again in step {} after it overflowed its context",
                            e.seq, link.0, link.1, e.step
                        ),
                    );
                }
                if let Some((pinned, category)) = &turn.pinned
                    && *pinned != link
                {
                    violation(
                        out,
                        Invariant::StructuredFailures,
                        Some(run),
                        format!(
                            "event {}: step {} moved on from {}/{} to {}/{} after a {category} failure",
                            e.seq, e.step, pinned.0, pinned.1, link.0, link.1
                        ),
                    );
                }
            }
            EventData::ModelCallFinished(d) => {
                let link = link_of(&d.provider, &d.model);
                let Some(category) = d.category() else {
                    // Announced right after the answer: judged at the end.
                    if turn.first.as_ref().is_some_and(|first| *first != link) {
                        turn.switched.push((e.seq, link));
                    }
                    continue;
                };
                if category == Category::ContextOverflow {
                    turn.overflowed.insert(link);
                } else if NEVER_FALL_BACK_ON.contains(&category) {
                    turn.pinned = Some((link, category.as_str().to_owned()));
                }
            }
            _ => {}
        }
    }
    for (step, turn) in &turns {
        for (seq, link) in turn
            .switched
            .iter()
            .filter(|(_, link)| !turn.announced.contains(link))
        {
            violation(
                out,
                Invariant::StructuredFailures,
                Some(run),
                format!(
                    "event {seq}: {}/{} answered step {step} in place of the link first asked, without a model_fallback_used event naming it",
                    link.0, link.1
                ),
            );
        }
    }
}

/// Every request that reached a mock model server is one of rein's
/// recorded model calls (part of invariant 6, like tool calls): no call
/// bypassed the provider's breaker arm, and a link rein did not record
/// asking — a backup after a 401 — was not asked. The backup server is
/// the `backup` provider's alone; the primary server serves the others.
fn model_calls_accounted_for(evidence: &Evidence, out: &mut Vec<Violation>) {
    if evidence.runs.iter().any(|r| r.crashed) {
        return;
    }
    let started = |backup: bool| {
        evidence
            .runs
            .iter()
            .flat_map(|r| &r.events)
            .filter(|e| {
                matches!(&e.data, EventData::ModelCallStarted(s) if (s.provider == "backup") == backup)
            })
            .count()
    };
    let asked = |trace: &[crate::proxy::TraceRecord]| {
        trace
            .iter()
            .filter(|t| t.path.contains("/chat/completions"))
            .count()
    };
    for (server, trace, backup) in [
        ("the mock model", &evidence.model_trace, false),
        ("the backup mock model", &evidence.backup_trace, true),
    ] {
        let (n, seen) = (asked(trace), started(backup));
        if n > seen {
            violation(
                out,
                Invariant::OpenBreakerBlocks,
                None,
                format!("{n} requests reached {server} but rein recorded {seen} model calls to it"),
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

fn open_breaker_blocks<'a>(
    evidence: &Evidence,
    run: Option<&RunEvidence>,
    events: impl Iterator<Item = &'a rein_core::Event>,
    out: &mut Vec<Violation>,
) {
    let mut open: BTreeSet<(String, String)> = BTreeSet::new();
    for e in events {
        let called = match &e.data {
            EventData::BreakerStateChanged(b) => {
                let arm = b.arm.as_str().to_owned();
                let name = b.name.clone();
                match b.transition {
                    Transition::Opened { .. } => {
                        open.insert((arm, name));
                    }
                    Transition::HalfOpened { .. } | Transition::Closed { .. } => {
                        open.remove(&(arm, name));
                    }
                    _ => {}
                }
                continue;
            }
            EventData::ToolCallStarted(s) => s.tool.as_str(),
            EventData::ModelCallStarted(s) => s.provider.as_str(),
            _ => continue,
        };
        let blocked = open.iter().find(|(arm, name)| match e.kind() {
            EventKind::ModelCallStarted => arm == ArmKind::Provider.as_str() && name == called,
            _ => arm_covers(evidence, arm, name, called),
        });
        if let Some((arm, name)) = blocked {
            violation(
                out,
                Invariant::OpenBreakerBlocks,
                run,
                format!(
                    "run {} event {}: {called} was called while the {arm} breaker {name} was open",
                    e.run_id, e.seq
                ),
            );
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
        for e in &run.events {
            if let EventData::ToolCallStarted(s) = &e.data {
                *attempts.entry(s.tool.clone()).or_default() += 1;
            }
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
        let planned = run
            .events
            .iter()
            .any(|e| e.kind() == EventKind::PlanCreated);
        let called = run
            .events
            .iter()
            .any(|e| e.kind() == EventKind::ToolCallStarted);
        if planned {
            let entry = served.entry(run.tenant.as_str()).or_insert(false);
            *entry |= called;
        }
    }
    for (tenant, _) in served.iter().filter(|(_, s)| !**s) {
        violation(
            out,
            Invariant::ConcurrencyCeiling,
            None,
            format!("tenant {tenant} planned calls but none of them ever ran"),
        );
    }
    // ... and none waits far longer for a slot than the others: FIFO slots
    // keep the worst waits of tenants sharing a ceiling comparable.
    let mut worst: BTreeMap<&str, u64> = BTreeMap::new();
    for run in &evidence.runs {
        for e in &run.events {
            let EventData::ToolCallStarted(s) = &e.data else {
                continue;
            };
            let wait = u64::try_from(s.queue_wait.as_millis()).unwrap_or(u64::MAX);
            let entry = worst.entry(run.tenant.as_str()).or_insert(0);
            *entry = (*entry).max(wait);
        }
    }
    if worst.len() > 1 {
        for (tenant, wait) in &worst {
            let others = worst
                .iter()
                .filter(|(t, _)| t != &tenant)
                .map(|(_, w)| *w)
                .max()
                .unwrap_or(0);
            if *wait > STARVATION_FLOOR_MS && *wait > others.saturating_mul(3) {
                violation(
                    out,
                    Invariant::ConcurrencyCeiling,
                    None,
                    format!(
                        "tenant {tenant} waited up to {wait} ms for a slot; the other tenants at most {others} ms"
                    ),
                );
            }
        }
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
        .position(|e| e.kind() == EventKind::RunResumed)
    else {
        return;
    };
    let done_step = run
        .report
        .as_ref()
        .and_then(|r| r.resume.as_ref())
        .map(|m| m.continued_from_step)
        .or_else(|| match &run.events[resumed_at].data {
            EventData::RunResumed(r) => Some(r.marker.continued_from_step),
            _ => None,
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
        match e.kind() {
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
        for e in &run.events {
            let EventData::RetryScheduled(r) = &e.data else {
                continue;
            };
            let RetryTarget::Tool(tool) = &r.target else {
                continue;
            };
            let tool = tool.as_str();
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
/// (`{"ok": true, ...}`) or exactly what rein renders for a failure of that
/// target, category, effect and retryability — so nothing can ride along
/// after a well-formed prefix.
fn is_structured_reply(content: &str) -> bool {
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(content) {
        return map.get("ok") == Some(&Value::Bool(true));
    }
    let Some(rendered) = rerendered(content) else {
        return false;
    };
    // An argument refusal also lists rein's own schema findings about the
    // model's arguments: what to fix, not anything a tool said.
    content == rendered
        || (rendered.contains(" category=invalid_arguments ")
            && content
                .strip_prefix(rendered.as_str())
                .is_some_and(|rest| rest.starts_with(" problems: ")))
}

/// Renders again, through rein's own constructors, the failure that
/// `content` claims to describe.
fn rerendered(content: &str) -> Option<String> {
    let rest = content.strip_prefix("tool_error ")?;
    let (header, _) = rest.split_once(" | instruction: ")?;
    let mut target = None;
    let mut category = None;
    let mut effect = None;
    let mut retryable = None;
    let mut retry_after = None;
    for field in header.split(' ') {
        let (name, value) = field.split_once('=')?;
        let quoted = Value::String(value.to_owned());
        match name {
            "target" => target = Some(value),
            "category" => category = serde_json::from_value::<rein_core::Category>(quoted).ok(),
            "effect" => effect = serde_json::from_value::<rein_core::Effect>(quoted).ok(),
            "retryable" => retryable = value.parse::<bool>().ok(),
            "retry_after_s" => retry_after = value.parse::<u64>().ok(),
            _ => return None,
        }
    }
    let mut failure = rein_core::Failure::new(target?, category?)
        .with_effect(effect?)
        .with_retryable(retryable?);
    if let Some(secs) = retry_after {
        failure = failure.with_retry_after(std::time::Duration::from_secs(secs));
    }
    Some(failure.model_message().to_owned())
}

fn no_raw_error_text(run: &RunEvidence, out: &mut Vec<Violation>) {
    for (call, messages) in run.model_inputs.iter().enumerate() {
        for m in messages {
            let (what, content) = match m {
                Message::Tool { call_id, content } => (format!("the reply for {call_id}"), content),
                Message::System { content } => ("the system prompt".to_owned(), content),
                Message::User { content, .. } => ("the task".to_owned(), content),
                Message::Assistant {
                    content: Some(content),
                    ..
                } => ("its own earlier turn".to_owned(), content),
                Message::Assistant { content: None, .. } => continue,
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
                        "model call {} received raw error text ({marker:?}) in {what}",
                        call + 1
                    ),
                );
            } else if matches!(m, Message::Tool { .. })
                && !is_structured_reply(content)
                && !approval::is_withheld_reply(run, content)
            {
                violation(
                    out,
                    Invariant::NoRawErrorText,
                    Some(run),
                    format!(
                        "model call {} received an unstructured reply in {what}: {}",
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
        let tampered = format!("{} KeyError: 'order'", rendered.model_message());
        assert!(!is_structured_reply(&tampered));
        let waited = rein_core::Failure::new("get_order", rein_core::Category::RateLimited)
            .with_retry_after(std::time::Duration::from_millis(1500));
        assert!(is_structured_reply(waited.model_message()));
    }
}
