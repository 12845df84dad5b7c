//! `[agents.NAME]`: models, tools, budget, retries and policies of an agent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use humantime_serde::re::humantime::format_duration;

use super::{AgentModels, Checker, Merged};
use crate::config::Ratio;
use crate::deadline::BudgetLimits;
use crate::loop_guard::LoopGuard;
use crate::registry::config::AgentConfig;
use crate::registry::constants::{
    DEFAULT_COMPENSATION_RESERVE, DEFAULT_MAX_MODEL_RETRIES, DEFAULT_MAX_MODEL_RETRY_WAIT,
    DEFAULT_MODEL_LATENCY, MAX_COMPENSATION_RESERVE, MAX_MODEL_LATENCY,
};
use crate::registry::spec::{AgentSpec, ModelBindingSpec, ModelLink, ModelRetryLimits};
use crate::retry::RetryPolicy;

impl<'a> Checker<'a> {
    pub(super) fn agents(
        &mut self,
        merged: &Merged<'a>,
        models: &BTreeMap<String, ModelBindingSpec>,
    ) -> BTreeMap<String, AgentSpec> {
        let mut out = BTreeMap::new();
        for (name, entry) in &merged.agents {
            if let Some(spec) = self.agent(merged, models, entry.file, name, entry.config) {
                out.insert((*name).to_owned(), spec);
            }
        }
        out
    }

