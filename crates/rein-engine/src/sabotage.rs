//! Deliberately broken mechanisms, for the chaos suite's self-test.
//!
//! # Why
//!
//! An invariant checker that never fires cannot be told apart from one
//! that cannot fire. Each switch here breaks one mechanism on purpose, so
//! the chaos suite can prove its checker catches the violation it exists
//! for. This module exists only with the `sabotage` cargo feature, which no
//! shipped binary enables; without it the engine has no switch and no
//! branch.
//!
//! | switch | breaks | invariant |
//! | --- | --- | --- |
//! | `fresh_key_per_attempt` | every retry of a call (and its lookup by key) sends a new idempotency key | 1 |
//! | `forward_order_compensation` | compensation runs in forward order of execution | 4 |
//! | `raw_error_text` | a failed call's reply to the model is the operator's raw text | 10 |
//! | `retry_irreversible` | the retry decision treats an irreversible tool as an idempotent write | 9 |
//! | `bypass_governor` | no resource group is governed: rates and ceilings are not applied | 7 |
//! | `charge_after_call` | a model call reserves nothing and checks no cost before it is sent; its usage is charged after it | 2 |
//! | `uncapped_fan_out` | a turn over `max_calls_per_turn` runs all its calls | 7 |
//! | `parallel_same_resource` | writes of one turn to the same `resource_key` value run in parallel | 7 |
//! | `declare_before_shed` | a write is declared `pending` before the governor decides, and a shed leaves that record as it is | 3 |
//! | `fixed_concurrency` | a resource group's adaptive limit stays at its ceiling: neither 429s nor rising latency shrink it | 7 |
//! | `undersized_prompt_bound` | a model call's prompt bound is a quarter of what it is: below what the provider counts | 2 |
//! | `unreserved_final_turn` | a model call offered no tools (the last, minimal-output turn) reserves nothing: its `max_tokens` is the model's output cap | 2 |
//! | `uncharged_model_tokens` | a model call charges nothing to its provider's `tokens_per_minute` bucket | 7 |
//! | `ignore_provider_retry_after` | a provider's 429 with a time to wait does not pause the provider for the other calls | 7 |
//! | `commit_without_retry` | a run's commit is offered once: a store that blinks fails the write (and what hangs on it) | 12 |
//! | `events_ahead_of_ledger` | the events of a commit the store did not take all go back for the next commit, those stating a record too | 11 |
//! | `skip_approval` | the approval gate lets every call through: a call that needs a human's approval is sent without one | 13 |
//! | `send_declined` | a rejected or expired approval is applied as approved: the call is sent | 13 |
//!
//! The hooks are marked `Sabotage hook` in the engine's `run/` modules
//! (`guarded/`, `settle/`, `model_chain/ceiling.rs`, `durable.rs`, …).
//!
//! Note for checkers: with `fresh_key_per_attempt` each key the tool sees
//! still has at most one effect; the duplicate shows per intent (the
//! `Rein-Intent-Id` header) or per ledger key, which stays the intent's
//! original key.

use rein_core::idempotency::{IdempotencyKey, MAX_KEY_LEN};

