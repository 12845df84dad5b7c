//! The bytes per token each model's provider counted, learned from every
//! answered call of the process ([`rein_core::token_ratio`]): what bounds
//! the prompt of a model's next call.
//!
//! # Why here
//!
//! The prompt bound is taken before every model call (the reservation,
//! the provider's token bucket, the planner's last-turn decision), and the
//! provider's count arrives after it; one book per engine lets every run of
//! the process plan with what any of them learned. A model is known by its
//! provider and name (`provider/model`): the same name behind two providers
//! may be two tokenizers.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use rein_core::token_ratio::TokenRatio;
use serde_json::Value;

use crate::provider::Message;

/// Every model's learned ratio, by `provider/model`.
#[derive(Debug, Default)]
pub(crate) struct TokenRatios {
    ratios: Mutex<HashMap<String, TokenRatio>>,
}

/// `provider/model`.
fn key(provider: &str, model: &str) -> String {
    format!("{provider}/{model}")
}

/// The JSON bytes of `messages` and `tools`, as the prompt bound counts
/// them.
pub(crate) fn request_bytes(messages: &[Message], tools: &[Value]) -> u64 {
    let messages: usize = messages
        .iter()
        .map(|m| serde_json::to_vec(m).map_or(0, |v| v.len()))
        .sum();
    let tools = if tools.is_empty() {
        0
    } else {
        serde_json::to_vec(tools).map_or(0, |v| v.len())
    };
    u64::try_from(messages.saturating_add(tools)).unwrap_or(u64::MAX)
}

impl TokenRatios {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, TokenRatio>> {
        self.ratios.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most cautious of `models`' ratios (the fewest bytes per token):
    /// the prompt of a turn goes unchanged to every link of its chain.
    pub(crate) fn least_of<'m>(
        &self,
        models: impl IntoIterator<Item = (&'m str, &'m str)>,
    ) -> TokenRatio {
        let ratios = self.lock();
        models
            .into_iter()
            .map(|(p, m)| ratios.get(&key(p, m)).copied().unwrap_or_default())
            .min_by(|a, b| a.bytes_per_token().total_cmp(&b.bytes_per_token()))
            .unwrap_or_default()
    }

    /// Learns from an answered request of `messages` and `tools` that
    /// `provider` counted `input` prompt tokens for: the whole request, and
    /// — when the provider had counted `last_input` for the transcript
    /// before the last assistant message — what was added since.
    pub(crate) fn learn(
        &self,
        (provider, model): (&str, &str),
        messages: &[Message],
        tools: &[Value],
        (input, last_input): (u64, u64),
    ) {
        if input == 0 {
            return;
        }
        let whole = request_bytes(messages, tools);
        let added = messages
            .iter()
            .rposition(|m| matches!(m, Message::Assistant { .. }))
            .filter(|_| last_input > 0 && input > last_input)
            .map(|i| (request_bytes(&messages[i..], &[]), input - last_input));
        let mut ratios = self.lock();
        let ratio = ratios.entry(key(provider, model)).or_default();
        ratio.observe(whole, input);
        if let Some((bytes, tokens)) = added {
            ratio.observe(bytes, tokens);
        }
    }
}
