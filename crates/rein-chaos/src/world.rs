//! The chaos world: the order desk and the mock model behind fault
//! proxies, the chaos config bound through rein's real config path, and a
//! scenario's settings applied on top.
//!
//! # Why through the real config
//!
//! The scenarios must exercise what users run: TOML loaded with `${ENV}`
//! interpolation, the integrity check, compiled argument schemas and
//! `bind_agent` — not a hand-built binding that could drift from it. The
//! config is embedded and versioned with the catalog.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rein_core::breaker::BreakersConfig;
use rein_core::deadline::BudgetLimits;
use rein_core::retry::{RetryConfig, RetryPolicy};
use rein_engine::bind::bind_agent;
use rein_engine::config::{CompiledSchemas, Loader, Registry};
use rein_engine::provider::ModelProvider;
use rein_engine::run::AgentBinding;
use rein_testkit::mock_model::{MockModel, MockModelConfig};
use rein_testkit::order_desk::{OrderDesk, OrderDeskConfig};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::ChaosError;
use crate::proxy::FaultProxy;
use crate::recording::RecordingProvider;
use crate::scenario::{ModelPlan, Plan, Tune};

/// The chaos world's config.
pub const WORLD_TOML: &str = include_str!("../world/rein.toml");

/// The resource group every tool of the world is in.
pub const GROUP: &str = "order_api";

/// The model name the world's agents use.
pub const MODEL: &str = "chaos-model";
/// The backup's larger-context model.
pub const LARGE_MODEL: &str = "chaos-model-large";
/// `MODEL`'s output cap, as the world's `max_output_tokens` gives it.
pub const MODEL_OUTPUT_CAP: u64 = 4096;
/// `LARGE_MODEL`'s output cap.
pub const LARGE_MODEL_OUTPUT_CAP: u64 = 8192;

/// Where a world's parts listen, written next to its config so that a
/// worker process can bind the same agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Endpoints {
    /// The proxy in front of the order desk.
    pub tools: String,
    /// The proxy in front of the mock model (unused by scripted runs).
    pub model: String,
    /// The proxy in front of the backup mock model (unused unless a plan
    /// starts one).
    #[serde(default = "unused_endpoint")]
    pub backup: String,
}

fn unused_endpoint() -> String {
    "http://127.0.0.1:9".to_owned()
}

/// A config directory of the world: `rein.toml`, `script.json`,
/// `endpoints.json`.
pub struct WorldConfig {
    /// The directory.
    pub dir: PathBuf,
    /// The loaded registry.
    pub registry: Registry,
    /// Its compiled argument schemas.
    pub schemas: Arc<CompiledSchemas>,
    /// The endpoints it was loaded with.
    pub endpoints: Endpoints,
}

impl WorldConfig {
    /// Writes the world's config into `dir` and loads it.
    ///
    /// # Errors
    ///
    /// When a file cannot be written or the config does not load.
    pub fn write(dir: &Path, endpoints: Endpoints, plan: &Plan) -> Result<WorldConfig, ChaosError> {
        let io = |e: std::io::Error| ChaosError::Setup(format!("{}: {e}", dir.display()));
        std::fs::write(dir.join("rein.toml"), WORLD_TOML).map_err(io)?;
        let turns = match &plan.model {
            ModelPlan::Script(turns) => turns.clone(),
            ModelPlan::Mock(_) => Vec::new(),
        };
        std::fs::write(
            dir.join("script.json"),
            json!({ "turns": turns }).to_string(),
        )
        .map_err(io)?;
        let text = serde_json::to_string(&endpoints)
            .map_err(|e| ChaosError::Setup(format!("endpoints: {e}")))?;
        std::fs::write(dir.join("endpoints.json"), text).map_err(io)?;
        WorldConfig::load(dir)
    }

