//! Payloads of model calls: started, finished, queued, fallen back, cut.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Flag;
use crate::deadline::Cost;
use crate::failure::Category;
use crate::model::{FinishReason, TokenUsage};

/// `model_call_started`: one attempt of a model call began.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCallStarted {
    /// The provider asked.
    pub provider: String,
    /// The model asked.
    pub model: String,
    /// The attempt's number, from 1.
    pub attempt: u32,
    /// The time the attempt may take.
    #[serde(rename = "allowance_ms", with = "super::millis")]
    pub allowance: Duration,
    /// Messages in the prompt.
    pub messages: usize,
    /// Whether the answer streams.
    pub stream: bool,
    /// The output ceiling sent (`max_tokens` or `max_completion_tokens`):
    /// the least of the model's cap, the caller's ask and what the budget
    /// leaves. Absent when nothing limited the output, and in events
    /// written before calls recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The budget dimension (`tokens` or `cost`) that set `max_tokens`
    /// below both the model's cap and the caller's ask; absent when the
    /// cap or the caller set it. A gateway answer says the same in
    /// `Rein-Max-Tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_limited_by: Option<crate::deadline::Dimension>,
}

/// `model_call_finished`: one attempt of a model call ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCallFinished {
    /// The provider asked.
    pub provider: String,
    /// The model asked.
    pub model: String,
    /// The attempt's number, from 1.
    pub attempt: u32,
    /// What the attempt cost, at the price of the model asked (for a
    /// failure: the tokens it spent), in dollars on the wire. Absent in
    /// events written before calls carried their cost; resume prices those
    /// at the primary's. Schema 1 wrote micro-dollars as `cost_micros`
    /// ([`super::schema`]).
    #[serde(
        rename = "cost_usd",
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::deadline::wire::usd::option"
    )]
    pub cost: Option<Cost>,
    /// How long the attempt took, from its request to its answer or
    /// failure (for a streamed answer, to its last event): what the
    /// model-call latency histogram observes. Absent in events written
    /// before attempts were timed.
    #[serde(
        rename = "elapsed_ms",
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::millis::option"
    )]
    pub elapsed: Option<Duration>,
    /// For a streamed attempt: how long its first event took to arrive
    /// (time to first token). Absent for a whole answer.
    #[serde(
        rename = "first_event_ms",
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::millis::option"
    )]
    pub first_event: Option<Duration>,
    /// An answer or a failure.
    #[serde(flatten)]
    pub result: ModelCallResult,
}

impl ModelCallFinished {
    /// Whether the model answered.
    pub fn ok(&self) -> bool {
        matches!(self.result, ModelCallResult::Answered(_))
    }

    /// The failure's category, for an attempt that failed.
    pub fn category(&self) -> Option<Category> {
        match &self.result {
            ModelCallResult::Answered(_) => None,
            ModelCallResult::Failed(f) => Some(f.category),
        }
    }

    /// Tokens the attempt consumed: the answer's input and output, or what
    /// a failed attempt spent. What resume charges back to the budget.
    pub fn tokens(&self) -> u64 {
        match &self.result {
            ModelCallResult::Answered(a) => a.usage.total(),
            ModelCallResult::Failed(f) => f.tokens_spent,
        }
    }

    /// Input tokens of the attempt (what a failure spent counts as input).
    pub fn input_tokens(&self) -> u64 {
        match &self.result {
            ModelCallResult::Answered(a) => a.usage.input,
            ModelCallResult::Failed(f) => f.tokens_spent,
        }
    }

    /// Output tokens of the attempt (none for a failure).
    pub fn output_tokens(&self) -> u64 {
        match &self.result {
            ModelCallResult::Answered(a) => a.usage.output,
            ModelCallResult::Failed(_) => 0,
        }
    }
}

/// How a model call attempt ended; told apart on the wire by `ok`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ModelCallResult {
    /// `"ok": true`: the model answered.
    Answered(ModelAnswered),
    /// `"ok": false`: the attempt failed.
    Failed(ModelCallFailed),
}

/// A model's answer, as the event stream records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelAnswered {
    /// Always `true`.
    pub ok: Flag<true>,
    /// Tokens it consumed.
    pub usage: TokenUsage,
    /// Why it stopped.
    pub finish: FinishReason,
    /// The tools it proposed to call, by name.
    pub tool_calls: Vec<String>,
}

