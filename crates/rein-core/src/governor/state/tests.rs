use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::governor::{Adjustment, DecisionKind, QuotaTier, Settled, ShrinkReason};

fn tenant(name: &str) -> TenantId {
    TenantId::new(name).unwrap()
}

fn run(name: &str) -> RunId {
    RunId::new(name).unwrap()
}

fn at(ms: u64) -> Instant {
    Instant::from_origin(Duration::from_millis(ms))
}

fn governor(edit: impl FnOnce(&mut GovernorConfig)) -> Governor {
    let mut config = GovernorConfig::default();
    edit(&mut config);
    Governor::new(config).unwrap()
}

#[track_caller]
fn granted(admit: Admit) -> Permit {
    match admit {
        Admit::Granted(permit) => permit,
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[track_caller]
fn queued(admit: Admit) -> (Ticket, Cause) {
    match admit {
        Admit::Queued { ticket, cause, .. } => (ticket, cause),
        other => panic!("expected to queue, got {other:?}"),
    }
}

#[track_caller]
fn polled(poll: Poll) -> Grant {
    match poll {
        Poll::Granted(grant) => grant,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Admits one interactive call of `run` for `tenant`.
fn ask(g: &mut Governor, t: &TenantId, r: &RunId, now: Instant) -> Admit {
    g.admit(Request::new(t, r), now)
}

fn done(g: &mut Governor, permit: Permit, now: Instant) -> Released {
    g.release(permit, Completion::SUCCEEDED, None, now)
}

#[test]
fn admit_on_a_fresh_group_grants_and_release_frees_the_slot() {
    let mut g = governor(|_| {});
    let (a, r1) = (tenant("a"), run("r1"));
    let permit = granted(ask(&mut g, &a, &r1, at(0)));
    assert_eq!(permit.class(), Class::Interactive);
    assert_eq!(permit.acquired_at(), at(0));
    assert_eq!((g.concurrency().in_flight(), g.tenant_held(&a)), (1, 1));
    let released = done(&mut g, permit, at(5));
    assert_eq!(released.adjustment, Adjustment::Unchanged);
    assert_eq!(released.settled, None);
    assert_eq!((g.concurrency().in_flight(), g.tenant_held(&a)), (0, 0));
    assert_eq!(g.poll(at(5)), Poll::Idle);
}

#[test]
fn admit_at_the_limit_queues_until_a_release() {
    let mut g = governor(|c| c.concurrency.initial = Some(2));
    let (a, r1) = (tenant("a"), run("r1"));
    let p1 = granted(ask(&mut g, &a, &r1, at(0)));
    let _p2 = granted(ask(&mut g, &a, &r1, at(0)));
    let (ticket, cause) = queued(ask(&mut g, &a, &r1, at(0)));
    assert_eq!(
        cause,
        Cause::Concurrency {
            limit: 2,
            in_flight: 2
        }
    );
    assert_eq!(g.poll(at(1)), Poll::Blocked(Blocked::Release));
    let _ = done(&mut g, p1, at(10));
    let grant = polled(g.poll(at(10)));
    assert_eq!(grant.ticket, ticket);
    assert_eq!(grant.waited, Duration::from_millis(10));
    assert_eq!(g.concurrency().in_flight(), 2);
}

#[test]
fn admit_behind_waiters_queues_without_jumping_ahead() {
    let mut g = governor(|c| c.concurrency.initial = Some(1));
    let (a, b) = (tenant("a"), tenant("b"));
    let p = granted(ask(&mut g, &a, &run("r1"), at(0)));
    let (first, _) = queued(ask(&mut g, &a, &run("r1"), at(0)));
    let _ = done(&mut g, p, at(1));
    // A slot is free, but a waiter came first.
    let (_, cause) = queued(ask(&mut g, &b, &run("r2"), at(1)));
    assert_eq!(cause, Cause::Backlog { queued: 1 });
    assert_eq!(polled(g.poll(at(1))).ticket, first);
}

#[test]
fn admit_over_the_rate_waits_for_the_bucket_to_refill() {
    let mut g = governor(|c| {
        c.rate_per_sec = Some(10.0);
        c.burst = Some(2);
    });
    let (a, r1) = (tenant("a"), run("r1"));
    let _p1 = granted(ask(&mut g, &a, &r1, at(0)));
    let _p2 = granted(ask(&mut g, &a, &r1, at(0)));
    let Admit::Queued {
        ticket,
        cause,
        not_before,
    } = ask(&mut g, &a, &r1, at(0))
    else {
        panic!("a burst of 2 grants two");
    };
    let refill = Cause::RateLimited {
        bucket: BucketKind::Requests,
        until: at(100),
    };
    assert_eq!((cause, not_before), (refill, at(100)));
    assert_eq!(
        g.poll(at(50)),
        Poll::Blocked(Blocked::Until {
            bucket: BucketKind::Requests,
            at: at(100)
        })
    );
    assert_eq!(polled(g.poll(at(100))).ticket, ticket);
    // The queued call did not take a slot while it waited.
    assert_eq!(g.concurrency().in_flight(), 3);
}

#[test]
fn not_before_reflects_the_buckets_even_behind_a_backlog() {
    let mut g = governor(|c| {
        c.rate_per_sec = Some(1.0);
        c.concurrency.initial = Some(1);
    });
    let (a, r1) = (tenant("a"), run("r1"));
    let _p = granted(ask(&mut g, &a, &r1, at(0)));
    let Admit::Queued { not_before, .. } = ask(&mut g, &a, &r1, at(200)) else {
        panic!("at the limit");
    };
    assert_eq!(not_before, at(1000));
}

#[test]
fn not_before_counts_its_own_lane_of_the_queue() {
    let mut g = governor(|c| {
        c.rate_per_sec = Some(10.0);
        c.burst = Some(5);
    });
    let (a, r1) = (tenant("a"), run("r1"));
    for _ in 0..5 {
        let _ = granted(ask(&mut g, &a, &r1, at(0)));
    }
    // The 6th call waits 100 ms, the 40th behind 34 of its own 3.5 s.
    let mut last = at(0);
    for n in 6..=40 {
        let Admit::Queued { not_before, .. } = ask(&mut g, &a, &r1, at(0)) else {
            panic!("the burst is spent");
        };
        assert_eq!(not_before, at((n - 5) * 100), "call {n}");
        last = not_before;
    }
    assert_eq!(last, at(3_500));
}

#[test]
fn not_before_does_not_count_another_tenants_backlog() {
    let mut g = governor(|c| {
        c.rate_per_sec = Some(1.0);
    });
    let (a, b, r1) = (tenant("a"), tenant("b"), run("r1"));
    let _ = granted(ask(&mut g, &a, &r1, at(0)));
    for _ in 0..10 {
        let _ = queued(ask(&mut g, &a, &r1, at(0)));
    }
    // The first of a's is next, waiting for the refill.
    assert!(matches!(
        g.poll(at(0)),
        Poll::Blocked(Blocked::Until { .. })
    ));
    // Fair order may serve b's first call second: its prediction counts
    // the call whose turn it is, not a's backlog.
    let Admit::Queued { not_before, .. } = ask(&mut g, &b, &r1, at(0)) else {
        panic!("the bucket is empty");
    };
    assert_eq!(not_before, at(2_000));
}

#[test]
fn token_estimate_above_token_burst_is_rejected_and_holds_nothing() {
    let mut g = governor(|c| {
        c.tokens_per_minute = Some(60_000);
        c.token_burst = Some(8_000);
    });
    let (a, r1) = (tenant("a"), run("r1"));
    let rejected = g.admit(Request::new(&a, &r1).tokens(8_001), at(0));
    assert_eq!(
        rejected,
        Admit::Rejected(Rejection::TokensExceedBurst {
            requested: 8_001,
            burst: 8_000
        })
    );
    assert!(!rejected.is_granted());
    assert_eq!((g.queued(), g.tenant_held(&a)), (0, 0));
    assert!(
        Rejection::TokensExceedBurst {
            requested: 8_001,
            burst: 8_000
        }
        .to_string()
        .contains("more than the group's token_burst of 8000")
    );
}

#[test]
fn token_group_charges_the_estimate_and_settles_the_actual_usage() {
    // 60 000 tokens per minute: 1 000 per second.
    let mut g = governor(|c| c.tokens_per_minute = Some(60_000));
    let (a, r1) = (tenant("a"), run("r1"));
    let big = granted(g.admit(Request::new(&a, &r1).tokens(50_000), at(0)));
    assert_eq!(big.tokens(), 50_000);
    let (_, cause) = queued(g.admit(Request::new(&a, &r1).tokens(20_000), at(0)));
    assert_eq!(
        cause,
        Cause::RateLimited {
            bucket: BucketKind::Tokens,
            until: at(10_000)
        }
    );
    // The first call used 30 000 fewer than estimated: the refund lets the
    // waiter go at once.
    let released = g.release(big, Completion::generated(500), Some(20_000), at(1));
    assert_eq!(released.settled, Some(Settled::Refunded(30_000)));
    let grant = polled(g.poll(at(1)));
    // It used more than estimated: the debt makes the next call wait.
    let released = g.release(
        grant.permit,
        Completion::generated(500),
        Some(45_000),
        at(2),
    );
    assert_eq!(released.settled, Some(Settled::Owed(25_000)));
    assert_eq!(g.tokens_bucket().unwrap().available(at(2)), 0);
}

#[test]
fn unknown_usage_keeps_the_estimate_charged() {
    let mut g = governor(|c| c.tokens_per_minute = Some(60_000));
    let (a, r1) = (tenant("a"), run("r1"));
    let p = granted(g.admit(Request::new(&a, &r1).tokens(10_000), at(0)));
    let released = g.release(p, Completion::Ignored, None, at(0));
    assert_eq!(released.settled, None);
    assert_eq!(g.tokens_bucket().unwrap().available(at(0)), 50_000);
}

#[test]
fn a_provider_pause_holds_every_call_until_it_ends_then_the_queue_moves() {
    let mut g = governor(|c| c.tokens_per_minute = Some(60_000));
    let (a, r1) = (tenant("a"), run("r1"));
    assert!(g.pause_until(at(2_000), at(0)));
    assert!(!g.pause_until(at(1_000), at(0)), "a pause only extends");
    let Admit::Queued {
        ticket,
        cause,
        not_before,
    } = g.admit(Request::new(&a, &r1).tokens(10), at(0))
    else {
        panic!("a paused group grants nothing");
    };
    assert_eq!(
        cause,
        Cause::RateLimited {
            bucket: BucketKind::Provider,
            until: at(2_000)
        }
    );
    assert_eq!(not_before, at(2_000));
    assert_eq!(
        g.poll(at(1_999)),
        Poll::Blocked(Blocked::Until {
            bucket: BucketKind::Provider,
            at: at(2_000)
        })
    );
    let grant = polled(g.poll(at(2_000)));
    assert_eq!(grant.ticket, ticket);
    assert_eq!(g.paused(at(2_000)), None);
    assert!(
        !g.pause_until(at(1_000), at(3_000)),
        "a pause in the past is none"
    );
}

#[test]
fn a_providers_ceiling_is_divided_among_nodes() {
    let two = std::num::NonZeroU32::new(2);
    let mut g = Governor::new(GovernorConfig::provider(two, None)).unwrap();
    assert_eq!(g.concurrency().limit(), 2);
    let share = g.share_among(
        Members::new(std::num::NonZeroU32::new(2).unwrap(), 1).unwrap(),
        at(0),
    );
    assert_eq!(share.max_concurrency, 1);
    assert_eq!(g.concurrency().limit(), 1, "the part, not the whole");
    let (a, r1) = (tenant("a"), run("r1"));
    let _held = granted(ask(&mut g, &a, &r1, at(0)));
    let _ = queued(ask(&mut g, &a, &r1, at(0)));
}

#[test]
fn the_token_bucket_is_divided_among_nodes() {
    let mut g = governor(|c| c.tokens_per_minute = Some(60_000));
    let share = g.share_among(
        Members::new(std::num::NonZeroU32::new(2).unwrap(), 0).unwrap(),
        at(0),
    );
    assert_eq!(share.members.count().get(), 2);
    assert_eq!(g.tokens_bucket().unwrap().burst(), 30_000);
    assert_eq!(g.tokens_bucket().unwrap().available(at(0)), 30_000);
    let _ = g.share_among(Members::ALONE, at(0));
    assert_eq!(g.tokens_bucket().unwrap().burst(), 60_000);
}

#[test]
fn tokens_and_requests_are_taken_both_or_neither() {
    let mut g = governor(|c| {
        c.rate_per_sec = Some(1.0);
        c.burst = Some(5);
        c.tokens_per_minute = Some(600);
    });
    let (a, r1) = (tenant("a"), run("r1"));
    let _p = granted(g.admit(Request::new(&a, &r1).tokens(600), at(0)));
    let (_, cause) = queued(g.admit(Request::new(&a, &r1).tokens(10), at(0)));
    assert!(matches!(
        cause,
        Cause::RateLimited {
            bucket: BucketKind::Tokens,
            ..
        }
    ));
    // The call the token bucket refused took no request token.
    assert_eq!(g.requests_bucket().unwrap().available(at(0)), 4);
}

#[test]
fn tenant_at_tenant_max_queues_while_another_tenant_goes() {
    let mut g = governor(|c| c.quotas.tenant_max = Some(2));
    let (a, b) = (tenant("a"), tenant("b"));
    let _p1 = granted(ask(&mut g, &a, &run("r1"), at(0)));
    let p2 = granted(ask(&mut g, &a, &run("r2"), at(0)));
    let (ticket, cause) = queued(ask(&mut g, &a, &run("r3"), at(0)));
    assert_eq!(cause, Cause::Quota(QuotaTier::Tenant { held: 2, max: 2 }));
    // b is behind a's waiter, but a's waiter cannot go: b can.
    let (b_ticket, _) = queued(ask(&mut g, &b, &run("r4"), at(0)));
    assert_eq!(polled(g.poll(at(0))).ticket, b_ticket);
    assert_eq!(g.poll(at(0)), Poll::Blocked(Blocked::Release));
    let _ = done(&mut g, p2, at(1));
    assert_eq!(polled(g.poll(at(1))).ticket, ticket);
}

#[test]
fn run_at_run_max_queues_while_another_run_of_the_tenant_goes() {
    let mut g = governor(|c| c.quotas.run_max = Some(1));
    let a = tenant("a");
    let p = granted(ask(&mut g, &a, &run("fan-out"), at(0)));
    let (blocked, cause) = queued(ask(&mut g, &a, &run("fan-out"), at(0)));
    assert_eq!(cause, Cause::Quota(QuotaTier::Run { held: 1, max: 1 }));
    let (other, _) = queued(ask(&mut g, &a, &run("other"), at(0)));
    assert_eq!(polled(g.poll(at(0))).ticket, other);
    let _ = done(&mut g, p, at(1));
    assert_eq!(polled(g.poll(at(1))).ticket, blocked);
}

#[test]
fn borrowed_capacity_returns_to_an_owed_tenant_as_borrowers_release() {
    let mut g = governor(|c| {
        c.concurrency.min = 8;
        c.concurrency.max = 8;
    });
    let (a, b) = (tenant("a"), tenant("b"));
    // a borrows the whole group while b is idle.
    let mut a_held: Vec<Permit> = (0..8)
        .map(|i| granted(ask(&mut g, &a, &run(&format!("a{i}")), at(0))))
        .collect();
    let a_waiting: BTreeSet<Ticket> = (0..20)
        .map(|i| queued(ask(&mut g, &a, &run(&format!("a-more{i}")), at(0))).0)
        .collect();
    for i in 0..20 {
        let _ = queued(ask(&mut g, &b, &run(&format!("b{i}")), at(1)));
    }
    assert_eq!((g.tenant_share(&a), g.tenant_share(&b)), (4, 4));
    // b is owed 4 of 8: the next four slots a releases all go to b, though
    // a's waiters came first.
    let mut b_held = Vec::new();
    for step in 0..4 {
        let p = a_held.pop().unwrap();
        let _ = done(&mut g, p, at(10 + step));
        let grant = polled(g.poll(at(10 + step)));
        assert!(
            !a_waiting.contains(&grant.ticket),
            "step {step}: a got it back"
        );
        b_held.push(grant.permit);
    }
    assert_eq!((g.tenant_held(&a), g.tenant_held(&b)), (4, 4));
    // At their shares each keeps its own: what a releases returns to a,
    // what b releases returns to b.
    let p = a_held.pop().unwrap();
    let _ = done(&mut g, p, at(20));
    assert!(a_waiting.contains(&polled(g.poll(at(20))).ticket));
    let p = b_held.pop().unwrap();
    let _ = done(&mut g, p, at(21));
    assert!(!a_waiting.contains(&polled(g.poll(at(21))).ticket));
    assert_eq!((g.tenant_held(&a), g.tenant_held(&b)), (4, 4));
}

#[test]
fn owed_tenants_at_their_own_caps_do_not_leave_slots_idle() {
    let mut g = governor(|c| {
        c.concurrency.initial = Some(4);
        c.quotas.run_max = Some(1);
    });
    let (a, b) = (tenant("a"), tenant("b"));
    let _b1 = granted(ask(&mut g, &b, &run("b-run"), at(0)));
    let mut a_permits: Vec<_> = (0..3)
        .map(|i| granted(ask(&mut g, &a, &run(&format!("a{i}")), at(0))))
        .collect();
    // b (owed: 1 of its 2) waits on its one run, which is at run_max; a
    // borrows the slot a release frees rather than leaving it idle.
    let _ = queued(ask(&mut g, &b, &run("b-run"), at(0)));
    let (a_ticket, _) = queued(ask(&mut g, &a, &run("a-new"), at(0)));
    let p = a_permits.pop().unwrap();
    let _ = done(&mut g, p, at(1));
    assert_eq!(polled(g.poll(at(1))).ticket, a_ticket);
}

#[test]
fn a_quiet_tenant_is_not_delayed_by_a_noisy_backlog() {
    let mut g = governor(|c| c.concurrency.initial = Some(1));
    let (noisy, quiet) = (tenant("noisy"), tenant("quiet"));
    let mut permit = granted(ask(&mut g, &noisy, &run("n"), at(0)));
    for _ in 0..300 {
        let _ = queued(ask(&mut g, &noisy, &run("n"), at(0)));
    }
    let (quiet_ticket, _) = queued(ask(&mut g, &quiet, &run("q"), at(1)));
    // The quiet tenant's call goes at the first or second slot freed, not
    // after 300.
    let mut grants = 0;
    loop {
        let _ = done(&mut g, permit, at(2 + grants));
        let grant = polled(g.poll(at(2 + grants)));
        grants += 1;
        if grant.ticket == quiet_ticket {
            break;
        }
        permit = grant.permit;
    }
    assert!(grants <= 2, "quiet call went after {grants} grants");
}

#[test]
fn interactive_waiter_goes_before_queued_batch_work() {
    let mut g = governor(|c| c.concurrency.initial = Some(1));
    let a = tenant("a");
    let p = granted(ask(&mut g, &a, &run("r"), at(0)));
    for _ in 0..5 {
        let _ = queued(g.admit(Request::new(&a, &run("batch")).class(Class::Batch), at(0)));
    }
    let (interactive, _) = queued(ask(&mut g, &a, &run("sync"), at(1)));
    let _ = done(&mut g, p, at(2));
    let grant = polled(g.poll(at(2)));
    assert_eq!(grant.ticket, interactive);
    assert_eq!(grant.permit.class(), Class::Interactive);
}

#[test]
fn cancel_removes_a_waiter_and_its_claim_on_a_share() {
    let mut g = governor(|c| c.concurrency.initial = Some(2));
    let (a, b) = (tenant("a"), tenant("b"));
    let p1 = granted(ask(&mut g, &a, &run("a1"), at(0)));
    let _p2 = granted(ask(&mut g, &a, &run("a2"), at(0)));
    let (a_waiter, _) = queued(ask(&mut g, &a, &run("a3"), at(0)));
    let (b_waiter, _) = queued(ask(&mut g, &b, &run("b1"), at(0)));
    assert!(g.cancel(b_waiter));
    assert!(!g.cancel(b_waiter), "a ticket is cancelled once");
    assert_eq!(g.queued(), 1);
    let _ = done(&mut g, p1, at(1));
    let grant = polled(g.poll(at(1)));
    assert_eq!(grant.ticket, a_waiter);
    assert!(!g.cancel(a_waiter), "a granted ticket is no longer queued");
    assert_eq!(g.tenant_share(&b), 1);
}

#[test]
fn the_waiter_holding_its_turn_is_not_overtaken_and_can_be_cancelled() {
    let mut g = governor(|c| c.tokens_per_minute = Some(60_000));
    let (a, b) = (tenant("a"), tenant("b"));
    let _p = granted(g.admit(Request::new(&a, &run("a")).tokens(55_000), at(0)));
    let (big, _) = queued(g.admit(Request::new(&a, &run("a")).tokens(20_000), at(0)));
    assert_eq!(
        g.poll(at(0)),
        Poll::Blocked(Blocked::Until {
            bucket: BucketKind::Tokens,
            at: at(15_000)
        })
    );
    // A small call that would fit now waits behind the big one's turn.
    let (small, cause) = queued(g.admit(Request::new(&b, &run("b")).tokens(10), at(1)));
    assert_eq!(cause, Cause::Backlog { queued: 1 });
    assert!(matches!(
        g.poll(at(1)),
        Poll::Blocked(Blocked::Until { .. })
    ));
    assert_eq!(polled(g.poll(at(15_000))).ticket, big);
    // 10 tokens at 1 000 per second: 10 ms later.
    assert!(
        matches!(g.poll(at(15_000)), Poll::Blocked(Blocked::Until { at, .. }) if at == self::at(15_010))
    );
    assert_eq!(polled(g.poll(at(15_010))).ticket, small);
    // Cancelling the waiter whose turn it is hands the turn on.
    let (waiting, _) = queued(g.admit(Request::new(&a, &run("a")).tokens(30_000), at(15_010)));
    assert!(matches!(
        g.poll(at(15_010)),
        Poll::Blocked(Blocked::Until { .. })
    ));
    assert!(g.cancel(waiting));
    assert_eq!(g.poll(at(15_010)), Poll::Idle);
}

#[test]
fn overload_shrinks_the_limit_and_release_reports_it() {
    let mut g = governor(|_| {});
    let (a, r) = (tenant("a"), run("r"));
    let p = granted(ask(&mut g, &a, &r, at(0)));
    let released = g.release(
        p,
        Completion::from_failure(crate::Category::RateLimited),
        None,
        at(3),
    );
    assert_eq!(
        released.adjustment,
        Adjustment::Shrunk {
            old: 8,
            new: 7,
            reason: ShrinkReason::Overloaded
        }
    );
    assert_eq!(g.concurrency().limit(), 7);
}

#[test]
fn a_limit_shrunk_below_in_flight_grants_nothing_until_enough_release() {
    let mut g = governor(|c| {
        c.concurrency.initial = Some(4);
        c.concurrency.backoff = 0.5;
    });
    let (a, r) = (tenant("a"), run("r"));
    let mut held: Vec<_> = (0..4)
        .map(|_| granted(ask(&mut g, &a, &r, at(0))))
        .collect();
    let (ticket, _) = queued(ask(&mut g, &a, &r, at(0)));
    let p = held.pop().unwrap();
    let _ = g.release(p, Completion::Overloaded, None, at(1));
    assert_eq!(g.concurrency().limit(), 2);
    // Three in flight under a limit of 2: the waiter waits for two releases.
    assert_eq!(g.poll(at(1)), Poll::Blocked(Blocked::Release));
    let p = held.pop().unwrap();
    let _ = g.release(p, Completion::Ignored, None, at(2));
    assert_eq!(g.poll(at(2)), Poll::Blocked(Blocked::Release));
    let p = held.pop().unwrap();
    let _ = g.release(p, Completion::Ignored, None, at(3));
    assert_eq!(polled(g.poll(at(3))).ticket, ticket);
    assert_eq!(g.concurrency().in_flight(), 2);
}

#[test]
fn governor_try_from_config_validates() {
    let config = GovernorConfig {
        burst: Some(3),
        ..GovernorConfig::default()
    };
    let err = Governor::try_from(config).unwrap_err();
    assert_eq!(err.field(), "governor.burst");
}

#[test]
fn decisions_serialize_for_events() {
    let cause = serde_json::to_value(Cause::Quota(QuotaTier::Run { held: 2, max: 2 })).unwrap();
    assert_eq!(cause["cause"], "quota");
    assert_eq!(cause["tier"], "run");
    let cause = serde_json::to_value(Cause::RateLimited {
        bucket: BucketKind::Tokens,
        until: at(5),
    })
    .unwrap();
    assert_eq!(cause["bucket"], "tokens");
    let blocked = serde_json::to_value(Blocked::Release).unwrap();
    assert_eq!(blocked["blocked"], "release");
    assert_eq!(Ticket(7).to_string(), "#7");
}

/// Every kind of decision the governor makes, reached through its public
/// transitions: fails when a variant is added without a scenario.
#[test]
fn transition_coverage() {
    let mut seen = BTreeSet::new();
    let mut g = governor(|c| {
        c.rate_per_sec = Some(1.0);
        c.burst = Some(2);
        c.tokens_per_minute = Some(600);
        c.concurrency.initial = Some(2);
        c.quotas.run_max = Some(1);
    });
    let (a, b) = (tenant("a"), tenant("b"));
    let mut record_admit = |g: &mut Governor, request: Request<'_>, now| {
        let admit = g.admit(request, now);
        seen.insert(DecisionKind::of_admit(&admit));
        admit
    };
    let rejected = record_admit(&mut g, Request::new(&a, &run("x")).tokens(601), at(0));
    assert!(matches!(rejected, Admit::Rejected(_)));
    let p1 = granted(record_admit(&mut g, Request::new(&a, &run("r1")), at(0)));
    let (t1, _) = queued(record_admit(&mut g, Request::new(&a, &run("r1")), at(0)));
    let _ = queued(record_admit(&mut g, Request::new(&b, &run("r2")), at(0)));
    assert!(g.cancel(t1));
    let mut g2 = governor(|c| {
        c.rate_per_sec = Some(1.0);
        c.burst = Some(1);
        c.concurrency.initial = Some(1);
    });
    let _p = granted(g2.admit(Request::new(&a, &run("r")), at(0)));
    let admit = g2.admit(Request::new(&a, &run("r")), at(0));
    seen.insert(DecisionKind::of_admit(&admit));
    let mut g3 = governor(|c| c.rate_per_sec = Some(1.0));
    let _p = granted(g3.admit(Request::new(&a, &run("r")), at(0)));
    let admit = g3.admit(Request::new(&a, &run("r")), at(0));
    seen.insert(DecisionKind::of_admit(&admit));

    let mut record_poll = |g: &mut Governor, now| {
        let poll = g.poll(now);
        seen.insert(DecisionKind::of_poll(&poll));
        poll
    };
    // b's call waits on the request bucket (burst 2, one left after p1).
    let grant = polled(record_poll(&mut g, at(0)));
    let (_t, _) = queued(g.admit(Request::new(&b, &run("r3")), at(0)));
    assert!(matches!(
        record_poll(&mut g, at(0)),
        Poll::Blocked(Blocked::Release)
    ));
    let _ = done(&mut g, p1, at(1));
    assert!(matches!(
        record_poll(&mut g, at(1)),
        Poll::Blocked(Blocked::Until { .. })
    ));
    let grant2 = polled(record_poll(&mut g, at(1000)));
    let _ = done(&mut g, grant.permit, at(1000));
    let _ = done(&mut g, grant2.permit, at(1000));
    assert_eq!(record_poll(&mut g, at(1000)), Poll::Idle);
    assert_eq!(seen, DecisionKind::ALL.into_iter().collect());
}

/// Every field of [`GovernorConfig`] changes an observable decision: a
/// field added without an effect (and a case here) fails this test.
#[test]
fn every_config_field_has_an_effect() {
    type Edit = fn(&mut GovernorConfig);
    type Observe = fn(&mut Governor) -> String;

    fn second_call(g: &mut Governor) -> String {
        let (a, r) = (tenant("a"), run("r"));
        let _ = g.admit(Request::new(&a, &r), at(0));
        format!(
            "{:?}",
            DecisionKind::of_admit(&g.admit(Request::new(&a, &r), at(0)))
        )
    }
    fn third_call(g: &mut Governor) -> String {
        let (a, r) = (tenant("a"), run("r"));
        let _ = g.admit(Request::new(&a, &r), at(0));
        let _ = g.admit(Request::new(&a, &r), at(0));
        format!(
            "{:?}",
            DecisionKind::of_admit(&g.admit(Request::new(&a, &r), at(0)))
        )
    }
    fn second_call_other_run(g: &mut Governor) -> String {
        let a = tenant("a");
        let _ = g.admit(Request::new(&a, &run("r1")), at(0));
        format!(
            "{:?}",
            DecisionKind::of_admit(&g.admit(Request::new(&a, &run("r2")), at(0)))
        )
    }
    fn token_calls(g: &mut Governor) -> String {
        let (a, r) = (tenant("a"), run("r"));
        let first = g.admit(Request::new(&a, &r).tokens(500), at(0));
        let second = g.admit(Request::new(&a, &r).tokens(500), at(0));
        format!(
            "{:?} {:?}",
            DecisionKind::of_admit(&first),
            DecisionKind::of_admit(&second)
        )
    }
    fn limit_after_two_overloads(g: &mut Governor) -> String {
        let (a, r) = (tenant("a"), run("r"));
        for i in 0..2 {
            let p = granted(g.admit(Request::new(&a, &r), at(i)));
            let _ = g.release(p, Completion::Overloaded, None, at(i));
        }
        g.concurrency().limit().to_string()
    }
    /// Samples of 10 ms, then one of `30 ms`; the limit after.
    fn limit_after_slow_call(g: &mut Governor) -> String {
        let (a, r) = (tenant("a"), run("r"));
        for i in 0..3 {
            let p = granted(g.admit(Request::new(&a, &r), at(i * 100)));
            let _ = done(g, p, at(i * 100 + 10));
        }
        let p = granted(g.admit(Request::new(&a, &r), at(1000)));
        let _ = done(g, p, at(1030));
        g.concurrency().limit().to_string()
    }
    /// 10 ms, then 50 ms every 100 ms for 3 s: the baseline after.
    fn baseline_after_slowdown(g: &mut Governor) -> String {
        let (a, r) = (tenant("a"), run("r"));
        let p = granted(g.admit(Request::new(&a, &r), at(0)));
        let _ = done(g, p, at(10));
        for i in 1..=30 {
            let p = granted(g.admit(Request::new(&a, &r), at(i * 100)));
            let _ = done(g, p, at(i * 100 + 50));
        }
        format!("{:?}", g.concurrency().baseline())
    }
    fn share_of_b_beside_a(g: &mut Governor) -> String {
        let (a, b) = (tenant("a"), tenant("b"));
        let _ = g.admit(Request::new(&a, &run("r")), at(0));
        g.tenant_share(&b).to_string()
    }
    fn batch_in_first_ten(g: &mut Governor) -> String {
        let a = tenant("a");
        let mut permit = granted(g.admit(Request::new(&a, &run("r")), at(0)));
        let mut batch = 0;
        for _ in 0..20 {
            let _ = g.admit(Request::new(&a, &run("i")), at(0));
            let _ = g.admit(Request::new(&a, &run("b")).class(Class::Batch), at(0));
        }
        for i in 0..10 {
            let _ = done(g, permit, at(i));
            let grant = polled(g.poll(at(i)));
            batch += u32::from(grant.permit.class() == Class::Batch);
            permit = grant.permit;
        }
        batch.to_string()
    }

    let cases: Vec<(&str, Edit, Edit, Observe)> = vec![
        (
            "rate_per_sec",
            |_| {},
            |c| c.rate_per_sec = Some(1.0),
            second_call,
        ),
        (
            "burst",
            |c| c.rate_per_sec = Some(1.0),
            |c| c.burst = Some(3),
            second_call,
        ),
        (
            "tokens_per_minute",
            |_| {},
            |c| c.tokens_per_minute = Some(600),
            token_calls,
        ),
        (
            "token_burst",
            |c| c.tokens_per_minute = Some(600),
            |c| c.token_burst = Some(400),
            token_calls,
        ),
        (
            "concurrency.initial",
            |_| {},
            |c| c.concurrency.initial = Some(2),
            third_call,
        ),
        (
            "concurrency.min",
            |_| {},
            |c| c.concurrency.min = 7,
            limit_after_two_overloads,
        ),
        (
            "concurrency.max",
            |_| {},
            |c| c.concurrency.max = 2,
            third_call,
        ),
        (
            "concurrency.backoff",
            |_| {},
            |c| c.concurrency.backoff = 0.5,
            limit_after_two_overloads,
        ),
        (
            "concurrency.latency_tolerance",
            |c| {
                c.concurrency.warmup_samples = 1;
                c.concurrency.smoothing = 1.0;
            },
            |c| c.concurrency.latency_tolerance = 4.0,
            limit_after_slow_call,
        ),
        (
            "concurrency.smoothing",
            |c| {
                c.concurrency.warmup_samples = 1;
                c.concurrency.smoothing = 1.0;
            },
            |c| c.concurrency.smoothing = 0.1,
            limit_after_slow_call,
        ),
        (
            "concurrency.baseline_interval",
            |c| {
                c.concurrency.warmup_samples = 1;
                c.concurrency.smoothing = 1.0;
                c.concurrency.latency_tolerance = 100.0;
            },
            |c| c.concurrency.baseline_interval = Duration::from_secs(1),
            baseline_after_slowdown,
        ),
        (
            "concurrency.warmup_samples",
            |c| c.concurrency.smoothing = 1.0,
            |c| c.concurrency.warmup_samples = 1,
            limit_after_slow_call,
        ),
        (
            "quotas.default_weight",
            |c| {
                c.quotas.weights.insert(tenant("a"), 1.0);
            },
            |c| c.quotas.default_weight = 3.0,
            share_of_b_beside_a,
        ),
        (
            "quotas.weights",
            |_| {},
            |c| {
                c.quotas.weights.insert(tenant("b"), 3.0);
            },
            share_of_b_beside_a,
        ),
        (
            "quotas.tenant_max",
            |_| {},
            |c| c.quotas.tenant_max = Some(1),
            second_call_other_run,
        ),
        (
            "quotas.run_max",
            |_| {},
            |c| c.quotas.run_max = Some(1),
            second_call,
        ),
        (
            "batch_share",
            |c| c.concurrency.initial = Some(1),
            |c| c.batch_share = 0.5,
            batch_in_first_ten,
        ),
    ];

    let mut results = BTreeMap::new();
    for (field, base, change, observe) in &cases {
        let mut before = governor(base);
        let mut after = governor(|c| {
            base(c);
            change(c);
        });
        let (before, after) = (observe(&mut before), observe(&mut after));
        assert_ne!(before, after, "{field} has no effect: {before} either way");
        results.insert(*field, (before, after));
    }

    // Every field of the config is in the table above.
    let mut fields = BTreeSet::new();
    let json = serde_json::to_value(GovernorConfig::default()).unwrap();
    for (key, value) in json.as_object().unwrap() {
        match value.as_object() {
            Some(section) => fields.extend(section.keys().map(|k| format!("{key}.{k}"))),
            None => {
                fields.insert(key.clone());
            }
        }
    }
    let tested: BTreeSet<String> = results.keys().map(|k| (*k).to_owned()).collect();
    assert_eq!(fields, tested, "a config field without an effect case");
}

/// Three nodes that each run at their share grant together what one
/// governor of the whole group grants: `burst + rate × t` over a window
/// `t`, and no more calls in flight than the ceiling.
#[test]
fn shares_among_three_nodes_hold_the_groups_bucket_and_ceiling_together() {
    use crate::governor::Members;
    use std::num::NonZeroU32;
    let (tenant, run) = (TenantId::new("t").unwrap(), RunId::new("r").unwrap());
    let mut nodes: Vec<Governor> = (0..3u32)
        .map(|rank| {
            let config = GovernorConfig::tool_group(
                Some(crate::registry::RateLimit::new(20.0, 20)),
                NonZeroU32::new(8),
            );
            let mut g = Governor::new(config).unwrap();
            let share = g.share_among(
                Members::new(NonZeroU32::new(3).unwrap(), rank).unwrap(),
                Instant::ORIGIN,
            );
            assert_eq!(share.requests.map(|r| r.1), Some([7, 7, 6][rank as usize]));
            g
        })
        .collect();
    let ceilings: u32 = nodes.iter().map(|g| g.concurrency().max()).sum();
    assert_eq!(ceilings, 8, "the ceilings sum to the group's");
    // Every node asks every millisecond for two seconds, releasing at once.
    let mut granted = 0u64;
    for ms in 0..2_000u64 {
        let now = Instant::from_origin(Duration::from_millis(ms));
        for g in &mut nodes {
            while let Poll::Granted(grant) = g.poll(now) {
                granted += 1;
                let _ = g.release(grant.permit, Completion::Ignored, None, now);
            }
            if g.queued() == 0 {
                if let Admit::Granted(permit) = g.admit(Request::new(&tenant, &run), now) {
                    granted += 1;
                    let _ = g.release(permit, Completion::Ignored, None, now);
                }
            }
        }
    }
    // burst 20 + 20/s × 1.999 s, rounded down per node.
    assert!(granted <= 20 + 40, "{granted} calls over 2 s");
    assert!(granted >= 20 + 40 - 3, "the shares are used: {granted}");
    // Alone again: the whole rate, without a fresh burst.
    let now = Instant::from_origin(Duration::from_secs(2));
    let share = nodes[0].share_among(Members::ALONE, now);
    assert_eq!(share.requests.map(|r| r.1), Some(20));
    assert_eq!(nodes[0].concurrency().max(), 8);
    assert!(nodes[0].requests_bucket().unwrap().available(now) < 7);
}
