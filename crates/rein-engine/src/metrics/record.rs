//! What each event counts.

use std::sync::PoisonError;
use std::time::Duration;

use rein_core::breaker::BreakerState;
use rein_core::event::{
    CallRejected, IdempotencyLookup, LinkName, ModelCallFinished, RetryTarget, ToolCallFinished,
    TruncationAction,
};
use rein_core::{Category, Event, EventData, ToolClass};

use super::families::{
    Adjust, Agent, Arm, ArmTransition, BudgetEnd, Compensation, Fallback, Group, HandoffEffects,
    Link, Lookup, ModelAttempt, ModelCall, ModelTime, QueueWait, RateLimit, Refusal, Retry, RunEnd,
    Shed, Spend, StreamRecovery, Subject, Tokens, Tool, ToolAttempt, ToolCall, ToolTime, Trip,
    Truncation, Whose, WhoseTool,
};
use super::{Metrics, NONE, Scope};

/// `ok`, or the failure's category (`none` when it has none).
fn outcome(ok: bool, category: Option<Category>) -> String {
    if ok {
        "ok".to_owned()
    } else {
        category.map_or(NONE, Category::as_str).to_owned()
    }
}

/// `first` for the first attempt of a call, `retry` for any after it.
fn attempt(number: u32) -> String {
    if number <= 1 { "first" } else { "retry" }.to_owned()
}

fn link(l: &LinkName) -> String {
    format!("{}/{}", l.provider, l.model)
}

fn whose(scope: &Scope) -> Whose {
    Whose {
        tenant: scope.tenant.clone(),
        agent: scope.agent.clone(),
    }
}

impl Metrics {
    /// Counts what `event` says, if it is a decision worth a metric, under
    /// the tenant and agent of `scope`.
    pub fn record(&self, event: &Event, scope: &Scope) {
        let f = &self.families;
        let (tenant, agent) = (scope.tenant.clone(), scope.agent.clone());
        match &event.data {
            EventData::RunStarted(_) => {
                f.runs_started.get_or_create(&whose(scope)).inc();
            }
            EventData::RunFinished(d) => {
                let end = RunEnd {
                    tenant,
                    agent: agent.clone(),
                    outcome: d.outcome.as_str().to_owned(),
                };
                f.runs_finished.get_or_create(&end).inc();
                let agent = Agent { agent };
                f.run_duration
                    .get_or_create(&agent)
                    .observe(d.elapsed.as_secs_f64());
                f.run_steps
                    .get_or_create(&agent)
                    .observe(f64::from(d.steps));
            }
            EventData::ModelCallStarted(d) => {
                f.model_attempts
                    .get_or_create(&ModelAttempt {
                        provider: d.provider.clone(),
                        model: d.model.clone(),
                        attempt: attempt(d.attempt),
                    })
                    .inc();
            }
            EventData::ModelCallFinished(d) => self.model_call(d, scope),
            EventData::ToolCallStarted(d) => {
                self.classes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(d.tool.clone(), d.class);
                f.tool_attempts
                    .get_or_create(&ToolAttempt {
                        tool: d.tool.clone(),
                        class: d.class.as_str().to_owned(),
                        attempt: attempt(d.attempt),
                    })
                    .inc();
            }
            EventData::ToolCallFinished(d) => self.tool_call(d, scope),
            EventData::CallRejected(CallRejected::CircuitOpen(c)) => {
                f.calls_rejected
                    .get_or_create(&Arm {
                        arm: c.arm.as_str().to_owned(),
                        name: c.name.clone(),
                    })
                    .inc();
            }
            EventData::CallRejected(CallRejected::Refused(r)) => {
                f.calls_refused
                    .get_or_create(&Refusal {
                        tenant,
                        agent,
                        tool: self.bounds.refused_tool(&r.tool),
                        category: r.category.map_or(NONE, Category::as_str).to_owned(),
                    })
                    .inc();
            }
            EventData::IdempotencyLookup(d) => self.lookup(d, scope),
            EventData::BudgetExhausted(d) => {
                f.budget_exhausted
                    .get_or_create(&BudgetEnd {
                        tenant,
                        agent,
                        scope: scope_name(d.scope).to_owned(),
                        dimension: d.exhausted.dimension.to_string(),
                    })
                    .inc();
            }
            EventData::CompensationFinished(d) => {
                f.compensations
                    .get_or_create(&Compensation {
                        tenant,
                        agent,
                        status: d.status.as_str().to_owned(),
                    })
                    .inc();
            }
            EventData::HandoffCreated(d) => {
                f.handoffs.get_or_create(&whose(scope)).inc();
                if let Some(package) = &d.package {
                    for (state, n) in [
                        ("awaiting_decision", package.awaiting_decision),
                        ("uncertain", package.uncertain),
                    ] {
                        f.handoff_effects
                            .get_or_create(&HandoffEffects {
                                tenant: tenant.clone(),
                                agent: agent.clone(),
                                state: state.to_owned(),
                            })
                            .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
                    }
                }
            }
            EventData::FanOutRefused(_) => {
                f.fan_out_refused.get_or_create(&whose(scope)).inc();
            }
            EventData::LatencyDegraded(d) => {
                f.latency_degraded
                    .get_or_create(&Subject {
                        subject: d.subject.clone(),
                    })
                    .inc();
            }
            EventData::LoopDetected(d) => {
                f.loop_trips
                    .get_or_create(&Trip {
                        tenant,
                        agent,
                        trip: d.trip.as_str().to_owned(),
                    })
                    .inc();
            }
            _ => self.control(event),
        }
    }

