//! The validated registry: [`Registry`] and its entries.
//!
//! Entries are `#[non_exhaustive]` with public fields: code outside
//! rein-core can read every fact but can only obtain an entry from
//! [`check`](super::check), so every entry it sees passed the integrity check.

use std::collections::BTreeMap;
use std::fmt;
use std::num::{NonZeroU32, NonZeroU64};
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::compensation::{CompensationGrade, CompensationSpec};
use super::constants::{DEFAULT_MAX_MODEL_RETRIES, DEFAULT_MAX_MODEL_RETRY_WAIT};
use super::server::ServerSpec;
use crate::breaker::BreakersConfig;
use crate::config::Ratio;
use crate::deadline::{BudgetLimits, ChildCaps, Cost};
use crate::idempotency::NormalizerConfig;
use crate::latency::AllowanceFactor;
use crate::loop_guard::LoopGuardConfig;
use crate::outcome::FailurePolicy;
use crate::retry::RetryPolicy;
use crate::tool::{LatencyProfile, ToolClass};

/// How visible a tool's effect is outside the system (seed 000): decides
/// whether extra gates are needed, and how loudly a failure is reported.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SideEffectTier {
    /// Nothing outside changes.
    None,
    /// Internal state changes; nobody outside notices.
    Low,
    /// Visible to a customer or partner, correctable.
    Medium,
    /// Visible and hard to take back: money, messages, legal records.
    High,
}

impl SideEffectTier {
    /// The tier a tool of `class` has when its config declares none: a
    /// read changes nothing outside (`none`), an idempotent write changes
    /// what can be corrected (`medium`), an irreversible call what cannot
    /// (`high`).
    pub fn implied_by(class: ToolClass) -> SideEffectTier {
        match class {
            ToolClass::Read => SideEffectTier::None,
            ToolClass::IdempotentWrite => SideEffectTier::Medium,
            ToolClass::Irreversible => SideEffectTier::High,
        }
    }

    /// The tier's name as it appears in config and events.
    pub fn as_str(self) -> &'static str {
        match self {
            SideEffectTier::None => "none",
            SideEffectTier::Low => "low",
            SideEffectTier::Medium => "medium",
            SideEffectTier::High => "high",
        }
    }
}

impl fmt::Display for SideEffectTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An HTTP method an adapter may use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    /// `GET`.
    Get,
    /// `POST`, the default: the arguments travel as a JSON body.
    #[default]
    Post,
    /// `PUT`.
    Put,
    /// `PATCH`.
    Patch,
    /// `DELETE`.
    Delete,
}

impl HttpMethod {
    /// The method as sent on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
            HttpMethod::Delete => "DELETE",
        }
    }
}

impl fmt::Display for HttpMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a tool is called.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AdapterSpec {
    /// JSON arguments over HTTP.
    #[non_exhaustive]
    Http {
        /// Where calls go (interpolated, absolute `http`/`https`).
        url: String,
        /// The method.
        method: HttpMethod,
        /// Extra headers (interpolated); never one of
        /// [`RESERVED_HEADERS`](super::RESERVED_HEADERS).
        headers: BTreeMap<String, String>,
        /// `GET status_url?key=K` looks a call up by its idempotency key;
        /// never set for irreversible tools, which have no key.
        status_url: Option<String>,
        /// Result bytes kept before truncation.
        max_result_bytes: usize,
    },
    /// A local program, run in its own process group with the JSON
    /// arguments on stdin (`rein_engine::tool::command`).
    #[non_exhaustive]
    Command {
        /// The program: a bare name (looked up on `PATH` at call time) or
        /// a path, resolved against the config file's directory when
        /// relative.
        program: PathBuf,
        /// Its arguments, passed as they are (no shell).
        args: Vec<String>,
        /// The working directory, resolved against the config file's
        /// directory; `None` keeps rein's own.
        working_dir: Option<PathBuf>,
        /// Extra environment variables; never one starting with
        /// [`RESERVED_ENV_PREFIX`](super::RESERVED_ENV_PREFIX).
        env: BTreeMap<String, String>,
        /// Stdout and stderr bytes kept, each, before truncation.
        max_output_bytes: usize,
    },
    /// Another agent of the registry, run as a child of the calling run
    /// with a share of its budget. The child's depth, count and tokens are
    /// bounded by the server's `agent_graph` limits at run time, so an
    /// agent may name itself.
    #[non_exhaustive]
    Agent {
        /// The agent to run (present in the registry).
        agent: String,
        /// The share of the caller's remaining budget the child may use, in
        /// (0, 1].
        budget_ratio: Ratio,
        /// Ceilings on that share; each set one is non-zero.
        caps: ChildCaps,
    },
    /// A tool of an MCP server, called with `tools/call`.
    #[non_exhaustive]
    Mcp {
        /// The server offering it.
        server: super::mcp::McpServerSpec,
        /// The tool's name on that server.
        tool: String,
        /// Result bytes kept before truncation.
        max_result_bytes: usize,
        /// The digest (`sha256:` and 64 hex digits) of the definition the
        /// registry entry was made from; `None`: not pinned.
        pin: Option<String>,
    },
}

