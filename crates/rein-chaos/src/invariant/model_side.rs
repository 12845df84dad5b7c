//! Invariant 2 as the model servers count it.

use super::{Invariant, Violation, violation};
use crate::evidence::Evidence;

/// Invariant 2 from the model side: what the mock model servers counted
/// (their usage logs, at the world's prices) is within the run's token and
/// cost limits. Judged for a scenario of one run, the only one whose every
/// model call is that run's.
pub(super) fn budgets(evidence: &Evidence, out: &mut Vec<Violation>) {
    let [run] = evidence.runs.as_slice() else {
        return;
    };
    let logs = [
        ("mock", &evidence.model_usage),
        ("backup", &evidence.backup_usage),
    ];
    let mut tokens = 0u64;
    let mut micros = 0u128;
    for (server, log) in logs {
        for entry in log.iter() {
            tokens = tokens.saturating_add(entry.prompt_tokens + entry.completion_tokens);
            if let Some((input, output)) = evidence.prices.get(&format!("{server}/{}", entry.model))
            {
                // Rounded up per part, as rein prices a call.
                let part = |t: u64, per: u64| (u128::from(t) * u128::from(per)).div_ceil(1_000_000);
                micros +=
                    part(entry.prompt_tokens, *input) + part(entry.completion_tokens, *output);
            }
        }
    }
    if let Some(limit) = run.limits.tokens()
        && tokens > limit
    {
        violation(
            out,
            Invariant::BudgetsHold,
            Some(run),
            format!("the model servers counted {tokens} tokens, limit {limit}"),
        );
    }
    if let Some(limit) = run.limits.cost()
        && micros > u128::from(limit.micros())
    {
        violation(
            out,
            Invariant::BudgetsHold,
            Some(run),
            format!(
                "the model servers counted {micros} micro-dollars, limit {}",
                limit.micros()
            ),
        );
    }
}
