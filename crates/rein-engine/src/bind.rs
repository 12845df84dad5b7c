//! Resolving the registry into what a run needs: an agent's tools, its
//! provider, its model's price, and the model-facing tool definitions.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use rein_core::LatencyProfile;
use rein_core::idempotency::Normalizer;
use rein_core::registry::{AdapterSpec, HttpMethod, ProviderKind, Registry, ToolSpec};
use serde_json::Value;

use crate::config::CompiledSchemas;
use crate::provider::{
    AnthropicProvider, ModelProvider, OpenAiProvider, ScriptError, ScriptedProvider, StreamSettings,
};
use crate::run::{
    AgentBinding, AgentResolver, AgentTarget, ArgValidator, CompensationBinding, Declared,
    EngineBuilder, ModelBinding, ModelLink, ToolBinding, ToolLatency, ToolTarget,
};
use crate::tool::command::CommandTarget;
use crate::tool::http::HttpTarget;

/// The latency profile assumed for a model call: the basis of the "is there
/// time for one more model turn" check and of model-call retries.
/// An agent's `model_latency` overrides it.
pub const DEFAULT_MODEL_LATENCY_P50: Duration = rein_core::registry::DEFAULT_MODEL_LATENCY;

/// An agent that could not be bound.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// No such agent in the registry.
    #[error("unknown agent `{name}`; agents in the config: {known}")]
    UnknownAgent {
        /// The requested name.
        name: String,
        /// The agents that exist, comma-separated.
        known: String,
    },
    /// The agent's provider is missing (the integrity check prevents this).
    #[error("agent `{agent}` names provider `{provider}`, which is not in the config")]
    UnknownProvider {
        /// The agent.
        agent: String,
        /// The provider.
        provider: String,
    },
    /// The scripted provider's script could not be read.
    #[error(transparent)]
    Script(#[from] ScriptError),
    /// A kind of adapter or provider this engine does not implement yet.
    #[error("{what} is not supported by this version of rein")]
    Unsupported {
        /// What, e.g. "the adapter of tool `x`".
        what: String,
    },
}

/// Where a binding gets its providers: `(binding, provider)` → the
/// provider, built for it or taken from those already built.
pub type ProviderSource<'a> = dyn Fn(&str, &str) -> Result<Arc<dyn ModelProvider>, BindError> + 'a;

