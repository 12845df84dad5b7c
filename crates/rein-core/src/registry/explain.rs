//! The limits a run gets, as a human reads them: the block `rein check
//! --explain` prints per agent (and the dashboard's config page shows),
//! the line `rein run` prints as a run starts, and a report's consumption
//! beside each ceiling.
//!
//! # Why show the defaults
//!
//! An agent without a `[budget]` still runs under one (rein's defaults),
//! and a user who cannot see it learns it when a run stops. Every value
//! here is the one a run applies; one equal to rein's default says so.

use std::time::Duration;

use crate::RunReport;
use crate::deadline::{BudgetLimits, DEFAULT_MAX_STEPS, DEFAULT_MAX_TOKENS, DEFAULT_WALL_CLOCK};
use crate::plural::count;
use crate::registry::{AgentSpec, DEFAULT_MAX_CALLS_PER_TURN, Registry};

/// `d` as a human reads it: `850 ms`, `12.5 s`, `4m`, `4m 30s`, `2h 5m`,
/// `3d 4h`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        return format!("{ms} ms");
    }
    let secs = d.as_secs();
    if secs < 60 {
        let tenths = (ms % 1_000) / 100;
        return if tenths == 0 {
            format!("{secs} s")
        } else {
            format!("{secs}.{tenths} s")
        };
    }
    let (days, hours, minutes, seconds) = (
        secs / 86_400,
        secs % 86_400 / 3_600,
        secs % 3_600 / 60,
        secs % 60,
    );
    let parts = [(days, "d"), (hours, "h"), (minutes, "m"), (seconds, "s")];
    let first = parts.iter().position(|(n, _)| *n > 0).unwrap_or(3);
    parts[first..]
        .iter()
        .take(2)
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn marked<T: PartialEq>(text: String, value: T, default: T) -> String {
    if value == default {
        format!("{text} (default)")
    } else {
        text
    }
}

/// The budget of a run, in one line: steps, wall clock (and the part kept
/// for compensation), tokens and cost, each marked when it is rein's
/// default.
pub fn budget_line(budget: &BudgetLimits, reserved: Duration) -> String {
    let steps = match budget.steps() {
        Some(n) => marked(format!("{n} steps"), n, DEFAULT_MAX_STEPS),
        None => "no step ceiling".to_owned(),
    };
    let wall = budget.wall_clock();
    let mut clock = marked(
        format!("{} wall clock", human(wall)),
        wall,
        DEFAULT_WALL_CLOCK,
    );
    if !reserved.is_zero() {
        clock.push_str(&format!(
            ", {} of it kept for compensation",
            human(reserved)
        ));
    }
    let tokens = match budget.tokens() {
        Some(n) => marked(format!("{n} tokens"), n, DEFAULT_MAX_TOKENS),
        None => "no token ceiling".to_owned(),
    };
    let cost = match budget.cost() {
        Some(c) => format!("{c} cost ceiling"),
        None => "no cost ceiling".to_owned(),
    };
    format!("{steps}, {clock}, {tokens}, {cost}")
}

/// The limits of `agent`'s runs, one line each, as `rein check --explain`
/// prints them.
pub fn explain(registry: &Registry, agent: &AgentSpec) -> Vec<String> {
    let reserved = agent
        .compensation_reserve
        .of_duration(agent.budget.wall_clock());
    let mut lines = vec![
        format!("agent {}:", agent.name),
        format!("  budget: {}", budget_line(&agent.budget, reserved)),
        format!(
            "  per turn: at most {}; an action repeated more than {} times ends the run",
            marked(
                format!("{} calls", agent.fan_out.max_calls_per_turn),
                agent.fan_out.max_calls_per_turn.get(),
                DEFAULT_MAX_CALLS_PER_TURN,
            ),
            agent.loop_guard.max_repeats
        ),
        format!(
            "  retries: up to {} per call (irreversible tools: one)",
            marked(
                format!("{} attempts", agent.retry.max_attempts()),
                agent.retry.max_attempts(),
                crate::retry::RetryConfig::default().max_attempts,
            )
        ),
    ];
    let approval = &agent.approval;
    lines.push(match approval.from_tier {
        Some(tier) => format!(
            "  approval: calls to tools of tier {tier} or above wait for a human, up to {}; the wall clock {} while they wait",
            human(approval.window),
            if approval.pause_clock {
                "stops"
            } else {
                "runs"
            }
        ),
        None => "  approval: only for tools that ask for it themselves".to_owned(),
    });
    for tool in agent.tools.iter().filter_map(|t| registry.tools().get(t)) {
        if let Some(line) = tool_defaults(tool) {
            lines.push(line);
        }
    }
    let mut groups: Vec<&str> = agent
        .tools
        .iter()
        .filter_map(|t| registry.tools().get(t))
        .map(|t| t.resource_group.as_str())
        .collect();
    groups.sort_unstable();
    groups.dedup();
    for name in groups {
        let line = match registry.resource_groups().get(name) {
            Some(g) => {
                let rate = g.rate.map_or("no rate limit".to_owned(), |r| {
                    format!("{}/s, bursts of {}", r.per_sec, r.burst)
                });
                let concurrency = g
                    .max_concurrency
                    .map_or("no concurrency ceiling".to_owned(), |n| {
                        format!("at most {n} at once")
                    });
                format!("  resource group {name}: {rate}, {concurrency}")
            }
            None => format!("  resource group {name}: ungoverned"),
        };
        lines.push(line);
    }
    lines
}

