//! The model gateway: `POST /v1/chat/completions` (OpenAI's wire format,
//! [`openai`]), `POST /v1/responses` (OpenAI's Responses API,
//! [`mod@responses`]) and `POST /v1/messages` (Anthropic's, [`anthropic`]),
//! answered by a configured model binding through the same breakers,
//! fallback chains, provider slots and retry budgets as runs; and the
//! bindings themselves, `GET /v1/models` ([`models`]), in the shape of the
//! caller's API ([`dialect`]).
//!
//! # Why
//!
//! Teams want rein's guarantees for plain model calls too, from the
//! clients they already use: an OpenAI or Anthropic SDK pointed at
//! `rein serve` (only its base URL changed) gets a provider that stays up.
//! The request's `model` names a `[models.*]` binding; the response says
//! which model really answered (`Rein-Model`, `Rein-Fallback`, and the
//! body's `model`).
//!
//! # One call, three wire formats
//!
//! Everything but the shape of the bytes is here, once: reading the body
//! and the deadline, the idempotency key, the binding lookup, the output
//! ceiling, the model chain, the answer's headers. A `Wire` only parses
//! its request into a `Call` and renders the answer (whole, or as its
//! server-sent events), so every endpoint keeps the same guarantees by
//! construction rather than by copies kept in step.
//!
//! # Output ceilings
//!
//! The client's output ceiling is never lowered silently. Above the
//! documented output cap of the binding's primary model it is refused with
//! the 400 the real API sends, before any call. Sent lower than asked — to
//! a fallback with a smaller cap, or because the budget left less — the
//! answer says so in [`MAX_TOKENS_HEADER`] (`Rein-Max-Tokens: 1000;
//! reason=cap`), as the call's `model_call_started` event does in
//! `max_tokens` and `max_tokens_limited_by`.
//!
//! # Structured output
//!
//! A `response_format` asking for JSON is carried in the request's options
//! to every link; each provider sends it as its API honours it (an
//! OpenAI-compatible one unchanged, an Anthropic one as a forced answer
//! tool), and the model chain checks every answer against it
//! ([`ResponseFormat`](rein_engine::provider::ResponseFormat)): prose, or
//! JSON that does not fit the schema, fails its link, so the answer is the
//! next link's or an explicit error — never a 200 the client's parser
//! then fails on.
//!
//! # Cut streams
//!
//! A streamed answer that fails after its first token is recovered when its
//! binding says `recover_streams` (the default): continued from the text
//! sent, or regenerated and forwarded only when it extends that text
//! ([`recovering`]); its last event says so (`"rein": {"recoveries": …}`).
//! One that is not, or cannot be, ends with the wire format's in-band error
//! event and without its terminator (`[DONE]`, `response.completed`,
//! `message_stop`): a truncated stream is never passed off as a complete
//! answer, and the SDKs raise instead of returning the text so far.

pub mod anthropic;
pub mod count_tokens;
pub mod dialect;
pub mod embeddings;
pub mod key_budget;
pub mod models;
pub mod openai;
mod parts;
pub mod responses;
pub mod spend_book;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use rein_core::TenantId;
use rein_core::event::{LinkName, StreamRecovered};
use rein_core::header::DEADLINE_HEADER;
use rein_core::registry::BindingKind;
use rein_engine::provider::{ModelRequest, ModelResponse, TurnStream};
use rein_engine::run::{
    ModelAnswer, ModelAsk, ModelBinding, ModelError, ModelReply, Resume, recovering,
};
use serde_json::json;

pub use anthropic::messages;
pub use embeddings::embeddings;
pub use openai::chat_completions;
pub use responses::responses;
// The gateway's response headers, defined with every other rein header.
pub use rein_core::header::{FALLBACK_HEADER, IGNORED_HEADER, MAX_TOKENS_HEADER, MODEL_HEADER};

use crate::api::idempotency;
use crate::api::runs::Answer;
use crate::http::problem::Problem;
use crate::http::state::AppState;

/// How long a gateway call may take when the client sets no
/// `Rein-Deadline-Ms` and its binding names no `deadline`.
pub use rein_core::registry::DEFAULT_GATEWAY_DEADLINE;

/// A wire format's server-sent events, as the response body streams them.
type EventStream = Pin<Box<dyn Stream<Item = Bytes> + Send>>;