/// Binds `agent` from the registry. A new provider is built per call, so a
/// scripted provider starts at the first turn of its script.
///
/// # Errors
///
/// [`BindError`] when the agent or its provider cannot be resolved.
pub fn bind_agent(
    registry: &Registry,
    name: &str,
    client: &reqwest::Client,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<AgentBinding, BindError> {
    bind_agent_using(registry, name, &|agent, provider| {
        bind_provider(registry, agent, provider, client, env)
    })
}

/// [`bind_agent`] with the providers from `providers` (e.g. [`built`]:
/// each provider built once, for every binding of a start).
///
/// # Errors
///
/// [`BindError`] when the agent or its provider cannot be resolved.
pub fn bind_agent_using(
    registry: &Registry,
    name: &str,
    providers: &ProviderSource<'_>,
) -> Result<AgentBinding, BindError> {
    let Some(agent) = registry.agent(name) else {
        let known: Vec<&str> = registry.agents().keys().map(String::as_str).collect();
        return Err(BindError::UnknownAgent {
            name: name.to_owned(),
            known: known.join(", "),
        });
    };
    let provider = providers(&agent.name, &agent.provider)?;
    let price = registry
        .provider(&agent.provider)
        .and_then(|p| p.price(&agent.model))
        .copied();
    let max_output_tokens = output_cap(registry, &agent.provider, &agent.model);
    let link = |l: &rein_core::registry::ModelLink| -> Result<ModelLink, BindError> {
        Ok(ModelLink {
            provider: providers(&agent.name, &l.provider)?,
            model: l.model.clone(),
            price: registry
                .provider(&l.provider)
                .and_then(|p| p.price(&l.model))
                .copied(),
            max_output_tokens: output_cap(registry, &l.provider, &l.model),
        })
    };
    let fallbacks = agent.fallbacks.iter().map(link).collect::<Result<_, _>>()?;
    let context_fallbacks = agent
        .context_fallbacks
        .iter()
        .map(link)
        .collect::<Result<_, _>>()?;
    // Every provider the agent may ask, with its ceiling if it has one.
    let provider_limits = std::iter::once(&agent.provider)
        .chain(agent.fallbacks.iter().map(|l| &l.provider))
        .chain(agent.context_fallbacks.iter().map(|l| &l.provider))
        .filter_map(|name| {
            let limit = registry.provider(name)?.max_concurrency?;
            Some((name.clone(), limit))
        })
        .collect();
    let provider_tokens = std::iter::once(&agent.provider)
        .chain(agent.fallbacks.iter().map(|l| &l.provider))
        .chain(agent.context_fallbacks.iter().map(|l| &l.provider))
        .filter_map(|name| Some((name.clone(), registry.provider(name)?.tokens?)))
        .collect();
    let mut tools = BTreeMap::new();
    for spec in registry.agent_tools(agent) {
        tools.insert(spec.name.clone(), bind_tool(spec)?);
    }
    // Compensation tools are bound even when the model is not offered them:
    // rein calls them, the model does not.
    let mut compensations = BTreeMap::new();
    for spec in registry.agent_tools(agent) {
        let Some(compensation) = &spec.compensation else {
            continue;
        };
        let Some(tool) = registry.tool(&compensation.tool) else {
            continue;
        };
        compensations.insert(
            spec.name.clone(),
            CompensationBinding {
                spec: compensation.clone(),
                tool: bind_tool(tool)?,
            },
        );
    }
    let groups = || {
        registry.agent_tools(agent).chain(
            compensations
                .values()
                .filter_map(|c| registry.tool(&c.tool.name)),
        )
    };
    let group_limits = group_limits(registry, groups());
    let group_rates = group_rates(registry, groups());
    let model_latency = model_latency(agent.model_latency);
    Ok(AgentBinding {
        name: agent.name.clone(),
        model: agent.model.clone(),
        system_prompt: agent.system_prompt.clone(),
        provider,
        price,
        max_output_tokens,
        tool_definitions: registry.openai_tools(agent),
        tools,
        budget: agent.budget,
        retry: agent.retry,
        loop_guard: agent.loop_guard.clone(),
        model_latency,
        on_failure: agent.on_failure,
        compensation_reserve: agent.compensation_reserve,
        compensations,
        group_limits,
        group_rates,
        fallbacks,
        context_fallbacks,
        provider_limits,
        provider_tokens,
        model_retry: agent.model_retry,
        fan_out: agent.fan_out,
        planner: agent.planner,
        approval: agent.approval,
    })
}

/// Where binding reads provider keys (`api_key_env`) from: the process
/// environment in a binary, a fixed map in a test.
pub type Env = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The process environment, as an [`Env`].
pub fn process_env() -> Env {
    Arc::new(|name: &str| std::env::var(name).ok())
}

/// The [`AgentResolver`] of `registry`: binds the agent an `agent` tool
/// starts, by name, with fresh providers per child run (a scripted child
/// starts at the first turn of its script, a resumed one is positioned by
/// the engine).
///
/// # Why here
///
/// Every command that drives runs (`rein run`, `rein resume`, `rein
/// serve`, an embedder) must bind agent tools the same way, or a config
/// that `rein check` accepts fails under one of them. A name the registry
/// does not bind (it was checked at start, so only a script deleted since)
/// is logged and resolves to `None`: the engine then fails the call with a
/// structured `not_found`.
pub fn agent_resolver(registry: &Registry, client: &reqwest::Client, env: Env) -> AgentResolver {
    let registry = registry.clone();
    let client = client.clone();
    Arc::new(move |name: &str| {
        bind_agent(&registry, name, &client, &*env)
            .inspect_err(|e| tracing::warn!("agent tool: cannot bind agent `{name}`: {e}"))
            .ok()
    })
}

impl EngineBuilder {
    /// Configures the engine from `registry` as every command does: tool
    /// calls and child runs over `client`, the registry's breaker settings,
    /// agent tools bound by [`agent_resolver`] (provider keys from `env`),
    /// agent trees bounded by `[server.agent_graph]`, metric labels by
    /// `[server.metrics_labels]`, and traces by `[telemetry]`.
    #[must_use]
    pub fn registry(self, registry: &Registry, client: &reqwest::Client, env: Env) -> Self {
        self.http_client(client.clone())
            .breakers(registry.breakers().clone())
            .tool_latency(tool_latency(registry))
            .agents(agent_resolver(registry, client, env))
            .agent_graph(registry.server().agent_graph)
            .metrics_labels(crate::metrics::LabelBounds::from(
                &registry.server().metrics_labels,
            ))
            .traces(registry.telemetry().cloned())
    }
}

/// How each tool of `registry` is planned: its latency spec, factor and
/// argument-scale buckets.
pub fn tool_latency(registry: &Registry) -> BTreeMap<String, ToolLatency> {
    registry
        .tools()
        .values()
        .map(|spec| {
            (
                spec.name.clone(),
                ToolLatency {
                    spec: spec.latency,
                    factor: spec.allowance_factor,
                    scale: spec.latency_scale.clone(),
                },
            )
        })
        .collect()
}

/// The concurrency ceilings of the resource groups of `tools`, by group.
fn group_limits<'a>(
    registry: &Registry,
    tools: impl Iterator<Item = &'a ToolSpec>,
) -> BTreeMap<String, NonZeroU32> {
    tools
        .filter_map(|spec| {
            let group = registry.resource_group(&spec.resource_group)?;
            Some((group.name.clone(), group.max_concurrency?))
        })
        .collect()
}

