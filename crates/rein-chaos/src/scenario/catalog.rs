//! The scenarios. Parameters are literals on purpose: a scenario is its id.
//!
//! Conventions: attempt numbers are rein's `Rein-Attempt` (1 = the first
//! attempt of a call); crash points are counted per process from 1; the
//! world's retry policy is 3 attempts with 5–40 ms full jitter.

use rein_core::FailurePolicy;
use rein_testkit::mock_model::{Reply, StreamFault};
use rein_testkit::order_desk::{Fault, Faults, SEND_EMAIL, UPDATE_DELIVERY_TIME};
use serde_json::{Value, json};

use super::{Layer, Plan, Scenario};
use crate::invariant::Invariant as I;
use crate::mechanism::Mechanism as M;
use crate::model_fault::ModelFault;
use crate::proxy::{Injection, Match, Rule};
use crate::store_fault::StoreFault;

mod approval;
mod fan_out;
mod governor;
mod model_rate;
mod store;

const GET: &str = "get_order";
const UPDATE: &str = UPDATE_DELIVERY_TIME;
const RESTORE: &str = "restore_delivery_time";
const EMAIL: &str = SEND_EMAIL;
const STATUS: &str = "update_delivery_time/status";

fn usage() -> Value {
    json!({"input": 300, "output": 40})
}

fn calls(calls: &[(&str, Value)]) -> Value {
    json!({
        "tool_calls": calls.iter().map(|(name, args)| json!({"name": name, "arguments": args})).collect::<Vec<_>>(),
        "usage": usage(),
    })
}

fn get(order: &str) -> Value {
    calls(&[(GET, json!({"order_id": order}))])
}

fn update_args(order: &str, day: u32) -> Value {
    json!({"order_id": order, "delivery_date": format!("2026-12-{day:02}T10:00:00Z")})
}

fn update(order: &str, day: u32) -> Value {
    calls(&[(UPDATE, update_args(order, day))])
}

fn email_args() -> Value {
    json!({"to": "buyer-a1001@example.com", "subject": "Your order A-1001",
           "body": "Your order A-1001 now arrives on 2026-12-24."})
}

fn email() -> Value {
    calls(&[(EMAIL, email_args())])
}

fn answer(text: &str) -> Value {
    json!({"text": text, "usage": usage()})
}

fn model_error(status: u16) -> Value {
    json!({"error": {"status": status}})
}

/// Look the order up, move it, tell the buyer, answer.
fn happy() -> Vec<Value> {
    vec![
        get("A-1001"),
        update("A-1001", 24),
        email(),
        answer("Order A-1001 now arrives on 2026-12-24; the buyer was told."),
    ]
}

/// Move three orders; the desk refuses the third (a 409 conflict), so the
/// first two must be undone in reverse order.
fn three_moves() -> Vec<Value> {
    vec![
        update("A-1001", 24),
        update("A-1002", 25),
        update("A-1003", 26),
        answer("The third order cannot be moved."),
    ]
}

/// The desk's plan for [`three_moves`]: the third update is a conflict.
fn third_update_conflicts() -> Faults {
    Faults::none()
        .then(UPDATE, Fault::Delay(std::time::Duration::ZERO))
        .then(UPDATE, Fault::Delay(std::time::Duration::ZERO))
        .then(UPDATE, Fault::status(409))
}

fn on(tool: &str) -> Match {
    Match::tool(tool)
}

fn first(tool: &str, injection: Injection) -> Rule {
    Rule::new(on(tool).attempt(1), injection)
}

fn status(code: u16) -> Injection {
    Injection::Status {
        code,
        retry_after_s: None,
        body: None,
    }
}

fn rate_limited(seconds: u64) -> Injection {
    Injection::Status {
        code: 429,
        retry_after_s: Some(seconds),
        body: None,
    }
}

fn broken_write() -> ModelFault {
    ModelFault::BrokenToolJson {
        tool: UPDATE,
        raw: r#"{"order_id": "A-1001", "delivery_da"#,
    }
}

fn hallucinated_tool() -> ModelFault {
    ModelFault::HallucinatedTool {
        name: "cancel_order",
        args: json!({"order_id": "A-1001"}),
    }
}

fn hallucinated_args() -> ModelFault {
    ModelFault::HallucinatedArgs {
        tool: UPDATE,
        args: update_args("A-9999", 24),
    }
}

fn chat() -> Match {
    Match::path("/v1/chat/completions")
}

/// The whole catalog, in id order.
pub fn catalog() -> Vec<Scenario> {
    let mut all = Vec::new();
    all.extend(network());
    all.extend(tool_adapter());
    all.extend(model_gateway());
    all.extend(orchestration());
    all.extend(long());
    all.extend(model_gateway_scripted());
    all.extend(submission());
    all.extend(model_chains());
    all.extend(fan_out::fan_out_control());
    all.extend(super::ceilings::ceilings());
    all.extend(fan_out::shedding());
    all.extend(super::ceilings::last_turn());
    all.extend(model_rate::provider_limits());
    all.extend(governor::governor());
    all.extend(store::store());
    all.extend(approval::approval());
    all
}

/// The four live replies of the happy path, as the mock model sends them.
fn live_happy() -> Vec<Reply> {
    vec![
        Reply::tool_call(GET, &json!({"order_id": "A-1001"})),
        Reply::tool_call(UPDATE, &update_args("A-1001", 24)),
        Reply::tool_call(EMAIL, &email_args()),
        Reply::text("Order A-1001 now arrives on 2026-12-24; the buyer was told."),
    ]
}

/// The happy path's replies with the turn at `at` (0-based) replaced by
/// `fault`, which consumes a reply of the same server.
fn live_with(at: usize, fault: Reply) -> Vec<Reply> {
    let mut replies = live_happy();
    replies.insert(at, fault);
    replies
}

