//! Adaptive concurrency, measured where the calls arrive (the proxy in
//! front of the order desk): under an injected overload (429s, latency
//! rising past its baseline) the calls a group has in flight fall below
//! what they were before it, and rise back once the target is healthy.
//!
//! # Why at the proxy
//!
//! The engine's `concurrency_adjusted` events say what the limit *was*;
//! only the desk's side says what the backend *got*. A limit that shrinks
//! on paper while every call still goes out at once protects nothing, so
//! the check counts overlapping requests in the proxy's trace.
//!
//! # How
//!
//! Only scenarios that set `adaptive_probe` are judged (a fixed delay on
//! every call is not an overload, and a scenario with a few slow calls
//! never fills its ceiling). The fault is the run of requests the proxy
//! injected into; before it is everything that arrived before its first
//! injected request, after it everything that arrived once its last one
//! was done. For each request, "in flight" is how many of the group's
//! requests the proxy held when it arrived, itself included.

use super::{Invariant, Violation, violation};
use crate::evidence::Evidence;
use crate::proxy::TraceRecord;

/// The injected requests a probe must see, in ceilings: fewer, and the
/// fault was too short to judge a limit that shrinks once per round.
pub(crate) const MIN_FAULT_ROUNDS: usize = 3;

/// How far the limit must fall: late in the fault at most one in
/// `SHRINK_MARGIN` of the calls in flight before it (at most 4 of 8).
///
/// # Why a margin
///
/// "Fewer than before" alone is a coin toss for a fixed limit on a loaded
/// machine: the peak before the fault comes from a turn's first burst,
/// when every slot goes out at once, while late in the fault the slots are
/// staggered and rein's own work between a slot's acquire and its request
/// hides some of them from the proxy. A fixed limit of 8 showed a late
/// peak of 7 there and went unreported. Requiring the peak to halve asks
/// for what a working limit does (C098's falls to 1 or 2) and reports a
/// fixed one unless rein's overhead exceeds a slot's time on the wire.
pub(crate) const SHRINK_MARGIN: usize = 2;

/// In every group with a ceiling, under a probe: the most calls in flight
/// among the fault's last `ceiling` arrivals is at most half the most
/// before the fault ([`SHRINK_MARGIN`]: the limit shrank), and the most
/// after the fault is above that (it grew back).
///
/// Peaks, not medians: what the proxy sees of a slot is only the part of
/// it spent on the wire, so on a loaded machine a fixed limit's typical
/// count at the proxy falls well below its ceiling, while its peak still
/// reaches it.
pub(super) fn limit_follows_load(evidence: &Evidence, out: &mut Vec<Violation>) {
    if !evidence.adaptive_probe {
        return;
    }
    for (group, &ceiling) in &evidence.ceilings {
        let mut requests: Vec<&TraceRecord> = evidence
            .tool_trace
            .iter()
            .take(evidence.reconcile_from)
            .filter(|r| r.method == "POST")
            .filter(|r| {
                r.tool
                    .as_deref()
                    .and_then(|t| evidence.groups.get(t))
                    .is_some_and(|g| g == group)
            })
            .collect();
        requests.sort_by_key(|r| (r.at_ms, r.seq));
        judge(group, ceiling as usize, &Profile::of(&requests), out);
    }
}