/// The request buckets of the resource groups of `tools`, by group.
fn group_rates<'a>(
    registry: &Registry,
    tools: impl Iterator<Item = &'a ToolSpec>,
) -> BTreeMap<String, rein_core::registry::RateLimit> {
    tools
        .filter_map(|spec| {
            let group = registry.resource_group(&spec.resource_group)?;
            Some((group.name.clone(), group.rate?))
        })
        .collect()
}

/// Binds every `[models.*]` binding of the registry, for callers outside a
/// run (the OpenAI-compatible gateway). Built once: the providers are
/// stateless, and the engine holds the breakers and slots they share with
/// runs.
///
/// # Errors
///
/// [`BindError`] when a link's provider cannot be built.
pub fn bind_models(
    registry: &Registry,
    client: &reqwest::Client,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, ModelBinding>, BindError> {
    let providers =
        |binding: &str, provider: &str| bind_provider(registry, binding, provider, client, env);
    registry
        .models()
        .keys()
        .map(|name| Ok((name.clone(), bind_model_using(registry, name, &providers)?)))
        .collect()
}

/// Binds the `[models.NAME]` binding with the providers from `providers`.
///
/// # Errors
///
/// [`BindError`] when there is no such binding or a link's provider
/// cannot be had.
pub fn bind_model_using(
    registry: &Registry,
    name: &str,
    providers: &ProviderSource<'_>,
) -> Result<ModelBinding, BindError> {
    let Some(spec) = registry.models().get(name) else {
        return Err(BindError::Unsupported {
            what: format!("the model binding `{name}`, which is not in the config,"),
        });
    };
    let agent = format!("model binding `{}`", spec.name);
    let link = |l: &rein_core::registry::ModelLink| -> Result<ModelLink, BindError> {
        Ok(ModelLink {
            provider: providers(&agent, &l.provider)?,
            model: l.model.clone(),
            price: registry
                .provider(&l.provider)
                .and_then(|p| p.price(&l.model))
                .copied(),
            max_output_tokens: output_cap(registry, &l.provider, &l.model),
        })
    };
    let links = std::iter::once(&spec.primary)
        .chain(&spec.fallbacks)
        .chain(&spec.context_fallbacks);
    let provider_limits = links
        .clone()
        .filter_map(|l| {
            let limit = registry.provider(&l.provider)?.max_concurrency?;
            Some((l.provider.clone(), limit))
        })
        .collect();
    let provider_tokens = links
        .filter_map(|l| Some((l.provider.clone(), registry.provider(&l.provider)?.tokens?)))
        .collect();
    let stream = registry
        .provider(&spec.primary.provider)
        .and_then(|p| p.stream)
        .and_then(|s| StreamSettings::new(s.first_byte_timeout, s.idle_timeout).ok())
        .unwrap_or_default();
    Ok(ModelBinding {
        name: spec.name.clone(),
        kind: spec.kind,
        primary: link(&spec.primary)?,
        fallbacks: spec.fallbacks.iter().map(link).collect::<Result<_, _>>()?,
        context_fallbacks: spec
            .context_fallbacks
            .iter()
            .map(link)
            .collect::<Result<_, _>>()?,
        provider_limits,
        provider_tokens,
        retry: rein_core::retry::RetryPolicy::default(),
        model_latency: default_model_latency(),
        stream,
        same_model: spec.same_model,
        deadline: spec.deadline,
        recover_streams: spec.recover_streams,
    })
}

/// A [`ProviderSource`] over providers already built, by name.
pub fn built(
    providers: &BTreeMap<String, Arc<dyn ModelProvider>>,
) -> impl Fn(&str, &str) -> Result<Arc<dyn ModelProvider>, BindError> + '_ {
    move |binding: &str, provider: &str| {
        providers
            .get(provider)
            .cloned()
            .ok_or_else(|| BindError::UnknownProvider {
                agent: binding.to_owned(),
                provider: provider.to_owned(),
            })
    }
}