impl AdapterSpec {
    /// Which adapter calls the tool.
    pub fn kind(&self) -> super::adapter::AdapterKind {
        use super::adapter::AdapterKind;
        match self {
            AdapterSpec::Http { .. } => AdapterKind::Http,
            AdapterSpec::Command { .. } => AdapterKind::Command,
            AdapterSpec::Agent { .. } => AdapterKind::Agent,
            AdapterSpec::Mcp { .. } => AdapterKind::Mcp,
        }
    }
}

/// A tool's idempotency key recipe: how arguments are normalized before
/// they are digested, and the header the key travels in.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IdempotencySpec {
    /// Fields dropped and fields case-folded before digesting; also what the
    /// loop guard should fingerprint with, so both agree on "the same call".
    pub normalizer: NormalizerConfig,
    /// The HTTP header carrying the key. Irreversible tools get no key.
    pub header: String,
}

/// A tool's latency profile: declared, or observed with a conservative
/// fallback until enough samples exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LatencySpec {
    /// Quantiles written in config.
    Declared(LatencyProfile),
    /// Measured at run time.
    Observe {
        /// Used until `min_samples` observations exist: every quantile is
        /// the configured `fallback_p99`, so allowances err on the long side.
        fallback: LatencyProfile,
        /// Observations needed before the measured profile is trusted.
        min_samples: u64,
    },
}

impl LatencySpec {
    /// The profile to plan with now, given what has been `observed` so far
    /// (if anything): the declared profile, the observation once it rests
    /// on enough samples, or the fallback.
    pub fn profile(&self, observed: Option<&LatencyProfile>) -> LatencyProfile {
        match self {
            LatencySpec::Declared(profile) => *profile,
            LatencySpec::Observe {
                fallback,
                min_samples,
            } => match observed {
                Some(seen) if seen.samples() >= *min_samples => *seen,
                _ => *fallback,
            },
        }
    }
}

