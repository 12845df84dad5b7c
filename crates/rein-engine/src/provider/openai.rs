//! The OpenAI-compatible provider: Chat Completions with tools, streamed
//! or not.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rein_core::Failure;
use rein_core::continuation::Continuation;
use rein_core::output_field::{OutputField, output_field};
use rein_core::wire::anthropic::request::OutputConfig;
use rein_core::wire::openai;
use rein_core::wire::openai::request::{
    AudioFormat, ChatMessage, ChatRequest, ChatTool, ChatToolCall, Content, ContentPart,
    ImageDetail, ImageUrl, InputAudio, StreamOptions, ToolChoice, ToolChoiceMode,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::endpoint::{Api, Endpoint, KeyHeader};
use super::http::{encode, malformed, stream_error_failure};
use super::sse::{Decoder, SseEvent, Update, unparseable};
use super::stream::{Delta, StreamSettings, ToolCallDelta, collect_turn};
use super::{
    Embeddings, FinishReason, Message, ModelProvider, ModelRequest, ModelResponse, Part,
    StreamLimits, TokenUsage, ToolCall, TurnStream,
};
use crate::Timer;

/// Chat Completions over HTTP, against any OpenAI-compatible base URL.
///
/// One `reqwest::Client` (one connection pool, `TCP_NODELAY`) per provider,
/// never one per request. The call's timeout is the remainder of the run's
/// deadline, capped by the provider's own timeout.
///
/// [`stream`](ModelProvider::stream) asks for `"stream": true` with
/// `stream_options.include_usage`, and reads the chunks under the rules of
/// the `sse` driver (see [`StreamLimits`]). [`complete`](ModelProvider::complete)
/// sends one non-streamed request, unless
/// [`with_streaming`](Self::with_streaming) made it stream and assemble, so
/// that agent runs get the first-byte and idle limits too.
///
/// The output ceiling goes in the member the model takes: `max_tokens`, or
/// `max_completion_tokens` for OpenAI's reasoning models, as
/// [`rein_core::output_field::output_field`] decides from the provider's
/// configured fields ([`with_output_fields`](Self::with_output_fields))
/// and rein's table.
#[derive(Clone)]
pub struct OpenAiProvider {
    endpoint: Endpoint,
    /// `[providers.NAME.output_tokens_field]`: shared, never copied per
    /// request.
    output_fields: Arc<BTreeMap<String, OutputField>>,
    /// How the server continues an assistant prefix, when it says it does
    /// (`[providers.NAME] continuation`).
    continuation: Option<Continuation>,
}

/// The Chat Completions path and key header.
const CHAT_COMPLETIONS: Api = Api {
    path: "/chat/completions",
    key: KeyHeader::Bearer,
    headers: &[],
};

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.endpoint
            .debug_struct(f, "OpenAiProvider")
            .finish_non_exhaustive()
    }
}

impl OpenAiProvider {
    /// A provider named `name` at `base_url` (e.g. `http://127.0.0.1:8080/v1`),
    /// authenticating with `api_key` when given.
    pub fn new(
        name: &str,
        base_url: &str,
        api_key: Option<String>,
        timeout: Duration,
        client: reqwest::Client,
    ) -> Self {
        OpenAiProvider {
            endpoint: Endpoint::new(name, base_url, api_key, timeout, client, CHAT_COMPLETIONS),
            output_fields: Arc::default(),
            continuation: None,
        }
    }

    /// Says the server continues an assistant prefix, and how
    /// (`[providers.NAME] continuation`): a stream cut after its first
    /// token may then be continued here. Without it this provider refuses
    /// a [`continuation`](ModelRequest::continuation).
    pub fn with_continuation(mut self, continuation: Option<Continuation>) -> Self {
        self.continuation = continuation;
        self
    }

    /// Sends the output ceiling of each model named in `fields` in the
    /// member given there (`[providers.NAME.output_tokens_field]`); other
    /// models take rein's table's.
    pub fn with_output_fields(mut self, fields: BTreeMap<String, OutputField>) -> Self {
        self.output_fields = Arc::new(fields);
        self
    }

    /// The member `model`'s output ceiling is sent in.
    pub fn output_field(&self, model: &str) -> OutputField {
        output_field(&self.output_fields, model).0
    }

    /// Times the first-byte, idle and overall limits on `clock` instead of
    /// the system clock.
    pub fn with_clock(mut self, clock: Arc<dyn Timer>) -> Self {
        self.endpoint.clock = clock;
        self
    }

    /// Names the environment variable the key came from, for the log
    /// line of a rejected key.
    pub fn with_key_env(mut self, name: Option<&str>) -> Self {
        self.endpoint.key_env = name.map(str::to_owned);
        self
    }

