//! A model provider's own limits (issue 15, model calls): its
//! `tokens_per_minute` bucket charged before each call (C096), and its 429
//! with `Retry-After` holding every run of the process (C097).

use rein_testkit::RetryAfter;
use rein_testkit::mock_model::Reply;
use serde_json::json;

use super::{GET, chat, on};
use crate::invariant::Invariant as I;
use crate::mechanism::Mechanism as M;
use crate::proxy::{Injection, Rule};
use crate::scenario::{Layer, Plan, Scenario};

/// Tokens the model side counts for one answer of C096: close to what a
/// call is charged, so the bucket's bound shows in the usage.
const HEAVY_PROMPT: u64 = 6_000;

pub(super) fn provider_limits() -> Vec<Scenario> {
    use Layer::ModelGateway as L;
    vec![
        Scenario::new(96, L, "model-tokens-per-minute-charged-before-the-call",
            "Four runs ask the model at once; its provider allows 600 000 tokens per minute with a burst of 8 000, and every call is charged its prompt bound plus 4 096 reserved output tokens before it is sent, so only one fits the bucket at a time (each answer takes 300 ms at the proxy and counts 6 040 tokens). Measured at the model: the tokens of the calls arriving in any window never pass the bucket's bound.",
            Plan::mock((0..4).map(|_| Reply::text("Nothing to change.").with_usage(HEAVY_PROMPT, 40)).collect())
                .concurrent(4, vec!["tenant-a", "tenant-b"])
                .model_rule(Rule::new(chat(), Injection::Delay { ms: 300 }).always())
                .tune(|t| t.provider_tokens = Some((600_000, 8_000))))
            .risks([I::ConcurrencyCeiling, I::BudgetsHold]),
        Scenario::new(97, L, "model-429-pauses-the-provider-for-every-run",
            "Three runs look an order up at once (two of the lookups take 300 ms at the desk); the first run's next model call is answered 429 with Retry-After: 1 s, and the provider holds that for the whole account. The other runs' calls come within that second: they wait for it to pass instead of being sent, so the model receives nothing while its 429 holds.",
            Plan::mock(
                (0..3).map(|_| Reply::tool_call(GET, &json!({"order_id": "A-1001"})))
                    .chain([Reply::rate_limited(Some(RetryAfter::Seconds(1)))])
                    .chain((0..3).map(|_| Reply::text("Order A-1001 is on its way.")))
                    .collect(),
            )
                .enforced_retry_after()
                .concurrent(3, vec!["tenant-a", "tenant-b", "tenant-c"])
                .tool_rule(Rule::new(on(GET), Injection::Delay { ms: 300 }).skip(1).always()))
            .risks([I::ConcurrencyCeiling, I::StructuredFailures])
            .expects([M::RetryScheduled]),
    ]
}
