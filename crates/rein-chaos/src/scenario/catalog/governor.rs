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
//! hundreds of milliseconds (2 tokio workers among a dozen busy processes
//! on 2 cores) and varies from one moment to the next, so both the healthy
//! latency and the injected delay must dwarf it. 600 ms on top of 150
//! keeps the smoothed latency past 1.5 × its baseline through the overload
//! unless rein's overhead in the healthy turn exceeds 400 ms, lets the
//! limit grow back after it unless the overhead then exceeds the healthy
//! turn's by 75 ms, and keeps a slot almost all its time on the wire, so a
//! fixed limit's late peak at the proxy stays at its ceiling. Measured
//! failures of smaller sizes (overloaded: the requests injected into, 429s
//! included):
//!
//! | healthy + delay, overloaded | control failed | sabotage missed | why |
//! | --- | --- | --- | --- |
//! | 20 + 60 ms, 40 (the first C098) | 2 of 10 at load 12 | 0 of 10 (1 in 7 at load 15 before) | the latency trigger never fired; a fixed limit's staggered late peak fell below its first burst |
//! | 50 + 250 ms, 56 | 2 of 20 at load 15 to 17 | 0 of 20 | a slow healthy turn raised the baseline past the overload's latency; a slow turn after it kept the limit at 1 |
//!
//! The overload's 40 requests take a working limit from 8 to 2 or 1; the
//! reads' p99 is raised so none times out, and the wall clock so a queued
//! read's share of it does not run out.
//!
//! # Measured
//!
//! `C098_RUNS=10 cargo test -p rein-chaos --test adaptive_rates --locked
//! -- --ignored --nocapture`, each run a control and a `fixed_concurrency`
//! pair, at load 11 to 15 on 2 cores (eight busy loops beside the test
//! while other builds ran): every control held and every sabotage was
//! caught in 20 pairs. The proxy saw 8 in flight before the overload; among
//! its last eight arrivals 1 (twice 3) in the control runs and 8 in every
//! sabotaged one; 7 or 8 after it. A control run takes 14 to 32 s there,
//! a sabotaged one 7 to 12 s. On a quieter machine (load 4 to 6, no busy
//! loops) 10 of 10 pairs, the same peaks, a control run 13 to 19 s and a
//! sabotaged one 6 s.

use std::time::Duration;

use rein_testkit::order_desk::{Fault, Faults, GET_ORDER};
use serde_json::{Value, json};

use super::{GET, answer, calls, on, status};
use crate::invariant::Invariant as I;
use crate::mechanism::Mechanism as M;
use crate::proxy::{Injection, Rule};
use crate::scenario::{Layer, Plan, Scenario};

/// C098's healthy desk: every read answered in 150 ms (see the module
/// docs for why these sizes).
const HEALTHY_MS: u64 = 150;
/// The delay the proxy adds to C098's overloaded reads.
const OVERLOAD_MS: u64 = 600;
/// C098's read p99: its allowance (× 2) covers 750 ms on the wire plus
/// rein's overhead at load, so no overloaded read times out.
const READ_P99_MS: u64 = 2_000;

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
            "Three turns of reads against order_api (ceiling 8), the desk answering each in 150 ms: thirty-two healthy reads; thirty-two more whose requests (the 33rd to the 72nd, their 429s' retries included) are the overload: two of every ten get 429 and the others take 600 ms more at the proxy (within the reads' allowance, their p99 raised to 2 s: a timed-out request would stay in flight at the proxy after rein let it go); then eighty healthy reads. Measured at the proxy, the reads in flight late in the overload are at most half as many as before it, and rise again after it.",
            Plan::script(vec![reads(32), reads(32), reads(80), answer("Looked them all up, slowly at times.")])
            .desk(Faults::none().always(GET_ORDER, Fault::Delay(Duration::from_millis(HEALTHY_MS))))
            .tool_rule(Rule::new(on(GET), status(429)).skip(32).times(2))
            .tool_rule(Rule::new(on(GET), status(429)).skip(42).times(2))
            .tool_rule(Rule::new(on(GET), status(429)).skip(52).times(2))
            .tool_rule(Rule::new(on(GET), status(429)).skip(62).times(2))
            // The delay rule counts only the requests the 429s left it:
            // its thirty-two are the 33rd to the 72nd but those eight.
            .tool_rule(Rule::new(on(GET), Injection::Delay { ms: OVERLOAD_MS }).skip(32).times(32))
            .tune(|t| {
                t.group_limit = Some(8);
                t.fan_out_cap = Some(80);
                t.max_repeats = Some(1000);
                t.read_p99_ms = Some(READ_P99_MS);
                // Parallel calls share the run's remaining time, each lane
                // a 32nd of it in the overload: an hour's wall clock
                // gives a lane 112 s, so a read (or a 429's retry) queued
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