/// The first member of the JSON object `body` that is not in `read`, in
/// key order: a second, cheap pass over the top-level keys (the values are
/// skipped, not built), so a member the typed request does not name is
/// refused instead of dropped. A member sent as `null` is not given, as
/// both OpenAI and Anthropic read it.
fn unread_member(body: &[u8], read: &[&str]) -> Option<String> {
    let members: std::collections::BTreeMap<String, Option<serde::de::IgnoredAny>> =
        serde_json::from_slice(body).ok()?;
    members
        .into_iter()
        .filter(|(_, value)| value.is_some())
        .map(|(member, _)| member)
        .find(|m| !read.contains(&m.as_str()))
}

/// A request of any wire format, read into rein's terms.
struct Call<W> {
    /// The `[models.*]` binding asked.
    binding: String,
    /// The caller's tenant (its key's), for the metrics.
    tenant: Option<TenantId>,
    request: ModelRequest,
    /// The member the client's output ceiling came in, for the words of a
    /// refusal.
    max_tokens_param: &'static str,
    stream: bool,
    /// The caller's `traceparent`: the parent of the call's span.
    trace_parent: Option<rein_engine::telemetry::TraceParent>,
    /// Members of the request accepted by design and sent to no model
    /// (`store`, `metadata`): named in [`IGNORED_HEADER`].
    ignored: Vec<&'static str>,
    /// Charges what the call's attempts spend to the caller's key.
    spender: Option<crate::gateway::key_budget::Spender>,
    /// What only this wire format needs to render the answer.
    wire: W,
}

/// A client's output ceiling above the documented cap of the binding's
/// primary model.
struct OverCap {
    /// The member it came in (`max_tokens`, …).
    param: &'static str,
    asked: u64,
    cap: u32,
    /// The primary's model name.
    model: String,
}

/// One wire format of the gateway: how its requests parse and its answers
/// and errors look. The call between them is [`handle`]'s.
trait Wire: Sized + Send + Sync + 'static {
    /// The route (part of an idempotency key's fingerprint).
    const PATH: &'static str;

    /// Reads the body, naming the offending member of a bad one.
    fn parse(body: &[u8]) -> Result<Call<Self>, Problem>;

    /// The 400 for a ceiling above the primary's cap, in the real API's
    /// words.
    fn over_cap(over: &OverCap) -> Problem;

    /// The problem of a binding that gave no answer.
    fn failed(e: &ModelError) -> Problem;

    /// The problem of a `Rein-Deadline-Ms` that is not a positive number.
    fn bad_deadline(message: String) -> Problem;

    /// The whole answer's body.
    fn body(call: &Call<Self>, model: &str, response: &ModelResponse) -> serde_json::Value;

    /// Whether the route asks for embeddings rather than a turn
    /// ([`rein_engine::run::Engine::embed`]); its answer is then
    /// [`Wire::embedded_body`].
    const EMBEDS: bool = false;

    /// The body of embeddings, for a wire that [`Wire::EMBEDS`].
    fn embedded_body(
        call: &Call<Self>,
        model: &str,
        embeddings: &rein_engine::provider::Embeddings,
    ) -> serde_json::Value {
        let _ = (call, model, embeddings);
        serde_json::Value::Null
    }

    /// Whether the wire's stream opens by saying the prompt's tokens
    /// (Anthropic's `message_start`): [`Wire::events`] is then given rein's
    /// bound of them (as the answering attempt reserved them), for an
    /// upstream that says its count only at the end.
    const ANNOUNCES_PROMPT: bool = false;

    /// The answer as server-sent events, ending with the wire's in-band
    /// error event (and no terminator) when `turn` fails; `prompt` is
    /// rein's bound of the prompt's tokens when [`Wire::ANNOUNCES_PROMPT`].
    fn events(
        call: Call<Self>,
        model: String,
        turn: TurnStream,
        prompt: Option<u64>,
    ) -> EventStream;
}