/// One tool: everything rein needs to guard a call to it, and everything
/// the model is told about it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, as written in config (without the side-effect prefix;
    /// see [`ToolSpec::model_description`]).
    pub description: String,
    /// JSON Schema of the arguments: an object whose every property has a
    /// description.
    pub schema: Value,
    /// Its retryability.
    pub class: ToolClass,
    /// The idempotency key recipe.
    pub idempotency: IdempotencySpec,
    /// How to undo its effect; `None` when there is no way (`grade =
    /// "none"`) or nothing to undo (a read).
    pub compensation: Option<CompensationSpec>,
    /// Its latency profile.
    pub latency: LatencySpec,
    /// One attempt's allowance is the profile's p99 × this.
    pub allowance_factor: AllowanceFactor,
    /// Observe mode: the argument-scale buckets a call is measured and
    /// planned in (`latency.scale`); `None`: one profile for every call.
    pub latency_scale: Option<crate::latency::LatencyScale>,
    /// The resource group it draws on.
    pub resource_group: String,
    /// How visible its effect is.
    pub side_effect_tier: SideEffectTier,
    /// Who to call when it breaks.
    pub owner: String,
    /// The settings its config left out, which rein chose
    /// (`resource_group`: its own; `side_effect_tier`: implied by its
    /// class; `owner`: [`DEFAULT_TOOL_OWNER`]; `latency`: observed, planned
    /// at [`DEFAULT_TOOL_FALLBACK_P99`] until measured), named so that
    /// `rein check --explain` shows every one.
    ///
    /// [`DEFAULT_TOOL_OWNER`]: super::constants::DEFAULT_TOOL_OWNER
    /// [`DEFAULT_TOOL_FALLBACK_P99`]: super::constants::DEFAULT_TOOL_FALLBACK_P99
    pub defaulted: Vec<&'static str>,
    /// The model is told to avoid it unless necessary.
    pub avoid_at_plan_time: bool,
    /// Overrides the agent loop guard's self-heal allowance for this tool.
    pub self_heal_allowance: Option<u32>,
    /// How it is called.
    pub adapter: AdapterSpec,
    /// The argument naming the resource its writes change, if declared.
    pub resource_key: Option<super::fan_out::ResourceKey>,
    /// Whether a call waits for a human's approval of its own (an agent's
    /// tier gate may add more).
    pub approval: super::approval::ToolApproval,
    /// The lint rules silenced for it, each with its reason
    /// (`[tools.NAME.lint] allow`); `rein lint` reports them as silenced.
    pub lint_allow: Vec<crate::lint::Allowance>,
    /// The config file it was defined in.
    pub source: PathBuf,
}

impl ToolSpec {
    /// The compensation's grade: `none` when the tool has no compensation.
    pub fn compensation_grade(&self) -> CompensationGrade {
        self.compensation
            .as_ref()
            .map_or(CompensationGrade::None, |c| c.grade)
    }

    /// The description the model sees: the side effects stated plainly
    /// first, then the configured description.
    ///
    /// # Why a prefix
    ///
    /// Models pattern-match on the start of a description and often read
    /// no further (seed 002, "Tool Call Schema Design"); "never retried"
    /// and "cannot be undone" are what should change a plan, so they come
    /// first and are generated from the registry, never hand-written, so
    /// they cannot drift from what rein actually does.
    pub fn model_description(&self) -> String {
        let mut label = String::from(match self.class {
            ToolClass::Read => "read-only",
            ToolClass::IdempotentWrite => "idempotent write: safe to retry, deduplicated by key",
            ToolClass::Irreversible => "irreversible: runs at most once and is never retried",
        });
        if self.class == ToolClass::Irreversible {
            label.push_str(match self.compensation_grade() {
                CompensationGrade::None => "; cannot be undone",
                CompensationGrade::Weak => "; can only be partly undone",
                CompensationGrade::Strong => "; undone automatically if the run fails",
            });
        }
        if self.avoid_at_plan_time {
            label.push_str("; avoid unless necessary");
        }
        format!("[{label}] {}", self.description)
    }
}

/// A model's price per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Price {
    /// Per million input tokens.
    pub input_per_mtok: Cost,
    /// Per million output tokens.
    pub output_per_mtok: Cost,
}

impl Price {
    /// A price of `input_per_mtok` and `output_per_mtok` per million tokens.
    pub const fn new(input_per_mtok: Cost, output_per_mtok: Cost) -> Price {
        Price {
            input_per_mtok,
            output_per_mtok,
        }
    }

