//! Fan-out control at planning time: the cap on calls per turn, and the
//! lanes that keep writes to one resource apart.
//!
//! # Why the whole turn is refused, not its first `cap` calls
//!
//! A turn over the cap is a plan the model has to rethink (batch the
//! reads, narrow the writes). Running its first `cap` calls would leave
//! that plan half done — some writes applied, others not, chosen by
//! position rather than by the model — and the model would have to work
//! out which of its own calls ran before it could re-plan. Refusing all of
//! them leaves nothing applied, nothing in the ledger and one clear reply
//! per call; the price is one more model turn, which the step budget
//! already counts.
//!
//! # Why lanes
//!
//! Two writes of one turn to the same order, run in parallel, race: the
//! order desk applies them in whichever order they arrive, and a
//! read-modify-write pair loses an update (seed 000, "write conflicts").
//! A tool that declares `resource_key` puts its writes with the same key
//! value (within its resource group) in one lane; a lane runs its calls
//! one after another in the model's order, lanes run in parallel.

use std::collections::HashMap;

use rein_core::event::FanOutRefused;
use rein_core::{Category, Failure, ToolClass};
use serde_json::Value;

use super::args::{ParsedArgs, parse_args};
use super::binding::AgentBinding;
use super::ctx::RunCtx;
use super::emitter::Correlation;
use super::engine::Engine;
use super::guarded::Planned;
use super::step::{Plan, Turn};

/// How the reply to a call of a refused turn begins.
pub(super) const TOO_MANY_CALLS: &str = "too many calls in one turn";

impl Engine {
    /// The plan of a turn over its agent's `max_calls_per_turn`: nothing
    /// runs, every call gets a structured "batch or narrow" reply, and
    /// `fan_out_refused` records it. `None` when the turn is within the cap,
    /// or replays a persisted plan (which was within the cap when planned:
    /// its intents and ledger records must be settled, not dropped).
    pub(super) fn refuse_fan_out(&self, ctx: &RunCtx<'_>, step: u32, turn: &Turn) -> Option<Plan> {
        let calls = &turn.response.tool_calls;
        let limits = ctx.agent.fan_out;
        if !turn.prior_ids.is_empty() || !limits.exceeded_by(calls.len()) {
            return None;
        }
        // Sabotage hook `uncapped_fan_out`: the cap is not applied.
        #[cfg(feature = "sabotage")]
        if self.sabotage.uncapped_fan_out {
            return None;
        }
        let cap = limits.max_calls_per_turn.get();
        let message = format!(
            "{TOO_MANY_CALLS} ({} > {cap}): batch or narrow — send at most {cap} calls, \
             use a tool that takes many items at once, or narrow the task; none of this turn's calls ran",
            calls.len()
        );
        let mut tools: Vec<String> = Vec::new();
        for call in calls {
            if !tools.contains(&call.name) {
                tools.push(call.name.clone());
            }
        }
        ctx.emitter.emit(
            &Correlation {
                step,
                ..Correlation::default()
            },
            FanOutRefused {
                proposed: calls.len(),
                cap,
                tools,
            },
        );
        // The placeholder every refusal of a proposal gets, with rein's own
        // finding as its problem: structured, never a tool's text.
        let replies = calls
            .iter()
            .map(|call| {
                let failure = Failure::new(&call.name, Category::InvalidArguments);
                Some(format!("{} problems: {message}", failure.model_message()))
            })
            .collect();
        // Observed for repetition and progress (the same oversized turn
        // again is a loop), but not as failures of the tools: none was
        // called, and counting each call would disable a tool for a turn
        // it never saw.
        let observed = calls
            .iter()
            .map(|call| {
                let args = match parse_args(&call.arguments) {
                    ParsedArgs::Complete(v) => v,
                    _ => Value::Null,
                };
                (call.name.clone(), args)
            })
            .collect();
        Some(Plan {
            planned: Vec::new(),
            replies,
            observed,
            rejected: Vec::new(),
            commit: None,
        })
    }
}

/// The lanes of a turn's parallel calls: each call alone, except writes
/// that name the same resource (same resource group, same `resource_key`
/// value), which share a lane in the model's order. Lanes keep the order
/// of their first call.
pub(super) fn lanes(
    agent: &AgentBinding,
    planned: Vec<Planned>,
    serialise: bool,
) -> Vec<Vec<Planned>> {
    let mut lanes: Vec<Vec<Planned>> = Vec::new();
    let mut by_resource: HashMap<(String, String), usize> = HashMap::new();
    for p in planned {
        let resource = serialise.then(|| resource_of(agent, &p)).flatten();
        match resource {
            Some(resource) => match by_resource.get(&resource) {
                Some(&lane) => lanes[lane].push(p),
                None => {
                    by_resource.insert(resource, lanes.len());
                    lanes.push(vec![p]);
                }
            },
            None => lanes.push(vec![p]),
        }
    }
    lanes
}

/// The resource a planned write names: its tool's resource group (or the
/// tool, without one) and the value of its `resource_key`. Reads and calls
/// that do not name the key have none.
fn resource_of(agent: &AgentBinding, p: &Planned) -> Option<(String, String)> {
    let tool = agent.tools.get(&p.tool)?;
    if tool.class == ToolClass::Read {
        return None;
    }
    let value = tool.declared.resource_key.as_ref()?.value_in(&p.args)?;
    let group = tool
        .resource_group
        .clone()
        .unwrap_or_else(|| tool.name.clone());
    Some((group, value))
}