/// The happy path's reply of turn `at` with a stream fault.
fn live_faulted(at: usize, fault: StreamFault) -> Reply {
    live_happy().swap_remove(at).with_stream_fault(fault)
}

/// Model chains (issue 7): streamed calls, fallback links, larger-context
/// links and the failures that must never switch. Runs use the world's
/// `chaos_stream` (no fallback), `chaos_fallback` (the `backup` provider
/// after a transient failure) and `chaos_context` (the backup's larger
/// model after an overflow) agents; the backup is a second mock server
/// behind its own proxy, so what it was asked is witnessed apart.
fn model_chains() -> Vec<Scenario> {
    use Layer::ModelGateway as L;
    let stall = || StreamFault::Stall {
        after: 2,
        hold: std::time::Duration::from_millis(1500),
    };
    vec![
        Scenario::new(71, L, "primary-503-falls-back",
            "The primary provider answers 503 to the turn after the update: the turn moves on to the backup provider at once, which asks for the email; the run succeeds with one update and one email, and the switch is announced (model_fallback_used).",
            Plan::mock(live_with(2, Reply::unavailable()))
                .agent("chaos_fallback")
                .backup(vec![Reply::tool_call(EMAIL, &email_args())]))
            .risks([I::OneEffectPerKey, I::IrreversibleNotRetried, I::StructuredFailures])
            .expects([M::ModelFallback]),
        Scenario::new(72, L, "primary-reset-falls-back",
            "The primary provider's first call is reset before it reaches the model: a bare connection error moves the turn on to the backup, which answers; later turns go back to the primary.",
            Plan::mock(live_happy()[1..].to_vec())
                .agent("chaos_fallback")
                .model_rule(Rule::new(chat(), Injection::ResetBeforeForward))
                .backup(live_happy()[..1].to_vec()))
            .risks([I::OneEffectPerKey, I::StructuredFailures])
            .expects([M::ModelFallback]),
        Scenario::new(73, L, "primary-429-falls-back",
            "The primary provider answers 429 with Retry-After: 1 s: with a fallback ready the turn does not wait for the hint but moves on to the backup.",
            Plan::mock(live_with(0, ModelFault::RateLimited { retry_after_s: 1 }.mock_reply()))
                .agent("chaos_fallback")
                .backup(live_happy()[..1].to_vec()))
            .risks([I::BudgetsHold, I::StructuredFailures])
            .expects([M::ModelFallback]),
        Scenario::new(74, L, "stream-stall-falls-back",
            "The primary's streamed answer stalls after two events (idle limit 300 ms): the call fails as a timeout, never as a cut answer, its tokens are charged, and the turn moves on to the backup.",
            Plan::mock([vec![live_faulted(0, stall())], live_happy()[1..].to_vec()].concat())
                .agent("chaos_fallback")
                .backup(live_happy()[..1].to_vec()))
            .risks([I::BudgetsHold, I::StructuredFailures])
            .expects([M::ModelFallback]),
        Scenario::new(75, L, "stream-stall-no-fallback",
            "Every streamed answer stalls after two events and there is no fallback: each attempt times out, the retries run out, and the run fails with category timeout; nothing is presented as a complete answer.",
            Plan::mock(vec![live_faulted(0, stall()), live_faulted(0, stall()), live_faulted(0, stall())])
                .agent("chaos_stream"))
            .risks([I::BudgetsHold, I::StructuredFailures])
            .expects([M::RetryScheduled]),
        Scenario::new(76, L, "stream-drop-falls-back",
            "The primary's stream of the update call is cut after three events, mid-arguments, before [DONE]: never a salvaged write; the tokens spent are charged and the turn moves on to the backup, which asks for the update whole. One update.",
            Plan::mock([live_happy()[..1].to_vec(), vec![live_faulted(1, StreamFault::Drop { after: 3 })], live_happy()[2..].to_vec()].concat())
                .agent("chaos_fallback")
                .backup(vec![Reply::tool_call(UPDATE, &update_args("A-1001", 24))]))
            .risks([I::OneEffectPerKey, I::BudgetsHold, I::StructuredFailures])
            .expects([M::ModelFallback]),
        Scenario::new(77, L, "stream-drop-final-answer-retried",
            "The final answer's stream is cut after two events and there is no fallback: the cut text is never the run's answer; the call is retried and the whole answer arrives.",
            Plan::mock([live_happy(), vec![live_happy()[3].clone()]].concat().into_iter().enumerate()
                .map(|(i, r)| if i == 3 { r.with_stream_fault(StreamFault::Drop { after: 2 }) } else { r })
                .collect())
                .agent("chaos_stream"))
            .risks([I::BudgetsHold, I::StructuredFailures])
            .expects([M::RetryScheduled]),
        Scenario::new(78, L, "stream-malformed-event-retried",
            "An event of the first streamed answer is not JSON (cut mid-object): the stream fails as transient rather than skip a piece of the call, and the call is retried.",
            Plan::mock([vec![live_faulted(0, StreamFault::Malformed { after: 2 })], live_happy()].concat())
                .agent("chaos_stream"))
            .risks([I::StructuredFailures, I::NoRawErrorText])
            .expects([M::RetryScheduled]),
        Scenario::new(79, L, "stream-no-terminator-after-finish",
            "The final answer's stream sends every piece, its finish reason and its usage, then ends cleanly without the [DONE] terminator: nothing is missing, so the answer is whole and accepted without a retry; its tokens are counted once.",
            Plan::mock([live_happy()[..3].to_vec(), vec![live_faulted(3, StreamFault::NoTerminator)]].concat())
                .agent("chaos_stream"))
            .risks([I::StructuredFailures, I::BudgetsHold]),
        Scenario::new(80, L, "context-overflow-falls-back",
            "The primary refuses the turn after the lookup as too long, with a context fallback configured: the backup's larger-context model answers the turn; the primary is not asked that turn again.",
            Plan::mock(live_with(1, ModelFault::ContextOverflow.mock_reply()).into_iter().enumerate()
                .filter(|(i, _)| *i != 2).map(|(_, r)| r).collect())
                .agent("chaos_context")
                .backup(vec![Reply::tool_call(UPDATE, &update_args("A-1001", 24))]))
            .risks([I::StructuredFailures, I::OneEffectPerKey])
            .expects([M::ContextFallback]),
        Scenario::new(81, L, "context-overflow-no-context-link",
            "The primary overflows with only transient fallbacks configured: a larger window is not a transient fallback, so the backup is never asked and the run ends at once with what it completed.",
            Plan::mock(live_with(1, ModelFault::ContextOverflow.mock_reply()))
                .agent("chaos_fallback")
                .backup(live_happy()))
            .risks([I::StructuredFailures]),
        Scenario::new(82, L, "primary-401-no-fallback",
            "The primary answers 401 with a fallback configured: a bad key is a misconfiguration a switch would hide, so the backup gets no request and the run fails with category unauthorized.",
            Plan::mock(vec![Reply::unauthorized()])
                .agent("chaos_fallback")
                .backup(live_happy()))
            .risks([I::StructuredFailures, I::NoRawErrorText]),
        Scenario::new(83, L, "every-link-fails",
            "The primary answers 503 and so does the backup, every attempt: the last link retries under the policy, then the run fails with the first failure's category, naming both links tried.",
            Plan::mock(vec![Reply::unavailable()])
                .agent("chaos_fallback")
                .backup(vec![Reply::unavailable(), Reply::unavailable(), Reply::unavailable()]))
            .risks([I::StructuredFailures, I::BudgetsHold])
            .expects([M::RetryScheduled]),
    ]
}

