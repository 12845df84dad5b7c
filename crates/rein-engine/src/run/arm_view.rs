//! [`ArmView`]: what an operator sees of one breaker arm of this process.
//!
//! # Why a view, not the breaker
//!
//! The arms live behind the engine's lock and count in monotonic
//! [`rein_core::Instant`]s, which mean nothing outside the process. A view
//! is taken under the lock once and states times as wall-clock Unix
//! milliseconds and durations in milliseconds, so `GET /v1/breakers` can
//! answer without holding the lock and a reader can compare the times with
//! the shared openings' `open_until_ms`.

use std::time::{Duration, UNIX_EPOCH};

use rein_core::breaker::BreakerState;

use super::engine::Engine;

/// One breaker arm as this process knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArmView {
    /// `provider`, `tool`, `resource_group` or `cost`.
    pub kind: &'static str,
    /// The provider, tool, group or account the arm guards.
    pub name: String,
    /// Its state.
    pub state: BreakerState,
    /// When it entered an open or half-open state, Unix milliseconds
    /// (`None` while closed).
    pub since_ms: Option<u64>,
    /// How long an open arm still refuses calls (`None` unless open; 0 once
    /// its break has passed and the next call will probe).
    pub retry_after_ms: Option<u64>,
    /// Counted consecutive failures of a closed arm (`None` unless closed).
    pub consecutive_failures: Option<u32>,
}

/// Whole milliseconds of `d`, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Engine {
    /// Every breaker arm this process has admitted a call to, by kind then
    /// name. An arm never used is closed and not listed.
    pub fn breaker_arms(&self) -> Vec<ArmView> {
        use rein_core::Clock as _;
        let now = self.clock.now();
        let wall_ms = self
            .clock
            .system_now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, millis);
        let wall_of = |at: rein_core::Instant| {
            wall_ms.saturating_sub(millis(now.saturating_duration_since(at)))
        };
        let breakers = self.shared.breakers();
        breakers
            .arms()
            .map(|(kind, name, breaker)| ArmView {
                kind: kind.as_str(),
                name: name.to_owned(),
                state: breaker.state(),
                since_ms: breaker.since().map(wall_of),
                retry_after_ms: breaker
                    .open_until()
                    .map(|until| millis(until.saturating_duration_since(now))),
                consecutive_failures: breaker.consecutive_failures(),
            })
            .collect()
    }
}
