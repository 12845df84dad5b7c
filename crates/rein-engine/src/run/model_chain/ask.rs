//! A model binding asked from outside a run (the OpenAI-compatible
//! gateway), through the same chain as runs.

use std::collections::BTreeMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;

use futures_util::StreamExt;
use rein_core::breaker::ArmKind;
use rein_core::deadline::Budget;
use rein_core::registry::Price;
use rein_core::retry::{RetryPolicy, SameModelRetry};
use rein_core::{Category, LatencyProfile};

use super::{Chain, LinkRef, Mode, Reply, TurnHost};
use crate::provider::{Embeddings, ModelRequest, ModelResponse, StreamSettings, TurnStream};
use crate::run::Engine;
use crate::run::binding::ModelLink;
use crate::run::emitter::{Correlation, Emitter};
use crate::run::report::End;

/// A model binding as callers outside a run ask it (the OpenAI-compatible
/// gateway): its chain and the limits every call of it shares with runs.
#[derive(Clone, Debug)]
pub struct ModelBinding {
    /// The binding's name (the `model` a gateway client sends).
    pub name: String,
    /// What its models answer: turns ([`Engine::ask_model`]) or
    /// embeddings ([`Engine::embed`]).
    pub kind: rein_core::registry::BindingKind,
    /// The first link.
    pub primary: ModelLink,
    /// Links tried in order after a transient failure.
    pub fallbacks: Vec<ModelLink>,
    /// Larger-context links tried in order after a context overflow.
    pub context_fallbacks: Vec<ModelLink>,
    /// Calls in flight at once per provider name, shared with runs.
    pub provider_limits: BTreeMap<String, NonZeroU32>,
    /// Token buckets per provider name (`tokens_per_minute`), shared with
    /// runs.
    pub provider_tokens: BTreeMap<String, rein_core::registry::TokenLimit>,
    /// The retry policy of its calls.
    pub retry: RetryPolicy,
    /// The latency profile of a call, for retry and deadline decisions.
    pub model_latency: LatencyProfile,
    /// First-byte and idle limits when the caller streams.
    pub stream: StreamSettings,
    /// How a link retries its own model before the chain falls back
    /// (`retry_before_fallback`, `retry_after_max`, `retry_timeouts`).
    pub same_model: SameModelRetry,
    /// How long a gateway call may take when its client sends no
    /// deadline (`deadline`).
    pub deadline: std::time::Duration,
    /// Whether a stream cut after its first token is recovered
    /// (`recover_streams`; see [`recovering`](crate::run::recovering)).
    pub recover_streams: bool,
}

/// One request to a [`ModelBinding`].
pub struct ModelAsk {
    /// The request; its `model` is replaced by each link's.
    pub request: ModelRequest,
    /// How long the whole call may take, fallbacks and retries included.
    pub deadline: std::time::Duration,
    /// Whether the caller wants the answer as a stream.
    pub stream: bool,
    /// Fires when the caller went away.
    pub cancel: tokio_util::sync::CancellationToken,
    /// Sees every decision (slot waits, breaker transitions, retries,
    /// fallbacks) as it happens.
    pub observer: Option<crate::run::Observer>,
    /// The caller's tenant, for the metrics' `tenant` label (`none` when
    /// absent); a call outside a run has no agent.
    pub tenant: Option<rein_core::TenantId>,
    /// The caller's trace context (`traceparent`): the parent of the
    /// call's span when traces are on.
    pub trace_parent: Option<crate::telemetry::TraceParent>,
}

/// A binding's answer and the link that gave it.
pub struct ModelAnswer {
    /// The provider that answered.
    pub provider: String,
    /// The model that answered.
    pub model: String,
    /// Whether a link other than the primary answered.
    pub fell_back: bool,
    /// Its price, when known.
    pub price: Option<Price>,
    /// The output ceiling sent to the answering link: the least of its
    /// model's cap, the caller's `max_tokens` and what the budget left;
    /// `None` when nothing limited it.
    pub max_tokens: Option<u64>,
    /// The budget dimension that set [`max_tokens`](Self::max_tokens)
    /// below the model's cap and the caller's ask, if one did.
    pub max_tokens_limited_by: Option<rein_core::deadline::Dimension>,
    /// rein's upper bound of the prompt's tokens, as the answering attempt
    /// reserved them (see [`crate::run::prompt_estimate`]): what a gateway
    /// can say of the prompt before the provider counts it.
    pub prompt_tokens: u64,
    /// The answer.
    pub reply: ModelReply,
}