/// The submission layer: `rein serve` behind the fault proxy, a client
/// that retries with one `Idempotency-Key`.
fn submission() -> Vec<Scenario> {
    use Layer::Network as L;
    let post = || Match::path("/v1/agents/");
    vec![
        Scenario::new(68, L, "submission-response-lost",
            "The server runs a sync submission but the connection is reset before its answer; the client retries with the same Idempotency-Key and gets the stored answer: one run, one update.",
            Plan::script(happy())
                .submit(super::Submission { queued: false, tries: 4, timeout_ms: 5_000 })
                .server_rule(Rule::new(post(), Injection::ResetAfterForward)))
            .risks([I::OneEffectPerKey])
            .expects([M::SubmissionReplayed]),
        Scenario::new(69, L, "submission-retried-while-running",
            "The first submission is still running (three reads of 150 ms each) when the client, timing out at 250 ms, retries with the same key: 409 until it ends, then the stored answer; one run.",
            Plan::script(vec![get("A-1001"), get("A-1002"), get("A-1003"), update("A-1001", 24), email(), answer("Done.")])
                .tool_rule(Rule::new(on(GET), Injection::Delay { ms: 150 }).always())
                .submit(super::Submission { queued: false, tries: 30, timeout_ms: 250 }))
            .risks([I::OneEffectPerKey])
            .expects([M::SubmissionInProgress, M::SubmissionReplayed]),
        Scenario::new(70, L, "queued-submission-response-lost",
            "A queued submission is accepted but its 202 is lost; the retry with the same key replays the 202 and a worker runs the one run to its end.",
            Plan::script(happy())
                .submit(super::Submission { queued: true, tries: 4, timeout_ms: 5_000 })
                .server_rule(Rule::new(post(), Injection::ResetAfterForward)))
            .risks([I::OneEffectPerKey])
            .expects([M::SubmissionReplayed]),
    ]
}

/// The model faults again, carried by the scripted provider: the same
/// fault must be classified the same way whichever provider carries it.
fn model_gateway_scripted() -> Vec<Scenario> {
    use Layer::ModelGateway as L;
    vec![
        Scenario::new(61, L, "scripted-429",
            "The scripted model answers 429 with a 1 s hint once; the model call is retried.",
            Plan::script([vec![ModelFault::RateLimited { retry_after_s: 1 }.script_turn()], happy()].concat()))
            .risks([I::BudgetsHold, I::StructuredFailures])
            .expects([M::RetryScheduled]),
        Scenario::new(62, L, "scripted-overloaded",
            "The scripted model answers 503 twice; the model call is retried.",
            Plan::script([vec![ModelFault::Overloaded.script_turn(), ModelFault::Overloaded.script_turn()], happy()].concat()))
            .risks([I::BudgetsHold, I::StructuredFailures])
            .expects([M::RetryScheduled]),
        Scenario::new(63, L, "scripted-context-overflow",
            "The scripted model reports a context overflow after the update landed: never retried on the same model, the update is settled.",
            Plan::script(vec![update("A-1001", 24), ModelFault::ContextOverflow.script_turn()]))
            .risks([I::StructuredFailures, I::NothingDangles]),
        Scenario::new(64, L, "scripted-truncated-output",
            "The scripted model's final answer is cut at the token limit.",
            Plan::script(vec![get("A-1001"), ModelFault::TruncatedOutput { text: "Order A-1001 now arr" }.script_turn()]))
            .risks([I::StructuredFailures, I::BudgetsHold]),
        Scenario::new(65, L, "scripted-broken-write-json",
            "The scripted model's update arguments are cut mid-JSON: never salvaged for a write; the model corrects itself.",
            Plan::script(vec![broken_write().script_turn(), update("A-1001", 24), answer("Moved.")]))
            .risks([I::StructuredFailures, I::NoRawErrorText])
            .expects([M::ValidationRejected]),
        Scenario::new(66, L, "scripted-hallucinated-tool",
            "The scripted model calls cancel_order, which does not exist.",
            Plan::script(vec![hallucinated_tool().script_turn(), answer("I cannot cancel orders.")]))
            .risks([I::StructuredFailures, I::NoRawErrorText])
            .expects([M::ValidationRejected]),
        Scenario::new(67, L, "scripted-hallucinated-values",
            "The scripted model moves order A-9999, which does not exist.",
            Plan::script(vec![hallucinated_args().script_turn(), answer("That order does not exist.")]))
            .risks([I::NoRawErrorText, I::StructuredFailures]),
    ]
}

