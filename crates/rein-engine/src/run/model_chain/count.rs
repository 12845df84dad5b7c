//! A prompt's tokens counted before any call (the gateway's
//! `POST /v1/messages/count_tokens`), the way a turn's budget counts them.
//!
//! # Why rein's bound, not the provider's count
//!
//! A client counts tokens to learn whether a prompt fits a context window
//! or a budget before it sends it. rein's answer is the bound it will
//! itself reserve for the prompt on the binding's primary model: the
//! model's own tokenizer where rein ships one (OpenAI's chat families; the
//! count waits for it to be read, where a run's first calls use the ratio
//! below until it is),
//! otherwise the bytes per token learned from that model's reported counts
//! (kept in the store, so a new process starts with them) less a margin,
//! or a token per byte before any count was learned. Forwarding to a
//! provider's counting endpoint would be exact for one provider and
//! nothing for the rest, and would spend a call of its rate limit on a
//! question rein can answer; a bound that is never below the provider's
//! count is the safe side of that question. [`CountMethod`] says which
//! one answered, so a client can tell a close count from a cautious one.

use super::ModelBinding;
use super::ceiling::prompt_estimate;
use super::tokenizer::Encoding;
use crate::provider::ModelRequest;
use crate::run::Engine;

/// How [`Engine::count_prompt`] bounded the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CountMethod {
    /// The model's own encoding: close to the provider's count.
    Tokenizer(Encoding),
    /// Bytes per token learned from the model's counts, less a margin.
    LearnedRatio,
    /// A token per byte: nothing learned about the model yet.
    TokenPerByte,
}

impl CountMethod {
    /// Its name in a header or a log line: the encoding's name,
    /// `learned_ratio` or `token_per_byte`.
    pub fn name(self) -> &'static str {
        match self {
            CountMethod::Tokenizer(encoding) => encoding.name(),
            CountMethod::LearnedRatio => "learned_ratio",
            CountMethod::TokenPerByte => "token_per_byte",
        }
    }
}

/// A prompt's tokens on a binding's primary model, and how they were
/// counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptCount {
    /// An upper bound of what the primary model's provider will count.
    pub tokens: u64,
    /// How.
    pub method: CountMethod,
}

impl Engine {
    /// The tokens `request`'s prompt (messages and tools) costs on
    /// `binding`'s primary model, as the budget of a turn bounds them; no
    /// call is made.
    pub async fn count_prompt(
        &self,
        binding: &ModelBinding,
        request: &ModelRequest,
    ) -> PromptCount {
        let primary = (
            binding.primary.provider.name(),
            binding.primary.model.as_str(),
        );
        let ratios = &self.shared.token_ratios;
        ratios.prepare([primary.1]).await;
        let meter = ratios.meter_of([primary]);
        let method = match (meter.encodings().first(), meter.ratio()) {
            (Some(encoding), _) => CountMethod::Tokenizer(*encoding),
            (None, Some(ratio)) if ratio.samples() > 0 => CountMethod::LearnedRatio,
            (None, _) => CountMethod::TokenPerByte,
        };
        PromptCount {
            tokens: prompt_estimate(&request.messages, &request.tools, 0, &meter),
            method,
        }
    }
}
