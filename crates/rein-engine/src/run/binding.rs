//! What the engine needs to run an agent: its tools and its settings,
//! resolved from the registry.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use rein_core::deadline::BudgetLimits;
use rein_core::idempotency::Normalizer;
use rein_core::loop_guard::LoopGuardConfig;
use rein_core::registry::Price;
use rein_core::retry::RetryPolicy;
use rein_core::{FailurePolicy, LatencyProfile, Ratio, ToolClass};
use serde_json::Value;

use super::settle::CompensationBinding;
use crate::provider::ModelProvider;
use crate::tool::ToolAdapter;
use crate::tool::command::CommandTarget;
use crate::tool::http::HttpTarget;

/// The factor applied to a tool's p99 to get one attempt's allowance when
/// its config sets none (`tools.NAME.latency.allowance_factor`).
pub const DEFAULT_ALLOWANCE_FACTOR: u32 = 2;

/// How a tool is called: over HTTP, as a local command in its own
/// process group, or as a child run of another agent.
#[derive(Debug, Clone)]
pub enum ToolTarget {
    /// An HTTP endpoint.
    Http(HttpTarget),
    /// A local program.
    Command(CommandTarget),
    /// Another agent, run as a child of the calling run.
    Agent(AgentTarget),
    /// A kind of tool the engine does not build in ([`ToolAdapter`]): an
    /// in-process function ([`crate::tool::InProcessTool`]), …
    Adapter(Arc<dyn ToolAdapter>),
}

/// A tool that starts a child run of another agent.
///
/// # Why a tool
///
/// A child agent is one more action the model proposes: it gets an intent,
/// a ledger record and a share of the caller's budget like any call, and
/// the tree it grows is bounded (depth, child runs, total tokens) so a
/// model cannot fan out without limit.
#[derive(Debug, Clone)]
pub struct AgentTarget {
    /// The agent to run, as named in the config.
    pub agent: String,
    /// The share of the caller's remaining budget the child may use.
    pub budget_ratio: Ratio,
    /// Ceilings on that share.
    pub caps: rein_core::deadline::ChildCaps,
}

impl ToolTarget {
    /// The HTTP target, if the tool has one.
    pub fn http(&self) -> Option<&HttpTarget> {
        match self {
            ToolTarget::Http(t) => Some(t),
            ToolTarget::Command(_) | ToolTarget::Agent(_) | ToolTarget::Adapter(_) => None,
        }
    }

    /// Whether the tool can be asked about a call by its idempotency key.
    pub fn has_status_lookup(&self) -> bool {
        match self {
            ToolTarget::Http(t) => t.status_url.is_some(),
            ToolTarget::Adapter(a) => a.has_lookup(),
            ToolTarget::Command(_) | ToolTarget::Agent(_) => false,
        }
    }
}

impl From<HttpTarget> for ToolTarget {
    fn from(t: HttpTarget) -> Self {
        ToolTarget::Http(t)
    }
}

/// One tool as the engine calls it.
#[derive(Debug, Clone)]
pub struct ToolBinding {
    /// The registry name.
    pub name: String,
    /// Its class.
    pub class: ToolClass,
    /// The latency profile it was bound with: the declared one, or in
    /// observe mode the conservative fallback (a run plans with the
    /// observed profile once trusted: `ToolLatency`).
    pub latency: LatencyProfile,
    /// How its arguments are normalized for keys.
    pub normalizer: Normalizer,
    /// Where it lives and how it is called.
    pub target: ToolTarget,
    /// Its resource group, which has its own breaker arm.
    pub resource_group: Option<String>,
    /// Model self-heal attempts before the tool is disabled for the run.
    pub self_heal_allowance: Option<u32>,
    /// What the tool declares about itself beyond how it is called.
    pub declared: Declared,
}