    /// Makes [`complete`](ModelProvider::complete) stream the answer and
    /// assemble it, under `settings`' first-byte and idle limits.
    ///
    /// # Why
    ///
    /// A non-streamed call has only its overall timeout: a provider that
    /// accepts the request and then hangs holds the run for the whole
    /// allowance. A streamed one shows within seconds whether the model is
    /// producing anything.
    pub fn with_streaming(mut self, settings: StreamSettings) -> Self {
        self.endpoint.streaming = Some(settings);
        self
    }

    /// The request rein sends for `request`.
    ///
    /// # Errors
    ///
    /// An option, a tool definition or a part of a message not in this
    /// API's shape: a caller's mistake (the gateways pass what they read as
    /// this API reads it, and the registry generates the tools), refused
    /// unsent rather than sent half-read.
    fn body(&self, request: &ModelRequest) -> Result<ChatRequest, Failure> {
        let messages = request
            .messages
            .iter()
            .map(wire_message)
            .collect::<Result<_, _>>()
            .map_err(|what| self.not_carried(what))?;
        let mut body = ChatRequest {
            model: request.model.clone(),
            messages,
            stream: Some(false),
            ..ChatRequest::default()
        };
        if !request.tools.is_empty() {
            let tools = request
                .tools
                .iter()
                .map(|tool| {
                    ChatTool::deserialize(tool)
                        .map_err(|e| self.not_carried(format!("a tool definition: {e}")))
                })
                .collect::<Result<_, _>>()?;
            body.tools = Some(tools);
            // The tool members act on tools: without tools, the caller's
            // `tool_choice` and `parallel_tool_calls` are not sent (OpenAI
            // refuses them there), and nothing of the answer changes.
            body.tool_choice = Some(
                self.option(request, "tool_choice")?
                    .unwrap_or(ToolChoice::Mode(ToolChoiceMode::Auto)),
            );
            body.parallel_tool_calls = self.option(request, "parallel_tool_calls")?;
        }
        match (request.max_tokens, self.output_field(&request.model)) {
            (None, _) => {}
            (Some(max), OutputField::MaxCompletionTokens) => {
                body.max_completion_tokens = Some(max);
            }
            (Some(max), _) => body.max_tokens = Some(max),
        }
        // The caller's options, in this API's names. The members rein owns
        // (the model, the transcript, streaming, the tools and the output
        // ceiling) are never taken from them; those no member holds are
        // named by `ignored_options`.
        body.temperature = self.option(request, "temperature")?;
        body.top_p = self.option(request, "top_p")?;
        body.stop = self.option(request, "stop")?;
        body.seed = self.option(request, "seed")?;
        body.response_format = self.option(request, "response_format")?;
        body.user = self.option(request, "user")?;
        body.frequency_penalty = self.option(request, "frequency_penalty")?;
        body.presence_penalty = self.option(request, "presence_penalty")?;
        body.logit_bias = self.option(request, "logit_bias")?;
        body.service_tier = self.option(request, "service_tier")?;
        // The Messages API's effort is this API's reasoning effort.
        body.reasoning_effort = match self.option(request, "reasoning_effort")? {
            Some(effort) => Some(effort),
            None => self
                .option::<OutputConfig>(request, "output_config")?
                .and_then(|config| config.effort)
                .map(|effort| effort.as_str().to_owned()),
        };
        // A continuation, as this server reads one; refused in `carries`
        // when it reads none.
        if request.prefix().is_some() {
            match self.continuation {
                Some(Continuation::Prefix) => {
                    if let Some(ChatMessage::Assistant { prefix, .. }) = body.messages.last_mut() {
                        *prefix = Some(true);
                    }
                }
                Some(Continuation::ContinueFinalMessage) => {
                    body.continue_final_message = Some(true);
                    body.add_generation_prompt = Some(false);
                }
                _ => {}
            }
        }
        Ok(body)
    }

    fn stream_body(&self, request: &ModelRequest) -> Result<ChatRequest, Failure> {
        let mut body = self.body(request)?;
        body.stream = Some(true);
        body.stream_options = Some(StreamOptions {
            include_usage: Some(true),
        });
        Ok(body)
    }

    /// The option `key` of `request`, read as this API's member.
    ///
    /// # Errors
    ///
    /// Its value is not in this API's shape.
    fn option<T: DeserializeOwned>(
        &self,
        request: &ModelRequest,
        key: &str,
    ) -> Result<Option<T>, Failure> {
        request
            .option(key)
            .map_err(|e| self.not_carried(format!("the option `{key}`: {e}")))
    }

    /// The refusal of a request whose `what` is not in this API's shape.
    fn not_carried(&self, what: String) -> Failure {
        Failure::new(&self.endpoint.name, rein_core::Category::InvalidArguments)
            .with_effect(rein_core::Effect::NotApplied)
            .with_human_message(format!(
                "{} cannot send {what} (not in OpenAI's chat completion shape)",
                self.endpoint.name
            ))
    }
}

