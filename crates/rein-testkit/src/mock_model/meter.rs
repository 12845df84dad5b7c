//! What the mock charges, as a real provider would: output caps per model,
//! usage counted from the request, and a log of every answer's usage.
//!
//! # Why
//!
//! A budget that holds must be checked against the provider's own count,
//! not rein's. With [`MockModelConfig::with_output_cap`] the mock refuses a
//! `max_tokens` above a model's cap with the 400 OpenAI sends; with
//! [`MockModelConfig::with_metered_usage`] it reports a prompt of one token
//! per four bytes of the request's `messages` and `tools` and stops an
//! answer at `max_tokens` (`finish_reason: "length"`, its tool calls cut
//! off). [`MockModel::usage_log`] lists what every answer reported, so a
//! checker can sum consumption from the model's side.
//!
//! [`MockModelConfig::with_output_cap`]: super::MockModelConfig::with_output_cap
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
/// [`BYTES_PER_TOKEN`] bytes of its `messages` and `tools`, rounded up.
pub(crate) fn prompt_tokens(request: &Value) -> u64 {
    let bytes = ["messages", "tools"]
        .iter()
        .filter_map(|k| request.get(*k))
        .map(|v| v.to_string().len() as u64)
        .sum::<u64>();
    bytes.div_ceil(BYTES_PER_TOKEN)
}

impl Model {
    /// The 400 a real provider answers for a `max_tokens` above the model's
    /// cap, if `request` asks for one.
    pub(crate) fn over_cap(&self, model: &str, request: &Value) -> Option<ApiError> {
        let cap = *self.output_caps.get(model)?;
        let asked = requested_max_tokens(request)?;
        (asked > cap).then(|| {
            ApiError::new(
                400,
                "invalid_request_error",
                &format!(
                    "max_tokens is too large: {asked}. This model supports at most {cap} completion tokens, whereas you provided {asked}."
                ),
            )
            .with_param("max_tokens")
            .with_code("invalid_value")
        })
    }

    /// `message` as this mock reports it for `request`: metered when so
    /// configured, and logged.
    pub(crate) fn meter(
        &self,
        number: u64,
        model: &str,
        request: &Value,
        mut message: AssistantMessage,
    ) -> AssistantMessage {
        let max_tokens = requested_max_tokens(request);
        if self.metered {
            message.usage = Usage {
                prompt_tokens: prompt_tokens(request),
                completion_tokens: message.usage.completion_tokens,
            };
            if let Some(max) = max_tokens
                && message.usage.completion_tokens > max
            {
                message.usage.completion_tokens = max;
                message.tool_calls.clear();
                message.finish_reason = FinishReason::Length;
            }
        }
        self.lock().usage.push(UsageEntry {
            number,
            model: model.to_owned(),
            max_tokens,
            prompt_tokens: message.usage.prompt_tokens,
            completion_tokens: message.usage.completion_tokens,
        });
        message
    }
}
