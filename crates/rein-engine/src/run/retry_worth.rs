//! The measured success rate of retries, per target, and the worth input
//! of the next one ([`rein_core::retry::Worth`]; issue 16, item 6).
//!
//! # What is measured, and where it is kept
//!
//! Every attempt after the first of a tool call (`tool:NAME`) or a model
//! call (`provider:NAME`) is counted, by retry ordinal, as it ends: a
//! success, or a failure of any kind. The counts are kept with every
//! process on the store (`retry_memory`): a process starts from what all
//! of them counted, and adds its own at every run's end and periodically,
//! so a `rein run` learns what the previous ones saw and a cluster learns
//! a failing target once. The rate moves with the fault of the moment, so
//! old outcomes fade: the counts are halved every
//! [`RETRY_RATE_HALF_LIFE`](rein_core::retry::RETRY_RATE_HALF_LIFE) (ten
//! minutes), and after an hour a target is judged from (almost) the prior
//! (½) again.
//!
//! # Fallbacks
//!
//! A model fallback is weighed the same way before it is tried: its
//! expected value (`value_of_success_usd` × the measured success rate of
//! that arm as a fallback, target `fallback:PROVIDER/MODEL`) against its
//! expected cost (its price × the prompt and the most output it may give,
//! plus its median's share of the remaining time). Every call a link makes
//! as a fallback is counted there as it ends, answered or not.

use std::time::Duration;

use rein_core::deadline::Cost;
use rein_core::retry::{Worth, WorthInput};

use super::engine::Engine;

impl Engine {
    /// Counts how attempt `attempt` of `target` ended (first attempts are
    /// not retries and are not counted).
    pub(super) fn record_retry(&self, target: &str, attempt: u32, succeeded: bool) {
        self.shared.retry_memory.record(target, attempt, succeeded);
    }

    /// The worth input of attempt `failed + 1` of `target`, which spends
    /// `money`, when a success is worth `value`; `None` without a value.
    pub(super) fn worth_input(
        &self,
        target: &str,
        value: Option<Cost>,
        failed: u32,
        money: Cost,
    ) -> Option<WorthInput> {
        let value = value?;
        let rate = self
            .shared
            .retry_memory
            .rate(target, failed.saturating_add(1));
        Some(WorthInput { value, rate, money })
    }
}

/// The target a link's outcomes as a fallback are counted under.
pub(crate) fn fallback_target(provider: &str, model: &str) -> String {
    format!("fallback:{provider}/{model}")
}

impl Engine {
    /// Counts how a call of `provider`'s `model` made as a fallback ended.
    pub(super) fn record_fallback(&self, provider: &str, model: &str, answered: bool) {
        // One ordinal for fallbacks: the first retry's slot.
        self.record_retry(&fallback_target(provider, model), 2, answered);
    }

    /// The worth of trying `provider`'s `model` as a fallback, which
    /// spends `money` and takes `time` of the `remaining` deadline, when a
    /// success is worth `value`; `None` without a value.
    pub(super) fn fallback_worth(
        &self,
        (provider, model): (&str, &str),
        value: Option<Cost>,
        money: Cost,
        (time, remaining): (Duration, Duration),
    ) -> Option<Worth> {
        let input = self.worth_input(&fallback_target(provider, model), value, 1, money)?;
        Some(Worth::of(&input, time, remaining))
    }
}

/// Why a fallback was not tried, for the report: its numbers, in dollars.
pub(crate) fn fallback_not_worth_it(provider: &str, model: &str, worth: &Worth) -> String {
    format!(
        "fallback {provider}/{model} not tried: expected value {} ({} of {} of its calls as a fallback answered) is below its expected cost {}",
        Cost::from_micros(worth.expected_value_micros),
        worth.rate.successes,
        worth.rate.tries,
        Cost::from_micros(worth.expected_cost_micros)
    )
}

/// Why a retry was not made, for the report: its numbers, in dollars.
pub(crate) fn not_worth_it(worth: &Worth) -> String {
    format!(
        "not retried: expected value {} ({} of {} retries succeeded) is below its expected cost {}",
        Cost::from_micros(worth.expected_value_micros),
        worth.rate.successes,
        worth.rate.tries,
        Cost::from_micros(worth.expected_cost_micros)
    )
}