/// What a tool declares about itself beyond how it is called: who answers
/// for it and how visible its effect is (both shown in its call events and
/// in a handoff package), and the argument naming the resource it writes.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Declared {
    /// Who to call when it breaks (`owner`).
    pub owner: Option<String>,
    /// How visible its effect is outside (`side_effect_tier`).
    pub side_effect_tier: Option<rein_core::registry::SideEffectTier>,
    /// The argument naming the resource its writes change
    /// (`resource_key`): writes of one turn to the same value of the same
    /// resource group run one at a time, in the model's order.
    pub resource_key: Option<rein_core::registry::ResourceKey>,
    /// Whether its calls wait for a human's approval on their own account
    /// (`approval`), beside the agent's tier gate.
    pub approval: rein_core::registry::ToolApproval,
}

impl Declared {
    /// Declarations with only a resource key (for an embedder or a test).
    pub fn writing(resource_key: rein_core::registry::ResourceKey) -> Declared {
        Declared {
            resource_key: Some(resource_key),
            ..Declared::default()
        }
    }
}

impl ToolBinding {
    /// A tool of a kind the engine does not build in ([`ToolAdapter`], an
    /// [`InProcessTool`](crate::tool::InProcessTool)), for an embedder:
    /// `latency` is its declared profile (what retries leave room for and
    /// what bounds an attempt); no resource group, the default key
    /// normalizer, nothing declared. Set the public fields to change them.
    pub fn adapter(
        name: impl Into<String>,
        class: ToolClass,
        latency: LatencyProfile,
        adapter: impl ToolAdapter + 'static,
    ) -> ToolBinding {
        ToolBinding {
            name: name.into(),
            class,
            latency,
            normalizer: Normalizer::default(),
            target: ToolTarget::Adapter(Arc::new(adapter)),
            resource_group: None,
            self_heal_allowance: None,
            declared: Declared::default(),
        }
    }

    /// One attempt's allowance by the bound profile alone: p99 × the
    /// default factor, capped by what remains. A run plans with the
    /// engine's view instead (observed latency, the configured factor);
    /// this is for callers outside a run (the reconciler's lookups).
    pub fn allowance(&self, remaining: Duration) -> Duration {
        self.latency
            .p99()
            .saturating_mul(DEFAULT_ALLOWANCE_FACTOR)
            .min(remaining)
    }
}