/// The rules of [`limit_follows_load`] for one group's profile.
fn judge(group: &str, ceiling: usize, profile: &Profile<'_>, out: &mut Vec<Violation>) {
    if profile.fault.len() < MIN_FAULT_ROUNDS * ceiling {
        violation(
            out,
            Invariant::ConcurrencyCeiling,
            None,
            format!(
                "the probe of {group} injected into {} requests; judging its adaptive \
                 limit takes at least {} ({MIN_FAULT_ROUNDS} rounds of its ceiling {ceiling})",
                profile.fault.len(),
                MIN_FAULT_ROUNDS * ceiling
            ),
        );
        return;
    }
    let late_start = profile.fault.len() - ceiling;
    let late = profile.peak(&profile.fault[late_start..]);
    tracing::debug!(
        group,
        before = profile.before,
        late,
        after = profile.after,
        injected = profile.fault.len(),
        "in flight at the proxy around the overload"
    );
    // Before the fault the group ran at its ceiling; the proxy can see
    // one more for a moment (a freed slot's next request may arrive
    // before the last answer's end is stamped), so the reference is
    // capped at the ceiling.
    let reference = profile.before.min(ceiling).max(1);
    if late * SHRINK_MARGIN > reference {
        violation(
            out,
            Invariant::ConcurrencyCeiling,
            None,
            format!(
                "late in the overload {late} requests of {group} were in flight at the desk, \
                 more than 1/{SHRINK_MARGIN} of the {reference} before it: its concurrency \
                 limit did not shrink"
            ),
        );
    }
    if profile.after <= late {
        violation(
            out,
            Invariant::ConcurrencyCeiling,
            None,
            format!(
                "after the overload at most {} requests of {group} were in flight at the \
                 desk, no more than the {late} late in it: its concurrency limit did not \
                 grow back",
                profile.after
            ),
        );
    }
}

/// A group's requests around its fault.
struct Profile<'t> {
    /// Every request, by arrival.
    all: &'t [&'t TraceRecord],
    /// The injected requests, by arrival.
    fault: Vec<&'t TraceRecord>,
    /// The most in flight before the first injected request.
    before: usize,
    /// The most in flight among requests that arrived after the last
    /// injected one was done.
    after: usize,
}

