//! Payloads of the governor's decisions at step 4 of the guarded call:
//! a call that waited for its group's bucket, a call shed unsent, a
//! concurrency limit that moved.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `rate_limited`: a call waited for its resource group's request bucket
/// before it was sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateLimited {
    /// The tool.
    pub tool: String,
    /// The tool's resource group.
    pub resource_group: String,
    /// Which bucket made it wait (`requests`, `tokens`).
    pub bucket: String,
    /// How long it waited.
    #[serde(rename = "waited_ms", with = "super::millis")]
    pub waited: Duration,
}

/// `call_shed`: the governor did not let a call through in time; it was
/// never sent (and, at step 4, never declared in the ledger).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallShed {
    /// The tool.
    pub tool: String,
    /// The tool's resource group.
    pub resource_group: String,
    /// `no_time` (the group admits it only after its latest start),
    /// `wait_expired` (it waited until then) or `rejected` (never
    /// admissible).
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