    /// What a response that read `input_tokens` and wrote `output_tokens`
    /// cost, rounded up to the micro-dollar so that a cost ceiling is never
    /// undercounted.
    pub fn cost(&self, input_tokens: u64, output_tokens: u64) -> Cost {
        let part = |tokens: u64, per_mtok: Cost| -> u64 {
            let micros = u128::from(tokens) * u128::from(per_mtok.micros());
            u64::try_from(micros.div_ceil(1_000_000)).unwrap_or(u64::MAX)
        };
        Cost::from_micros(
            part(input_tokens, self.input_per_mtok)
                .saturating_add(part(output_tokens, self.output_per_mtok)),
        )
    }
}

/// What kind of provider, with its kind's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProviderKind {
    /// An OpenAI-compatible Chat Completions endpoint.
    OpenAi {
        /// Base URL up to and including `/v1` (interpolated).
        base_url: String,
        /// The environment variable holding the API key; no auth header
        /// when `None`.
        api_key_env: Option<String>,
        /// Per-request timeout (the run's deadline applies on top).
        timeout: Duration,
    },
    /// An Anthropic Messages API endpoint.
    Anthropic {
        /// Base URL up to and including `/v1` (interpolated).
        base_url: String,
        /// The environment variable holding the API key; no auth header
        /// when `None`.
        api_key_env: Option<String>,
        /// Per-request timeout (the run's deadline applies on top).
        timeout: Duration,
    },
    /// Recorded model turns replayed in order.
    Scripted {
        /// The script file: absolute, or relative to the directory of the
        /// config file that names it — not to the working directory, so a
        /// config means the same wherever `rein` is started.
        script: PathBuf,
    },
}

impl ProviderKind {
    /// The per-request timeout of a provider that calls over the network;
    /// `None` for a scripted one.
    pub fn timeout(&self) -> Option<Duration> {
        match self {
            ProviderKind::OpenAi { timeout, .. } | ProviderKind::Anthropic { timeout, .. } => {
                Some(*timeout)
            }
            ProviderKind::Scripted { .. } => None,
        }
    }
}

/// How a streamed model call is bounded: `[providers.NAME.stream]`.
///
/// # Why
///
/// A provider can accept a request and then say nothing, or stop halfway
/// through an answer. With one request timeout, rein notices only when the
/// whole timeout has passed — a minute of the run's deadline spent on a
/// stalled connection, with too little left to try a fallback. Streaming
/// shows progress byte by byte, so a silence can be told from a slow
/// answer early (DESIGN.md, guarded call step 7).
///
/// # Invariants
///
/// Both timeouts are greater than zero and at most the provider's
/// `timeout`, which still bounds the whole call.
///
/// # Defaults
///
/// | field | default |
/// | --- | --- |
/// | `first_byte_timeout` | [`DEFAULT_STREAM_FIRST_BYTE_TIMEOUT`](super::DEFAULT_STREAM_FIRST_BYTE_TIMEOUT) (20 s) |
/// | `idle_timeout` | [`DEFAULT_STREAM_IDLE_TIMEOUT`](super::DEFAULT_STREAM_IDLE_TIMEOUT) (10 s) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamSpec {
    /// The longest wait from sending the request to the first byte of the
    /// response.
    pub first_byte_timeout: Duration,
    /// The longest gap between two bytes once the first has arrived.
    pub idle_timeout: Duration,
}