/// The latency profile assumed for a model call.
fn default_model_latency() -> LatencyProfile {
    model_latency(DEFAULT_MODEL_LATENCY_P50)
}

/// The profile assumed for a model call of median `p50` (p95 4 ×, p99
/// 10 ×); a zero median (which the check refuses) is taken as 1 ms.
fn model_latency(p50: Duration) -> LatencyProfile {
    let p50 = p50.max(Duration::from_millis(1));
    LatencyProfile::new(p50, p50.saturating_mul(4), p50.saturating_mul(10), 0)
        .unwrap_or_else(|_| unreachable!("a model latency profile of a positive median is ordered"))
}

/// Binds every tool of the registry (the reconciler asks any of them).
///
/// # Errors
///
/// [`BindError::Unsupported`] for an adapter this engine cannot call.
pub fn bind_tools(registry: &Registry) -> Result<BTreeMap<String, ToolBinding>, BindError> {
    registry
        .tools()
        .values()
        .map(|spec| Ok((spec.name.clone(), bind_tool(spec)?)))
        .collect()
}

/// Binds the compensation of every tool that has one, by forward tool.
///
/// # Errors
///
/// [`BindError::Unsupported`] for an adapter this engine cannot call.
pub fn bind_compensations(
    registry: &Registry,
) -> Result<BTreeMap<String, CompensationBinding>, BindError> {
    let mut out = BTreeMap::new();
    for spec in registry.tools().values() {
        let Some(compensation) = &spec.compensation else {
            continue;
        };
        let Some(tool) = registry.tool(&compensation.tool) else {
            continue;
        };
        out.insert(
            spec.name.clone(),
            CompensationBinding {
                spec: compensation.clone(),
                tool: bind_tool(tool)?,
            },
        );
    }
    Ok(out)
}

/// Builds the adapter of one tool, as a run would.
///
/// # Errors
///
/// [`BindError::Unsupported`] for an adapter this engine cannot call.
pub fn build_tool(spec: &ToolSpec) -> Result<ToolBinding, BindError> {
    bind_tool(spec)
}