    pub(super) fn agent(
        &mut self,
        merged: &Merged<'a>,
        models: &BTreeMap<String, ModelBindingSpec>,
        file: &Path,
        name: &str,
        c: &AgentConfig,
    ) -> Option<AgentSpec> {
        let p = format!("agents.{name}");
        self.name(file, &p, name);
        let mut ok = true;
        let chain = self.agent_models(merged, models, file, &p, c);
        let mut seen = BTreeSet::new();
        for tool in &c.tools {
            if !seen.insert(tool.as_str()) {
                self.report(file, format!("{p}.tools"), format!("lists `{tool}` twice"));
                ok = false;
            } else if !merged.has("tools", tool) {
                self.report(
                    file,
                    format!("{p}.tools"),
                    format!("names `{tool}`, which is not a tool; define [tools.{tool}]"),
                );
                ok = false;
            }
        }
        let budget = match BudgetLimits::try_from(c.budget.clone()) {
            Ok(budget) => Some(budget),
            Err(err) => {
                self.config_error(file, &p, &err);
                None
            }
        };
        if c.budget.max_cost_usd.is_some() {
            ok &= self.agent_prices(merged, file, &p, &chain);
        }
        // A binding's links are checked with the binding.
        if chain.binding.is_none() {
            self.output_caps(
                merged,
                file,
                &p,
                [
                    ("model", chain.primary.iter().collect()),
                    ("fallbacks", chain.fallbacks.iter().flatten().collect()),
                    (
                        "context_fallbacks",
                        chain.context_fallbacks.iter().flatten().collect(),
                    ),
                ],
            );
        }
        let retry = match RetryPolicy::try_from(c.retry.clone()) {
            Ok(retry) => Some(retry),
            Err(err) => {
                self.config_error(file, &p, &err);
                None
            }
        };
        let mut loop_guard = c.loop_guard.clone();
        for tool in c.loop_guard.self_heal_overrides.keys() {
            if !seen.contains(tool.as_str()) {
                self.report(
                    file,
                    format!("{p}.loop_guard.self_heal_overrides.{tool}"),
                    format!("names `{tool}`, which is not one of the agent's tools"),
                );
                ok = false;
            }
        }
        // A tool's own allowance is the default for that tool; the agent's
        // explicit override, being more specific, wins.
        for tool in &c.tools {
            if let Some(allowance) = merged
                .tools
                .get(tool.as_str())
                .and_then(|t| t.config.self_heal_allowance)
            {
                loop_guard
                    .self_heal_overrides
                    .entry(tool.clone())
                    .or_insert(allowance);
            }
        }
        let loop_guard = match LoopGuard::new(loop_guard.clone()) {
            Ok(_) => Some(loop_guard),
            Err(err) => {
                self.config_error(file, &p, &err);
                None
            }
        };
        let reserve = c
            .compensation_reserve
            .unwrap_or(DEFAULT_COMPENSATION_RESERVE);
        let compensation_reserve = if reserve.is_finite()
            && (0.0..=MAX_COMPENSATION_RESERVE).contains(&reserve)
        {
            Ratio::new("compensation_reserve", reserve).ok()
        } else {
            self.report(
                file,
                format!("{p}.compensation_reserve"),
                format!("must be a number in [0, {MAX_COMPENSATION_RESERVE}], but it is {reserve}"),
            );
            None
        };
        let model_retry = match c.model_retry.max_wasted_tokens {
            Some(0) => {
                self.report(
                    file,
                    format!("{p}.model_retry.max_wasted_tokens"),
                    "must be at least 1 (leave it out to rely on the run's token budget alone)",
                );
                None
            }
            wasted => Some(ModelRetryLimits {
                max_retries: c
                    .model_retry
                    .max_retries
                    .unwrap_or(DEFAULT_MAX_MODEL_RETRIES),
                max_wait: c
                    .model_retry
                    .max_wait
                    .unwrap_or(DEFAULT_MAX_MODEL_RETRY_WAIT),
                max_wasted_tokens: wasted,
            }),
        };
        let model_latency = match c.model_latency {
            None => Some(DEFAULT_MODEL_LATENCY),
            Some(l) if !l.is_zero() && l <= MAX_MODEL_LATENCY => Some(l),
            Some(l) => {
                self.report(
                    file,
                    format!("{p}.model_latency"),
                    format!(
                        "must be more than 0 and at most {} (the median assumed for a model call), but it is {}",
                        format_duration(MAX_MODEL_LATENCY),
                        format_duration(l)
                    ),
                );
                None
            }
        };
        let approval = match crate::registry::approval::check_approval(&c.approval) {
            Ok(settings) => Some(settings),
            Err((field, message)) => {
                self.report(file, format!("{p}.{field}"), message);
                None
            }
        };
        let fan_out = match crate::registry::fan_out::check_fan_out(&c.fan_out) {
            Ok(limits) => Some(limits),
            Err((field, message)) => {
                self.report(file, format!("{p}.{field}"), message);
                None
            }
        };
        let planner =
            match crate::registry::planner::check_planner(&c.planner, c.value_of_success_usd) {
                Ok(settings) => Some(settings),
                Err((field, message)) => {
                    self.report(file, format!("{p}.{field}"), message);
                    None
                }
            };
        if !ok {
            return None;
        }
        let primary = chain.primary?;
        Some(AgentSpec {
            name: name.to_owned(),
            provider: primary.provider,
            model: primary.model,
            fallbacks: chain.fallbacks?,
            context_fallbacks: chain.context_fallbacks?,
            model_binding: chain.binding,
            system_prompt: c.system_prompt.clone().unwrap_or_default(),
            tools: c.tools.clone(),
            budget: budget?,
            retry: retry?,
            loop_guard: loop_guard?,
            on_failure: c.on_failure,
            compensation_reserve: compensation_reserve?,
            model_retry: model_retry?,
            model_latency: model_latency?,
            fan_out: fan_out?,
            planner: planner?,
            approval: approval?,
            source: file.to_path_buf(),
        })
    }