/// A whole answer, or a stream committed to the answering link: its first
/// event already arrived, so failures from here on are in-band; or the
/// embeddings [`Engine::embed`] asked for.
pub enum ModelReply {
    /// The whole answer.
    Complete(ModelResponse),
    /// The stream, first event included.
    Stream(TurnStream),
    /// The embeddings of the request's inputs.
    Embedded(Embeddings),
}

/// Why a binding gave no answer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ModelError {
    /// The failure's category (of the first link's failure when every link
    /// failed).
    pub category: Category,
    /// For a human; names every link tried when all failed.
    pub message: String,
    /// How long until the caller may try again, when rein knows (for its
    /// `Retry-After`): with every link's circuit open, until the first of
    /// them admits a probe again; rate limited, until the first link's
    /// provider said to come back or rein's limit on it admits a call.
    /// `None` otherwise (a 429 that said nothing about when).
    pub retry_after: Option<std::time::Duration>,
}

/// The host of a call from outside a run.
struct AskHost<'a> {
    binding: &'a ModelBinding,
    emitter: Emitter,
    cancel: &'a tokio_util::sync::CancellationToken,
    /// The earliest instant a rate-limited link admits a call again.
    limited_until: std::sync::Mutex<Option<rein_core::Instant>>,
}

impl TurnHost for AskHost<'_> {
    fn emitter(&self) -> &Emitter {
        &self.emitter
    }

    fn cancelled(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.cancel.cancelled())
    }

    fn retry(&self) -> &RetryPolicy {
        &self.binding.retry
    }

    fn model_latency(&self) -> LatencyProfile {
        self.binding.model_latency
    }

    fn provider_limits(&self) -> &BTreeMap<String, NonZeroU32> {
        &self.binding.provider_limits
    }

    fn provider_tokens(&self) -> &BTreeMap<String, rein_core::registry::TokenLimit> {
        &self.binding.provider_tokens
    }

    fn same_model(&self) -> SameModelRetry {
        self.binding.same_model
    }

    fn resends_timeouts(&self) -> bool {
        self.binding.same_model.retry_timeouts
    }

    fn rate_limited_until(&self, until: rein_core::Instant) {
        let mut earliest = self
            .limited_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *earliest = Some(earliest.map_or(until, |e| e.min(until)));
    }
}

impl Engine {
    /// How long until the first open arm of `chain`'s providers admits a
    /// probe again.
    fn reopens_in(&self, chain: &Chain<'_>) -> Option<std::time::Duration> {
        let now = self.clock.now();
        let breakers = self.shared.breakers();
        std::iter::once(chain.primary)
            .chain(chain.fallbacks.iter().map(LinkRef::from))
            .filter_map(|l| {
                let local = breakers
                    .get(ArmKind::Provider, l.provider.name())
                    .and_then(|arm| arm.open_until())
                    .map(|until| until.saturating_duration_since(now));
                // Another node's opening, when breakers are shared.
                let shared = self.shared_reopens_in(l.provider.name());
                local.max(shared)
            })
            .min()
    }

    /// Asks `binding` one turn from outside a run — through the same
    /// breaker arms, provider slots, retry budgets and fallback rules as
    /// runs — within `ask.deadline`.
    ///
    /// # Errors
    ///
    /// [`ModelError`] when no link answered: the first failure's category
    /// (`circuit_open`, `rate_limited`, `unauthorized`, `context_overflow`,
    /// `budget_exhausted` when the deadline ran out, `cancelled`, …).
    pub async fn ask_model(
        &self,
        binding: &ModelBinding,
        ask: ModelAsk,
    ) -> Result<ModelAnswer, ModelError> {
        let mode = if ask.stream {
            Mode::Stream(binding.stream)
        } else {
            Mode::Complete
        };
        self.ask_binding(binding, ask, mode).await
    }

    /// The embeddings of `ask.request`'s inputs (the texts of its user
    /// messages, in order) from `binding`'s embedding model, through the
    /// same breaker arms, provider slots, retries and fallbacks as a turn
    /// (`ask.stream` is not read). A link whose provider has no embeddings
    /// API is passed over.
    ///
    /// # Errors
    ///
    /// As [`Engine::ask_model`].
    pub async fn embed(
        &self,
        binding: &ModelBinding,
        ask: ModelAsk,
    ) -> Result<ModelAnswer, ModelError> {
        self.ask_binding(binding, ask, Mode::Embed).await
    }

