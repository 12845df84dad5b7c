//! Which request field carries a call's output ceiling to an
//! OpenAI-compatible model: `max_tokens` or `max_completion_tokens`.
//!
//! # Why
//!
//! OpenAI's reasoning models (the o-series: `o1`, `o3`, `o4-mini`, … and
//! the `gpt-5` family) refuse `max_tokens` with a 400 (`unsupported_parameter`:
//! "Use 'max_completion_tokens' instead"), while most OpenAI-compatible
//! servers (vLLM, llama.cpp, Ollama, older gateways) know only
//! `max_tokens`. rein sends every call an output ceiling, so sending the
//! wrong name fails every call. The field is a fact about the model: it
//! is decided here, from one table, with a per-model override in the
//! provider's config (`[providers.NAME.output_tokens_field]`) for models
//! the table does not know.
//!
//! # Deciding
//!
//! | the model | field |
//! | --- | --- |
//! | configured in `output_tokens_field` | as configured |
//! | in [`KNOWN_OUTPUT_FIELDS`] (matched like [`known_output_cap`](crate::output_cap::known_output_cap): the entry or the entry then `-`, longest wins) | the table's |
//! | unknown, and [`is_ambiguous`] | none: `rein check` refuses the config until it is configured |
//! | any other unknown model | `max_tokens`, which every compatible server takes |
//!
//! The Anthropic Messages API has one field, `max_tokens`; this table is
//! only for `openai` providers.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The name of the output-ceiling member of a Chat Completions request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OutputField {
    /// `max_tokens`: the original name, which every OpenAI-compatible
    /// server takes and OpenAI's reasoning models refuse.
    MaxTokens,
    /// `max_completion_tokens`: OpenAI's newer name, required by the
    /// o-series and the `gpt-5` family.
    MaxCompletionTokens,
}

impl OutputField {
    /// The member's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputField::MaxTokens => "max_tokens",
            OutputField::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

impl fmt::Display for OutputField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Well-known OpenAI models and the field each takes.
///
/// NOTE: the OpenAI entries of
/// [`KNOWN_OUTPUT_CAPS`](crate::output_cap::KNOWN_OUTPUT_CAPS) are all
/// here too (a test checks it): a model whose cap rein knows has a known
/// field.
pub const KNOWN_OUTPUT_FIELDS: &[(&str, OutputField)] = &[
    ("gpt-3.5-turbo", OutputField::MaxTokens),
    ("gpt-4", OutputField::MaxTokens),
    ("gpt-4-turbo", OutputField::MaxTokens),
    ("gpt-4o", OutputField::MaxTokens),
    ("gpt-4o-2024-05-13", OutputField::MaxTokens),
    ("gpt-4o-mini", OutputField::MaxTokens),
    ("chatgpt-4o-latest", OutputField::MaxTokens),
    ("gpt-4.1", OutputField::MaxTokens),
    ("gpt-4.1-mini", OutputField::MaxTokens),
    ("gpt-4.1-nano", OutputField::MaxTokens),
    ("gpt-5", OutputField::MaxCompletionTokens),
    ("gpt-5-mini", OutputField::MaxCompletionTokens),
    ("gpt-5-nano", OutputField::MaxCompletionTokens),
    ("o1", OutputField::MaxCompletionTokens),
    ("o1-mini", OutputField::MaxCompletionTokens),
    ("o1-preview", OutputField::MaxCompletionTokens),
    ("o3", OutputField::MaxCompletionTokens),
    ("o3-mini", OutputField::MaxCompletionTokens),
    ("o4-mini", OutputField::MaxCompletionTokens),
];

/// The field `model` takes from [`KNOWN_OUTPUT_FIELDS`], if it is a
/// well-known model.
pub fn known_output_field(model: &str) -> Option<OutputField> {
    KNOWN_OUTPUT_FIELDS
        .iter()
        .filter(|(name, _)| {
            model == *name
                || model
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('-'))
        })
        .max_by_key(|(name, _)| name.len())
        .map(|&(_, field)| field)
}