/// A model provider.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ProviderSpec {
    /// Its name.
    pub name: String,
    /// Its kind and settings.
    pub kind: ProviderKind,
    /// Prices by model.
    pub prices: BTreeMap<String, Price>,
    /// Output caps by model, as configured (`max_output_tokens`); see
    /// [`output_cap`](Self::output_cap).
    pub output_caps: BTreeMap<String, NonZeroU32>,
    /// Output-ceiling fields by model, as configured
    /// (`output_tokens_field`, `openai` providers only); see
    /// [`output_field`](Self::output_field).
    pub output_fields: BTreeMap<String, crate::output_field::OutputField>,
    /// How the server continues an assistant prefix (`continuation`,
    /// `openai` providers only); `None`: it is never asked to.
    pub continuation: Option<crate::continuation::Continuation>,
    /// Calls to this provider in flight at once, across every agent (and
    /// every model binding) that uses it; unlimited when `None`.
    ///
    /// A provider's rate limits and capacity are the account's, not one
    /// agent's, so the limit is shared by everything that calls it.
    pub max_concurrency: Option<NonZeroU32>,
    /// Tokens per minute across every caller of the provider
    /// (`tokens_per_minute`, `token_burst`); unlimited when `None`.
    pub tokens: Option<TokenLimit>,
    /// When set, every call streams and these limits apply; never set on a
    /// scripted provider.
    pub stream: Option<StreamSpec>,
    /// The config file it was defined in.
    pub source: PathBuf,
}

impl ProviderSpec {
    /// The price of `model`, if the table has one.
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.prices.get(model)
    }

    /// The most output tokens `model` may produce in one answer: the
    /// configured cap, else the well-known model's
    /// ([`known_output_cap`](crate::output_cap::known_output_cap)); `None`
    /// for an unknown model without one (only a scripted provider may
    /// have such a model: `rein check` refuses it elsewhere).
    pub fn output_cap(&self, model: &str) -> Option<NonZeroU32> {
        self.output_caps
            .get(model)
            .copied()
            .or_else(|| crate::output_cap::known_output_cap(model).and_then(NonZeroU32::new))
    }

    /// The request member a call to `model` carries its output ceiling
    /// in, and how that was decided
    /// ([`output_field`](crate::output_field::output_field)); only an
    /// `openai` provider sends it by this name.
    pub fn output_field(
        &self,
        model: &str,
    ) -> (
        crate::output_field::OutputField,
        crate::output_field::FieldSource,
    ) {
        crate::output_field::output_field(&self.output_fields, model)
    }
}

/// One model a call can go to: a provider of the registry and the model as
/// that provider names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub struct ModelLink {
    /// The provider's name (present in the registry when the link came
    /// from [`check`](super::check)).
    pub provider: String,
    /// The model, as the provider names it.
    pub model: String,
}

impl ModelLink {
    /// The model `model` of the provider `provider`.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> ModelLink {
        ModelLink {
            provider: provider.into(),
            model: model.into(),
        }
    }
}

impl fmt::Display for ModelLink {
    /// `provider/model`, as events and messages show a link.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

/// A model binding (`[models.ALIAS]`): the model agents that name the
/// alias use, and what to try when it fails.
///
/// # Why
///
/// One provider is one point of failure: an outage, a rate limit or a
/// context window too small for this prompt ends the run although another
/// model could have answered. A binding names the alternatives once, so
/// every agent that uses the alias gets the same, checked chain.
///
/// # Invariants
///
/// Every link's provider is in the registry. No fallback equals the
/// primary, and no list names a link twice: a fallback that is the model
/// that just failed would only retry it, which is the retry policy's job,
/// and a context fallback that is the primary would overflow again.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ModelBindingSpec {
    /// Its alias.
    pub name: String,
    /// What its models answer: turns, or embeddings.
    pub kind: super::config::BindingKind,
    /// The model used first.
    pub primary: ModelLink,
    /// Tried in order when the model in use is unavailable (its provider
    /// down, overloaded or its breaker open).
    pub fallbacks: Vec<ModelLink>,
    /// Tried in order when the prompt does not fit the model in use
    /// (`context_overflow`); the same model is never retried then.
    pub context_fallbacks: Vec<ModelLink>,
    /// How a link retries its own model before the chain falls back
    /// (`retry_before_fallback`, `retry_after_max`, `retry_timeouts`).
    pub same_model: crate::retry::SameModelRetry,
    /// How long a gateway call of it may take when the client sends no
    /// `Rein-Deadline-Ms`.
    pub deadline: std::time::Duration,
    /// Whether a gateway stream cut after its first token is recovered
    /// (`recover_streams`, on by default).
    pub recover_streams: bool,
    /// The config file it was defined in.
    pub source: PathBuf,
}