/// An agent, resolved: everything a run of it needs.
///
/// Built by [`bind`](crate::bind) from a config, or by
/// [`AgentBinding::new`] and its `with_*` methods in a program's own code;
/// its fields stay public to read and to change one setting, and
/// `#[non_exhaustive]` lets a release add a setting without breaking
/// either.
#[derive(Clone)]
#[non_exhaustive]
pub struct AgentBinding {
    /// The agent's name.
    pub name: String,
    /// The model to ask.
    pub model: String,
    /// Its system prompt.
    pub system_prompt: String,
    /// Its provider.
    pub provider: Arc<dyn ModelProvider>,
    /// The model's price, when known.
    pub price: Option<Price>,
    /// The most output tokens the model accepts per answer
    /// (`max_output_tokens`); `None`: no cap.
    pub max_output_tokens: Option<u32>,
    /// The model-facing tool definitions (OpenAI format), generated by the
    /// registry.
    pub tool_definitions: Vec<Value>,
    /// The tools it may call, by name.
    pub tools: BTreeMap<String, ToolBinding>,
    /// Its budget ceilings.
    pub budget: BudgetLimits,
    /// Its retry policy, for tools and the model alike.
    pub retry: RetryPolicy,
    /// Its loop guard settings.
    pub loop_guard: LoopGuardConfig,
    /// The latency profile of a model call, for budget and retry decisions.
    pub model_latency: LatencyProfile,
    /// What to do with effects already caused when a later step fails.
    pub on_failure: FailurePolicy,
    /// The share of the wall clock reserved for compensation: the forward
    /// path runs on the rest, so undoing never depends on what it left.
    pub compensation_reserve: Ratio,
    /// How to undo each tool's effect, by forward tool name.
    pub compensations: BTreeMap<String, CompensationBinding>,
    /// Concurrency ceilings per resource group (`max_concurrency`), for the
    /// groups of its tools and their compensations. A ceiling is shared by
    /// every run of the engine: at most that many attempts of the group's
    /// tools are in flight at once, whichever run makes them. A group not
    /// named here has no ceiling. Empty by default.
    pub group_limits: BTreeMap<String, NonZeroU32>,
    /// Request buckets per resource group (`rate_per_sec`, `burst`), for the
    /// same groups: shared by every run of the engine, so at most `burst +
    /// rate_per_sec × t` attempts of a group's tools start in any window `t`;
    /// a call over it waits, bounded by its deadline, or is shed unsent. A
    /// group not named here has no bucket. Empty by default.
    pub group_rates: BTreeMap<String, rein_core::registry::RateLimit>,
    /// Links tried in order after the primary (`provider`, `model`) when a
    /// turn fails transiently (open circuit, 5xx, 429, a bare connection
    /// error, a first byte that did not come in time) — never on 401/403,
    /// cancellation or a content filter. Empty: the primary alone.
    pub fallbacks: Vec<ModelLink>,
    /// Larger-context links tried in order when a turn does not fit the
    /// model's context window; the same model is never asked again.
    pub context_fallbacks: Vec<ModelLink>,
    /// Calls in flight at once per provider name (`max_concurrency`),
    /// shared by every run of the engine; a call over the limit waits for a
    /// slot within its deadline. A provider not named here is unlimited and
    /// costs nothing extra.
    pub provider_limits: BTreeMap<String, NonZeroU32>,
    /// Token buckets per provider name (`tokens_per_minute`), shared by
    /// every run of the engine and the gateway: each model call is charged
    /// its prompt estimate and reserved output before it is sent, and
    /// settled with the usage the provider counted. A provider not named
    /// here has no token bucket.
    pub provider_tokens: BTreeMap<String, rein_core::registry::TokenLimit>,
    /// The run's own ceiling on model retries, apart from tool retries and
    /// from the model's self-healing.
    pub model_retry: rein_core::registry::ModelRetryLimits,
    /// How many calls one turn may propose: a turn with more runs none of
    /// them, and the model is told to batch or narrow.
    pub fan_out: rein_core::registry::FanOutLimits,
    /// What the model is told of its budget each turn, whether a budget
    /// too short for another tool round trip gets one last turn without
    /// tools, and what a success is worth to a retry.
    pub planner: rein_core::registry::PlannerSettings,
    /// Which calls wait for a human's approval (with the tools' own
    /// rules), how long, and what an expiry does (`[approval]`).
    pub approval: rein_core::registry::ApprovalSettings,
}

/// One `{provider, model}` link of a model binding's chain.
#[derive(Clone)]
pub struct ModelLink {
    /// The provider that serves it.
    pub provider: Arc<dyn ModelProvider>,
    /// The model, as the provider names it.
    pub model: String,
    /// Its price, when known: a turn it answers is charged at it.
    pub price: Option<Price>,
    /// The most output tokens it accepts per answer (`max_output_tokens`);
    /// `None`: no cap (a scripted provider's unknown model).
    pub max_output_tokens: Option<u32>,
}