    /// The models an agent uses: its own `provider` and `model` with any
    /// inline fallbacks, or, without `provider`, the binding its `model`
    /// names. Each part is `None` when it did not pass.
    pub(super) fn agent_models(
        &mut self,
        merged: &Merged<'a>,
        models: &BTreeMap<String, ModelBindingSpec>,
        file: &Path,
        p: &str,
        c: &AgentConfig,
    ) -> AgentModels {
        if let Some(provider) = c.provider.as_deref() {
            let provider = self.provider_ref(merged, file, &format!("{p}.provider"), provider);
            let model = self.required_text(file, p, "model", c.model.as_deref());
            let primary = provider.zip(model).map(|(p, m)| ModelLink::new(p, m));
            let (fallbacks, context_fallbacks) = self.fallback_lists(
                merged,
                file,
                p,
                primary.as_ref(),
                &c.fallbacks,
                &c.context_fallbacks,
            );
            return AgentModels {
                primary,
                fallbacks,
                context_fallbacks,
                binding: None,
            };
        }
        let unresolved = AgentModels {
            primary: None,
            fallbacks: None,
            context_fallbacks: None,
            binding: None,
        };
        let alias = c.model.as_deref().filter(|m| !m.trim().is_empty());
        match alias {
            Some(alias) if merged.has("models", alias) => {}
            Some(alias) => {
                let known: Vec<&str> = merged.models.keys().copied().collect();
                let known = if known.is_empty() {
                    "no [models.*] binding is defined".to_owned()
                } else {
                    format!("known bindings: {}", known.join(", "))
                };
                self.report(
                    file,
                    format!("{p}.provider"),
                    format!(
                        "is required unless `model` names a [models.*] binding, and `{alias}` names none; {known}"
                    ),
                );
            }
            None => {
                self.report(
                    file,
                    format!("{p}.provider"),
                    "is required unless `model` names a [models.*] binding",
                );
                self.required_text(file, p, "model", c.model.as_deref());
            }
        }
        let mut inline_ok = true;
        for (set, field) in [
            (!c.fallbacks.is_empty(), "fallbacks"),
            (!c.context_fallbacks.is_empty(), "context_fallbacks"),
        ] {
            if set {
                self.report(
                    file,
                    format!("{p}.{field}"),
                    format!(
                        "needs `provider`: an agent lists its own {field} only with its own provider and model; \
                         one that names a [models.*] binding uses the binding's, so list them there"
                    ),
                );
                inline_ok = false;
            }
        }
        // A binding that is defined but did not pass has been reported
        // under its own fields already.
        match alias.and_then(|alias| models.get(alias)) {
            Some(binding) if binding.kind != crate::registry::BindingKind::Chat => {
                self.report(
                    file,
                    format!("{p}.model"),
                    format!(
                        "names `{}`, an {} binding: an agent needs a chat binding (kind = \"chat\", the default)",
                        binding.name,
                        binding.kind.as_str()
                    ),
                );
                unresolved
            }
            Some(binding) if inline_ok => AgentModels {
                primary: Some(binding.primary.clone()),
                fallbacks: Some(binding.fallbacks.clone()),
                context_fallbacks: Some(binding.context_fallbacks.clone()),
                binding: Some(binding.name.clone()),
            },
            _ => unresolved,
        }
    }

    /// With a cost ceiling, every model the agent can call needs a price,
    /// or its calls would count no cost and the ceiling would never be
    /// reached. Returns whether every one has a price.
    pub(super) fn agent_prices(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        p: &str,
        chain: &AgentModels,
    ) -> bool {
        let roles = [
            ("model", chain.primary.iter().collect::<Vec<_>>()),
            ("fallback model", chain.fallbacks.iter().flatten().collect()),
            (
                "context fallback model",
                chain.context_fallbacks.iter().flatten().collect(),
            ),
        ];
        let via = match &chain.binding {
            Some(alias) => format!(" (used through [models.{alias}])"),
            None => String::new(),
        };
        let mut ok = true;
        let mut seen = BTreeSet::new();
        for (role, links) in roles {
            for link in links {
                if !seen.insert(link) {
                    continue;
                }
                let Some(entry) = merged.providers.get(link.provider.as_str()) else {
                    continue;
                };
                if entry.config.prices.contains_key(&link.model) {
                    continue;
                }
                self.report(
                    file,
                    format!("{p}.budget.max_cost_usd"),
                    format!(
                        "needs a price for {role} `{}` in [providers.{}.prices]{via}: without one no cost is counted",
                        link.model, link.provider
                    ),
                );
                ok = false;
            }
        }
        ok
    }
}