/// The members of the caller's options the request holds (see
/// [`OpenAiProvider::body`]); `output_config` is read for its effort.
const CARRIED: [&str; 14] = [
    "temperature",
    "top_p",
    "stop",
    "seed",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "user",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "reasoning_effort",
    "service_tier",
    "output_config",
];

/// A message of the transcript as Chat Completions reads it.
///
/// # Errors
///
/// What of a user message's parts this API cannot take (see
/// [`part_refusal`]).
fn wire_message(message: &Message) -> Result<ChatMessage, String> {
    Ok(match message {
        Message::System { content } => ChatMessage::System {
            content: Content::Text(content.clone()),
        },
        Message::User { content, parts } if parts.is_empty() => ChatMessage::User {
            content: Content::Text(content.clone()),
        },
        Message::User { parts, .. } => ChatMessage::User {
            content: Content::Parts(parts.iter().map(wire_part).collect::<Result<_, _>>()?),
        },
        Message::Assistant {
            content,
            tool_calls,
        } => ChatMessage::Assistant {
            content: content.clone().map(Content::Text),
            tool_calls: (!tool_calls.is_empty()).then(|| {
                tool_calls
                    .iter()
                    .map(|c| {
                        ChatToolCall::function(c.id.clone(), c.name.clone(), c.arguments.clone())
                    })
                    .collect()
            }),
            prefix: None,
        },
        Message::Tool { call_id, content } => ChatMessage::Tool {
            tool_call_id: call_id.clone(),
            content: Content::Text(content.clone()),
        },
    })
}

/// A part of a user message as a chat completions content part.
///
/// # Errors
///
/// An image detail or an audio format OpenAI does not name (which
/// `carries` refuses first, see [`part_refusal`]).
fn wire_part(part: &Part) -> Result<ContentPart, String> {
    Ok(match part {
        Part::Text { text } => ContentPart::Text { text: text.clone() },
        Part::Image { url, detail } => ContentPart::ImageUrl {
            image_url: ImageUrl {
                url: url.clone(),
                detail: image_detail(detail.as_deref())?,
            },
        },
        Part::Audio { data, format } => ContentPart::InputAudio {
            input_audio: InputAudio {
                data: data.clone(),
                format: audio_format(format)?,
            },
        },
    })
}

/// Why OpenAI's chat completions cannot take `part`, if they cannot: an
/// image detail or an audio format they do not name.
fn part_refusal(part: &Part) -> Option<String> {
    match part {
        Part::Text { .. } => None,
        Part::Image { detail, .. } => image_detail(detail.as_deref()).err(),
        Part::Audio { format, .. } => audio_format(format).err(),
    }
}

/// An image's `detail` as OpenAI names it.
fn image_detail(detail: Option<&str>) -> Result<Option<ImageDetail>, String> {
    detail
        .map(|detail| {
            ImageDetail::named(detail).ok_or_else(|| {
                format!("an image with detail `{detail}` (OpenAI reads auto, low and high)")
            })
        })
        .transpose()
}

/// An audio part's format as OpenAI names it.
fn audio_format(format: &str) -> Result<AudioFormat, String> {
    AudioFormat::named(format).ok_or_else(|| {
        format!("audio in the format `{format}` (OpenAI's chat completions read wav and mp3)")
    })
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    fn key_env(&self) -> Option<&str> {
        self.endpoint.key_env.as_deref()
    }

    fn ignored_options(&self, options: &serde_json::Map<String, Value>) -> Vec<String> {
        options
            .keys()
            .filter(|key| !CARRIED.contains(&key.as_str()))
            .cloned()
            .collect()
    }

    fn stream_settings(&self) -> Option<StreamSettings> {
        self.endpoint.streaming
    }

    fn carries(&self, request: &ModelRequest) -> Result<(), Failure> {
        if request.continuation && (self.continuation.is_none() || request.prefix().is_none()) {
            return Err(super::no_continuation(self.name()));
        }
        let parts = request.messages.iter().flat_map(|m| match m {
            Message::User { parts, .. } => parts.as_slice(),
            _ => &[],
        });
        match parts.filter_map(part_refusal).next() {
            Some(what) => Err(self.not_carried(what)),
            None => Ok(()),
        }
    }

    async fn complete(
        &self,
        request: &ModelRequest,
        allowance: Duration,
    ) -> Result<ModelResponse, Failure> {
        if let Some(settings) = self.endpoint.streaming {
            let stream = self.stream(request, settings.limits(allowance)).await?;
            return collect_turn(&self.endpoint.name, stream).await;
        }
        let body = encode(&self.endpoint.name, &self.body(request)?)?;
        let text = self.endpoint.post_json(body, allowance).await?;
        parse_response(&self.endpoint.name, &text)
    }

    fn embeds(&self) -> bool {
        true
    }

    async fn embed(
        &self,
        request: &ModelRequest,
        allowance: Duration,
    ) -> Result<Embeddings, Failure> {
        let inputs = embedding_inputs(request);
        // Floats always: a client that asked for base64 gets them encoded
        // by the gateway, whichever link answered.
        let mut body = json!({
            "model": request.model,
            "input": inputs,
            "encoding_format": "float",
        });
        for key in ["dimensions", "user"] {
            if let Some(value) = request.options.get(key) {
                body[key] = value.clone();
            }
        }
        let text = self
            .endpoint
            .post_json_at("/embeddings", body.to_string().into_bytes(), allowance)
            .await?;
        parse_embeddings(&self.endpoint.name, &text, inputs.len())
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        limits: StreamLimits,
    ) -> Result<TurnStream, Failure> {
        let body = encode(&self.endpoint.name, &self.stream_body(request)?)?;
        let decoder = ChunkDecoder {
            name: self.endpoint.name.clone(),
        };
        self.endpoint.open_stream(body, limits, decoder).await
    }
}

