//! What the mock charges, as a real provider would: output caps per model,
//! the output-ceiling member a model takes, usage counted from the
//! request, and a log of every answer's usage — on both routes.
//!
//! # Why
//!
//! A budget that holds must be checked against the provider's own count,
//! not rein's. With [`MockModelConfig::with_output_cap`] the mock refuses a
//! `max_tokens` above a model's cap with the 400 the provider sends
//! (OpenAI's on Chat Completions, Anthropic's on the Messages API); with
//! [`MockModelConfig::with_max_completion_tokens_only`] it refuses
//! `max_tokens` for that model on Chat Completions as OpenAI does for its
//! reasoning models (`unsupported_parameter`); with
//! [`MockModelConfig::with_metered_usage`] it reports a prompt of one token
//! per four bytes of the request's `system`, `messages` and `tools` and
//! stops an answer at `max_tokens` (`finish_reason: "length"`, its tool
//! calls cut off). [`MockModel::usage_log`] lists what every answer
//! reported, so a checker can sum consumption from the model's side.
//!
//! [`MockModelConfig::with_output_cap`]: super::MockModelConfig::with_output_cap
//! [`MockModelConfig::with_max_completion_tokens_only`]: super::MockModelConfig::with_max_completion_tokens_only
//! [`MockModelConfig::with_metered_usage`]: super::MockModelConfig::with_metered_usage
//! [`MockModel::usage_log`]: super::MockModel::usage_log

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ApiError, AssistantMessage, FinishReason, Model, Usage};

/// Bytes of request JSON the metered mock counts as one prompt token.
pub const BYTES_PER_TOKEN: u64 = 4;

/// The usage one answer reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageEntry {
    /// The completion number (from 1).
    pub number: u64,
    /// The route that answered: `/v1/chat/completions` or `/v1/messages`.
    #[serde(default)]
    pub path: String,
    /// The model the request named.
    pub model: String,
    /// The `max_tokens` it asked for, if any.
    pub max_tokens: Option<u64>,
    /// Input tokens reported.
    pub prompt_tokens: u64,
    /// Output tokens reported.
    pub completion_tokens: u64,
}

/// The output ceiling a Chat Completions request asked for.
pub(crate) fn requested_max_tokens(request: &Value) -> Option<u64> {
    request
        .get("max_completion_tokens")
        .or_else(|| request.get("max_tokens"))
        .and_then(Value::as_u64)
}

/// The prompt tokens of `request` when metered: a token per
/// [`BYTES_PER_TOKEN`] bytes of its `system` (the Messages API's
/// instructions), `messages` and `tools`, rounded up.
pub(crate) fn prompt_tokens(request: &Value) -> u64 {
    let bytes = ["system", "messages", "tools"]
        .iter()
        .filter_map(|k| request.get(*k))
        .map(|v| v.to_string().len() as u64)
        .sum::<u64>();
    bytes.div_ceil(BYTES_PER_TOKEN)
}

/// `o200k_base`, read once.
fn o200k() -> Option<&'static tiktoken_rs::CoreBPE> {
    static ENCODING: std::sync::OnceLock<Option<tiktoken_rs::CoreBPE>> = std::sync::OnceLock::new();
    ENCODING
        .get_or_init(|| tiktoken_rs::o200k_base().ok())
        .as_ref()
}