    /// Loads a world config written by [`WorldConfig::write`].
    ///
    /// # Errors
    ///
    /// When the files cannot be read or the config does not load.
    pub fn load(dir: &Path) -> Result<WorldConfig, ChaosError> {
        let text = std::fs::read_to_string(dir.join("endpoints.json"))
            .map_err(|e| ChaosError::Setup(format!("{}: {e}", dir.display())))?;
        let endpoints: Endpoints = serde_json::from_str(&text)
            .map_err(|e| ChaosError::Setup(format!("endpoints.json: {e}")))?;
        let env = env_of(&endpoints);
        let registry = Loader::with_env(move |k| env(k))
            .load(&dir.join("rein.toml"))
            .map_err(|e| ChaosError::Setup(format!("the chaos world's config: {e}")))?;
        let schemas = CompiledSchemas::compile(&registry)
            .map_err(|e| ChaosError::Setup(format!("the chaos world's schemas: {e}")))?;
        Ok(WorldConfig {
            dir: dir.to_owned(),
            registry,
            schemas: Arc::new(schemas),
            endpoints,
        })
    }

    /// The agent a plan's runs use.
    pub fn agent_name(plan: &Plan) -> &'static str {
        if let Some(agent) = plan.agent {
            return agent;
        }
        match plan.model {
            ModelPlan::Script(_) => "chaos",
            ModelPlan::Mock(_) => "chaos_live",
        }
    }

    /// Binds the plan's agent with the scenario's settings, its provider
    /// wrapped to record what the model receives.
    ///
    /// # Errors
    ///
    /// When binding fails or a setting is invalid.
    pub fn bind(
        &self,
        plan: &Plan,
        client: &reqwest::Client,
        journal: Option<PathBuf>,
    ) -> Result<(AgentBinding, Arc<RecordingProvider>), ChaosError> {
        let env = env_of(&self.endpoints);
        let mut agent = bind_agent(&self.registry, Self::agent_name(plan), client, &env)
            .map_err(|e| ChaosError::Setup(format!("binding the chaos agent: {e}")))?;
        let recording = Arc::new(RecordingProvider::new(agent.provider.clone(), journal));
        agent.provider = recording.clone() as Arc<dyn ModelProvider>;
        tune(&mut agent, &plan.tune)?;
        Ok((agent, recording))
    }

    /// The breaker settings of the world with the scenario's tool arm.
    pub fn breakers(&self, plan: &Plan) -> BreakersConfig {
        let mut config = self.registry.breakers().clone();
        if let Some((consecutive, break_ms)) = plan.tune.breaker {
            config.tool.consecutive_failures = Some(consecutive);
            config.tool.break_duration = Duration::from_millis(break_ms);
        }
        config
    }
}

fn env_of(endpoints: &Endpoints) -> impl Fn(&str) -> Option<String> + use<> {
    let tools = endpoints.tools.clone();
    let model = endpoints.model.clone();
    let backup = endpoints.backup.clone();
    move |k: &str| match k {
        "ORDER_DESK_URL" => Some(tools.clone()),
        "MOCK_MODEL_URL" => Some(model.clone()),
        "MOCK_BACKUP_URL" => Some(backup.clone()),
        _ => None,
    }
}

/// The caps every mock model server enforces (the world's
/// `max_output_tokens`, so any call above them is a 400 the run would
/// show), metered when the plan says so.
fn mock_config(plan: &Plan, replies: &[rein_testkit::mock_model::Reply]) -> MockModelConfig {
    let config = MockModelConfig::new(replies.to_vec())
        .with_model(MODEL)
        .with_output_cap(MODEL, MODEL_OUTPUT_CAP)
        .with_output_cap(LARGE_MODEL, LARGE_MODEL_OUTPUT_CAP);
    let config = if plan.enforce_retry_after {
        config.with_enforced_retry_after()
    } else {
        config
    };
    if plan.metered {
        config.with_metered_usage()
    } else {
        config
    }
}

fn setting(e: impl std::fmt::Display) -> ChaosError {
    ChaosError::Setup(format!("scenario setting: {e}"))
}

