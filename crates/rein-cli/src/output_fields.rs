//! What `rein check` says about each OpenAI-compatible model it will
//! call: the member its output ceiling is sent in and its cap.
//!
//! # Why
//!
//! OpenAI's reasoning models refuse `max_tokens` and most compatible
//! servers know nothing but `max_tokens`: a config that picks the wrong
//! one fails on its first call. `rein check` refuses a model whose field
//! would be a guess; for the rest it shows what will be sent and why, so
//! an operator sees it before a live call does.

use std::collections::BTreeSet;

use rein_core::registry::{ModelLink, ProviderKind, Registry};
use serde_json::{Value, json};

/// One model of an `openai` provider and how its ceiling is sent.
pub struct OutputFieldLine {
    provider: String,
    model: String,
    field: &'static str,
    source: &'static str,
    cap: Option<u32>,
}

impl OutputFieldLine {
    /// `model mock/o3-mini: max_completion_tokens (known model), at most 100000`.
    pub fn text(&self) -> String {
        let cap = self
            .cap
            .map_or_else(String::new, |c| format!(", at most {c}"));
        format!(
            "model {}/{}: output ceiling in {} ({}){cap}",
            self.provider, self.model, self.field, self.source
        )
    }

    /// The line as `rein check --json` lists it under `"output_fields"`.
    pub fn json(&self) -> Value {
        json!({"provider": self.provider, "model": self.model, "field": self.field,
               "source": self.source, "max_output_tokens": self.cap})
    }
}

/// Every distinct model of an `openai` provider that an agent or a model
/// binding may call, in name order.
pub fn lines(registry: &Registry) -> Vec<OutputFieldLine> {
    let mut links: BTreeSet<ModelLink> = BTreeSet::new();
    for agent in registry.agents().values() {
        links.insert(ModelLink::new(agent.provider.clone(), agent.model.clone()));
        links.extend(agent.fallbacks.iter().cloned());
        links.extend(agent.context_fallbacks.iter().cloned());
    }
    for binding in registry.models().values() {
        links.insert(binding.primary.clone());
        links.extend(binding.fallbacks.iter().cloned());
        links.extend(binding.context_fallbacks.iter().cloned());
    }
    links
        .into_iter()
        .filter_map(|link| {
            let spec = registry.provider(&link.provider)?;
            if !matches!(spec.kind, ProviderKind::OpenAi { .. }) {
                return None;
            }
            let (field, source) = spec.output_field(&link.model);
            Some(OutputFieldLine {
                cap: spec.output_cap(&link.model).map(std::num::NonZeroU32::get),
                field: field.as_str(),
                source: source.as_str(),
                provider: link.provider,
                model: link.model,
            })
        })
        .collect()
}