/// A failed model call attempt, as the event stream records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCallFailed {
    /// Always `false`.
    pub ok: Flag<false>,
    /// The failure's category.
    pub category: Category,
    /// Its human message (redacted).
    pub reason: String,
    /// Tokens the provider reported for the failed attempt (charged to the
    /// budget: a failure is not free).
    #[serde(default)]
    pub tokens_spent: u64,
    /// The variable the provider's key comes from; `null` for a provider
    /// that sends none.
    pub key_env: Option<String>,
}

/// `model_queue_waited`: a model call waited for a slot of its provider
/// (its `max_concurrency`) and then went. A wait for the provider's token
/// bucket or for the end of its pause after a 429 is `rate_limited`; a call
/// that did not go is `call_shed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelQueueWaited {
    /// The provider.
    pub provider: String,
    /// Its `max_concurrency`.
    pub max_concurrency: NonZeroU32,
    /// How long the call waited.
    #[serde(rename = "queue_wait_ms", with = "super::millis")]
    pub queue_wait: Duration,
    /// Whether it gave up waiting (at its deadline). Always `false` as
    /// written now (a call that gave up is `call_shed`); `true` only in
    /// event logs of earlier versions.
    pub expired: bool,
}

/// A link of a model chain: a provider and a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkName {
    /// The provider.
    pub provider: String,
    /// The model.
    pub model: String,
}

/// A link a fallback moved on from, and the failure that moved it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MovedOn {
    /// The provider.
    pub provider: String,
    /// The model.
    pub model: String,
    /// The failure's category.
    pub category: Category,
    /// Its human message.
    pub reason: String,
}

/// `model_fallback_used`: a link other than the primary answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFallbackUsed {
    /// The binding's primary link.
    pub primary: LinkName,
    /// The link that answered.
    pub answered: LinkName,
    /// The links that failed before it, in order.
    pub after: Vec<MovedOn>,
    /// The answering link's expected value and cost when it was tried,
    /// when the run has a `value_of_success_usd`: the rationale of trying
    /// it (a fallback below its cost is not tried; `retry_abandoned` says
    /// so then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worth: Option<crate::retry::Worth>,
}

/// How a stream cut after its first token was recovered, or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recovery {
    /// A link that continues an assistant prefix wrote what extends the
    /// text already sent.
    Continued,
    /// No link continues one: the answer was asked again, whole, and it
    /// begins with exactly the text already sent, so only the rest was
    /// forwarded.
    Regenerated,
    /// Neither worked (no link answered, or the regenerated answer does
    /// not begin with the text sent): the stream ended with its error.
    Failed,
}

impl Recovery {
    /// The name as stored and in the metrics' `outcome` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Recovery::Continued => "continued",
            Recovery::Regenerated => "regenerated",
            Recovery::Failed => "failed",
        }
    }
}

/// `stream_recovered`: a streamed answer failed after its first token and
/// rein tried to finish it without the caller noticing anything but this
/// event and the mark on the stream's last event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamRecovered {
    /// The link whose stream was cut.
    pub cut: LinkName,
    /// Why it was cut (its failure's category).
    pub category: Category,
    /// Its failure's human message.
    pub reason: String,
    /// Characters of text the caller already had.
    pub sent_chars: u64,
    /// What rein did.
    pub recovery: Recovery,
    /// The link that wrote the rest, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered: Option<LinkName>,
    /// Why the recovery failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// What rein did with a turn whose output was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TruncationAction {
    /// Every cut call was a read whose complete fields were kept.
    Salvaged,
    /// At least one call was refused and the model asked again.
    AskedAgain,
}

/// `model_output_truncated`: a turn's structured output was cut.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelOutputTruncated {
    /// Why the model stopped.
    pub finish: FinishReason,
    /// Tool calls the turn proposed.
    pub calls: usize,
    /// Tools whose calls were salvaged.
    pub salvaged: Vec<String>,
    /// Tools whose calls were refused; the model was asked again.
    pub asked_again: Vec<String>,
    /// What rein did.
    pub action: TruncationAction,
}