/// Reads `chat.completion.chunk` events.
struct ChunkDecoder {
    name: String,
}

impl Decoder for ChunkDecoder {
    const TERMINATOR: &'static str = "data: [DONE]";

    fn decode(&mut self, event: &SseEvent, updates: &mut Vec<Update>) -> Result<(), Failure> {
        if event.data.trim() == "[DONE]" {
            updates.push(Update::End);
            return Ok(());
        }
        let chunk: openai::Chunk<'_> = serde_json::from_str(&event.data)
            .map_err(|e| unparseable(&self.name, event, &e.to_string()))?;
        if let Some(error) = chunk.error.as_ref().filter(|e| !e.is_null()) {
            return Err(stream_error_failure(&self.name, error));
        }
        // Only the first choice: rein never asks for `n` > 1.
        for choice in chunk
            .choices
            .into_owned()
            .into_iter()
            .filter(|c| c.index == 0)
        {
            // An empty reason is no reason: a compatible server that sends
            // `""` on every chunk must not make a cut stream look finished.
            let finish = choice
                .finished()
                .map(|reason| finish_of(reason, choice.stop_reason.clone()));
            let tool_calls = choice
                .delta
                .tool_calls
                .into_iter()
                .enumerate()
                .map(|(position, call)| tool_call_delta(position, call))
                .collect();
            updates.push(Update::Delta(Delta {
                text: choice.delta.content.map(Cow::into_owned),
                tool_calls,
            }));
            if let Some((finish, sequence)) = finish {
                updates.push(Update::Finish(finish));
                if let Some(sequence) = sequence {
                    updates.push(Update::StopSequence(sequence));
                }
            }
        }
        if let Some(Some(usage)) = chunk.usage {
            updates.push(Update::Usage {
                input: usage.prompt_tokens,
                output: usage.completion_tokens,
            });
        }
        Ok(())
    }

    fn whole(&self, body: &str) -> Result<ModelResponse, Failure> {
        parse_response(&self.name, body)
    }
}

fn tool_call_delta(position: usize, call: openai::ToolCallDelta<'_>) -> ToolCallDelta {
    ToolCallDelta {
        index: call
            .index
            .map_or(position, |i| usize::try_from(i).unwrap_or(usize::MAX)),
        id: call.id.map(Cow::into_owned),
        name: call.function.name.map(Cow::into_owned),
        arguments: call.function.arguments.unwrap_or_default(),
    }
}

/// A Chat Completions `finish_reason`.
fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "length" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

/// A choice's finish, and the stop sequence it names: OpenAI says `stop`
/// for a natural end and a stop sequence alike, but a compatible server
/// that names the match (vLLM's `stop_reason`) tells them apart.
fn finish_of(reason: &str, stop_reason: Option<String>) -> (FinishReason, Option<String>) {
    match (finish_reason(reason), stop_reason) {
        (FinishReason::Stop, Some(sequence)) => (FinishReason::StopSequence, Some(sequence)),
        (finish, _) => (finish, None),
    }
}

