//! Payloads of the governor's decisions at step 4 of the guarded call:
//! a call that waited for its group's bucket, a call shed unsent, a
//! concurrency limit that moved.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `rate_limited`: a call waited for a bucket of its resource group (or,
/// for a model call, of its provider) before it was sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateLimited {
    /// The tool; empty (and left out) for a model call.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tool: String,
    /// The model call's `provider/model`; `None` for a tool call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The tool's resource group, or the model call's provider.
    pub resource_group: String,
    /// Which bucket made it wait: `requests` (`rate_per_sec`), `tokens`
    /// (`tokens_per_minute`) or `provider` (the provider's own 429 with a
    /// time to wait holds it).
    pub bucket: String,
    /// How long it waited.
    #[serde(rename = "waited_ms", with = "super::millis")]
    pub waited: Duration,
}

/// `call_shed`: the governor did not let a call through in time, or after
/// its wait the call no longer fit its budget; it was never sent (and, for
/// a tool at step 4, never declared in the ledger).
///
/// The one event of that concept, for every attempt (a retry's included)
/// of a tool or a model call: `rate_limited` says a call *waited* for a
/// bucket and went, `concurrency_adjusted` that a limit moved, and
/// `call_shed` that a call did *not* go. (`concurrency_wait_expired`,
/// written by earlier versions for a tool attempt that found no slot, is
/// no longer written: it is a `call_shed` with reason `wait_expired`.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallShed {
    /// The tool; empty (and left out) for a model call.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tool: String,
    /// The model call's `provider/model`; `None` for a tool call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The tool's resource group, or the model call's provider.
    pub resource_group: String,
    /// `no_time` (the group admits it only after its latest start),
    /// `wait_expired` (it waited until then), `rejected` (never
    /// admissible, e.g. more tokens than `token_burst`), `share_unknown`
    /// (this node's part of a shared limit was not known in time) or
    /// `budget_after_wait` (it was admitted, but the wait left less than
    /// the call needs).
    pub reason: String,
    /// How long it waited before it was shed.
    #[serde(rename = "waited_ms", with = "super::millis")]
    pub waited: Duration,
}

/// `concurrency_adjusted`: a resource group's adaptive concurrency limit
/// moved when a call released its slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConcurrencyAdjusted {
    /// The resource group.
    pub resource_group: String,
    /// The limit before.
    pub old: u32,
    /// The limit after.
    pub new: u32,
    /// Why: the shrink's trigger, or growth after a round of successes.
    pub reason: String,
}

/// `fan_out_refused`: a model turn proposed more calls than its agent's
/// `max_calls_per_turn`; none of them ran, and each got a structured reply
/// telling the model to batch or narrow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FanOutRefused {
    /// The calls the turn proposed.
    pub proposed: usize,
    /// The agent's cap.
    pub cap: u32,
    /// The tools the turn named, each once, in the model's order.
    pub tools: Vec<String>,
}