/// A model provider's token bucket (`tokens_per_minute`, `token_burst`):
/// what its account lets rein send per minute, charged with each call's
/// prompt estimate and reserved output before it is sent and settled with
/// the usage the provider counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenLimit {
    /// Tokens refilled per minute.
    pub per_minute: NonZeroU64,
    /// The bucket's size; `per_minute` unless set.
    pub burst: NonZeroU64,
}

impl TokenLimit {
    /// A bucket of `burst` tokens refilled at `per_minute`.
    pub fn new(per_minute: NonZeroU64, burst: NonZeroU64) -> TokenLimit {
        TokenLimit { per_minute, burst }
    }
}

/// A token bucket: `per_sec` sustained, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct RateLimit {
    /// Refill rate, calls per second; finite and positive.
    pub per_sec: f64,
    /// Bucket size; at least 1.
    pub burst: u32,
}

impl RateLimit {
    /// A bucket of `burst` refilled at `per_sec`, as written; the registry's
    /// integrity check is what refuses a rate that is not finite and
    /// positive or a burst of zero.
    pub fn new(per_sec: f64, burst: u32) -> RateLimit {
        RateLimit { per_sec, burst }
    }
}

/// A resource group: tools sharing a backend and therefore its limits,
/// breaker arm and monitoring.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ResourceGroupSpec {
    /// Its name.
    pub name: String,
    /// The token bucket, if rate-limited.
    pub rate: Option<RateLimit>,
    /// Calls in flight at once, if limited.
    pub max_concurrency: Option<NonZeroU32>,
    /// The config file it was defined in.
    pub source: PathBuf,
}

/// An agent: a model binding, a system prompt, the tools it is offered and
/// the limits of its runs.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AgentSpec {
    /// Its name.
    pub name: String,
    /// The primary model's provider (present in the registry): as written,
    /// or the primary of the binding the agent names.
    pub provider: String,
    /// The primary model, as the provider names it: as written, or the
    /// primary of the binding the agent names.
    pub model: String,
    /// Tried in order when the model in use is unavailable: the agent's
    /// own list, or its binding's.
    pub fallbacks: Vec<ModelLink>,
    /// Tried in order when the prompt does not fit the model in use: the
    /// agent's own list, or its binding's.
    pub context_fallbacks: Vec<ModelLink>,
    /// The `[models.ALIAS]` binding the agent names, if it names one
    /// instead of a provider and model.
    pub model_binding: Option<String>,
    /// The system prompt.
    pub system_prompt: String,
    /// The tools offered to the model, in config order (all in the
    /// registry).
    pub tools: Vec<String>,
    /// The budget of each run.
    pub budget: BudgetLimits,
    /// The retry policy.
    pub retry: RetryPolicy,
    /// Loop guard settings (validated); tools' `self_heal_allowance` are
    /// merged into `self_heal_overrides` unless the agent names the tool
    /// there itself.
    pub loop_guard: LoopGuardConfig,
    /// What to do with effects already caused when a later step fails.
    pub on_failure: FailurePolicy,
    /// The share of the wall clock reserved for compensation.
    pub compensation_reserve: Ratio,
    /// The median latency assumed for a model call (p95 4 ×, p99 10 ×).
    pub model_latency: Duration,
    /// The run's own ceiling on model retries.
    pub model_retry: ModelRetryLimits,
    /// How many calls one turn may propose.
    pub fan_out: super::fan_out::FanOutLimits,
    /// What the planner is told of its budget, the last minimal-output
    /// turn, and what a success is worth to a retry.
    pub planner: super::planner::PlannerSettings,
    /// Which calls wait for a human, for how long, and what an expiry does.
    pub approval: super::approval::ApprovalSettings,
    /// The config file it was defined in.
    pub source: PathBuf,
}