impl std::fmt::Debug for ModelLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelLink")
            .field("provider", &self.provider.name())
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl AgentBinding {
    /// The digest of what the model is shown (`sha256:…`): the system
    /// prompt and the tool definitions, or the tools' names and classes
    /// when no definitions were generated (an embedder's own loop). A
    /// resume compares it with the one its run started with.
    pub fn contract(&self) -> String {
        let tools: Vec<serde_json::Value> = if self.tool_definitions.is_empty() {
            self.tools
                .values()
                .map(|t| serde_json::json!({"name": t.name, "class": t.class}))
                .collect()
        } else {
            self.tool_definitions.clone()
        };
        let shown = serde_json::json!({
            "system_prompt": self.system_prompt,
            "tools": tools,
        });
        rein_core::digest::sha256(shown.to_string().as_bytes())
    }

    /// An agent for a caller's own loop ([`Engine::begin`](super::Engine::begin)):
    /// `budget` for each run, no tools yet ([`with_tool`](AgentBinding::with_tool)),
    /// no model ([`CallerDriven`](crate::provider::CallerDriven)), and
    /// rein's defaults for everything else (retries, loop guard, failure
    /// policy, a 20 % compensation reserve). Its public fields change
    /// them.
    pub fn new(name: impl Into<String>, budget: BudgetLimits) -> AgentBinding {
        let second = Duration::from_secs(1);
        AgentBinding {
            name: name.into(),
            model: "caller".into(),
            system_prompt: String::new(),
            provider: Arc::new(crate::provider::CallerDriven),
            price: None,
            max_output_tokens: None,
            tool_definitions: Vec::new(),
            tools: BTreeMap::new(),
            budget,
            retry: RetryPolicy::default(),
            loop_guard: LoopGuardConfig::default(),
            model_latency: LatencyProfile::new(second, second * 5, second * 10, 0)
                .unwrap_or_else(|_| unreachable!("positive, ordered latencies are a profile")),
            on_failure: FailurePolicy::default(),
            compensation_reserve: Ratio::new("compensation_reserve", 0.2)
                .unwrap_or_else(|_| unreachable!("0.2 is a ratio")),
            compensations: BTreeMap::new(),
            group_limits: BTreeMap::new(),
            group_rates: BTreeMap::new(),
            fallbacks: Vec::new(),
            context_fallbacks: Vec::new(),
            provider_limits: BTreeMap::new(),
            provider_tokens: BTreeMap::new(),
            model_retry: Default::default(),
            fan_out: Default::default(),
            planner: Default::default(),
            approval: Default::default(),
        }
    }

    /// Asking `model` of `provider` (in place of the caller-driven model).
    pub fn with_model(
        mut self,
        provider: Arc<dyn ModelProvider>,
        model: impl Into<String>,
    ) -> AgentBinding {
        self.provider = provider;
        self.model = model.into();
        self
    }

    /// With `prompt` as its system prompt.
    pub fn with_system_prompt(mut self, prompt: impl Into<String>) -> AgentBinding {
        self.system_prompt = prompt.into();
        self
    }

    /// Planning model calls with `latency` (whether one more turn fits
    /// the deadline, and model retries).
    pub fn with_model_latency(mut self, latency: LatencyProfile) -> AgentBinding {
        self.model_latency = latency;
        self
    }

    /// With `tool` (by its name).
    pub fn with_tool(mut self, tool: ToolBinding) -> AgentBinding {
        self.tools.insert(tool.name.clone(), tool);
        self
    }

    /// With `compensation` undoing the tool `of`.
    pub fn with_compensation(
        mut self,
        of: impl Into<String>,
        compensation: CompensationBinding,
    ) -> AgentBinding {
        self.compensations.insert(of.into(), compensation);
        self
    }

    /// Who answers for each tool the agent may call (its compensations
    /// included), and how visible its effect is: what its handoff packages
    /// name beside each effect. Tools that declare neither are left out.
    pub fn owners(&self) -> BTreeMap<String, rein_core::handoff::ToolOwner> {
        self.tools
            .values()
            .chain(self.compensations.values().map(|c| &c.tool))
            .filter_map(|t| {
                Some((
                    t.name.clone(),
                    rein_core::handoff::ToolOwner {
                        owner: t.declared.owner.clone()?,
                        side_effect_tier: t.declared.side_effect_tier?,
                    },
                ))
            })
            .collect()
    }
}

impl std::fmt::Debug for AgentBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBinding")
            .field("name", &self.name)
            .field("model", &self.model)
            .field("provider", &self.provider.name())
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Validates a tool's arguments against its schema; the registry's
/// compiled schemas implement it.
pub trait ArgValidator: Send + Sync {
    /// `Ok` when `args` fit `tool`'s schema, else short problems safe to
    /// show the model.
    ///
    /// # Errors
    ///
    /// The problems, one line each.
    fn validate(&self, tool: &str, args: &Value) -> Result<(), Vec<String>>;
}

/// A validator that accepts everything (for tools without a schema).
#[derive(Debug, Clone, Copy, Default)]
pub struct AcceptAll;

impl ArgValidator for AcceptAll {
    fn validate(&self, _tool: &str, _args: &Value) -> Result<(), Vec<String>> {
        Ok(())
    }
}