/// A gateway request of wire format `W`, from its raw body to its answer.
async fn handle<W: Wire>(
    state: Arc<AppState>,
    caller: crate::http::auth::Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let tenant = caller.tenant.clone();
    let body = match crate::api::runs::raw_body(&state, body) {
        Ok(b) => b,
        Err(problem) => return problem.into_response(),
    };
    let key = match idempotency::key(&state, &headers, &body) {
        Ok(key) => key,
        Err(problem) => return problem.into_response(),
    };
    let deadline = match deadline::<W>(&headers) {
        Ok(d) => d,
        Err(problem) => return problem.into_response(),
    };
    let mut call = match W::parse(&body) {
        Ok(call) => call,
        Err(problem) => return problem.into_response(),
    };
    call.tenant = Some(tenant.clone());
    call.trace_parent = crate::http::trace_context::from_headers(&headers);
    if call.stream {
        // A key over its budget asks no model.
        match crate::gateway::key_budget::admit(&state, &caller).await {
            Ok(spender) => call.spender = Some(spender),
            Err(problem) => return problem.into_response(),
        }
        // Dropped with the response when the client goes away: the
        // provider call is aborted with it.
        return stream(state, call, deadline).await;
    }
    match key {
        None => match admitted(state, caller, call, deadline).await {
            Ok(answer) => answer.into_response(),
            Err(problem) => problem.into_response(),
        },
        Some(key) => {
            let s = state.clone();
            // Checked where the call runs: a replay of a stored answer is
            // not refused (it spends nothing).
            idempotency::guarded(&state, &tenant, &key, "POST", W::PATH, &body, move || {
                admitted(s, caller, call, deadline)
            })
            .await
        }
    }
}

/// A whole answer for a caller whose key may still spend (a key over its
/// budget asks no model: its 429).
async fn admitted<W: Wire>(
    state: Arc<AppState>,
    caller: crate::http::auth::Caller,
    mut call: Call<W>,
    deadline: Option<Duration>,
) -> Result<Answer, Problem> {
    call.spender = Some(crate::gateway::key_budget::admit(&state, &caller).await?);
    complete(state, call, deadline).await
}

/// The client's `Rein-Deadline-Ms`; `None` without one (the binding's
/// `deadline` then applies).
fn deadline<W: Wire>(headers: &HeaderMap) -> Result<Option<Duration>, Problem> {
    let Some(value) = headers.get(DEADLINE_HEADER) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(|ms| Some(Duration::from_millis(ms)))
        .ok_or_else(|| {
            W::bad_deadline(format!(
                "{DEADLINE_HEADER} must be a positive number of milliseconds"
            ))
        })
}

/// The 404 of a binding that is not configured, listing those that are.
fn unknown_binding(state: &AppState, binding: &str) -> Problem {
    let known: Vec<&str> = state.models.keys().map(String::as_str).collect();
    let message = format!(
        "there is no model binding `{binding}`; known: {}",
        if known.is_empty() {
            "none (define [models.NAME] in the config)".to_owned()
        } else {
            known.join(", ")
        }
    );
    Problem::new(
        StatusCode::NOT_FOUND,
        "model-not-found",
        "Unknown model binding",
        message.clone(),
    )
    .with(json!({
        "error": {"message": message, "type": "invalid_request_error",
                  "param": "model", "code": "model_not_found"},
        "known_models": known,
    }))
}

/// Asks the binding; the unknown-binding and failure problems.
async fn ask<W: Wire>(
    state: &AppState,
    call: &Call<W>,
    deadline: Option<Duration>,
    stream: bool,
) -> Result<ModelAnswer, Problem> {
    let Some(binding) = state.models.get(&call.binding) else {
        return Err(unknown_binding(state, &call.binding));
    };
    let wanted = if W::EMBEDS {
        BindingKind::Embedding
    } else {
        BindingKind::Chat
    };
    if binding.kind != wanted {
        let (route, what) = if W::EMBEDS {
            ("POST /v1/embeddings", "a chat")
        } else {
            ("a chat route", "an embedding")
        };
        return Err(W::failed(&ModelError {
            category: rein_core::Category::InvalidArguments,
            message: format!(
                "`{}` is {what} binding, which {route} cannot ask (kind = \"{}\" in [models.{}])",
                binding.name,
                binding.kind.as_str(),
                binding.name
            ),
            retry_after: None,
        }));
    }
    if let Some(over) = over_cap(binding, call) {
        return Err(W::over_cap(&over));
    }
    let ask = ModelAsk {
        request: call.request.clone(),
        deadline: deadline.unwrap_or(binding.deadline),
        stream,
        cancel: rein_engine::run::CancellationToken::new(),
        observer: call.spender.as_ref().map(|s| s.observer(stream)),
        tenant: call.tenant.clone(),
        trace_parent: call.trace_parent.clone(),
    };
    let answer = if W::EMBEDS {
        state.engine.embed(binding, ask).await
    } else {
        state.engine.ask_model(binding, ask).await
    };
    answer.map_err(|e| W::failed(&e))
}