impl AgentSpec {
    /// The agent's primary model as a link.
    pub fn primary(&self) -> ModelLink {
        ModelLink::new(self.provider.clone(), self.model.clone())
    }
}

/// How much one run may spend retrying model calls, in total, whatever
/// the per-call policy allows (`[agents.NAME.model_retry]`, validated).
///
/// # Why
///
/// A per-call policy bounds one call's attempts; a run makes many calls,
/// and a provider that fails one in three would otherwise be retried
/// without end across the run. Model retries are budgeted apart from tool
/// retries and from the model's own self-healing, so none of them can use
/// up the others' allowance.
///
/// | field | default |
/// | --- | --- |
/// | `max_retries` | [`DEFAULT_MAX_MODEL_RETRIES`] |
/// | `max_wait` | [`DEFAULT_MAX_MODEL_RETRY_WAIT`] |
/// | `max_wasted_tokens` | none: only the run's token budget |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelRetryLimits {
    /// Retries of model calls in the whole run.
    pub max_retries: u32,
    /// Time spent waiting between model retries in the whole run.
    pub max_wait: Duration,
    /// Tokens consumed by failed model calls (a stream cut midway) after
    /// which no model call is retried; `None`: only the run's token budget.
    pub max_wasted_tokens: Option<u64>,
}

impl Default for ModelRetryLimits {
    fn default() -> Self {
        ModelRetryLimits {
            max_retries: DEFAULT_MAX_MODEL_RETRIES,
            max_wait: DEFAULT_MAX_MODEL_RETRY_WAIT,
            max_wasted_tokens: None,
        }
    }
}

impl ModelRetryLimits {
    /// These limits with at most `max` model retries per run.
    #[must_use]
    pub fn with_max_retries(mut self, max: u32) -> Self {
        self.max_retries = max;
        self
    }

    /// These limits with at most `max` of waiting between model retries.
    #[must_use]
    pub fn with_max_wait(mut self, max: Duration) -> Self {
        self.max_wait = max;
        self
    }

    /// These limits with no model retry once failed calls consumed `max`
    /// tokens (`None`: only the run's token budget).
    #[must_use]
    pub fn with_max_wasted_tokens(mut self, max: Option<u64>) -> Self {
        self.max_wasted_tokens = max;
        self
    }
}

/// The validated registry: providers, model bindings, resource groups,
/// tools, agents, breaker and server settings, all mutually consistent.
#[derive(Debug, Clone, PartialEq)]
pub struct Registry {
    pub(super) providers: BTreeMap<String, ProviderSpec>,
    pub(super) models: BTreeMap<String, ModelBindingSpec>,
    pub(super) resource_groups: BTreeMap<String, ResourceGroupSpec>,
    pub(super) tools: BTreeMap<String, ToolSpec>,
    pub(super) agents: BTreeMap<String, AgentSpec>,
    pub(super) breakers: BreakersConfig,
    pub(super) server: ServerSpec,
    pub(super) telemetry: Option<super::telemetry::TelemetrySpec>,
    pub(super) store: Option<super::store::StoreSpec>,
    pub(super) webhooks: BTreeMap<String, super::webhooks::WebhookSpec>,
    pub(super) mcp_servers: BTreeMap<String, super::mcp::McpServerSpec>,
}

impl Registry {
    /// Providers by name.
    pub fn providers(&self) -> &BTreeMap<String, ProviderSpec> {
        &self.providers
    }

    /// Model bindings by alias.
    pub fn models(&self) -> &BTreeMap<String, ModelBindingSpec> {
        &self.models
    }

    /// Resource groups by name.
    pub fn resource_groups(&self) -> &BTreeMap<String, ResourceGroupSpec> {
        &self.resource_groups
    }

    /// Tools by name.
    pub fn tools(&self) -> &BTreeMap<String, ToolSpec> {
        &self.tools
    }

    /// Agents by name.
    pub fn agents(&self) -> &BTreeMap<String, AgentSpec> {
        &self.agents
    }