fn network() -> Vec<Scenario> {
    use Layer::Network as L;
    vec![
        Scenario::new(1, L, "control", "No fault: the happy path, as a control for every invariant.",
            Plan::script(happy()))
            .risks([I::OneEffectPerKey, I::BudgetsHold, I::NothingDangles, I::StructuredFailures, I::NoRawErrorText]),
        Scenario::new(2, L, "read-reset-before-forward",
            "The first attempt of get_order is reset before it reaches the desk; the read is retried.",
            Plan::script(happy()).tool_rule(first(GET, Injection::ResetBeforeForward)))
            .risks([I::StructuredFailures, I::NoRawErrorText])
            .expects([M::RetryScheduled]),
        Scenario::new(3, L, "write-reset-after-forward",
            "update_delivery_time applies at the desk, then the connection is reset: the effect is in doubt, resolved by key.",
            Plan::script(happy()).tool_rule(first(UPDATE, Injection::ResetAfterForward)))
            .risks([I::OneEffectPerKey, I::NothingDangles])
            .expects([M::DuplicateCollapsed]),
        Scenario::new(4, L, "write-503-then-ok",
            "update_delivery_time answers 503 once without applying; it is retried with the same key.",
            Plan::script(happy()).tool_rule(first(UPDATE, status(503))))
            .risks([I::OneEffectPerKey])
            .expects([M::RetryScheduled]),
        Scenario::new(5, L, "read-429-retry-after",
            "get_order answers 429 with Retry-After: 1 s; the retry waits for the server's hint.",
            Plan::script(happy()).tool_rule(first(GET, rate_limited(1))))
            .risks([I::BudgetsHold])
            .expects([M::RetryScheduled]),
        Scenario::new(6, L, "email-429-beyond-deadline",
            "send_email answers 429 with Retry-After: 1 h, far beyond the run's deadline: never retried, the run ends partial and recoverable.",
            Plan::script(happy()).tool_rule(first(EMAIL, rate_limited(3600))))
            .risks([I::IrreversibleNotRetried, I::BudgetsHold, I::NothingDangles])
            .expects([M::PartialSuccess]),
        Scenario::new(7, L, "read-truncated-body",
            "get_order's body is cut after 10 bytes; the read is retried.",
            Plan::script(happy()).tool_rule(first(GET, Injection::TruncateBody { keep: 10 })))
            .risks([I::StructuredFailures, I::NoRawErrorText])
            .expects([M::RetryScheduled]),
        Scenario::new(8, L, "write-truncated-body",
            "update_delivery_time applies, then its body is cut: in doubt, resolved by key.",
            Plan::script(happy()).tool_rule(first(UPDATE, Injection::TruncateBody { keep: 10 })))
            .risks([I::OneEffectPerKey])
            .expects([M::DuplicateCollapsed]),
        Scenario::new(9, L, "read-idle-stream",
            "get_order sends headers, then nothing for 1.5 s; the attempt times out and is retried.",
            Plan::script(happy()).tool_rule(first(GET, Injection::IdleStream { ms: 1500 })))
            .risks([I::BudgetsHold, I::StructuredFailures])
            .expects([M::RetryScheduled]),
        Scenario::new(10, L, "write-first-byte-stall",
            "update_delivery_time applies, then the first byte stalls for 1.5 s: the attempt times out in doubt, resolved by key.",
            Plan::script(happy()).tool_rule(first(UPDATE, Injection::StallFirstByte { ms: 1500 })))
            .risks([I::OneEffectPerKey, I::BudgetsHold])
            .expects([M::DuplicateCollapsed]),
        Scenario::new(11, L, "write-late-delivery",
            "update_delivery_time's first attempt is held 1.5 s before it reaches the desk; the retry with the same key lands first and the late original is deduplicated.",
            Plan::script(happy()).tool_rule(first(UPDATE, Injection::LateDelivery { ms: 1500 })))
            .risks([I::OneEffectPerKey])
            .expects([M::RetryScheduled, M::DuplicateCollapsed]),
        Scenario::new(12, L, "read-502-every-attempt",
            "get_order answers 502 to every attempt: retries run out and the run degrades.",
            Plan::script(happy()).tool_rule(Rule::new(on(GET), status(502)).always()))
            .risks([I::StructuredFailures, I::NoRawErrorText])
            .expects([M::RetryScheduled]),
        Scenario::new(13, L, "write-reset-every-attempt",
            "Every update_delivery_time request is reset before reaching the desk: nothing applies, yet a lookup cannot prove a lost request will never land, so the write stays in doubt and goes to a human with the run.",
            Plan::script(happy()).tool_rule(Rule::new(on(UPDATE), Injection::ResetBeforeForward).always()))
            .risks([I::OneEffectPerKey, I::NothingDangles])
            .expects([M::RetryScheduled]),
        Scenario::new(14, L, "breaker-opens",
            "get_order answers 503 to everything with a tool breaker of 2 consecutive failures: it opens, and later calls are refused without reaching the desk.",
            Plan::script(vec![get("A-1001"), get("A-1002"), get("A-1003"), answer("The order service is down.")])
                .tool_rule(Rule::new(on(GET), status(503)).always())
                .tune(|t| t.breaker = Some((2, 60_000))))
            .risks([I::OpenBreakerBlocks])
            .expects([M::BreakerOpened, M::CircuitRejected]),
    ]
}

