//! The governor's adaptive concurrency under load (issue 15): a group's
//! limit shrinks when its backend answers 429 and slows down, and grows
//! back once it is healthy, as measured at the proxy
//! (`invariant/adaptive.rs`).

use std::time::Duration;

use rein_testkit::order_desk::{Fault, Faults, GET_ORDER};
use serde_json::{Value, json};

use super::{GET, answer, calls, on, status};
use crate::invariant::Invariant as I;
use crate::mechanism::Mechanism as M;
use crate::proxy::{Injection, Rule};
use crate::scenario::{Layer, Plan, Scenario};

/// One turn of `n` reads over the three orders.
fn reads(n: usize) -> Value {
    calls(
        &(0..n)
            .map(|i| (GET, json!({"order_id": format!("A-100{}", 1 + i % 3)})))
            .collect::<Vec<_>>(),
    )
}

/// The governor's scenarios.
pub(super) fn governor() -> Vec<Scenario> {
    use Layer::Orchestration as L;
    vec![
        Scenario::new(98, L, "adaptive-limit-shrinks-under-overload-and-recovers",
            "Turns of sixteen reads against order_api (ceiling 8, the desk answering in 20 ms): the 17th to 22nd requests get 429, the 17th to 56th take 150 ms more at the proxy, then the desk is healthy again for four turns. Measured at the proxy, the reads in flight late in the overload are fewer than before it, and rise again after it.",
            Plan::script(vec![
                reads(16), reads(16), reads(16), reads(16),
                reads(16), reads(16), reads(16), reads(16),
                answer("Looked them all up, slowly at times."),
            ])
            .desk(Faults::none().always(GET_ORDER, Fault::Delay(Duration::from_millis(20))))
            .tool_rule(Rule::new(on(GET), status(429)).skip(16).times(6))
            .tool_rule(Rule::new(on(GET), Injection::Delay { ms: 150 }).skip(16).times(40))
            .tune(|t| {
                t.group_limit = Some(8);
                t.fan_out_cap = Some(16);
                t.steps = Some(12);
                t.max_repeats = Some(1000);
                t.wall_ms = Some(60_000);
                t.adaptive_probe = true;
            }))
            .risks([I::ConcurrencyCeiling])
            .expects([M::ConcurrencyQueued]),
    ]
}
