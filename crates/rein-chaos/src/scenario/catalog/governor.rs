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
            "Three turns of reads against order_api (ceiling 8), the desk answering each in 20 ms: thirty-two healthy reads; thirty-two more whose requests (the 33rd to the 64th) take 60 ms more at the proxy (still within the reads' allowance: a timed-out request would stay in flight at the proxy after rein let it go) and two of every ten of which get 429; then sixty-four healthy reads. Measured at the proxy, the reads in flight late in the overload are fewer than before it, and rise again after it.",
            Plan::script(vec![reads(32), reads(32), reads(64), answer("Looked them all up, slowly at times.")])
            .desk(Faults::none().always(GET_ORDER, Fault::Delay(Duration::from_millis(20))))
            .tool_rule(Rule::new(on(GET), status(429)).skip(32).times(2))
            .tool_rule(Rule::new(on(GET), status(429)).skip(42).times(2))
            .tool_rule(Rule::new(on(GET), status(429)).skip(52).times(2))
            .tool_rule(Rule::new(on(GET), status(429)).skip(62).times(2))
            .tool_rule(Rule::new(on(GET), Injection::Delay { ms: 60 }).skip(32).times(32))
            .tune(|t| {
                t.group_limit = Some(8);
                t.fan_out_cap = Some(64);
                t.max_repeats = Some(1000);
                // Parallel calls share the run's remaining time: a long
                // wall clock keeps sixty-four reads behind a limit shrunk
                // to one from being shed before they are sent.
                t.wall_ms = Some(600_000);
                t.adaptive_probe = true;
            }))
            .risks([I::ConcurrencyCeiling])
            .expects([M::ConcurrencyQueued])
            // Opt-in: its measure is a latency signal, and on a loaded
            // machine (load 16 on 2 cores) rein's own overhead per call
            // drowns it — one control run in five grew its limit back
            // during the overload. `rein chaos --include-long` runs it.
            .long(),
    ]
}
