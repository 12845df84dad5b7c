//! Budget ceilings that hold (issue 16): the model servers meter usage as
//! a provider does (a prompt token per four bytes of the request, answers
//! stopped at `max_tokens`) and refuse a `max_tokens` above a model's cap,
//! and the checker sums what they counted against the run's limits.
//!
//! The last-turn scenarios (C094, C095): a run too short of tokens or time
//! for another tool round trip gets one last turn without tools, whose
//! `max_tokens` is what the budget leaves; the model's answer is long
//! (3000 tokens), so only the reservation keeps it within the ceiling.

use rein_testkit::mock_model::{Reply, ToolCall};
use serde_json::json;

use super::{Layer, Plan, Scenario};
use crate::invariant::Invariant as I;
use crate::mechanism::Mechanism as M;

const GET: &str = "get_order";

/// Output tokens each scripted answer writes: large, so that the last call
/// of a run is the one whose output the budget has to cut.
const ANSWER_TOKENS: u64 = 1500;

/// One turn that looks up every order: each adds three results to the
/// prompt.
fn look_up_all() -> Reply {
    Reply::tool_calls(
        ["A-1001", "A-1002", "A-1003"].map(|order| ToolCall::new(GET, &json!({"order_id": order}))),
    )
    .with_usage(0, ANSWER_TOKENS)
}

fn look_up(order: &str) -> Reply {
    Reply::tool_call(GET, &json!({"order_id": order})).with_usage(0, ANSWER_TOKENS)
}

pub(super) fn ceilings() -> Vec<Scenario> {
    use Layer::ModelGateway as L;
    vec![
        Scenario::new(91, L, "growing-prompts-token-ceiling",
            "Every turn looks up three orders, so each prompt is longer than the last, under a ceiling of 8000 tokens: each call reserves its prompt (bounded from above) and its largest output before it is sent, and the run ends budget_exhausted before the call that cannot fit; what the mock model counted stays within 8000.",
            Plan::mock(vec![look_up_all(); 8])
                .metered()
                .tune(|t| {
                    t.tokens = Some(8000);
                    t.max_repeats = Some(20);
                    t.final_turn = Some(false);
                }))
            .risks([I::BudgetsHold])
            .expects([M::BudgetExhausted]),
        Scenario::new(92, L, "cost-ceiling-across-priced-fallback",
            "A cost ceiling of $0.03 over two models at different prices: the primary ($1/$4 per million) answers, then fails with 503 and the turn falls back to the backup at twice the price, then the primary answers again; every call reserves at the price of the model that answers it, and the last call's output is cut to what the money left buys, so the run ends budget_exhausted with what both servers counted at or under $0.03.",
            Plan::mock(vec![
                look_up("A-1001"),
                Reply::unavailable(),
                look_up("A-1003"),
                look_up("A-1001"),
                look_up("A-1002"),
                look_up("A-1003"),
            ])
            .agent("chaos_fallback")
            .backup(vec![look_up("A-1002"), look_up("A-1003")])
            .metered()
            .tune(|t| {
                t.cost_micros = Some(30_000);
                t.max_repeats = Some(20);
            }))
            .risks([I::BudgetsHold])
            .expects([M::BudgetExhausted, M::ModelFallback]),
    ]
}

/// The answer of a last turn: longer than what any of the last-turn
/// scenarios leaves, so that the reservation has to cut it.
fn long_answer() -> Reply {
    Reply::text("A-1001 was not checked: the budget ran out before any lookup.").with_usage(0, 3000)
}

pub(super) fn last_turn() -> Vec<Scenario> {
    use Layer::ModelGateway as L;
    vec![
        Scenario::new(94, L, "tokens-short-last-turn-within-ceiling",
            "1200 tokens are less than two turns with the three tools' definitions need, so the first turn is the last: no tools, a minimal-output instruction, max_tokens what the 1200 leave after its prompt. The model would write 3000 tokens; it is cut at max_tokens, the run ends budget_exhausted with that answer, and what the mock model counted stays within 1200.",
            Plan::mock(vec![long_answer()])
                .metered()
                .tune(|t| t.tokens = Some(1200)))
            .risks([I::BudgetsHold])
            .expects([M::BudgetExhausted]),
        Scenario::new(95, L, "time-short-last-turn-within-ceiling",
            "A 1 s wall clock (800 ms forward) is less than a model turn, a lookup and the turn reading it need (2 × 500 ms + 5 ms), so the first turn is the last, under a 2000-token ceiling: max_tokens is what the 2000 leave after its prompt, the 3000-token answer is cut to it, the run ends budget_exhausted with that answer, and what the mock model counted stays within 2000.",
            Plan::mock(vec![long_answer()])
                .metered()
                .tune(|t| {
                    t.wall_ms = Some(1000);
                    t.tokens = Some(2000);
                }))
            .risks([I::BudgetsHold])
            .expects([M::BudgetExhausted]),
    ]
}
