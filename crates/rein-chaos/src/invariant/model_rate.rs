//! Invariant 7 for a model provider's own limits, measured where the calls
//! arrive (the proxy in front of the mock model) and as the model side
//! counts them: the provider's token bucket holds over every window of
//! arrivals, and nothing is sent while the provider's own 429 still holds.

use super::{Invariant, Violation, violation};
use crate::evidence::Evidence;

/// How far an arrival at the proxy may trail its admission: the refill of
/// this long is allowed on top of the window, so a call admitted just
/// inside the bound but parsed a little late is not counted against it.
pub(crate) const ARRIVAL_LAG_MS: u64 = 100;

/// Over every window of answered model requests, from the `i`-th arrival
/// to the `j`-th, the tokens the model side counted for them stay within
/// what the provider's bucket (`tokens_per_minute`, `token_burst`) lets
/// through: `burst + rate × (window + ARRIVAL_LAG_MS)`, plus one call's
/// usage (the last call of a window is admitted on its estimate; what it
/// used beyond it is a debt the next call waits out, not a breach).
///
/// A bucket charged only after the call lets concurrent calls go at once:
/// their usage lands in one window far above the bound.
pub(super) fn tokens_hold(evidence: &Evidence, out: &mut Vec<Violation>) {
    let Some((per_minute, burst)) = evidence.model_tokens else {
        return;
    };
    let mut arrivals: Vec<u64> = evidence
        .model_trace
        .iter()
        .filter(|r| r.forwarded && r.upstream_status == Some(200))
        .map(|r| r.at_ms)
        .collect();
    arrivals.sort_unstable();
    let mut used: Vec<(u64, u64)> = evidence
        .model_usage
        .iter()
        .map(|u| (u.number, u.prompt_tokens + u.completion_tokens))
        .collect();
    used.sort_unstable();
    let used: Vec<u64> = used.into_iter().map(|(_, t)| t).collect();
    let n = arrivals.len().min(used.len());
    let largest = used.iter().copied().max().unwrap_or(0);
    for (i, start) in arrivals.iter().enumerate().take(n) {
        let mut sum = 0u64;
        for (j, (at, tokens)) in arrivals.iter().zip(&used).enumerate().take(n).skip(i) {
            sum += tokens;
            let span = at - start;
            let refill = per_minute.saturating_mul(span + ARRIVAL_LAG_MS) / 60_000;
            let bound = burst + refill + largest;
            if sum > bound {
                violation(
                    out,
                    Invariant::ConcurrencyCeiling,
                    None,
                    format!(
                        "{} model calls arriving within {span} ms used {sum} tokens; the \
                         provider's bucket ({per_minute} tokens/min, burst {burst}) lets at most \
                         {bound} through",
                        j - i + 1
                    ),
                );
                return;
            }
        }
    }
}

/// No request reached the model while a 429 it had answered still held
/// (its `Retry-After`, kept by the mock for the whole account): after a
/// 429 that says when to come back, the provider is paused for every run.
pub(super) fn provider_wait_honoured(evidence: &Evidence, out: &mut Vec<Violation>) {
    if evidence.model_hammered > 0 {
        violation(
            out,
            Invariant::ConcurrencyCeiling,
            None,
            format!(
                "{} model requests were sent while the provider's 429 Retry-After still held",
                evidence.model_hammered
            ),
        );
    }
}