/// The client's output ceiling when it is above the documented cap of the
/// binding's primary model; `None` when it fits (or the model has no cap).
///
/// # Why not lower it
///
/// A client that asks for 50,000 tokens of gpt-4o-mini and silently gets
/// 16,384 reads a `length` finish as its own ceiling; the real API refuses
/// the request, so rein does too, and the client learns the cap.
fn over_cap<W>(binding: &ModelBinding, call: &Call<W>) -> Option<OverCap> {
    let asked = call.request.max_tokens?;
    let cap = binding.primary.max_output_tokens?;
    (asked > u64::from(cap)).then(|| OverCap {
        param: call.max_tokens_param,
        asked,
        cap,
        model: binding.primary.model.clone(),
    })
}

/// The [`MAX_TOKENS_HEADER`] value when the ceiling sent to the answering
/// model is below what the client asked: `<sent>; reason=budget` when the
/// budget set it, `<sent>; reason=cap` when the answering model's cap did.
fn lowered<W>(call: &Call<W>, answer: &ModelAnswer) -> Option<String> {
    let asked = call.request.max_tokens?;
    let sent = answer.max_tokens?;
    (sent < asked).then(|| {
        let reason = if answer.max_tokens_limited_by.is_some() {
            "budget"
        } else {
            "cap"
        };
        format!("{sent}; reason={reason}")
    })
}

/// `Retry-After` for a failure: whole seconds, rounded up, at least 1,
/// until the first open circuit admits again or the first rate-limited
/// link admits a call ([`ModelError::retry_after`]); `None` when rein does
/// not know (a provider's 429 that said nothing about when).
fn retry_after(e: &ModelError) -> Option<u32> {
    e.retry_after.map(|d| {
        u32::try_from(d.as_millis().div_ceil(1000))
            .unwrap_or(u32::MAX)
            .max(1)
    })
}

/// The headers that say who answered, a lowered ceiling, and what the
/// answer did not honour.
fn answer_headers<W>(
    state: &AppState,
    call: &Call<W>,
    answer: &ModelAnswer,
) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        (
            MODEL_HEADER,
            format!("{}/{}", answer.provider, answer.model),
        ),
        (FALLBACK_HEADER, answer.fell_back.to_string()),
    ];
    if let Some(lowered) = lowered(call, answer) {
        headers.push((MAX_TOKENS_HEADER, lowered));
    }
    let ignored = ignored(state, call, answer);
    if !ignored.is_empty() {
        headers.push((IGNORED_HEADER, ignored.join(", ")));
    }
    headers
}

/// The request's members the answer did not honour: those the wire
/// accepts by design and sends nowhere, then those the answering link's
/// API has no equivalent for.
fn ignored<W>(state: &AppState, call: &Call<W>, answer: &ModelAnswer) -> Vec<String> {
    let by_link = state
        .models
        .get(&call.binding)
        .and_then(|binding| {
            std::iter::once(&binding.primary)
                .chain(&binding.fallbacks)
                .chain(&binding.context_fallbacks)
                .find(|link| link.provider.name() == answer.provider)
        })
        .map(|link| link.provider.ignored_options(&call.request.options))
        .unwrap_or_default();
    call.ignored
        .iter()
        .map(|m| (*m).to_owned())
        .chain(by_link)
        .collect()
}

/// A non-streaming answer, whole (so it can be stored and replayed).
async fn complete<W: Wire>(
    state: Arc<AppState>,
    call: Call<W>,
    deadline: Option<Duration>,
) -> Result<Answer, Problem> {
    let answer = ask(&state, &call, deadline, false).await;
    // Charged before the answer is returned (or the failure reported): the
    // key's next call sees it.
    if let Some(spender) = &call.spender {
        spender.flush().await;
    }
    let answer = answer?;
    let headers = answer_headers(&state, &call, &answer);
    let body = match &answer.reply {
        ModelReply::Complete(response) => W::body(&call, &answer.model, response),
        ModelReply::Embedded(embeddings) => W::embedded_body(&call, &answer.model, embeddings),
        ModelReply::Stream(_) => {
            return Err(Problem::internal(
                "a stream where a whole answer was asked for",
            ));
        }
    };
    Ok(Answer {
        status: StatusCode::OK,
        body: serde_json::to_vec(&body).unwrap_or_default(),
        location: None,
        headers,
        provisional: false,
    })
}