/// The prompt tokens of a Chat Completions `request` as OpenAI's cookbook
/// counts them for the gpt-4o family (see
/// [`super::MockModelConfig::with_tokenized_usage`]); bytes, as
/// [`prompt_tokens`], if the encoding cannot be read.
pub(crate) fn cookbook_prompt_tokens(request: &Value) -> u64 {
    let Some(bpe) = o200k() else {
        return prompt_tokens(request);
    };
    let count = |text: &str| bpe.encode_ordinary(text).len() as u64;
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    };
    let mut tokens: u64 = 3; // <|start|>assistant<|message|>
    for m in request["messages"].as_array().into_iter().flatten() {
        tokens += 3;
        tokens += count(m["role"].as_str().unwrap_or_default());
        tokens += count(&text(&m["content"]));
        if let Some(name) = m["name"].as_str() {
            tokens += count(name) + 1;
        }
        for call in m["tool_calls"].as_array().into_iter().flatten() {
            let f = &call["function"];
            tokens += count(f["name"].as_str().unwrap_or_default());
            tokens += count(f["arguments"].as_str().unwrap_or_default());
            tokens += 1;
        }
    }
    // The cookbook's rule for function definitions (gpt-4o, gpt-4o-mini).
    let tools = request["tools"].as_array().map_or(&[][..], Vec::as_slice);
    for f in tools.iter().map(|t| &t["function"]) {
        tokens += 7;
        let desc = f["description"].as_str().unwrap_or_default();
        tokens += count(&format!(
            "{}:{}",
            f["name"].as_str().unwrap_or_default(),
            desc.trim_end_matches('.')
        ));
        let properties = f["parameters"]["properties"].as_object();
        if let Some(properties) = properties.filter(|p| !p.is_empty()) {
            tokens += 3;
            for (key, p) in properties {
                tokens += 3;
                if let Some(items) = p["enum"].as_array() {
                    tokens = tokens.saturating_sub(3);
                    for item in items {
                        tokens += 3 + count(item.as_str().unwrap_or_default());
                    }
                }
                tokens += count(&format!(
                    "{key}:{}:{}",
                    p["type"].as_str().unwrap_or_default(),
                    p["description"].as_str().unwrap_or_default()
                ));
            }
        }
    }
    if !tools.is_empty() {
        tokens += 12;
    }
    tokens
}

/// A request for more output than its model accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OverCap {
    /// What it asked for.
    pub(crate) asked: u64,
    /// The model's cap.
    pub(crate) cap: u64,
    /// The member it asked in.
    pub(crate) param: &'static str,
}

impl OverCap {
    /// OpenAI's 400 for it.
    pub(crate) fn openai_error(self) -> ApiError {
        let OverCap { asked, cap, param } = self;
        ApiError::new(
            400,
            "invalid_request_error",
            &format!(
                "{param} is too large: {asked}. This model supports at most {cap} completion tokens, whereas you provided {asked}."
            ),
        )
        .with_param(param)
        .with_code("invalid_value")
    }

    /// Anthropic's message for it (an `invalid_request_error`).
    pub(crate) fn anthropic_message(self, model: &str) -> String {
        format!(
            "max_tokens: {} > {}, which is the maximum allowed number of output tokens for {model}",
            self.asked, self.cap
        )
    }
}

impl Model {
    /// The request's ask for more output than `model`'s cap, if it makes
    /// one.
    pub(crate) fn over_cap(&self, model: &str, request: &Value) -> Option<OverCap> {
        let cap = *self.output_caps.get(model)?;
        let (param, asked) = match request.get("max_completion_tokens").and_then(Value::as_u64) {
            Some(asked) => ("max_completion_tokens", asked),
            None => (
                "max_tokens",
                request.get("max_tokens").and_then(Value::as_u64)?,
            ),
        };
        (asked > cap).then_some(OverCap { asked, cap, param })
    }

    /// OpenAI's 400 for a Chat Completions request that sends `max_tokens`
    /// to a model that takes only `max_completion_tokens`, if `request`
    /// does.
    pub(crate) fn unsupported_field(&self, model: &str, request: &Value) -> Option<ApiError> {
        (self.completion_tokens_only.contains(model) && request.get("max_tokens").is_some())
            .then(|| {
                ApiError::new(
                    400,
                    "invalid_request_error",
                    "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                )
                .with_param("max_tokens")
                .with_code("unsupported_parameter")
            })
    }

    /// `message` as this mock reports it for `request`: metered when so
    /// configured, and logged.
    pub(crate) fn meter(
        &self,
        (number, path): (u64, &str),
        model: &str,
        request: &Value,
        mut message: AssistantMessage,
    ) -> AssistantMessage {
        let max_tokens = requested_max_tokens(request);
        if self.metered {
            message.usage = Usage {
                prompt_tokens: if self.tokenized && path == "/v1/chat/completions" {
                    cookbook_prompt_tokens(request)
                } else {
                    prompt_tokens(request)
                },
                completion_tokens: message.usage.completion_tokens,
            };
            if let Some(max) = max_tokens
                && message.usage.completion_tokens > max
            {
                message.usage.completion_tokens = max;
                message.tool_calls.clear();
                message.finish_reason = FinishReason::Length;
                message.stop_sequence = None;
            }
        }
        self.lock().usage.push(UsageEntry {
            number,
            path: path.to_owned(),
            model: model.to_owned(),
            max_tokens,
            prompt_tokens: message.usage.prompt_tokens,
            completion_tokens: message.usage.completion_tokens,
        });
        message
    }
}
