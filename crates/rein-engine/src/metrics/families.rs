//! The metric families of the engine, their label sets, help texts and
//! buckets, registered once in the process's registry.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Seconds a tool or model call may take: 5 ms to two minutes.
pub(super) const CALL_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// Seconds to a streamed answer's first event.
pub(super) const FIRST_EVENT_BUCKETS: [f64; 11] =
    [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0];

/// Seconds a whole run may take: a tenth of a second to an hour.
const RUN_BUCKETS: [f64; 12] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// Steps of a run.
const STEP_BUCKETS: [f64; 9] = [1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0, 55.0];

/// A histogram family built with fixed buckets.
pub(super) type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn call_histogram() -> Histogram {
    Histogram::new(CALL_BUCKETS)
}

fn first_event_histogram() -> Histogram {
    Histogram::new(FIRST_EVENT_BUCKETS)
}

fn run_histogram() -> Histogram {
    Histogram::new(RUN_BUCKETS)
}

/// Shares of a ceiling: a tenth at a time, the top bucket all of it.
const SHARE_BUCKETS: [f64; 10] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];

fn share_histogram() -> Histogram {
    Histogram::new(SHARE_BUCKETS)
}

fn step_histogram() -> Histogram {
    Histogram::new(STEP_BUCKETS)
}