/// Asks `call`'s binding for the rest of its answer when its stream is
/// cut after the first token ([`recovering`]), within what is left of the
/// call's `deadline` (counted from `started`), charged to the caller's key
/// like the call itself.
fn resume<W>(
    state: &Arc<AppState>,
    call: &Call<W>,
    deadline: Duration,
    started: std::time::Instant,
) -> Resume {
    let state = state.clone();
    let binding = call.binding.clone();
    let request = call.request.clone();
    let observer = call.spender.as_ref().map(|s| s.observer(true));
    let tenant = call.tenant.clone();
    let trace_parent = call.trace_parent.clone();
    Box::new(move |cut| {
        let (state, binding, request) = (state.clone(), binding.clone(), request.clone());
        let (observer, tenant, trace_parent) =
            (observer.clone(), tenant.clone(), trace_parent.clone());
        Box::pin(async move {
            let left = deadline.saturating_sub(started.elapsed());
            let Some(binding) = state.models.get(&binding).filter(|_| !left.is_zero()) else {
                return Err(ModelError {
                    category: rein_core::Category::BudgetExhausted,
                    message: "the call's deadline ran out".to_owned(),
                    retry_after: None,
                });
            };
            let ask = ModelAsk {
                request,
                deadline: left,
                stream: true,
                cancel: rein_engine::run::CancellationToken::new(),
                observer,
                tenant,
                trace_parent,
            };
            state.engine.continue_answer(binding, ask, &cut).await
        })
    })
}

/// The mark a recovered stream's last event carries, as an extension
/// member (`"rein": {"recoveries": [...]}`), which clients that do not
/// know it ignore; `None` for a stream that was not recovered. The
/// response's headers cannot say it (they were sent with the first
/// token), and SSE clients read no trailers.
fn recovered_mark(recoveries: &[StreamRecovered]) -> Option<serde_json::Value> {
    let link = |l: &LinkName| format!("{}/{}", l.provider, l.model);
    (!recoveries.is_empty()).then(|| {
        json!({"recoveries": recoveries.iter().map(|r| json!({
            "cut": link(&r.cut),
            "category": r.category.as_str(),
            "sent_chars": r.sent_chars,
            "recovery": r.recovery.as_str(),
            "answered": r.answered.as_ref().map(link),
        })).collect::<Vec<_>>()})
    })
}

/// A streamed answer: the wire's server-sent events.
async fn stream<W: Wire>(
    state: Arc<AppState>,
    call: Call<W>,
    deadline: Option<Duration>,
) -> Response {
    let started = std::time::Instant::now();
    let answer = match ask(&state, &call, deadline, true).await {
        Ok(a) => a,
        Err(problem) => return problem.into_response(),
    };
    let answer_headers = answer_headers(&state, &call, &answer);
    let ModelReply::Stream(turn) = answer.reply else {
        return Problem::internal("a whole answer where a stream was asked for").into_response();
    };
    let turn = match state.models.get(&call.binding) {
        Some(binding) if binding.recover_streams => {
            let deadline = deadline.unwrap_or(binding.deadline);
            let link = LinkName {
                provider: answer.provider.clone(),
                model: answer.model.clone(),
            };
            recovering(turn, link, resume(&state, &call, deadline, started))
        }
        _ => turn,
    };
    let prompt = W::ANNOUNCES_PROMPT.then_some(answer.prompt_tokens);
    let events = W::events(call, answer.model, turn, prompt);
    let mut response = Response::new(Body::from_stream(futures_util::StreamExt::map(
        events,
        Ok::<_, std::convert::Infallible>,
    )));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    for (name, value) in answer_headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    response
}

/// The members a request type's OpenAPI schema lists, sorted: what the
/// gateway's hand-kept `READ` list of that route must be.
#[cfg(test)]
fn schema_members<T: utoipa::PartialSchema>() -> Vec<String> {
    use utoipa::openapi::{RefOr, Schema};
    let RefOr::T(Schema::Object(object)) = T::schema() else {
        panic!("a request's schema is an object")
    };
    let mut members: Vec<String> = object.properties.keys().cloned().collect();
    members.sort_unstable();
    members
}
