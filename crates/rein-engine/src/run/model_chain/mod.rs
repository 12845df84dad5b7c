//! Model chains: one turn asked along a binding's `{provider, model}`
//! links, each under its provider's concurrency limit and breaker arm,
//! with classified retries inside the caller's deadline.
//!
//! # Why here, and why a host
//!
//! A run's model turns and the OpenAI-compatible gateway's requests must
//! behave alike: the same breakers (one arm per provider, shared by the
//! engine), the same slots, the same fallback rules. The chain therefore
//! talks to a [`TurnHost`] — a run, or a gateway request — for the few
//! things that differ: where events go, what cancels the turn, which retry
//! policy and provider ceilings apply, what an answer is charged to.
//!
//! # Rules (seed 004)
//!
//! - The next link is tried only after a transient failure: the local
//!   circuit open, 5xx, 429, overload, a bare connection error, or no first
//!   byte in time. Never after 401/403, cancellation or a content filter.
//!   With a next link ready a transient failure moves on (another
//!   provider is likelier to answer than a retry of a failing one), after
//!   the host's same-model retries when it has some (the gateway's
//!   bindings: a short `Retry-After` waited out, a single 5xx retried;
//!   [`SameModelRetry`](rein_core::retry::SameModelRetry)); the last link
//!   retries under the policy.
//! - A context overflow goes to the next context-fallback link; the same
//!   model is never asked again. Without one the turn fails at once.
//! - A switch is never silent: `model_fallback_used` names the primary and
//!   the link that answered; the answer carries that link's price and name.
//! - When every link failed, the first failure (the root cause) is
//!   surfaced, naming every link tried.
//! - Streaming: a link is committed to once its first event arrived; before
//!   that it may be retried or left like any failed call.
//! - An answer that is not in the `response_format` the caller asked for
//!   (prose where JSON of a schema was asked) is that link's failure, never
//!   the turn's answer ([`answer_format`]).

mod answer_format;
mod ask;
pub(crate) mod ceiling;
mod chain;
mod count;
mod held;
mod link;
mod recover;
mod same_model;
pub(crate) mod token_ratios;
pub(crate) mod tokenizer;

pub(crate) use link::MODEL_GATE_PREFIX;

use std::collections::BTreeMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;

use rein_core::LatencyProfile;
use rein_core::registry::Price;
use rein_core::retry::RetryPolicy;

use super::binding::ModelLink;
use super::emitter::Emitter;
use crate::provider::{
    Embeddings, ModelProvider, ModelResponse, StreamEvent, StreamSettings, TokenUsage, TurnStream,
};
pub use ask::{ModelAnswer, ModelAsk, ModelBinding, ModelError, ModelReply};
pub use count::{CountMethod, PromptCount};
pub use recover::{Cut, MAX_STREAM_RECOVERIES, Resume, Resumed, recovering};