/// Whether an unknown `model` may be a reasoning model that refuses
/// `max_tokens`: its name (or its last `/` segment, as routers prefix
/// names: `openai/o3`) starts like an o-series name (`o` and a digit) or
/// `gpt-5`, or is a known reasoning model behind a prefix. Sending
/// `max_tokens` to it would be a guess, so rein asks for the field.
pub fn is_ambiguous(model: &str) -> bool {
    if known_output_field(model).is_some() {
        return false;
    }
    let last = model.rsplit('/').next().unwrap_or(model);
    let reasoning_like = |name: &str| {
        let mut chars = name.chars();
        (chars.next() == Some('o') && chars.next().is_some_and(|c| c.is_ascii_digit()))
            || name.starts_with("gpt-5")
    };
    reasoning_like(model)
        || reasoning_like(last)
        || known_output_field(last) == Some(OutputField::MaxCompletionTokens)
}

/// How [`output_field`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FieldSource {
    /// `[providers.NAME.output_tokens_field]` names the model.
    Configured,
    /// [`KNOWN_OUTPUT_FIELDS`] knows the model.
    Known,
    /// Neither: `max_tokens`, the name every compatible server takes
    /// (never for an [ambiguous](is_ambiguous) model: `rein check` refuses
    /// that).
    Default,
}

impl FieldSource {
    /// How `rein check` says it: `configured`, `known model`, `default`.
    pub fn as_str(self) -> &'static str {
        match self {
            FieldSource::Configured => "configured",
            FieldSource::Known => "known model",
            FieldSource::Default => "default",
        }
    }
}

/// The field a call to `model` sends its output ceiling in, given the
/// provider's `configured` fields, and how that was decided: the one place
/// the choice is made, for the provider and for `rein check` alike.
pub fn output_field(
    configured: &BTreeMap<String, OutputField>,
    model: &str,
) -> (OutputField, FieldSource) {
    if let Some(field) = configured.get(model) {
        return (*field, FieldSource::Configured);
    }
    match known_output_field(model) {
        Some(field) => (field, FieldSource::Known),
        None => (OutputField::MaxTokens, FieldSource::Default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output_cap::{KNOWN_OUTPUT_CAPS, known_output_cap};

    #[test]
    fn reasoning_models_and_their_snapshots_take_max_completion_tokens() {
        for model in [
            "o1",
            "o1-2024-12-17",
            "o1-mini",
            "o3",
            "o3-mini-2025-01-31",
            "o4-mini",
            "gpt-5",
            "gpt-5-mini-2025-08-07",
            "gpt-5-nano",
        ] {
            assert_eq!(
                known_output_field(model),
                Some(OutputField::MaxCompletionTokens),
                "{model}"
            );
        }
        for model in ["gpt-4o-mini", "gpt-4o-2024-08-06", "gpt-4.1-nano", "gpt-4"] {
            assert_eq!(
                known_output_field(model),
                Some(OutputField::MaxTokens),
                "{model}"
            );
        }
    }

    #[test]
    fn every_openai_model_with_a_known_cap_has_a_known_field() {
        for (name, _) in KNOWN_OUTPUT_CAPS
            .iter()
            .filter(|(name, _)| !name.starts_with("claude"))
        {
            assert!(known_output_field(name).is_some(), "{name}");
        }
        for (name, _) in KNOWN_OUTPUT_FIELDS {
            assert!(known_output_cap(name).is_some(), "{name}");
        }
    }

    #[test]
    fn unknown_names_that_look_like_reasoning_models_are_ambiguous() {
        for model in ["openai/o3", "o5-mini", "gpt-5.1", "azure/gpt-5-chat", "o7"] {
            assert!(is_ambiguous(model), "{model}");
        }
        for model in [
            "llama-3-70b",
            "qwen2.5",
            "mock-model",
            "o3-mini",
            "gpt-4o",
            "omni",
        ] {
            assert!(!is_ambiguous(model), "{model}");
        }
    }

    #[test]
    fn configured_wins_then_the_table_then_max_tokens() {
        let mut configured = BTreeMap::new();
        configured.insert("gpt-4o".to_owned(), OutputField::MaxCompletionTokens);
        assert_eq!(
            output_field(&configured, "gpt-4o"),
            (OutputField::MaxCompletionTokens, FieldSource::Configured)
        );
        assert_eq!(
            output_field(&configured, "o3-mini"),
            (OutputField::MaxCompletionTokens, FieldSource::Known)
        );
        assert_eq!(
            output_field(&configured, "llama-3-70b"),
            (OutputField::MaxTokens, FieldSource::Default)
        );
        assert_eq!(
            OutputField::MaxCompletionTokens.as_str(),
            "max_completion_tokens"
        );
    }
}