/// Which mechanisms to break. All off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sabotage {
    /// Every attempt after the first of a call sends a different
    /// idempotency key (the lookup by key too): a retried idempotent write
    /// applies again.
    pub fresh_key_per_attempt: bool,
    /// Compensation undoes effects in forward order of execution instead of
    /// reverse.
    pub forward_order_compensation: bool,
    /// The model gets a failed call's raw text (its human message, which
    /// holds the tool's error message) instead of the structured
    /// placeholder.
    pub raw_error_text: bool,
    /// The retry decision treats an irreversible tool as an idempotent
    /// write, so a retryable failure (a 503) is retried.
    pub retry_irreversible: bool,
    /// No resource group is governed: every call goes out at once, whatever
    /// its group's `rate_per_sec`, `burst` or `max_concurrency`.
    pub bypass_governor: bool,
    /// A model call reserves nothing before it is sent: its `max_tokens`
    /// is what the token budget leaves after the *last* prompt, no cost is
    /// checked, and usage is charged only after the call — so a growing
    /// prompt, or a cost ceiling, is overrun.
    pub charge_after_call: bool,
    /// A model call's prompt bound is a quarter of what rein computes, so
    /// a prompt is reserved (and `max_tokens` set) as if it were far
    /// smaller than the provider then counts.
    pub undersized_prompt_bound: bool,
    /// A turn over its agent's `max_calls_per_turn` is not refused: every
    /// call of it runs.
    pub uncapped_fan_out: bool,
    /// Writes of one turn to the same resource (`resource_key`) are not
    /// put in one lane: they run in parallel.
    pub parallel_same_resource: bool,
    /// A write is declared `pending` in the ledger *before* step 4 (the
    /// governor), and a call the governor sheds returns with that record
    /// left as it is: a write that never went out stays `pending`, in
    /// doubt, for reconciliation or a human to settle.
    pub declare_before_shed: bool,
    /// Every resource group's concurrency limit is fixed at its ceiling
    /// (`max_concurrency`): 429s, overload, timeouts and rising latency
    /// never shrink it, so an overloaded backend keeps getting the whole
    /// ceiling.
    pub fixed_concurrency: bool,
    /// A model call offered no tools — the last, minimal-output turn of a
    /// run short of budget — reserves nothing before it is sent: its
    /// `max_tokens` is the model's output cap instead of what the budget
    /// leaves, so its answer can overrun the token or cost ceiling.
    pub unreserved_final_turn: bool,
    /// A model call charges nothing to its provider's token bucket
    /// (`tokens_per_minute`): every call goes out whatever the tokens
    /// already sent this minute.
    pub uncharged_model_tokens: bool,
    /// A provider's 429 with `Retry-After` is only its own call's retry
    /// delay: the provider is not paused, so every other run keeps sending
    /// into the provider's empty bucket.
    pub ignore_provider_retry_after: bool,
    /// A run's commit is offered to the store once: a transient refusal
    /// (the store blinked) is not offered again, and fails the write as a
    /// broken store would — the declaration, the mark, the checkpoint or
    /// the end it carried, and the run with it.
    pub commit_without_retry: bool,
    /// The events of a commit the store did not take all go back for the
    /// run's next commit, including those that state a record
    /// (`ledger_recorded`, `compensation_finished`, …): they land with a
    /// commit that does not carry their record, and the event log says
    /// what the ledger does not.
    pub events_ahead_of_ledger: bool,
    /// The approval gate lets every call through, decided or not: a call
    /// that needs a human's approval is sent without one.
    pub skip_approval: bool,
    /// A call a human rejected, or whose approval expired, is sent as if
    /// approved.
    pub send_declined: bool,
}

/// A key different from `key` for attempt `attempt`: the original with the
/// attempt number appended (cut to fit [`MAX_KEY_LEN`]).
pub(crate) fn fresh_key(key: &IdempotencyKey, attempt: u32) -> IdempotencyKey {
    let suffix = format!(".attempt-{attempt}");
    let keep = MAX_KEY_LEN
        .saturating_sub(suffix.len())
        .min(key.as_str().len());
    // Keys are visible ASCII, so every byte index is a char boundary.
    let fresh = format!("{}{suffix}", &key.as_str()[..keep]);
    IdempotencyKey::parse(&fresh).unwrap_or_else(|_| key.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_key_differs_per_attempt_and_stays_valid() {
        let key = IdempotencyKey::parse(&"k".repeat(MAX_KEY_LEN))
            .unwrap_or_else(|_| unreachable!("a key of MAX_KEY_LEN visible characters is valid"));
        let two = fresh_key(&key, 2);
        let three = fresh_key(&key, 3);
        assert_ne!(two, key);
        assert_ne!(two, three);
        assert!(two.as_str().len() <= MAX_KEY_LEN);
    }
}