/// What rein chose for `tool` because its config left it out, in one
/// line; `None` when the config set everything.
fn tool_defaults(tool: &crate::registry::ToolSpec) -> Option<String> {
    if tool.defaulted.is_empty() {
        return None;
    }
    let chosen: Vec<String> = tool
        .defaulted
        .iter()
        .map(|field| match *field {
            "resource_group" => format!("resource_group {} (its own)", tool.resource_group),
            "side_effect_tier" => format!(
                "side_effect_tier {} (from class {})",
                tool.side_effect_tier,
                tool.class.as_str()
            ),
            "owner" => format!("owner {}", tool.owner),
            "latency" => format!(
                "latency observed, planned at a p99 of {} until {} calls are measured",
                human(crate::registry::DEFAULT_TOOL_FALLBACK_P99),
                crate::registry::DEFAULT_OBSERVE_MIN_SAMPLES
            ),
            other => other.to_owned(),
        })
        .collect();
    Some(format!(
        "  tool {} (rein's defaults; set them to override): {}",
        tool.name,
        chosen.join(", ")
    ))
}

/// What a run consumed, beside each of its ceilings when they are known.
pub fn consumed_line(report: &RunReport, limits: Option<&BudgetLimits>) -> String {
    let c = &report.consumed;
    let elapsed = human(Duration::from_millis(report.elapsed_ms));
    let Some(limits) = limits else {
        return format!(
            "{}, {}, {} in {elapsed}",
            count(report.steps, "step"),
            count(c.tokens, "token"),
            c.cost
        );
    };
    let of = |used: String, ceiling: Option<String>| match ceiling {
        Some(ceiling) => format!("{used} of {ceiling}"),
        None => used,
    };
    [
        of(
            count(report.steps, "step"),
            limits.steps().map(|n| n.to_string()),
        ),
        of(
            count(c.tokens, "token"),
            limits.tokens().map(|n| n.to_string()),
        ),
        of(c.cost.to_string(), limits.cost().map(|n| n.to_string())),
        of(elapsed, Some(human(limits.wall_clock()))),
    ]
    .join(", ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use super::*;

    #[test]
    fn durations_read_as_a_human_reads_them() {
        assert_eq!(human(Duration::from_millis(850)), "850 ms");
        assert_eq!(human(Duration::from_millis(12_500)), "12.5 s");
        assert_eq!(human(Duration::from_secs(30)), "30 s");
        assert_eq!(human(Duration::from_secs(240)), "4m");
        assert_eq!(human(Duration::from_secs(270)), "4m 30s");
        assert_eq!(human(Duration::from_secs(7_500)), "2h 5m");
        assert_eq!(human(Duration::from_secs(400 * 86_400)), "400d");
    }

    #[test]
    fn a_default_budget_says_so() {
        let defaults = BudgetLimits::try_from(crate::deadline::BudgetConfig::default())
            .expect("the default budget is valid");
        let line = budget_line(&defaults, Duration::from_secs(60));
        assert_eq!(
            line,
            "40 steps (default), 5m wall clock (default), 1m of it kept for compensation, 200000 tokens (default), no cost ceiling"
        );
    }
}