    /// The control layer's decisions: retries, breakers, fallbacks, queues,
    /// the governor, self-healing and cut outputs (no tenant or agent:
    /// they are about targets shared by every run).
    fn control(&self, event: &Event) {
        let f = &self.families;
        match &event.data {
            EventData::RetryScheduled(d) => {
                let kind = match d.target {
                    RetryTarget::Provider(_) => "model",
                    RetryTarget::Tool(_) => "tool",
                };
                f.retries
                    .get_or_create(&Retry {
                        kind: kind.to_owned(),
                        target: d.target.name().to_owned(),
                    })
                    .inc();
            }
            EventData::BreakerStateChanged(d) => {
                let arm = Arm {
                    arm: d.arm.as_str().to_owned(),
                    name: d.name.clone(),
                };
                f.breaker_transitions
                    .get_or_create(&ArmTransition {
                        arm: arm.arm.clone(),
                        name: arm.name.clone(),
                        transition: d.transition.as_str().to_owned(),
                    })
                    .inc();
                if let Some(state) = d.transition.state_after() {
                    f.breaker_state.get_or_create(&arm).set(state_value(state));
                }
            }
            EventData::ModelFallbackUsed(d) => {
                f.fallbacks
                    .get_or_create(&Fallback {
                        primary: link(&d.primary),
                        answered: link(&d.answered),
                    })
                    .inc();
            }
            EventData::ModelQueueWaited(d) => {
                f.queue_waits
                    .get_or_create(&QueueWait {
                        provider: d.provider.clone(),
                        expired: d.expired.to_string(),
                    })
                    .inc();
            }
            EventData::ConcurrencyWaitExpired(d) => {
                f.tool_queue_expired
                    .get_or_create(&Group {
                        group: d.resource_group.clone(),
                    })
                    .inc();
            }
            EventData::RateLimited(d) => {
                f.rate_limited
                    .get_or_create(&RateLimit {
                        group: d.resource_group.clone(),
                        bucket: d.bucket.clone(),
                    })
                    .inc();
            }
            EventData::CallShed(d) => {
                // `concurrency_wait_expired` is no longer written: a tool
                // call that found no slot in time is this shed, and keeps
                // the counter it always had.
                if d.reason == "wait_expired" && !d.tool.is_empty() {
                    f.tool_queue_expired
                        .get_or_create(&Group {
                            group: d.resource_group.clone(),
                        })
                        .inc();
                }
                f.shed
                    .get_or_create(&Shed {
                        group: d.resource_group.clone(),
                        reason: d.reason.clone(),
                    })
                    .inc();
            }
            EventData::ConcurrencyAdjusted(d) => {
                f.adjusted
                    .get_or_create(&Adjust {
                        group: d.resource_group.clone(),
                        direction: if d.new < d.old { "down" } else { "up" }.to_owned(),
                    })
                    .inc();
            }
            EventData::ToolDisabled(d) => {
                f.self_heal_exhausted
                    .get_or_create(&Tool {
                        tool: d.tool.clone(),
                    })
                    .inc();
            }
            EventData::ModelOutputTruncated(d) => {
                let action = match d.action {
                    TruncationAction::Salvaged => "salvaged",
                    TruncationAction::AskedAgain => "asked_again",
                };
                f.truncated
                    .get_or_create(&Truncation {
                        action: action.to_owned(),
                    })
                    .inc();
            }
            EventData::StreamRecovered(d) => {
                f.stream_recoveries
                    .get_or_create(&StreamRecovery {
                        provider: d.cut.provider.clone(),
                        outcome: d.recovery.as_str().to_owned(),
                    })
                    .inc();
            }
            _ => {}
        }
    }