/// The inputs of an embedding request: the texts of its user messages.
fn embedding_inputs(request: &ModelRequest) -> Vec<&str> {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::User { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect()
}

/// OpenAI's embedding list, as far as rein reads it.
#[derive(serde::Deserialize)]
struct EmbeddingList {
    data: Vec<EmbeddingItem>,
    #[serde(default)]
    usage: Option<EmbeddingUsage>,
}

#[derive(serde::Deserialize)]
struct EmbeddingItem {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct EmbeddingUsage {
    #[serde(default)]
    prompt_tokens: u64,
}

/// Reads an embedding list of `expected` vectors, in input order.
///
/// # Errors
///
/// A transient `malformed` failure for an answer that is not one, or that
/// has another number of vectors than inputs.
fn parse_embeddings(name: &str, text: &str, expected: usize) -> Result<Embeddings, Failure> {
    let list: EmbeddingList = serde_json::from_str(text)
        .map_err(|e| malformed(name, &format!("not an embedding list: {e}"), text))?;
    if list.data.len() != expected {
        return Err(malformed(
            name,
            &format!("{} vectors for {expected} inputs", list.data.len()),
            text,
        ));
    }
    let mut items = list.data;
    // Each vector is matched to its input by `index`: exactly 0..n, or
    // none at all (then in order). Anything else would pair a vector with
    // the wrong text.
    if items.iter().any(|item| item.index.is_some()) {
        items.sort_by_key(|item| item.index);
        if !items
            .iter()
            .enumerate()
            .all(|(i, item)| item.index == Some(i))
        {
            return Err(malformed(
                name,
                "vector indices that are not 0 to n-1, once each",
                text,
            ));
        }
    }
    Ok(Embeddings {
        vectors: items.into_iter().map(|item| item.embedding).collect(),
        usage: TokenUsage {
            input: list.usage.map_or(0, |u| u.prompt_tokens),
            output: 0,
        },
    })
}

/// Reads a Chat Completions answer. A body that is not one is a retryable
/// failure (a proxy in between may have mangled it), never a panic.
fn parse_response(name: &str, text: &str) -> Result<ModelResponse, Failure> {
    let malformed = |why: &str| malformed(name, why, text);
    let completion: openai::Completion = serde_json::from_str(text)
        .map_err(|e| malformed(&format!("not a chat completion: {e}")))?;
    let Some(choice) = completion.choices.into_iter().next() else {
        return Err(malformed("no choices"));
    };
    let mut tool_calls = Vec::with_capacity(choice.message.tool_calls.len());
    for (i, call) in choice.message.tool_calls.into_iter().enumerate() {
        let Some(tool) = call.function.name else {
            return Err(malformed("tool call without a function name"));
        };
        tool_calls.push(ToolCall {
            id: call.id.unwrap_or_else(|| format!("call_{i}")),
            name: tool,
            arguments: call.function.arguments.unwrap_or_else(|| "{}".to_owned()),
        });
    }
    let (finish, stop_sequence) = match choice
        .finish_reason
        .as_deref()
        .map(|reason| finish_of(reason, choice.stop_reason.clone()))
    {
        Some((FinishReason::Other, _)) | None if !tool_calls.is_empty() => {
            (FinishReason::ToolCalls, None)
        }
        Some(finish) => finish,
        None => (FinishReason::Other, None),
    };
    Ok(ModelResponse {
        text: choice.message.content,
        tool_calls,
        finish,
        stop_sequence,
        usage: TokenUsage {
            input: completion.usage.prompt_tokens.unwrap_or(0),
            output: completion.usage.completion_tokens.unwrap_or(0),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compatible server's nulls, absences and empty reasons read as
    /// nothing; a member of the wrong type makes the chunk unparseable
    /// (a transient failure), never a guess.
    #[test]
    fn chunks_tolerate_nulls_and_refuse_wrong_types() {
        for (data, expected) in [
            (
                r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
                r#"[Delta(Delta { text: Some(""), tool_calls: [] })]"#,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"content":"He said \"hi\" \u00e9\n"},"finish_reason":""}]}"#,
                r#"[Delta(Delta { text: Some("He said \"hi\" é\n"), tool_calls: [] })]"#,
            ),
            (
                r#"{"choices":[{"delta":{"content":null,"tool_calls":null}}]}"#,
                "[Delta(Delta { text: None, tool_calls: [] })]",
            ),
            (
                r#"{"choices":[{"index":1,"delta":{"content":"other"}},{"index":0,"delta":null}]}"#,
                "[Delta(Delta { text: None, tool_calls: [] })]",
            ),
            (
                r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}"#,
                "[Usage { input: Some(3), output: Some(5) }]",
            ),
            (r#"{"choices":null,"usage":null,"error":null}"#, "[]"),
            (
                r#"{"choices":[{"index":null,"delta":{"content":"x"}}],"usage":{}}"#,
                r#"[Delta(Delta { text: Some("x"), tool_calls: [] }), Usage { input: None, output: None }]"#,
            ),
            ("{}", "[]"),
        ] {
            assert_eq!(format!("{:?}", decode(data).unwrap()), expected, "{data}");
        }
        for data in [
            r#"{"choices":[{"index":"0","delta":{"content":"x"}}]}"#,
            r#"{"choices":[{"delta":{"content":7}}]}"#,
            r#"{"choices":{"index":0}}"#,
            r#"{"usage":{"prompt_tokens":"3"}}"#,
            r#"{"usage":5}"#,
            r#"[1,2]"#,
            "42",
            "not json",
        ] {
            let failure = decode(data).unwrap_err();
            assert_eq!(failure.category(), Category::Transient, "{data}");
            assert!(failure.human_message().contains("unparseable"), "{data}");
        }
    }

    /// The wall clock of an error answer; only relative `Retry-After`
    /// values occur here.
    const NOW: std::time::SystemTime = std::time::SystemTime::UNIX_EPOCH;
    use crate::provider::http::http_failure;
    use rein_core::Category;

    /// Issue 12 (review): a provider built by hand registered nothing, and
    /// its derived `Debug` printed the key.
    #[test]
    fn a_hand_built_provider_teaches_its_key_and_never_prints_it() {
        const CANARY: &str = "sk-hand-built-canary-91";
        let provider = OpenAiProvider::new(
            "p",
            "http://127.0.0.1:9/v1",
            Some(CANARY.into()),
            Duration::from_secs(1),
            reqwest::Client::new(),
        );
        assert!(!format!("{provider:?}").contains(CANARY));
        assert_eq!(
            rein_core::redact::text(&format!("echo: Bearer {CANARY}")),
            "echo: Bearer [redacted]"
        );
    }

    #[test]
    fn a_stop_sequence_is_claimed_only_when_the_server_names_it() {
        let answer = |choice: &str| {
            parse_response(
                "p",
                &format!(
                    r#"{{"choices":[{{"message":{{"role":"assistant","content":"1, 2"}},{choice}}}]}}"#
                ),
            )
            .unwrap()
        };
        // OpenAI: `stop` for both; nothing tells a stop sequence apart.
        let openai = answer(r#""finish_reason":"stop""#);
        assert_eq!(
            (openai.finish, openai.stop_sequence),
            (FinishReason::Stop, None)
        );
        // vLLM names the matched string; a number is a stop token.
        let vllm = answer(r#""finish_reason":"stop","stop_reason":"END""#);
        assert_eq!(vllm.finish, FinishReason::StopSequence);
        assert_eq!(vllm.stop_sequence.as_deref(), Some("END"));
        let token = answer(r#""finish_reason":"stop","stop_reason":128009"#);
        assert_eq!(
            (token.finish, token.stop_sequence),
            (FinishReason::Stop, None)
        );
        let streamed = decode(
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":"END"}]}"#,
        )
        .unwrap();
        assert!(
            matches!(&streamed[..], [Update::Delta(_), Update::Finish(FinishReason::StopSequence), Update::StopSequence(s)] if s == "END"),
            "{streamed:?}"
        );
    }

    #[test]
    fn parses_tool_calls_usage_and_finish_reason() {
        let r = parse_response(
            "p",
            r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
                {"id":"c1","type":"function","function":{"name":"get_order","arguments":"{\"order_id\":\"A\"}"}}]},
                "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":12,"completion_tokens":3}}"#,
        )
        .unwrap();
        assert_eq!(r.tool_calls[0].name, "get_order");
        assert_eq!(r.tool_calls[0].arguments, r#"{"order_id":"A"}"#);
        assert_eq!(r.finish, FinishReason::ToolCalls);
        assert_eq!(
            r.usage,
            TokenUsage {
                input: 12,
                output: 3
            }
        );
    }

    #[test]
    fn malformed_completions_are_failures_not_panics() {
        for body in [
            "",
            "null",
            "{}",
            r#"{"choices":[]}"#,
            r#"{"choices":[{"message":{"tool_calls":[{"function":{}}]}}]}"#,
        ] {
            let f = parse_response("p", body).unwrap_err();
            assert_eq!(f.category(), Category::Transient, "{body}");
        }
    }

    #[test]
    fn error_bodies_refine_the_status() {
        let ctx = http_failure(
            "p",
            400,
            None,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#,
            NOW,
        );
        assert_eq!(ctx.category(), Category::ContextOverflow);
        assert!(!ctx.model_message().contains("8192"));
        let rl = http_failure(
            "p",
            429,
            Some("2"),
            r#"{"error":{"message":"slow down"}}"#,
            NOW,
        );
        assert_eq!(rl.category(), Category::RateLimited);
        assert_eq!(rl.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(
            http_failure("p", 401, None, "nope", NOW).category(),
            Category::Unauthorized
        );
        assert!(!http_failure("p", 422, None, "", NOW).retryable());
        assert!(http_failure("p", 503, None, "", NOW).retryable());
    }

    #[test]
    fn request_body_carries_tools_and_tool_results() {
        let req = ModelRequest {
            model: "m".into(),
            messages: vec![
                Message::user("hi"),
                Message::Assistant {
                    content: None,
                    tool_calls: vec![ToolCall {
                        id: "c".into(),
                        name: "t".into(),
                        arguments: "{}".into(),
                    }],
                },
                Message::Tool {
                    call_id: "c".into(),
                    content: "fact".into(),
                },
            ],
            tools: vec![json!({"type": "function", "function": {"name": "t"}})],
            max_tokens: Some(100),
            options: Default::default(),
            continuation: false,
        };
        let provider = provider();
        let body = sent(provider.body(&req));
        assert_eq!(body["messages"][1]["content"], Value::Null);
        assert_eq!(
            body["messages"][1]["tool_calls"][0]["function"]["name"],
            "t"
        );
        assert_eq!(body["messages"][2]["tool_call_id"], "c");
        assert_eq!(body["tool_choice"], "auto");
        assert_eq!(body["max_tokens"], 100);
        assert!(body.get("max_completion_tokens").is_none());
    }

    #[test]
    fn embeddings_follow_their_indices_and_refuse_indices_that_do_not_pair() {
        let list = |data: &str| format!(r#"{{"data": {data}, "usage": {{"prompt_tokens": 3}}}}"#);
        let swapped =
            list(r#"[{"index": 1, "embedding": [2.0]}, {"index": 0, "embedding": [1.0]}]"#);
        let e = parse_embeddings("p", &swapped, 2).unwrap();
        assert_eq!(e.vectors, vec![vec![1.0], vec![2.0]]);
        assert_eq!(e.usage.input, 3);
        let unnumbered = list(r#"[{"embedding": [1.0]}, {"embedding": [2.0]}]"#);
        assert_eq!(
            parse_embeddings("p", &unnumbered, 2).unwrap().vectors,
            vec![vec![1.0], vec![2.0]]
        );
        for bad in [
            r#"[{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}]"#,
            r#"[{"index": 1, "embedding": [1.0]}, {"index": 2, "embedding": [2.0]}]"#,
            r#"[{"index": 0, "embedding": [1.0]}, {"embedding": [2.0]}]"#,
        ] {
            let refused = parse_embeddings("p", &list(bad), 2).unwrap_err();
            assert!(refused.human_message().contains("indices"), "{bad}");
        }
        assert!(parse_embeddings("p", &list(r#"[{"embedding": [1.0]}]"#), 2).is_err());
    }

    #[test]
    fn a_user_message_with_media_is_sent_as_content_parts_in_order() {
        let text_only = Message::user_parts(vec![Part::Text { text: "hi".into() }]);
        assert_eq!(text_only, Message::user("hi"), "text parts alone are text");
        assert_eq!(
            json!(wire_message(&text_only).unwrap()),
            json!({"role": "user", "content": "hi"})
        );
        let message = Message::user_parts(vec![
            Part::Text {
                text: "what is this?".into(),
            },
            Part::Image {
                url: "https://example.com/a.png".into(),
                detail: Some("high".into()),
            },
            Part::Audio {
                data: "UklGRg==".into(),
                format: "wav".into(),
            },
        ]);
        assert_eq!(
            json!(wire_message(&message).unwrap()),
            json!({"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "high"}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
            ]})
        );
    }

    #[test]
    fn the_output_ceiling_goes_in_the_member_the_model_takes() {
        let mut req = ModelRequest {
            model: "o3-mini".into(),
            messages: vec![Message::user("hi")],
            tools: Vec::new(),
            max_tokens: Some(100),
            options: [("max_tokens".to_owned(), json!(5))].into_iter().collect(),
            continuation: false,
        };
        let provider = provider().with_output_fields(
            [(
                "local-reasoner".to_owned(),
                OutputField::MaxCompletionTokens,
            )]
            .into_iter()
            .collect(),
        );
        // A known reasoning model: only max_completion_tokens, and a
        // caller's own option never adds the other name.
        let body = sent(provider.body(&req));
        assert_eq!(body["max_completion_tokens"], 100);
        assert!(body.get("max_tokens").is_none(), "{body}");
        // Configured for a model the table does not know.
        req.model = "local-reasoner".into();
        assert_eq!(sent(provider.body(&req))["max_completion_tokens"], 100);
        // Unknown and not configured: max_tokens.
        req.model = "llama-3-70b".into();
        let body = sent(provider.stream_body(&req));
        assert_eq!(body["max_tokens"], 100);
        assert!(body.get("max_completion_tokens").is_none(), "{body}");
    }

    /// A provider at an address nothing listens on: these tests build
    /// bodies, they send nothing.
    fn provider() -> OpenAiProvider {
        OpenAiProvider::new(
            "p",
            "http://127.0.0.1:9/v1",
            None,
            Duration::from_secs(1),
            reqwest::Client::new(),
        )
    }

    /// The JSON a body is sent as.
    fn sent(body: Result<ChatRequest, Failure>) -> Value {
        serde_json::to_value(body.unwrap()).unwrap()
    }

    #[test]
    fn options_are_sent_under_their_members_and_the_rest_named_as_ignored() {
        let provider = provider();
        let options = json!({
            "temperature": 0.2, "top_p": 0.9, "stop": ["END"], "seed": 7, "user": "u-1",
            "frequency_penalty": 0.5, "presence_penalty": -0.5, "logit_bias": {"50256": -100},
            "service_tier": "flex", "response_format": {"type": "json_object"},
            "tool_choice": "required", "parallel_tool_calls": false,
            "top_k": 5, "output_config": {"effort": "low"}
        });
        let mut req = ModelRequest {
            model: "m".into(),
            messages: vec![Message::user("hi")],
            tools: Vec::new(),
            max_tokens: None,
            options: options.as_object().unwrap().clone(),
            continuation: false,
        };
        let body = sent(provider.body(&req));
        for member in [
            "temperature",
            "top_p",
            "stop",
            "seed",
            "user",
            "frequency_penalty",
            "presence_penalty",
            "logit_bias",
            "service_tier",
            "response_format",
        ] {
            assert_eq!(body[member], options[member], "{member}");
        }
        // The Messages API's effort is mapped; a tool choice needs tools.
        assert_eq!(body["reasoning_effort"], "low");
        for absent in [
            "tool_choice",
            "parallel_tool_calls",
            "top_k",
            "output_config",
        ] {
            assert!(body.get(absent).is_none(), "{absent} in {body}");
        }
        assert_eq!(provider.ignored_options(&req.options), ["top_k"]);
        req.tools = vec![json!({"type": "function", "function": {"name": "t"}})];
        let body = sent(provider.body(&req));
        assert_eq!(body["tool_choice"], "required");
        assert_eq!(body["parallel_tool_calls"], false);
        // An option in another shape is refused, not sent half-read.
        req.options.insert("stop".into(), json!({"not": "a stop"}));
        let refused = provider.body(&req).unwrap_err();
        assert!(refused.human_message().contains("`stop`"), "{refused:?}");
    }

    #[test]
    fn a_part_openai_does_not_name_is_refused_before_sending() {
        let provider = provider();
        let request = |part: Part| ModelRequest {
            model: "m".into(),
            messages: vec![Message::user_parts(vec![part])],
            tools: Vec::new(),
            max_tokens: None,
            options: Default::default(),
            continuation: false,
        };
        let image = |detail: &str| Part::Image {
            url: "https://example.com/a.png".into(),
            detail: Some(detail.into()),
        };
        assert!(provider.carries(&request(image("low"))).is_ok());
        let refused = provider.carries(&request(image("ultra"))).unwrap_err();
        assert!(refused.human_message().contains("`ultra`"), "{refused:?}");
        let audio = Part::Audio {
            data: "AAAA".into(),
            format: "flac".into(),
        };
        assert!(provider.carries(&request(audio)).is_err());
    }

    fn decode(data: &str) -> Result<Vec<Update>, Failure> {
        let mut decoder = ChunkDecoder { name: "p".into() };
        let mut updates = Vec::new();
        decoder.decode(
            &SseEvent {
                event: None,
                data: data.to_owned(),
            },
            &mut updates,
        )?;
        Ok(updates)
    }

    #[test]
    fn chunk_decoder_reads_deltas_finish_and_usage() {
        let updates = decode(
            r#"{"choices":[{"index":0,"delta":{"content":"Hi","tool_calls":[
                {"index":1,"id":"c","function":{"name":"t","arguments":{"a":1}}}]},
                "finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#,
        )
        .unwrap();
        let [
            Update::Delta(delta),
            Update::Finish(finish),
            Update::Usage { input, output },
        ] = &updates[..]
        else {
            panic!("{updates:?}");
        };
        assert_eq!(delta.text.as_deref(), Some("Hi"));
        assert_eq!(delta.tool_calls[0].index, 1);
        assert_eq!(delta.tool_calls[0].arguments, r#"{"a":1}"#);
        assert!(finish.is_truncated());
        assert_eq!((*input, *output), (Some(3), Some(4)));
        assert!(matches!(decode(" [DONE]").unwrap()[..], [Update::End]));
        // An empty reason finishes nothing.
        let empty =
            decode(r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":""}]}"#)
                .unwrap();
        assert!(matches!(&empty[..], [Update::Delta(_)]), "{empty:?}");
    }

    #[test]
    fn chunk_decoder_fails_on_garbage_and_errors_but_skips_the_unknown() {
        let garbage = decode(r#"{"choices":[{"delta":{"content":"#).unwrap_err();
        assert_eq!(garbage.category(), Category::Transient);
        assert!(garbage.human_message().contains("unparseable"));
        let error =
            decode(r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#).unwrap_err();
        assert_eq!(error.category(), Category::RateLimited);
        for ignored in [
            "{}",
            r#"{"choices":[{"index":1,"delta":{"content":"other choice"}}]}"#,
        ] {
            let updates = decode(ignored).unwrap();
            assert!(updates.is_empty(), "{ignored}: {updates:?}");
        }
        let huge =
            decode(r#"{"choices":[{"delta":{"tool_calls":[{"index":18446744073709551615}]}}]}"#)
                .unwrap();
        assert!(matches!(&huge[..], [Update::Delta(d)] if d.tool_calls[0].index == usize::MAX));
    }
}