    /// Webhooks by name (`[webhooks.NAME]`).
    pub fn webhooks(&self) -> &BTreeMap<String, super::webhooks::WebhookSpec> {
        &self.webhooks
    }

    /// MCP servers by name (`[mcp_servers.NAME]`).
    pub fn mcp_servers(&self) -> &BTreeMap<String, super::mcp::McpServerSpec> {
        &self.mcp_servers
    }

    /// Breaker settings (defaults when no file sets them).
    pub fn breakers(&self) -> &BreakersConfig {
        &self.breakers
    }

    /// `rein serve` settings: the `[server]` table, checked, or
    /// [`ServerSpec::default`] when no file has one (so a registry written
    /// only for `rein run` still serves, on loopback, admitting no key).
    pub fn server(&self) -> &ServerSpec {
        &self.server
    }

    /// Traces: the `[telemetry]` table, checked; `None` (no traces) when
    /// no file has one.
    pub fn telemetry(&self) -> Option<&super::telemetry::TelemetrySpec> {
        self.telemetry.as_ref()
    }

    /// The run store: the `[store]` table, checked; `None` when no file
    /// has one (`--data` or its default decides).
    pub fn store(&self) -> Option<&super::store::StoreSpec> {
        self.store.as_ref()
    }

    /// The tool called `name`.
    pub fn tool(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name)
    }

    /// The agent called `name`.
    pub fn agent(&self, name: &str) -> Option<&AgentSpec> {
        self.agents.get(name)
    }

    /// The provider called `name`.
    pub fn provider(&self, name: &str) -> Option<&ProviderSpec> {
        self.providers.get(name)
    }

    /// The model binding called `name`.
    pub fn model(&self, name: &str) -> Option<&ModelBindingSpec> {
        self.models.get(name)
    }

    /// The resource group called `name`.
    pub fn resource_group(&self, name: &str) -> Option<&ResourceGroupSpec> {
        self.resource_groups.get(name)
    }

    /// The tools `agent` offers its model, in its config order. Names not in
    /// this registry (an agent from another registry) are skipped.
    pub fn agent_tools<'a>(&'a self, agent: &'a AgentSpec) -> impl Iterator<Item = &'a ToolSpec> {
        agent.tools.iter().filter_map(|name| self.tools.get(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(ms: u64, samples: u64) -> LatencyProfile {
        let d = Duration::from_millis(ms);
        LatencyProfile::new(d, d, d, samples).unwrap()
    }

    #[test]
    fn observe_profile_uses_fallback_until_enough_samples() {
        let spec = LatencySpec::Observe {
            fallback: profile(5000, 0),
            min_samples: 50,
        };
        assert_eq!(spec.profile(None), profile(5000, 0));
        assert_eq!(spec.profile(Some(&profile(80, 49))), profile(5000, 0));
        assert_eq!(spec.profile(Some(&profile(80, 50))), profile(80, 50));
    }

    #[test]
    fn declared_profile_ignores_observations() {
        let spec = LatencySpec::Declared(profile(100, 0));
        assert_eq!(spec.profile(Some(&profile(80, 1000))), profile(100, 0));
    }

    #[test]
    fn price_cost_rounds_up_to_the_micro_dollar() {
        let price = Price {
            input_per_mtok: Cost::from_micros(150_000),
            output_per_mtok: Cost::from_micros(600_000),
        };
        assert_eq!(price.cost(1_000_000, 0), Cost::from_micros(150_000));
        assert_eq!(price.cost(1, 1), Cost::from_micros(2));
        assert_eq!(price.cost(0, 0), Cost::ZERO);
        let dear = Price {
            input_per_mtok: Cost::from_micros(2_000_000),
            output_per_mtok: Cost::from_micros(2_000_000),
        };
        assert_eq!(dear.cost(u64::MAX, u64::MAX).micros(), u64::MAX);
    }
}