/// Applies a scenario's settings to a bound agent.
fn tune(agent: &mut AgentBinding, tune: &Tune) -> Result<(), ChaosError> {
    let mut budget = match tune.wall_ms {
        Some(ms) => BudgetLimits::new(Duration::from_millis(ms)).map_err(setting)?,
        None => BudgetLimits::new(agent.budget.wall_clock()).map_err(setting)?,
    };
    if let Some(steps) = tune.steps.or(agent.budget.steps()) {
        budget = budget.with_steps(steps).map_err(setting)?;
    }
    if let Some(tokens) = tune.tokens.or(agent.budget.tokens()) {
        budget = budget.with_tokens(tokens).map_err(setting)?;
    }
    if let Some(cost) = tune
        .cost_micros
        .map(rein_core::deadline::Cost::from_micros)
        .or(agent.budget.cost())
    {
        budget = budget.with_cost(cost).map_err(setting)?;
    }
    agent.budget = budget;
    if tune.max_attempts.is_some() || tune.retry_budget.is_some() {
        let mut retry = RetryConfig::default();
        retry.base_delay = Duration::from_millis(5);
        retry.max_delay = Duration::from_millis(40);
        retry.max_attempts = tune.max_attempts.unwrap_or(3);
        if let Some((ratio, initial)) = tune.retry_budget {
            retry.budget_ratio = ratio;
            retry.budget_initial = initial;
        }
        agent.retry = RetryPolicy::try_from(retry).map_err(setting)?;
    }
    if let Some(policy) = tune.on_failure {
        agent.on_failure = policy;
    }
    if let Some(on) = tune.final_turn {
        agent.planner = agent.planner.with_final_turn(on);
    }
    if let Some(repeats) = tune.max_repeats {
        agent.loop_guard.max_repeats = repeats;
    }
    if let Some(limit) = tune.group_limit.and_then(NonZeroU32::new) {
        agent.group_limits.insert(GROUP.to_owned(), limit);
    }
    if let Some(p99) = tune.read_p99_ms.map(Duration::from_millis) {
        let read = agent
            .tools
            .get_mut(rein_testkit::order_desk::GET_ORDER)
            .ok_or_else(|| setting("read_p99_ms: the world has no get_order"))?;
        // The declared p50 and p95 stay (a read needs its p50 left before
        // it is sent); only the tail, hence the allowance, moves.
        let declared = read.latency;
        read.latency = rein_core::LatencyProfile::new(
            declared.p50().min(p99),
            declared.p95().min(p99),
            p99,
            declared.samples(),
        )
        .map_err(setting)?;
    }
    if let Some((per_sec, burst)) = tune.group_rate {
        agent.group_rates.insert(
            GROUP.to_owned(),
            rein_core::registry::RateLimit::new(per_sec, burst),
        );
    }
    if let Some((per_minute, burst)) = tune.provider_tokens {
        let (Some(per_minute), Some(burst)) = (
            std::num::NonZeroU64::new(per_minute),
            std::num::NonZeroU64::new(burst),
        ) else {
            return Err(setting("provider_tokens must be positive"));
        };
        agent.provider_tokens.insert(
            agent.provider.name().to_owned(),
            rein_core::registry::TokenLimit::new(per_minute, burst),
        );
    }
    if let Some(cap) = tune.fan_out_cap.and_then(NonZeroU32::new) {
        agent.fan_out = rein_core::registry::FanOutLimits::new(cap);
    }
    if tune.gate_email {
        agent
            .tools
            .get_mut(rein_testkit::order_desk::SEND_EMAIL)
            .ok_or_else(|| setting("gate_email: the world has no send_email"))?
            .declared
            .approval = rein_core::registry::ToolApproval::Required;
    }
    Ok(())
}

/// The running services of a world.
pub struct Services {
    /// The order desk.
    pub desk: OrderDesk,
    /// The proxy in front of it.
    pub tool_proxy: FaultProxy,
    /// The mock model, when the plan uses one.
    pub model: Option<MockModel>,
    /// The proxy in front of the mock model.
    pub model_proxy: Option<FaultProxy>,
    /// The backup mock model, when the plan starts one.
    pub backup: Option<MockModel>,
    /// The proxy in front of the backup mock model.
    pub backup_proxy: Option<FaultProxy>,
}