/// What a model turn is asked on behalf of: a run, or a gateway request.
pub(crate) trait TurnHost: Send + Sync {
    /// Where the turn's events go.
    fn emitter(&self) -> &Emitter;
    /// Resolves when the turn must stop (the caller cancelled).
    fn cancelled(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;

    /// Whether the turn stops because its process hands the run on (not a
    /// cancellation: nothing says `run_cancelled` then).
    fn interrupted(&self) -> bool {
        false
    }
    /// The retry policy of model calls.
    fn retry(&self) -> &RetryPolicy;
    /// The latency profile of a model call.
    fn model_latency(&self) -> LatencyProfile;
    /// Calls in flight at once per provider name.
    fn provider_limits(&self) -> &BTreeMap<String, NonZeroU32>;
    /// Token buckets per provider name (`tokens_per_minute`).
    fn provider_tokens(&self) -> &BTreeMap<String, rein_core::registry::TokenLimit>;
    /// How a link with a fallback after it retries its own model before
    /// moving on; none by default (a run's chain moves on at once, its
    /// last link retrying under the policy).
    fn same_model(&self) -> rein_core::retry::SameModelRetry {
        rein_core::retry::SameModelRetry::NONE
    }
    /// Whether a call that timed out after it was sent may be sent to the
    /// same model again under the retry policy. A run's may (its policy
    /// decides); a gateway call's only when its binding says
    /// `retry_timeouts`: the provider may still be generating, and billing,
    /// the first one.
    fn resends_timeouts(&self) -> bool {
        true
    }
    /// A call is about to be sent.
    fn calling(&self) {}
    /// A link is rate limited until `until`: its provider said when to
    /// come back (a 429's `Retry-After`, or the pause it set), or rein's
    /// own limit on it admits no call before then. A host answering a
    /// caller (the gateway's `Retry-After`) keeps the earliest.
    fn rate_limited_until(&self, until: rein_core::Instant) {
        let _ = until;
    }
    /// Whether one more model retry, waiting `delay`, fits the host's own
    /// ceiling on model retries (it is counted when it does); `Err` says
    /// why not.
    fn allow_model_retry(&self, delay: std::time::Duration) -> Result<(), String> {
        let _ = delay;
        Ok(())
    }
    /// A failed call consumed `tokens` (charged to the host's budget by the
    /// chain; this is for the host's own counters).
    fn spent(&self, tokens: u64) {
        let _ = tokens;
    }
    /// A model call failed so (`hint`: what it said besides its category).
    fn failed(&self, category: rein_core::Category, hint: rein_core::advice::FailureHint) {
        let _ = (category, hint);
    }
    /// What the provider counted for the prompt of the last answered call
    /// of this host's transcript (0 when none): the prompt estimate of the
    /// next call builds on it.
    fn last_input_tokens(&self) -> u64 {
        0
    }
    /// `provider`'s `model` answered, using `usage`.
    fn answered(&self, provider: &str, model: &str, usage: &TokenUsage) {
        let _ = (provider, model, usage);
    }
    /// The cost account the host's model calls spend from (`tenant/agent`
    /// for a run), whose `[breakers.cost]` arm every call passes; `None`:
    /// no cost arm (a gateway request, which names no agent).
    fn cost_account(&self) -> Option<String> {
        None
    }
    /// What a success of the host's work is worth, against which a model
    /// retry's expected value is weighed; `None` (a gateway request):
    /// retries are decided without it.
    fn value_of_success(&self) -> Option<rein_core::deadline::Cost> {
        None
    }
}

/// A model binding's chain, borrowed: the primary, the links tried after a
/// transient failure, and the larger-context links tried after an overflow.
#[derive(Clone, Copy)]
pub(crate) struct Chain<'a> {
    pub(crate) primary: LinkRef<'a>,
    pub(crate) fallbacks: &'a [ModelLink],
    pub(crate) context: &'a [ModelLink],
}

/// One link of a chain, borrowed.
#[derive(Clone, Copy)]
pub(crate) struct LinkRef<'a> {
    pub(crate) provider: &'a Arc<dyn ModelProvider>,
    pub(crate) model: &'a str,
    pub(crate) price: Option<Price>,
    /// The most output tokens the model accepts per answer.
    pub(crate) max_output: Option<u32>,
}

impl<'a> From<&'a ModelLink> for LinkRef<'a> {
    fn from(link: &'a ModelLink) -> Self {
        LinkRef {
            provider: &link.provider,
            model: &link.model,
            price: link.price,
            max_output: link.max_output_tokens,
        }
    }
}

/// How a turn is wanted: whole, or as a stream (committed to a link at
/// its first event).
#[derive(Clone, Copy)]
pub(crate) enum Mode {
    /// The whole answer.
    Complete,
    /// A stream, with these first-byte and idle limits.
    Stream(StreamSettings),
    /// The embeddings of the request's inputs (its user messages' texts),
    /// through the same breakers, slots, retries and fallbacks as a turn.
    Embed,
}

/// What a link gave.
pub(crate) enum Reply {
    /// The whole answer.
    Complete(ModelResponse),
    /// The embeddings asked for ([`Mode::Embed`]).
    Embedded(Embeddings),
    /// The first event, and the rest of the stream.
    Stream {
        first: StreamEvent,
        rest: TurnStream,
    },
}

/// A turn's answer and the link that gave it: cost and the model on record
/// are the answering link's, never the primary's.
pub(crate) struct Answered {
    pub(crate) reply: Reply,
    /// What the answering attempt reserved, to be settled with its usage.
    pub(crate) reservation: ceiling::Reservation,
    pub(crate) price: Option<Price>,
    pub(crate) provider: String,
    pub(crate) model: String,
    /// Whether a link other than the primary answered.
    pub(crate) fell_back: bool,
}