    /// A model call attempt: its outcome, its time (and time to first
    /// event, streamed), its tokens and its cost.
    fn model_call(&self, d: &ModelCallFinished, scope: &Scope) {
        let f = &self.families;
        let outcome = outcome(d.ok(), d.category());
        let (tenant, agent) = (scope.tenant.clone(), scope.agent.clone());
        f.model_calls
            .get_or_create(&ModelCall {
                tenant: tenant.clone(),
                agent: agent.clone(),
                provider: d.provider.clone(),
                model: d.model.clone(),
                outcome: outcome.clone(),
            })
            .inc();
        if let Some(elapsed) = d.elapsed {
            f.model_duration
                .get_or_create(&ModelTime {
                    provider: d.provider.clone(),
                    model: d.model.clone(),
                    outcome,
                    streamed: d.first_event.is_some().to_string(),
                })
                .observe(seconds(elapsed));
        }
        if let Some(first) = d.first_event {
            f.model_first_event
                .get_or_create(&Link {
                    provider: d.provider.clone(),
                    model: d.model.clone(),
                })
                .observe(seconds(first));
        }
        for (direction, n) in [("input", d.input_tokens()), ("output", d.output_tokens())] {
            f.tokens
                .get_or_create(&Tokens {
                    tenant: tenant.clone(),
                    agent: agent.clone(),
                    provider: d.provider.clone(),
                    model: d.model.clone(),
                    direction: direction.to_owned(),
                })
                .inc_by(n);
        }
        let usd = d.cost.map_or(0.0, rein_core::deadline::Cost::usd);
        f.cost
            .get_or_create(&Spend {
                tenant,
                agent,
                provider: d.provider.clone(),
                model: d.model.clone(),
            })
            .inc_by(usd);
    }

    /// A tool call attempt that ended (a call skipped for its recorded
    /// result made none, and is not counted).
    fn tool_call(&self, d: &ToolCallFinished, scope: &Scope) {
        let elapsed = match d {
            ToolCallFinished::Skipped(_) => return,
            ToolCallFinished::NotSent(_) => None,
            ToolCallFinished::Succeeded(s) => Some(s.elapsed),
            ToolCallFinished::Failed(s) => Some(s.elapsed),
        };
        let f = &self.families;
        let class = self
            .classes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(d.tool())
            .map_or(NONE, |c: &ToolClass| c.as_str())
            .to_owned();
        let outcome = outcome(d.ok(), d.category());
        f.tool_calls
            .get_or_create(&ToolCall {
                tenant: scope.tenant.clone(),
                agent: scope.agent.clone(),
                tool: d.tool().to_owned(),
                class: class.clone(),
                outcome: outcome.clone(),
            })
            .inc();
        if let Some(elapsed) = elapsed {
            f.tool_duration
                .get_or_create(&ToolTime {
                    tool: d.tool().to_owned(),
                    class,
                    outcome,
                })
                .observe(seconds(elapsed));
        }
    }

    /// An idempotency lookup, and the collapse it led to.
    fn lookup(&self, d: &IdempotencyLookup, scope: &Scope) {
        let f = &self.families;
        let result = match d.found {
            Some(true) => "found",
            Some(false) => "not_found",
            None => "failed",
        };
        f.idempotency_lookups
            .get_or_create(&Lookup {
                tenant: scope.tenant.clone(),
                agent: scope.agent.clone(),
                tool: d.tool.clone(),
                result: result.to_owned(),
            })
            .inc();
        if d.collapsed == Some(true) {
            f.idempotency_collapses
                .get_or_create(&WhoseTool {
                    tenant: scope.tenant.clone(),
                    agent: scope.agent.clone(),
                    tool: d.tool.clone(),
                })
                .inc();
        }
    }
}

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The `rein_breaker_state` value of `state`.
fn state_value(state: BreakerState) -> i64 {
    match state {
        BreakerState::Closed => 0,
        BreakerState::HalfOpen => 1,
        BreakerState::Open => 2,
    }
}

fn scope_name(scope: rein_core::event::BudgetScope) -> &'static str {
    use rein_core::event::BudgetScope;
    match scope {
        BudgetScope::Run => "run",
        BudgetScope::ModelTurn => "model_turn",
        BudgetScope::ModelCall => "model_call",
        BudgetScope::ToolCall => "tool_call",
    }
}
