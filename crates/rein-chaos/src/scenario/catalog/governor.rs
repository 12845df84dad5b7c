//! The governor's adaptive concurrency under load (issue 15): a group's
//! limit shrinks when its backend answers 429 and slows down, and grows
//! back once it is healthy, as measured at the proxy
//! (`invariant/adaptive.rs`).
//!
//! # C098's sizes
//!
//! The limit reads latency as release − acquire, which includes rein's
//! own work per call (events, the store), and the proxy sees only the part
//! of a slot spent on the wire. On a loaded machine that overhead grows to
//! tens of milliseconds, so the injected delay must dwarf it: 250 ms on
//! top of 50 keeps the smoothed latency past 1.5 × its baseline through
//! the overload, and keeps a slot almost all its time on the wire, so a
//! fixed limit's late peak at the proxy stays at its ceiling. With the
//! earlier 60 ms on 20, at load 12 on 2 cores, 2 control runs in 10 grew
//! their limit back during the overload (the latency trigger never fired),
//! and a fixed limit's late peak could fall below its peak before the
//! overload (the sabotage went unseen in 1 run in 7 at load 15). The
//! overload's 48 requests take a working limit from 8 to 1 with rounds to
//! spare; the reads' p99 is raised so none times out, and the wall clock
//! so a queued read's share of it does not run out.
//!
//! # Measured
//!
//! `C098_RUNS=10 cargo test -p rein-chaos --test adaptive_rates --locked --
//! --ignored --nocapture`, each run a control and a `fixed_concurrency`
//! pair: at load 15 to 17 on 2 cores (eight busy loops beside the test,
//! three times ten pairs, while other builds ran) every control held and
//! every sabotage was caught; the proxy saw 8 in flight before the
//! overload, 1 among its last eight arrivals in every control run (8 in
//! every sabotaged one), 3 to 8 after it. RATES_NOLOOPS

use std::time::Duration;

use rein_testkit::order_desk::{Fault, Faults, GET_ORDER};
use serde_json::{Value, json};

use super::{GET, answer, calls, on, status};
use crate::invariant::Invariant as I;
use crate::mechanism::Mechanism as M;
use crate::proxy::{Injection, Rule};
use crate::scenario::{Layer, Plan, Scenario};

/// C098's healthy desk: every read answered in 50 ms (see the module
/// docs for why these sizes).
const HEALTHY_MS: u64 = 50;
/// The delay the proxy adds to C098's overloaded reads.
const OVERLOAD_MS: u64 = 250;
/// C098's read p99: its allowance (× 2) covers 300 ms on the wire plus
/// rein's overhead at load, so no overloaded read times out.
const READ_P99_MS: u64 = 1_000;

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
            "Three turns of reads against order_api (ceiling 8), the desk answering each in 50 ms: thirty-two healthy reads; forty-eight more whose requests (the 33rd to the 88th, their 429s' retries included) are the overload: eight of them (two of every ten of the first forty) get 429 and the others take 250 ms more at the proxy (within the reads' allowance, their p99 raised to 1 s: a timed-out request would stay in flight at the proxy after rein let it go); then eighty healthy reads. Measured at the proxy, the reads in flight late in the overload are at most half as many as before it, and rise again after it.",
            Plan::script(vec![reads(32), reads(48), reads(80), answer("Looked them all up, slowly at times.")])
            .desk(Faults::none().always(GET_ORDER, Fault::Delay(Duration::from_millis(HEALTHY_MS))))
            .tool_rule(Rule::new(on(GET), status(429)).skip(32).times(2))
            .tool_rule(Rule::new(on(GET), status(429)).skip(42).times(2))
            .tool_rule(Rule::new(on(GET), status(429)).skip(52).times(2))
            .tool_rule(Rule::new(on(GET), status(429)).skip(62).times(2))
            // The delay rule counts only the requests the 429s left it:
            // its forty-eight are the 33rd to the 88th but those eight.
            .tool_rule(Rule::new(on(GET), Injection::Delay { ms: OVERLOAD_MS }).skip(32).times(48))
            .tune(|t| {
                t.group_limit = Some(8);
                t.fan_out_cap = Some(80);
                t.max_repeats = Some(1000);
                t.read_p99_ms = Some(READ_P99_MS);
                // Parallel calls share the run's remaining time, each lane
                // a 48th of it in the overload: an hour's wall clock
                // gives a lane 75 s, so a read (or a 429's retry) queued
                // behind a limit shrunk to one is not shed before it is
                // sent (with ten minutes, a lane's 15 s ran out at load 16,
                // where the overload took 13 s).
                t.wall_ms = Some(3_600_000);
                t.adaptive_probe = true;
            }))
            .risks([I::ConcurrencyCeiling])
            .expects([M::ConcurrencyQueued]),
    ]
}