impl Services {
    /// Starts the desk, the mock model and their proxies for `plan`.
    ///
    /// # Errors
    ///
    /// When a service cannot start.
    pub async fn start(plan: &Plan) -> Result<Services, ChaosError> {
        let desk =
            OrderDesk::start_with(OrderDeskConfig::default().with_faults(plan.desk_faults.clone()))
                .await
                .map_err(|e| ChaosError::Setup(format!("the order desk: {e}")))?;
        let tool_proxy = FaultProxy::start(desk.base_url())
            .await
            .map_err(|e| ChaosError::Setup(format!("the tool proxy: {e}")))?;
        tool_proxy.set_rules(plan.tool_rules.clone());
        let (model, model_proxy) = match &plan.model {
            ModelPlan::Mock(replies) => {
                let model = MockModel::start_with(mock_config(plan, replies))
                    .await
                    .map_err(|e| ChaosError::Setup(format!("the mock model: {e}")))?;
                let proxy = FaultProxy::start(model.base_url())
                    .await
                    .map_err(|e| ChaosError::Setup(format!("the model proxy: {e}")))?;
                proxy.set_rules(plan.model_rules.clone());
                (Some(model), Some(proxy))
            }
            ModelPlan::Script(_) => (None, None),
        };
        let (backup, backup_proxy) = match &plan.backup {
            Some(replies) => {
                let backup = MockModel::start_with(mock_config(plan, replies))
                    .await
                    .map_err(|e| ChaosError::Setup(format!("the backup mock model: {e}")))?;
                let proxy = FaultProxy::start(backup.base_url())
                    .await
                    .map_err(|e| ChaosError::Setup(format!("the backup proxy: {e}")))?;
                (Some(backup), Some(proxy))
            }
            None => (None, None),
        };
        Ok(Services {
            desk,
            tool_proxy,
            model,
            model_proxy,
            backup,
            backup_proxy,
        })
    }

    /// Where the world's parts listen.
    pub fn endpoints(&self) -> Endpoints {
        Endpoints {
            tools: self.tool_proxy.base_url().to_owned(),
            model: self
                .model_proxy
                .as_ref()
                .map_or_else(unused_endpoint, |p| p.base_url().to_owned()),
            backup: self
                .backup_proxy
                .as_ref()
                .map_or_else(unused_endpoint, |p| p.base_url().to_owned()),
        }
    }

    /// The request buckets the scenario runs under, per group: (calls per
    /// second, burst).
    pub fn rates(registry: &Registry, plan: &Plan) -> BTreeMap<String, (f64, u32)> {
        let mut out: BTreeMap<String, (f64, u32)> = registry
            .resource_groups()
            .iter()
            .filter_map(|(name, spec)| spec.rate.map(|r| (name.clone(), (r.per_sec, r.burst))))
            .collect();
        if let Some(rate) = plan.tune.group_rate {
            out.insert(GROUP.to_owned(), rate);
        }
        out
    }

    /// The calls per turn the scenario's agent may propose.
    pub fn fan_out_cap(registry: &Registry, plan: &Plan) -> u32 {
        plan.tune.fan_out_cap.unwrap_or_else(|| {
            registry
                .agent(WorldConfig::agent_name(plan))
                .map_or(rein_core::registry::DEFAULT_MAX_CALLS_PER_TURN, |a| {
                    a.fan_out.max_calls_per_turn.get()
                })
        })
    }

    /// The concurrency ceilings the scenario runs under, per group.
    pub fn ceilings(registry: &Registry, plan: &Plan) -> BTreeMap<String, u32> {
        let mut out: BTreeMap<String, u32> = registry
            .resource_groups()
            .iter()
            .filter_map(|(name, spec)| spec.max_concurrency.map(|m| (name.clone(), m.get())))
            .collect();
        if let Some(limit) = plan.tune.group_limit {
            out.insert(GROUP.to_owned(), limit);
        }
        out
    }
}