impl<'t> Profile<'t> {
    fn of(all: &'t [&'t TraceRecord]) -> Profile<'t> {
        let fault: Vec<&TraceRecord> = all
            .iter()
            .copied()
            .filter(|r| r.injected.is_some())
            .collect();
        let (Some(first), Some(done)) = (
            fault.first().map(|r| r.at_ms),
            fault.iter().map(|r| r.finished_ms).max(),
        ) else {
            return Profile {
                all,
                fault,
                before: 0,
                after: 0,
            };
        };
        let mut profile = Profile {
            all,
            fault: Vec::new(),
            before: 0,
            after: 0,
        };
        let before: Vec<&TraceRecord> = all.iter().copied().filter(|r| r.at_ms < first).collect();
        let after: Vec<&TraceRecord> = all.iter().copied().filter(|r| r.at_ms >= done).collect();
        profile.before = profile.peak(&before);
        profile.after = profile.peak(&after);
        profile.fault = fault;
        profile
    }

    /// The requests in flight when `arrival` arrived, itself included.
    fn in_flight_at(&self, arrival: &TraceRecord) -> usize {
        self.all
            .iter()
            .filter(|r| r.at_ms <= arrival.at_ms && r.finished_ms > arrival.at_ms)
            .count()
    }

    /// The most requests in flight when one of `arrivals` arrived.
    fn peak(&self, arrivals: &[&TraceRecord]) -> usize {
        arrivals
            .iter()
            .map(|a| self.in_flight_at(a))
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::{ClientSaw, Injection};

    fn request(seq: u64, at_ms: u64, ms: u64, injected: bool) -> TraceRecord {
        TraceRecord {
            seq,
            at_ms,
            method: "POST".into(),
            path: "/tools/get_order".into(),
            tool: Some("get_order".into()),
            idempotency_key: None,
            run_id: None,
            intent_id: None,
            attempt: Some(1),
            request_body: String::new(),
            injected: injected.then_some(Injection::Delay { ms }),
            forwarded: true,
            upstream_status: Some(200),
            upstream_error: None,
            client_saw: ClientSaw::Response { status: 200 },
            finished_ms: at_ms + ms,
        }
    }

    /// Rounds of `width` requests of `ms` each, from `start`.
    fn rounds(
        seq: &mut u64,
        start: u64,
        widths: &[usize],
        ms: u64,
        injected: bool,
    ) -> Vec<TraceRecord> {
        let mut out = Vec::new();
        let mut at = start;
        for &width in widths {
            for _ in 0..width {
                out.push(request(*seq, at, ms, injected));
                *seq += 1;
            }
            at += ms + 1;
        }
        out
    }

    fn profile_of(trace: &[TraceRecord]) -> (usize, usize, usize) {
        let refs: Vec<&TraceRecord> = trace.iter().collect();
        let p = Profile::of(&refs);
        let late = p.peak(&p.fault[p.fault.len() - 4..]);
        (p.before, late, p.after)
    }

    #[test]
    fn a_limit_that_shrinks_and_grows_back_shows_at_the_proxy() {
        let mut seq = 0;
        let mut trace = rounds(&mut seq, 0, &[4, 4], 20, false);
        trace.extend(rounds(&mut seq, 100, &[4, 3, 2, 2, 1], 150, true));
        trace.extend(rounds(&mut seq, 2000, &[1, 2, 3, 4], 20, false));
        assert_eq!(profile_of(&trace), (4, 2, 4));
    }

    #[test]
    fn a_fixed_limit_stays_at_its_ceiling_through_the_fault() {
        let mut seq = 0;
        let mut trace = rounds(&mut seq, 0, &[4, 4], 20, false);
        trace.extend(rounds(&mut seq, 100, &[4, 4, 4], 150, true));
        trace.extend(rounds(&mut seq, 2000, &[4, 4], 20, false));
        assert_eq!(profile_of(&trace), (4, 4, 4));
    }

    /// The violations `judge` reports for `trace` under a ceiling of 4.
    fn verdict(trace: &[TraceRecord]) -> Vec<String> {
        let refs: Vec<&TraceRecord> = trace.iter().collect();
        let mut out = Vec::new();
        judge("order_api", 4, &Profile::of(&refs), &mut out);
        out.into_iter().map(|v| v.detail).collect()
    }

    #[test]
    fn judge_when_the_limit_halves_and_grows_back_reports_nothing() {
        let mut seq = 0;
        let mut trace = rounds(&mut seq, 0, &[4, 4], 20, false);
        trace.extend(rounds(&mut seq, 100, &[4, 3, 2, 2, 1, 1, 1, 1], 150, true));
        trace.extend(rounds(&mut seq, 2000, &[1, 2, 3, 4], 20, false));
        assert_eq!(verdict(&trace), Vec::<String>::new());
    }

    #[test]
    fn judge_when_the_limit_stays_fixed_reports_it_did_not_shrink_or_grow_back() {
        let mut seq = 0;
        let mut trace = rounds(&mut seq, 0, &[4, 4], 20, false);
        trace.extend(rounds(&mut seq, 100, &[4, 4, 4], 150, true));
        trace.extend(rounds(&mut seq, 2000, &[4, 4], 20, false));
        let found = verdict(&trace);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("did not shrink"), "{found:?}");
        assert!(found[1].contains("did not grow back"), "{found:?}");
    }

    /// The margin: a fixed limit whose late peak the proxy sees one below
    /// the peak before the fault (its slots staggered late in it, the
    /// first burst all at once) is still a limit that did not shrink.
    #[test]
    fn judge_when_the_late_peak_falls_by_less_than_half_reports_it_did_not_shrink() {
        let mut seq = 0;
        let mut trace = rounds(&mut seq, 0, &[4, 4], 20, false);
        trace.extend(rounds(&mut seq, 100, &[4, 4, 3, 3, 3, 3], 150, true));
        trace.extend(rounds(&mut seq, 2000, &[4, 4], 20, false));
        assert_eq!(profile_of(&trace), (4, 3, 4));
        let found = verdict(&trace);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("more than 1/2 of the 4"), "{found:?}");
    }

    #[test]
    fn judge_when_the_fault_is_shorter_than_three_rounds_reports_it() {
        let mut seq = 0;
        let mut trace = rounds(&mut seq, 0, &[4, 4], 20, false);
        trace.extend(rounds(&mut seq, 100, &[4, 2], 150, true));
        trace.extend(rounds(&mut seq, 2000, &[4, 4], 20, false));
        let found = verdict(&trace);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("takes at least 12"), "{found:?}");
    }
}
