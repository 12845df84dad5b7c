//! The fan-out scenarios: the cap on calls per turn, lanes of writes to
//! one resource, and a group's rate under a wide fan-out; and the
//! governor's shedding (C093).

use serde_json::json;

use super::{GET, UPDATE, answer, calls, get, on, update, update_args};
use crate::invariant::Invariant as I;
use crate::mechanism::Mechanism as M;
use crate::proxy::{Injection, Rule};
use crate::scenario::{Layer, Plan, Scenario};

/// Fan-out control at planning time: the cap on calls per turn and the
/// lanes of writes to one resource (invariant 7, measured at the proxy).
pub(super) fn fan_out_control() -> Vec<Scenario> {
    use Layer::Orchestration as L;
    vec![
        Scenario::new(84, L, "fan-out-over-cap",
            "One turn asks for six orders at once from an agent allowed four calls per turn: none of the six is sent, each gets a \"batch or narrow\" reply, and the narrower next turn runs.",
            Plan::script(vec![
                calls(&[(GET, json!({"order_id": "A-1001"})), (GET, json!({"order_id": "A-1002"})),
                        (GET, json!({"order_id": "A-1003"})), (GET, json!({"order_id": "A-1001"})),
                        (GET, json!({"order_id": "A-1002"})), (GET, json!({"order_id": "A-1003"}))]),
                calls(&[(GET, json!({"order_id": "A-1001"})), (GET, json!({"order_id": "A-1002"}))]),
                answer("Looked up the two that matter."),
            ])
            .tune(|t| t.fan_out_cap = Some(4)))
            .risks([I::ConcurrencyCeiling])
            .expects([M::FanOutRefused]),
        Scenario::new(85, L, "same-order-writes-one-at-a-time",
            "One turn moves A-1001 twice and A-1002 once, every update taking 150 ms at the desk: the two writes of A-1001 run one after the other in the model's order, A-1002's beside them.",
            Plan::script(vec![
                calls(&[(UPDATE, update_args("A-1001", 24)), (UPDATE, update_args("A-1002", 25)),
                        (UPDATE, update_args("A-1001", 26))]),
                answer("Moved both orders."),
            ])
            .tool_rule(Rule::new(on(UPDATE), Injection::Delay { ms: 150 }).always()))
            .risks([I::ConcurrencyCeiling, I::OneEffectPerKey]),
        Scenario::new(86, L, "fan-out-36-under-20-per-second",
            "One turn asks for thirty-six reads against order_api limited to 20/s with a burst of 20 (the agent allows 64 calls per turn): measured at the proxy, no 100 ms window holds more than the bucket admits, and every read still arrives.",
            Plan::script(vec![
                calls(&(0..36).map(|i| (GET, json!({"order_id": format!("A-100{}", 1 + i % 3)}))).collect::<Vec<_>>()),
                answer("Looked them all up."),
            ])
            .tune(|t| { t.group_rate = Some((20.0, 20)); t.fan_out_cap = Some(64); t.wall_ms = Some(72_000); }))
            .risks([I::ConcurrencyCeiling])
            .expects([M::ConcurrencyQueued]),
    ]
}

/// The governor sheds what it cannot admit in time (issue 15): a shed
/// write is never declared, so nothing of it is left pending or in doubt.
pub(super) fn shedding() -> Vec<Scenario> {
    use Layer::Orchestration as L;
    vec![
        Scenario::new(93, L, "shed-write-leaves-nothing-pending",
            "order_api admits one call every five seconds (0.2/s, burst 1) and the run has 2 s: the lookup takes the only token, so the update that follows (needing its p99 allowance) could start only after its latest start and is shed at once (call_shed). It was never declared in the ledger and never reached the desk: no record of it, pending or settled.",
            Plan::script(vec![get("A-1001"), update("A-1001", 24), answer("The order could not be moved in time.")])
                .tune(|t| { t.group_rate = Some((0.2, 1)); t.wall_ms = Some(2_000); }))
            .risks([I::NothingDangles, I::OneEffectPerKey])
            .expects([M::CallShed]),
    ]
}