fn tool_adapter() -> Vec<Scenario> {
    use Layer::ToolAdapter as L;
    vec![
        Scenario::new(15, L, "write-executed-then-500",
            "The desk applies update_delivery_time, then answers 500 (maybe_applied): the lookup by key finds the effect.",
            Plan::script(happy()).desk(Faults::none().then(UPDATE, Fault::ApplyThenStatus { code: 500 })))
            .risks([I::OneEffectPerKey])
            .expects([M::DuplicateCollapsed]),
        Scenario::new(16, L, "write-executed-then-504-lookup-down",
            "update_delivery_time applies, the proxy answers 504, and every lookup by key fails: the retry carries the same key and the desk replays it.",
            Plan::script(happy())
                .tool_rule(first(UPDATE, Injection::ExecutedThenStatus { code: 504, body: None }))
                .tool_rule(Rule::new(on(STATUS), status(503)).always()))
            .risks([I::OneEffectPerKey])
            .expects([M::RetryScheduled, M::DuplicateCollapsed]),
        Scenario::new(17, L, "write-response-lost",
            "The desk applies update_delivery_time and aborts its response mid-body.",
            Plan::script(happy()).desk(Faults::none().then(UPDATE, Fault::LoseResponse)))
            .risks([I::OneEffectPerKey])
            .expects([M::DuplicateCollapsed]),
        Scenario::new(18, L, "conflict-compensates-in-reverse",
            "Three orders are moved and the third is a 409 conflict: the first two are undone, last first.",
            Plan::script(three_moves()).desk(third_update_conflicts()))
            .risks([I::NothingDangles, I::ReverseCompensation])
            .expects([M::CompensationExecuted]),
        Scenario::new(19, L, "email-503-not-retried",
            "send_email answers 503: an irreversible tool is never retried; the update is kept, the run is partial and recoverable.",
            Plan::script(happy()).tool_rule(first(EMAIL, status(503))))
            .risks([I::IrreversibleNotRetried, I::NothingDangles])
            .expects([M::PartialSuccess]),
        Scenario::new(20, L, "email-executed-then-500",
            "The desk sends the email, then answers 500: in doubt and irreversible, it is never repeated and goes to a human.",
            Plan::script(happy()).desk(Faults::none().then(EMAIL, Fault::ApplyThenStatus { code: 500 })))
            .risks([I::IrreversibleNotRetried, I::NothingDangles])
            .expects([M::HandedOff]),
        Scenario::new(21, L, "retry-budget-exhausted",
            "get_order answers 503 three times with a retry budget of one token and no refill: the second retry is refused by the budget.",
            Plan::script(vec![get("A-1001"), get("A-1002"), answer("The order service is failing.")])
                .tool_rule(Rule::new(on(GET), status(503)).times(3))
                .tune(|t| t.retry_budget = Some((0.0, 1))))
            .risks([I::StructuredFailures])
            .expects([M::RetryBudgetExhausted]),
        Scenario::new(22, L, "compensation-retried",
            "The 409 conflict forces compensation and the first restore answers 503: the strong compensation is retried and completes, in reverse order.",
            Plan::script(three_moves()).desk(third_update_conflicts())
                .tool_rule(first(RESTORE, status(503))))
            .risks([I::NothingDangles, I::ReverseCompensation, I::OneEffectPerKey])
            .expects([M::CompensationExecuted, M::RetryScheduled]),
        Scenario::new(23, L, "compensation-fails",
            "The 409 conflict forces compensation and every restore answers 500: the effects go to a human, nothing dangles.",
            Plan::script(three_moves()).desk(third_update_conflicts())
                .tool_rule(Rule::new(on(RESTORE), status(500)).always()))
            .risks([I::NothingDangles]),
        Scenario::new(24, L, "policy-handoff",
            "The 409 conflict with on_failure = handoff: nothing is undone automatically; a human gets the package.",
            Plan::script(three_moves()).desk(third_update_conflicts())
                .tune(|t| t.on_failure = Some(FailurePolicy::Handoff)))
            .risks([I::NothingDangles])
            .expects([M::HandedOff]),
        Scenario::new(25, L, "policy-continue",
            "The 409 conflict with on_failure = continue: the two moves are kept and reported as partial success.",
            Plan::script(three_moves()).desk(third_update_conflicts())
                .tune(|t| t.on_failure = Some(FailurePolicy::Continue)))
            .risks([I::NothingDangles])
            .expects([M::PartialSuccess]),
        Scenario::new(26, L, "restore-lookup-reset",
            "The 409 conflict forces compensation; the first restore applies and is reset: resolved by key, in reverse order.",
            Plan::script(three_moves()).desk(third_update_conflicts())
                .tool_rule(first(RESTORE, Injection::ResetAfterForward)))
            .risks([I::OneEffectPerKey, I::ReverseCompensation])
            .expects([M::CompensationExecuted]),
    ]
}