/// Labels of a label set: `#[derive]`d with the fields in their order.
macro_rules! label_set {
    ($(#[$doc:meta] $name:ident { $($field:ident),+ })+) => {
        $(
            #[$doc]
            #[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
            pub(super) struct $name {
                $(pub(super) $field: String,)+
            }
        )+
    };
}

label_set! {
    /// A run's end.
    RunEnd { tenant, agent, outcome }
    /// Whose run.
    Whose { tenant, agent }
    /// An agent.
    Agent { agent }
    /// A model call attempt's outcome, counted per tenant and agent.
    ModelCall { tenant, agent, provider, model, outcome }
    /// A model call attempt's duration.
    ModelTime { provider, model, outcome, streamed }
    /// A provider and a model.
    Link { provider, model }
    /// An attempt: the first of its call, or a retry.
    ModelAttempt { provider, model, attempt }
    /// Tokens of one direction.
    Tokens { tenant, agent, provider, model, direction }
    /// What model calls cost.
    Spend { tenant, agent, provider, model }
    /// A tool call attempt's outcome, counted per tenant and agent.
    ToolCall { tenant, agent, tool, class, outcome }
    /// A tool call attempt's duration.
    ToolTime { tool, class, outcome }
    /// A tool attempt: the first of its call, or a retry.
    ToolAttempt { tool, class, attempt }
    /// A retry's kind and target.
    Retry { kind, target }
    /// A breaker arm.
    Arm { arm, name }
    /// A breaker arm's transition.
    ArmTransition { arm, name, transition }
    /// A call refused before reaching its tool.
    Refusal { tenant, agent, tool, category }
    /// A fallback's primary and answering link.
    Fallback { primary, answered }
    /// A wait for a provider slot.
    QueueWait { provider, expired }
    /// A resource group.
    Group { group }
    /// A rate limit's group and bucket.
    RateLimit { group, bucket }
    /// A shed call's group and reason.
    Shed { group, reason }
    /// A concurrency change's group and direction.
    Adjust { group, direction }
    /// A loop guard trip.
    Trip { tenant, agent, trip }
    /// A tool.
    Tool { tool }
    /// What was done with a cut output.
    Truncation { action }
    /// A cut stream's provider and what its recovery came to.
    StreamRecovery { provider, outcome }
    /// A compensation's end.
    Compensation { tenant, agent, status }
    /// Effects a handoff package left to a human.
    HandoffEffects { tenant, agent, state }
    /// An idempotency lookup's result.
    Lookup { tenant, agent, tool, result }
    /// A tool, per tenant and agent.
    WhoseTool { tenant, agent, tool }
    /// A budget ceiling reached.
    BudgetEnd { tenant, agent, scope, dimension }
    /// The dimension whose ceiling stopped a run.
    BudgetUse { tenant, agent, dimension }
    /// Whose latency degraded: `tool:NAME` or `model:PROVIDER/MODEL`.
    Subject { subject }
}

/// Every family of the engine.
#[derive(Debug)]
pub(super) struct Families {
    pub(super) runs_started: Family<Whose, Counter>,
    pub(super) runs_finished: Family<RunEnd, Counter>,
    pub(super) run_duration: Histograms<Agent>,
    pub(super) run_steps: Histograms<Agent>,
    pub(super) model_calls: Family<ModelCall, Counter>,
    pub(super) model_duration: Histograms<ModelTime>,
    pub(super) model_first_event: Histograms<Link>,
    pub(super) model_attempts: Family<ModelAttempt, Counter>,
    pub(super) tokens: Family<Tokens, Counter>,
    pub(super) cost: Family<Spend, Counter<f64, AtomicU64>>,
    pub(super) tool_calls: Family<ToolCall, Counter>,
    pub(super) tool_duration: Histograms<ToolTime>,
    pub(super) tool_attempts: Family<ToolAttempt, Counter>,
    pub(super) retries: Family<Retry, Counter>,
    pub(super) breaker_transitions: Family<ArmTransition, Counter>,
    pub(super) breaker_state: Family<Arm, Gauge>,
    pub(super) calls_rejected: Family<Arm, Counter>,
    pub(super) calls_refused: Family<Refusal, Counter>,
    pub(super) fallbacks: Family<Fallback, Counter>,
    pub(super) queue_waits: Family<QueueWait, Counter>,
    pub(super) tool_queue_expired: Family<Group, Counter>,
    pub(super) rate_limited: Family<RateLimit, Counter>,
    pub(super) shed: Family<Shed, Counter>,
    pub(super) adjusted: Family<Adjust, Counter>,
    pub(super) loop_trips: Family<Trip, Counter>,
    pub(super) fan_out_refused: Family<Whose, Counter>,
    pub(super) latency_degraded: Family<Subject, Counter>,
    pub(super) self_heal_exhausted: Family<Tool, Counter>,
    pub(super) truncated: Family<Truncation, Counter>,
    pub(super) stream_recoveries: Family<StreamRecovery, Counter>,
    pub(super) compensations: Family<Compensation, Counter>,
    pub(super) handoffs: Family<Whose, Counter>,
    pub(super) handoff_effects: Family<HandoffEffects, Counter>,
    pub(super) idempotency_lookups: Family<Lookup, Counter>,
    pub(super) idempotency_collapses: Family<WhoseTool, Counter>,
    pub(super) budget_exhausted: Family<BudgetEnd, Counter>,
    pub(super) budget_used: Histograms<BudgetUse>,
}

impl Families {
    /// Every family, registered in `registry` (counters get their `_total`
    /// from the encoder).
    pub(super) fn register(registry: &mut Registry) -> Self {
        let f = Families {
            runs_started: Family::default(),
            runs_finished: Family::default(),
            run_duration: Family::new_with_constructor(run_histogram),
            run_steps: Family::new_with_constructor(step_histogram),
            model_calls: Family::default(),
            model_duration: Family::new_with_constructor(call_histogram),
            model_first_event: Family::new_with_constructor(first_event_histogram),
            model_attempts: Family::default(),
            tokens: Family::default(),
            cost: Family::default(),
            tool_calls: Family::default(),
            tool_duration: Family::new_with_constructor(call_histogram),
            tool_attempts: Family::default(),
            retries: Family::default(),
            breaker_transitions: Family::default(),
            breaker_state: Family::default(),
            calls_rejected: Family::default(),
            calls_refused: Family::default(),
            fallbacks: Family::default(),
            queue_waits: Family::default(),
            tool_queue_expired: Family::default(),
            rate_limited: Family::default(),
            shed: Family::default(),
            adjusted: Family::default(),
            loop_trips: Family::default(),
            fan_out_refused: Family::default(),
            latency_degraded: Family::default(),
            self_heal_exhausted: Family::default(),
            truncated: Family::default(),
            stream_recoveries: Family::default(),
            compensations: Family::default(),
            handoffs: Family::default(),
            handoff_effects: Family::default(),
            idempotency_lookups: Family::default(),
            idempotency_collapses: Family::default(),
            budget_exhausted: Family::default(),
            budget_used: Family::new_with_constructor(share_histogram),
        };
        let r = registry;
        r.register(
            "rein_runs_started",
            "Runs started (not resumed), by tenant and agent",
            f.runs_started.clone(),
        );
        r.register(
            "rein_runs_finished",
            "Runs that ended, by tenant, agent and outcome",
            f.runs_finished.clone(),
        );
        r.register(
            "rein_run_duration_seconds",
            "How long runs that ended took, by agent",
            f.run_duration.clone(),
        );
        r.register(
            "rein_run_steps",
            "Steps of runs that ended, by agent",
            f.run_steps.clone(),
        );
        r.register(
            "rein_model_calls",
            "Model call attempts (runs and gateway calls, streamed ones when their stream ended), by tenant, agent, provider, model and outcome (ok or the failure category)",
            f.model_calls.clone(),
        );
        r.register(
            "rein_model_call_duration_seconds",
            "How long model call attempts took (a stream: to its last event), by provider, model, outcome and whether streamed",
            f.model_duration.clone(),
        );
        r.register(
            "rein_model_time_to_first_event_seconds",
            "How long streamed model call attempts took to their first event (time to first token), by provider and model",
            f.model_first_event.clone(),
        );
        r.register(
            "rein_model_attempts",
            "Model call attempts begun, by provider, model and attempt (first or retry): retry amplification is all over first",
            f.model_attempts.clone(),
        );
        r.register(
            "rein_model_tokens",
            "Tokens model call attempts consumed, by tenant, agent, provider, model and direction (input or output; a failure's spent tokens are input)",
            f.tokens.clone(),
        );
        r.register(
            "rein_model_cost_usd",
            "What model call attempts cost in US dollars at the configured prices, by tenant, agent, provider and model",
            f.cost.clone(),
        );
        r.register(
            "rein_tool_calls",
            "Tool call attempts that ended, by tenant, agent, tool, class and outcome (ok or the failure category)",
            f.tool_calls.clone(),
        );
        r.register(
            "rein_tool_call_duration_seconds",
            "How long tool call attempts took, by tool, class and outcome",
            f.tool_duration.clone(),
        );
        r.register(
            "rein_tool_attempts",
            "Tool call attempts begun, by tool, class and attempt (first or retry): retry amplification is all over first",
            f.tool_attempts.clone(),
        );
        r.register(
            "rein_retries",
            "Retries scheduled, by kind (model or tool) and target: model retries and tool retries are separate series",
            f.retries.clone(),
        );
        r.register(
            "rein_breaker_transitions",
            "Breaker arm transitions, by arm kind, name and transition",
            f.breaker_transitions.clone(),
        );
        r.register(
            "rein_breaker_state",
            "The state of each breaker arm that ever changed: 0 closed, 1 half-open, 2 open",
            f.breaker_state.clone(),
        );
        r.register(
            "rein_calls_rejected",
            "Calls refused without being made because a breaker arm was open, by arm kind and name",
            f.calls_rejected.clone(),
        );
        r.register(
            "rein_calls_refused",
            "Proposed calls refused before reaching their tool (unknown tool, invalid arguments, disabled tool), by tenant, agent, tool and category",
            f.calls_refused.clone(),
        );
        r.register(
            "rein_model_fallbacks",
            "Model turns answered by a link other than the primary, by primary and answering provider/model",
            f.fallbacks.clone(),
        );
        r.register(
            "rein_model_queue_waits",
            "Model calls that waited for a provider slot, by provider and whether the wait expired",
            f.queue_waits.clone(),
        );
        r.register(
            "rein_tool_queue_expired",
            "Tool attempts not made because no resource-group slot came in time, by group",
            f.tool_queue_expired.clone(),
        );
        r.register(
            "rein_governor_rate_limited",
            "Calls the governor held for a rate-limit token, by group and bucket",
            f.rate_limited.clone(),
        );
        r.register(
            "rein_governor_calls_shed",
            "Calls the governor shed, by group and reason",
            f.shed.clone(),
        );
        r.register(
            "rein_governor_concurrency_adjusted",
            "Adaptive concurrency changes, by group and direction",
            f.adjusted.clone(),
        );
        r.register(
            "rein_loop_guard_trips",
            "Runs stopped by the loop guard, by tenant, agent and trip (repeated_action, no_progress, budget_exhausted)",
            f.loop_trips.clone(),
        );
        r.register(
            "rein_fan_out_refused",
            "Model turns that proposed more calls than their agent's max_calls_per_turn (none of their calls ran), by tenant and agent",
            f.fan_out_refused.clone(),
        );
        r.register(
            "rein_latency_degraded",
            "Windows of samples whose p99 came out above twice the baseline, by subject (tool:NAME or model:PROVIDER/MODEL)",
            f.latency_degraded.clone(),
        );
        r.register(
            "rein_self_heal_exhausted",
            "Tools disabled for the rest of a run because the model's own re-tries (self-healing) used up their allowance, by tool",
            f.self_heal_exhausted.clone(),
        );
        r.register(
            "rein_model_output_truncated",
            "Model turns whose structured output was cut, by what rein did (salvaged or asked_again)",
            f.truncated.clone(),
        );
        r.register(
            "rein_model_stream_recoveries",
            "Streamed answers cut after their first token, by the cut link's provider and what rein did (continued, regenerated, failed)",
            f.stream_recoveries.clone(),
        );
        r.register(
            "rein_compensations",
            "Compensations that finished, by tenant, agent and status (compensated, uncompensatable, manual)",
            f.compensations.clone(),
        );
        r.register(
            "rein_handoffs",
            "Runs handed to a human (a handoff package created), by tenant and agent",
            f.handoffs.clone(),
        );
        r.register(
            "rein_handoff_effects",
            "Side effects handoff packages left to a human, by tenant, agent and state (awaiting_decision, uncertain: dangling)",
            f.handoff_effects.clone(),
        );
        r.register(
            "rein_idempotency_lookups",
            "Maybe-applied writes looked up by their idempotency key, by tenant, agent, tool and result (found, not_found, failed)",
            f.idempotency_lookups.clone(),
        );
        r.register(
            "rein_idempotency_collapses",
            "Lost attempts whose found result was used instead of executing again (idempotency key collapses), by tenant, agent and tool",
            f.idempotency_collapses.clone(),
        );
        r.register(
            "rein_budget_exhausted",
            "Budget ceilings reached, by tenant, agent, scope (run, model_turn, model_call, tool_call) and dimension (wall_clock, steps, tokens, cost)",
            f.budget_exhausted.clone(),
        );
        r.register(
            "rein_budget_used_ratio",
            "The share of its ceiling a run had used when a budget stopped it (1: all of it), by tenant, agent and the dimension that stopped it (wall_clock, steps, tokens, cost): what a ceiling leaves unspent",
            f.budget_used.clone(),
        );
        f
    }
}
