//! The measured success rate of retries, per target, and the worth input
//! of the next one ([`rein_core::retry::Worth`]; issue 16, item 6).
//!
//! # What is measured, and where it is kept
//!
//! Every attempt after the first of a tool call (`tool:NAME`) or a model
//! call (`provider:NAME`) is counted, by retry ordinal, as it ends: a
//! success, or a failure of any kind. The counts live in the engine, beside
//! the targets' retry budgets, and are shared by every run of the process.
//! They are not written to the store: unlike latency, a retry's success
//! rate moves with the fault of the moment, and a fresh process that starts
//! from the prior (½) learns it again within a few retries.

use rein_core::deadline::Cost;
use rein_core::retry::{Worth, WorthInput};

use super::engine::Engine;

impl Engine {
    /// Counts how attempt `attempt` of `target` ended (first attempts are
    /// not retries and are not counted).
    pub(super) fn record_retry(&self, target: &str, attempt: u32, succeeded: bool) {
        if attempt < 2 {
            return;
        }
        let mut records = self
            .shared
            .retry_records
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        records
            .entry(target.to_owned())
            .or_default()
            .record(attempt, succeeded);
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
        let records = self
            .shared
            .retry_records
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let rate = records
            .get(target)
            .copied()
            .unwrap_or_default()
            .rate(failed.saturating_add(1));
        Some(WorthInput { value, rate, money })
    }
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