/// Builds provider `name` as a run would (a script is read and parsed).
///
/// # Errors
///
/// [`BindError`] when it cannot be built.
pub fn build_provider(
    registry: &Registry,
    name: &str,
    client: &reqwest::Client,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn ModelProvider>, BindError> {
    bind_provider(registry, name, name, client, env)
}

fn bind_tool(spec: &ToolSpec) -> Result<ToolBinding, BindError> {
    let target = match &spec.adapter {
        AdapterSpec::Http {
            url,
            method,
            headers,
            status_url,
            max_result_bytes,
            ..
        } => ToolTarget::Http(HttpTarget {
            name: spec.name.clone(),
            url: url.clone(),
            method: http_method(*method),
            headers: headers.clone(),
            idempotency_header: spec.idempotency.header.clone(),
            status_url: status_url.clone(),
            max_result_bytes: *max_result_bytes,
        }),
        AdapterSpec::Agent {
            agent,
            budget_ratio,
            caps,
            ..
        } => ToolTarget::Agent(AgentTarget {
            agent: agent.clone(),
            budget_ratio: *budget_ratio,
            caps: *caps,
        }),
        AdapterSpec::Mcp {
            server,
            tool,
            max_result_bytes,
            pin,
            ..
        } => {
            let mcp = crate::tool::McpTool::of_server(
                spec.name.clone(),
                server,
                tool.clone(),
                *max_result_bytes,
            );
            ToolTarget::Adapter(Arc::new(match pin {
                Some(pin) => mcp.with_pin(pin.clone()),
                None => mcp,
            }))
        }
        other => match CommandTarget::from_spec(&spec.name, other) {
            Some(target) => ToolTarget::Command(target),
            None => {
                return Err(BindError::Unsupported {
                    what: format!("the adapter of tool `{}`", spec.name),
                });
            }
        },
    };
    Ok(ToolBinding {
        name: spec.name.clone(),
        class: spec.class,
        latency: spec.latency.profile(None),
        normalizer: Normalizer::new(spec.idempotency.normalizer.clone()),
        target,
        resource_group: Some(spec.resource_group.clone()),
        self_heal_allowance: spec.self_heal_allowance,
        declared: Declared {
            owner: Some(spec.owner.clone()),
            side_effect_tier: Some(spec.side_effect_tier),
            resource_key: spec.resource_key.clone(),
            approval: spec.approval.clone(),
        },
    })
}

fn bind_provider(
    registry: &Registry,
    agent: &str,
    name: &str,
    client: &reqwest::Client,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn ModelProvider>, BindError> {
    let Some(spec) = registry.provider(name) else {
        return Err(BindError::UnknownProvider {
            agent: agent.to_owned(),
            provider: name.to_owned(),
        });
    };
    // Every call of a provider with a `[stream]` table streams, under its
    // first-byte and idle limits.
    let streaming = spec
        .stream
        .map(|s| StreamSettings::new(s.first_byte_timeout, s.idle_timeout))
        .transpose()
        .map_err(|e| BindError::Unsupported {
            what: format!("the stream settings of provider `{}` ({e})", spec.name),
        })?;
    Ok(match &spec.kind {
        ProviderKind::Scripted { script } => {
            Arc::new(ScriptedProvider::from_file(&spec.name, script)?)
        }
        ProviderKind::OpenAi {
            base_url,
            api_key_env,
            timeout,
        } => {
            // An unset key variable means no Authorization header: local
            // OpenAI-compatible servers often need none, and a server that
            // does answers 401, which is classified and never retried.
            let api_key = api_key_env.as_deref().and_then(env);
            let provider =
                OpenAiProvider::new(&spec.name, base_url, api_key, *timeout, client.clone())
                    .with_key_env(api_key_env.as_deref())
                    .with_output_fields(spec.output_fields.clone())
                    .with_continuation(spec.continuation);
            Arc::new(match streaming {
                Some(settings) => provider.with_streaming(settings),
                None => provider,
            })
        }
        ProviderKind::Anthropic {
            base_url,
            api_key_env,
            timeout,
        } => {
            let api_key = api_key_env.as_deref().and_then(env);
            let provider =
                AnthropicProvider::new(&spec.name, base_url, api_key, *timeout, client.clone())
                    .with_key_env(api_key_env.as_deref());
            Arc::new(match streaming {
                Some(settings) => provider.with_streaming(settings),
                None => provider,
            })
        }
        _ => {
            return Err(BindError::Unsupported {
                what: format!("the kind of provider `{}`", spec.name),
            });
        }
    })
}

fn http_method(method: HttpMethod) -> reqwest::Method {
    reqwest::Method::from_bytes(method.as_str().as_bytes()).unwrap_or(reqwest::Method::POST)
}

impl ArgValidator for CompiledSchemas {
    fn validate(&self, tool: &str, args: &Value) -> Result<(), Vec<String>> {
        self.validate_args(tool, args).map_err(|problems| {
            problems
                .into_iter()
                .map(|p| {
                    if p.path.is_empty() {
                        p.message
                    } else {
                        format!("{}: {}", p.path, p.message)
                    }
                })
                .collect()
        })
    }
}

/// The output cap of `provider`'s `model`: configured, or the well-known
/// model's.
fn output_cap(registry: &Registry, provider: &str, model: &str) -> Option<u32> {
    registry
        .provider(provider)
        .and_then(|p| p.output_cap(model))
        .map(std::num::NonZeroU32::get)
}