    pub(super) async fn ask_binding(
        &self,
        binding: &ModelBinding,
        ask: ModelAsk,
        mode: Mode,
    ) -> Result<ModelAnswer, ModelError> {
        let limits = rein_core::deadline::BudgetLimits::new(
            ask.deadline.max(std::time::Duration::from_millis(1)),
        )
        .map_err(|e| ModelError {
            category: Category::InvalidArguments,
            message: e.to_string(),
            retry_after: None,
        })?;
        let mut budget = Budget::start(limits, self.clock.now());
        let tenant = ask
            .tenant
            .as_ref()
            .map_or(crate::metrics::NONE, rein_core::TenantId::as_str);
        // The call's span ends when the last holder of its trace lets go:
        // here for a whole answer, with its stream for a streamed one.
        let trace = self
            .shared
            .telemetry
            .as_ref()
            .map(|t| t.gateway(ask.trace_parent.as_ref(), tenant, &binding.name));
        let host = AskHost {
            binding,
            emitter: Emitter::new(
                crate::run::new_id::<rein_core::RunId>(),
                self.clock.clone(),
                ask.observer,
            )
            .with_metrics(
                self.shared.metrics.clone(),
                self.shared.metrics.scope(tenant, crate::metrics::NONE),
            )
            .with_trace(trace)
            .without_run_in_logs(),
            cancel: &ask.cancel,
            limited_until: std::sync::Mutex::new(None),
        };
        let chain = Chain {
            primary: LinkRef::from(&binding.primary),
            fallbacks: &binding.fallbacks,
            context: &binding.context_fallbacks,
        };
        let answered = self
            .ask_chain(
                &host,
                &Correlation::default(),
                chain,
                &ask.request,
                &mut budget,
                mode,
            )
            .await;
        // Nothing of a call outside a run is stored: the observer saw it,
        // and its budget is the call's own (a deadline): nothing to settle.
        drop(host.emitter.drain());
        let now = self.clock.now();
        // The earliest a rate-limited link admits a call again, if that is
        // still ahead.
        let limited = host
            .limited_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .filter(|until| *until > now)
            .map(|until| until.saturating_duration_since(now));
        let answered = answered.map_err(|end| {
            let (category, message) = match end {
                End::ModelFailed(category, message) => (category, message),
                // The deadline ran out because a rate limit outlasts it (a
                // provider's Retry-After beyond it): the caller is told
                // when to come back (429 with Retry-After), not that time
                // ran out.
                End::Budget(exhausted) if limited.is_some() => (
                    Category::RateLimited,
                    format!(
                        "rate limited beyond the call's deadline (the provider admits a call \
                         again only after it ran out): {exhausted}"
                    ),
                ),
                End::Budget(exhausted) => (
                    Category::BudgetExhausted,
                    format!("the call's deadline ran out: {exhausted}"),
                ),
                End::Cancelled(message) => (Category::Cancelled, message),
                other => (Category::Unknown, format!("{other:?}")),
            };
            let retry_after = match category {
                Category::CircuitOpen => self.reopens_in(&chain),
                // A limit that lifted already: try again at once (the
                // gateway's header says at least 1 s).
                Category::RateLimited => limited.or_else(|| {
                    host.limited_until
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .map(|_| std::time::Duration::ZERO)
                }),
                _ => None,
            };
            ModelError {
                category,
                message,
                retry_after,
            }
        })?;
        let (max_tokens, max_tokens_limited_by, prompt_tokens) = (
            answered.reservation.max_tokens,
            answered.reservation.limited_by,
            answered.reservation.prompt,
        );
        let _unsettled = answered.reservation;
        let reply = match answered.reply {
            Reply::Complete(response) => ModelReply::Complete(response),
            Reply::Embedded(embeddings) => ModelReply::Embedded(embeddings),
            Reply::Stream { first, rest } => ModelReply::Stream(Box::pin(
                futures_util::stream::once(async { Ok(first) }).chain(rest),
            )),
        };
        Ok(ModelAnswer {
            provider: answered.provider,
            model: answered.model,
            fell_back: answered.fell_back,
            price: answered.price,
            max_tokens,
            max_tokens_limited_by,
            prompt_tokens,
            reply,
        })
    }
}