fn model_gateway() -> Vec<Scenario> {
    use Layer::ModelGateway as L;
    let live_happy = || {
        vec![
            Reply::tool_call(GET, &json!({"order_id": "A-1001"})),
            Reply::tool_call(UPDATE, &update_args("A-1001", 24)),
            Reply::tool_call(EMAIL, &email_args()),
            Reply::text("Order A-1001 now arrives on 2026-12-24; the buyer was told."),
        ]
    };
    vec![
        Scenario::new(27, L, "model-429",
            "The model answers 429 with Retry-After: 1 s once; the model call is retried.",
            Plan::mock([vec![ModelFault::RateLimited { retry_after_s: 1 }.mock_reply()], live_happy()].concat()))
            .risks([I::BudgetsHold, I::StructuredFailures])
            .expects([M::RetryScheduled]),
        Scenario::new(28, L, "model-overloaded",
            "The model answers 503 twice; the model call is retried.",
            Plan::mock([vec![ModelFault::Overloaded.mock_reply(), ModelFault::Overloaded.mock_reply()], live_happy()].concat()))
            .risks([I::BudgetsHold, I::StructuredFailures])
            .expects([M::RetryScheduled]),
        Scenario::new(29, L, "model-reset",
            "The first chat completion is reset before it reaches the model; it is retried.",
            Plan::mock(live_happy()).model_rule(Rule::new(chat(), Injection::ResetBeforeForward)))
            .risks([I::BudgetsHold, I::StructuredFailures])
            .expects([M::RetryScheduled]),
        Scenario::new(30, L, "model-context-overflow",
            "The model refuses the request as too long: not retried on the same model; the run ends at once with what it completed.",
            Plan::mock(vec![Reply::tool_call(GET, &json!({"order_id": "A-1001"})), ModelFault::ContextOverflow.mock_reply()]))
            .risks([I::StructuredFailures]),
        Scenario::new(31, L, "model-truncated-output",
            "The model's answer is cut at the token limit (finish_reason length).",
            Plan::mock(vec![Reply::tool_call(GET, &json!({"order_id": "A-1001"})), ModelFault::TruncatedOutput { text: "Order A-1001 now arr" }.mock_reply()]))
            .risks([I::StructuredFailures, I::BudgetsHold]),
        Scenario::new(32, L, "model-broken-write-json",
            "The model's update_delivery_time arguments are cut mid-JSON: a write is never salvaged; the model is told and corrects itself.",
            Plan::mock(vec![
                broken_write().mock_reply(),
                Reply::tool_call(UPDATE, &update_args("A-1001", 24)),
                Reply::text("Moved."),
            ]))
            .risks([I::StructuredFailures, I::NoRawErrorText])
            .expects([M::ValidationRejected]),
        Scenario::new(33, L, "model-broken-read-json",
            "The model's get_order arguments are cut mid-JSON: a read's complete fields are salvaged.",
            Plan::mock(vec![
                ModelFault::BrokenToolJson { tool: GET, raw: r#"{"order_id": "A-1001", "verbose": tr"# }.mock_reply(),
                Reply::text("Looked it up."),
            ]))
            .risks([I::StructuredFailures, I::NoRawErrorText]),
        Scenario::new(34, L, "model-hallucinated-tool",
            "The model calls cancel_order, which does not exist: refused before any tool sees it.",
            Plan::mock(vec![
                hallucinated_tool().mock_reply(),
                Reply::text("I cannot cancel orders."),
            ]))
            .risks([I::StructuredFailures, I::NoRawErrorText])
            .expects([M::ValidationRejected]),
        Scenario::new(35, L, "model-hallucinated-values",
            "The model moves order A-9999, which does not exist: the desk's 404 reaches the model as a structured placeholder.",
            Plan::mock(vec![
                hallucinated_args().mock_reply(),
                Reply::text("That order does not exist."),
            ]))
            .risks([I::NoRawErrorText, I::StructuredFailures]),
        Scenario::new(36, L, "model-down-after-write",
            "The scripted model fails with 500 on every attempt after the update landed: the run ends partial and recoverable, the update kept.",
            Plan::script(vec![update("A-1001", 24), model_error(500), model_error(500), model_error(500)]))
            .risks([I::NothingDangles, I::StructuredFailures])
            .expects([M::RetryScheduled, M::PartialSuccess]),
        Scenario::new(37, L, "model-truncated-body",
            "The first chat completion's body is cut after 20 bytes; it is retried.",
            Plan::mock(live_happy()).model_rule(Rule::new(chat(), Injection::TruncateBody { keep: 20 })))
            .risks([I::StructuredFailures])
            .expects([M::RetryScheduled]),
        Scenario::new(38, L, "model-raw-error-body",
            "get_order answers 400 with a raw stack trace in its body: the model gets a structured placeholder, never the text.",
            Plan::script(happy()).tool_rule(first(GET, Injection::Status {
                code: 400,
                retry_after_s: None,
                body: Some(r#"{"error": {"message": "RAW-UPSTREAM-ERROR: Traceback (most recent call last): KeyError 'order'"}}"#.into()),
            })))
            .risks([I::NoRawErrorText]),
        Scenario::new(39, L, "loop-repeated-call",
            "The model asks for the same order five times: the loop guard trips.",
            Plan::script(vec![get("A-1001"), get("A-1001"), get("A-1001"), get("A-1001"), get("A-1001"), answer("done")]))
            .risks([I::BudgetsHold, I::StructuredFailures])
            .expects([M::LoopGuardTripped]),
        Scenario::new(40, L, "loop-repeat-failure",
            "The model keeps moving order A-9999, which does not exist: the repeated failure trips the loop guard.",
            Plan::script(vec![update("A-9999", 24), update("A-9999", 25), update("A-9999", 26), update("A-9999", 27), answer("done")]))
            .risks([I::BudgetsHold, I::StructuredFailures])
            .expects([M::LoopGuardTripped]),
        Scenario::new(41, L, "step-budget",
            "A step limit of 3 against a model that wants 6 steps: the run ends budget_exhausted, explicitly.",
            Plan::script(vec![get("A-1001"), get("A-1002"), get("A-1003"), get("A-1001"), get("A-1002"), answer("done")])
                .tune(|t| { t.steps = Some(3); t.max_repeats = Some(10); }))
            .risks([I::BudgetsHold])
            .expects([M::BudgetExhausted]),
        Scenario::new(42, L, "token-budget",
            "A token limit of 2,400 against turns of 340 tokens (a read and a move of each of three orders, then again), each call reserving its prompt's upper bound (about 2,200 tokens for the first, before any count is learned; the learned bytes per token after) and a minimal answer: the run stops before the call that would breach it, its moves kept.",
            Plan::script(
                (0..2)
                    .flat_map(|round| {
                        ["A-1001", "A-1002", "A-1003"]
                            .into_iter()
                            .flat_map(move |order| [get(order), update(order, 10 + round)])
                    })
                    .chain([answer("done")])
                    .collect(),
            )
                .tune(|t| { t.tokens = Some(2400); t.steps = Some(20); t.max_repeats = Some(10); t.final_turn = Some(false); }))
            .risks([I::BudgetsHold])
            .expects([M::BudgetExhausted]),
        Scenario::new(43, L, "wall-clock-budget",
            "A 600 ms wall clock against reads that each take 150 ms (within their timeout): the run ends at its deadline, explicitly.",
            Plan::script(vec![get("A-1001"), get("A-1002"), get("A-1003"), get("A-1001"), get("A-1002"), answer("done")])
                .tool_rule(Rule::new(on(GET), Injection::Delay { ms: 150 }).always())
                .tune(|t| { t.wall_ms = Some(600); t.max_repeats = Some(10); }))
            .risks([I::BudgetsHold])
            .expects([M::BudgetExhausted]),
    ]
}

fn orchestration() -> Vec<Scenario> {
    use Layer::Orchestration as L;
    vec![
        Scenario::new(44, L, "crash-after-pending",
            "The process is aborted after the update's pending record is durable, before the call: the resume runs it once, with its key.",
            Plan::script(happy()).crash("after_pending", 1))
            .risks([I::ResumeReusesIntents, I::OneEffectPerKey])
            .expects([M::Resumed]),
        Scenario::new(45, L, "crash-after-write",
            "The process is aborted after the update applied but before its result was recorded: the resume repeats it with the same key and the desk replays it.",
            Plan::script(happy()).crash("after_call", 2))
            .risks([I::ResumeReusesIntents, I::OneEffectPerKey])
            .expects([M::Resumed, M::DuplicateCollapsed]),
        Scenario::new(46, L, "crash-after-email",
            "The process is aborted right after the email was sent: the resume never sends it again and hands the doubt to a human.",
            Plan::script(happy()).crash("after_call", 3))
            .risks([I::ResumeReusesIntents, I::IrreversibleNotRetried])
            .expects([M::Resumed]),
        Scenario::new(47, L, "crash-before-pending",
            "The process is aborted before the update's pending record is written: the resume plans from the persisted intent.",
            Plan::script(happy()).crash("before_pending", 1))
            .risks([I::ResumeReusesIntents, I::OneEffectPerKey])
            .expects([M::Resumed]),
        Scenario::new(48, L, "crash-during-checkpoint",
            "The process is aborted before the second checkpoint: completed steps are not run again.",
            Plan::script(happy()).crash("during_checkpoint", 2))
            .risks([I::ResumeReusesIntents, I::OneEffectPerKey])
            .expects([M::Resumed]),
        Scenario::new(49, L, "crash-mid-compensation",
            "The 409 conflict forces compensation and the process is aborted after the first restore landed, before the second: the resumed settlement does not repeat the first and finishes in reverse order.",
            Plan::script(three_moves()).desk(third_update_conflicts()).crash("mid_compensation", 2))
            .risks([I::ResumeReusesIntents, I::ReverseCompensation, I::NothingDangles])
            .expects([M::Resumed, M::CompensationExecuted]),
        Scenario::new(50, L, "store-outage",
            "The store refuses commits 4 to 6 (the update's declaration, offered three times): the run offers it again until the store takes it, makes no call before it is durable, and ends as it would have.",
            Plan::script(happy()).store(StoreFault::Unavailable { from: 4, count: 3 }))
            .risks([I::NothingDangles, I::StructuredFailures]),
        Scenario::new(51, L, "checkpoint-write-fails",
            "The second checkpoint write is refused once, after the update landed: it is offered again and lands, the update is not repeated and nothing is undone.",
            Plan::script(happy()).store(StoreFault::CheckpointFails { nth: 2 }))
            .risks([I::NothingDangles, I::StructuredFailures, I::OneEffectPerKey]),
        Scenario::new(52, L, "fan-out-under-ceiling",
            "One turn asks for four orders at once under a resource-group ceiling of 2, each read taking 100 ms: calls queue, the ceiling holds.",
            Plan::script(vec![
                calls(&[(GET, json!({"order_id": "A-1001"})), (GET, json!({"order_id": "A-1002"})),
                        (GET, json!({"order_id": "A-1003"})), (GET, json!({"order_id": "A-1002"}))]),
                answer("Looked them up."),
            ])
            .tool_rule(Rule::new(on(GET), Injection::Delay { ms: 100 }).always())
            .tune(|t| t.group_limit = Some(2)))
            .risks([I::ConcurrencyCeiling])
            .expects([M::ConcurrencyQueued]),
        Scenario::new(53, L, "tenants-share-a-ceiling",
            "Six runs of two tenants at once under a ceiling of 2, reads taking 50 ms: the ceiling holds and neither tenant starves.",
            Plan::script(vec![get("A-1001"), get("A-1002"), answer("done")])
                .tool_rule(Rule::new(on(GET), Injection::Delay { ms: 50 }).always())
                .tune(|t| t.group_limit = Some(2))
                .concurrent(6, vec!["tenant-a", "tenant-b"]))
            .risks([I::ConcurrencyCeiling])
            .expects([M::ConcurrencyQueued]),
        Scenario::new(54, L, "triple-executed-ratelimited-crash",
            "Three faults at once: the update is executed but reported failed (500), the lookup by key is rate limited (429) so it is retried with the same key, and the process is aborted right after that retry's answer. The resume repeats it with the same key; exactly one effect.",
            Plan::script(happy())
                .desk(Faults::none().then(UPDATE, Fault::ApplyThenStatus { code: 500 }))
                .tool_rule(Rule::new(on(STATUS), rate_limited(0)).always())
                .crash("after_call", 3))
            .risks([I::OneEffectPerKey, I::ResumeReusesIntents])
            .expects([M::Resumed, M::DuplicateCollapsed]),
        Scenario::new(55, L, "triple-reset-conflict-restore-503",
            "Three faults at once: the first update applies and is reset, the third is a 409 conflict, the first restore answers 503. Compensation still runs once per effect, in reverse order.",
            Plan::script(three_moves()).desk(third_update_conflicts())
                .tool_rule(first(UPDATE, Injection::ResetAfterForward))
                .tool_rule(first(RESTORE, status(503))))
            .risks([I::OneEffectPerKey, I::ReverseCompensation, I::NothingDangles])
            .expects([M::CompensationExecuted, M::DuplicateCollapsed, M::RetryScheduled]),
        Scenario::new(56, L, "triple-model429-read503-checkpoint",
            "Three faults at once: the model is rate limited once, get_order answers 503 once, and the second checkpoint write fails.",
            Plan::script([vec![json!({"error": {"status": 429, "retry_after_ms": 20}})], happy()].concat())
                .tool_rule(first(GET, status(503)))
                .store(StoreFault::CheckpointFails { nth: 2 }))
            .risks([I::BudgetsHold, I::NothingDangles, I::StructuredFailures])
            .expects([M::RetryScheduled]),
        Scenario::new(57, L, "triple-email429-truncated-crash",
            "Three faults at once: get_order's first body is truncated, send_email is rate limited for an hour, and the process is aborted at the third checkpoint. The resume does not repeat completed steps or the email.",
            Plan::script(happy())
                .tool_rule(first(GET, Injection::TruncateBody { keep: 5 }))
                .tool_rule(first(EMAIL, rate_limited(3600)))
                .crash("during_checkpoint", 3))
            .risks([I::ResumeReusesIntents, I::IrreversibleNotRetried])
            .expects([M::Resumed, M::RetryScheduled]),
    ]
}

fn long() -> Vec<Scenario> {
    use Layer::Orchestration as L;
    vec![
        Scenario::new(58, L, "sustained-outage-recovers",
            "get_order is down for its first 12 requests while 20 runs start 150 ms apart, with a 2-failure, 300 ms breaker: it opens, half-open probes fail until the outage ends, then traffic recovers.",
            Plan::script(vec![get("A-1001"), answer("done")])
                .tool_rule(Rule::new(on(GET), status(503)).times(12))
                .tune(|t| t.breaker = Some((2, 300)))
                .runs(20)
                .every(150))
            .risks([I::OpenBreakerBlocks])
            .expects([M::BreakerOpened, M::CircuitRejected, M::BreakerRecovered])
            .long(),
        Scenario::new(59, L, "sustained-slow-fan-out",
            "30 runs of three tenants at once under a ceiling of 4, every read taking 60 ms (within its latency profile): the ceiling holds for the whole backlog, nobody starves.",
            Plan::script(vec![get("A-1001"), get("A-1002"), get("A-1003"), answer("done")])
                .tool_rule(Rule::new(on(GET), Injection::Delay { ms: 60 }).always())
                .tune(|t| { t.group_limit = Some(4); t.wall_ms = Some(20_000); })
                .concurrent(30, vec!["tenant-a", "tenant-b", "tenant-c"]))
            .risks([I::ConcurrencyCeiling])
            .expects([M::ConcurrencyQueued])
            .long(),
        Scenario::new(60, L, "sustained-compensation-backlog",
            "20 runs each move an order and then a missing one (404), with restores failing for the first 10 requests: every effect ends compensated or with a human.",
            Plan::script(vec![update("A-1001", 24), update("A-9999", 24), answer("The second order does not exist.")])
                .tool_rule(Rule::new(on(RESTORE), status(500)).times(10))
                .runs(20))
            .risks([I::NothingDangles, I::ReverseCompensation])
            .expects([M::CompensationExecuted])
            .long(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn ids_are_unique_and_ordered() {
        let ids: Vec<u32> = catalog().iter().map(|s| s.id).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(ids, sorted);
    }

    #[test]
    fn the_catalog_covers_every_layer_and_is_large_enough() {
        let all = catalog();
        assert!(all.iter().filter(|s| !s.long).count() >= 40);
        let layers: BTreeSet<Layer> = all.iter().map(|s| s.layer).collect();
        assert_eq!(layers.len(), 4);
        assert!(all.iter().any(|s| s.long));
    }

    #[test]
    fn every_scenario_says_what_it_risks_and_every_invariant_is_risked() {
        let all = catalog();
        for s in &all {
            assert!(!s.risks.is_empty(), "{} risks nothing", s.label());
        }
        for i in crate::invariant::Invariant::ALL {
            assert!(
                all.iter().any(|s| s.risks.contains(&i)),
                "{i} is risked by no scenario"
            );
        }
    }

    #[test]
    fn every_required_mechanism_is_expected_somewhere() {
        let all = catalog();
        for m in crate::mechanism::Mechanism::REQUIRED {
            assert!(
                all.iter().any(|s| !s.long && s.expects.contains(&m)),
                "{m} is expected by no scenario"
            );
        }
    }
}
