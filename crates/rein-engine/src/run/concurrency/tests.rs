use super::*;
use crate::SystemClock;
use rein_core::Clock;

fn two() -> NonZeroU32 {
    NonZeroU32::new(2).unwrap_or(NonZeroU32::MIN)
}

fn slots() -> (Arc<dyn Timer>, GroupSlots) {
    let clock: Arc<dyn Timer> = Arc::new(SystemClock::new());
    (clock.clone(), GroupSlots::new(clock))
}

fn ids() -> (TenantId, RunId) {
    match (TenantId::new("acme"), RunId::new("run-1")) {
        (Ok(t), Ok(r)) => (t, r),
        _ => unreachable!("valid ids"),
    }
}

fn interactive<'a>(tenant: &'a TenantId, run: &'a RunId) -> Caller<'a> {
    Caller {
        tenant,
        run,
        class: Class::Interactive,
    }
}

fn rate(per_sec: f64, burst: u32) -> GroupLimits {
    GroupLimits {
        rate: Some(RateLimit::new(per_sec, burst)),
        max_concurrency: None,
    }
}

#[tokio::test(start_paused = true)]
async fn enter_with_a_free_slot_does_not_wait() {
    let (clock, slots) = slots();
    let gate = slots.provider_gate("api", Some(two()), None);
    let deadline = Deadline::after(clock.now(), Duration::from_secs(1));
    let slot = gate.enter(deadline, Duration::ZERO, 0).await;
    assert!(slot.is_ok_and(|s| s.waited.is_zero()));
}

#[tokio::test(start_paused = true)]
async fn enter_when_full_until_the_deadline_expires_with_the_wait() {
    let (clock, slots) = slots();
    let gate = slots.provider_gate("api", Some(two()), None);
    let far = Deadline::after(clock.now(), Duration::from_secs(60));
    let _a = gate.enter(far, Duration::ZERO, 0).await;
    let _b = gate.enter(far, Duration::ZERO, 0).await;
    let near = Deadline::after(clock.now(), Duration::from_millis(250));
    let expired = gate.enter(near, Duration::ZERO, 0).await.err();
    assert_eq!(expired.map(|e| e.waited), Some(Duration::from_millis(250)));
    let failure = expired
        .map(|e| e.failure("get_order", &gate))
        .unwrap_or_else(|| Failure::new("x", Category::Unknown));
    assert_eq!(failure.category(), Category::Timeout);
    assert_eq!(failure.effect(), rein_core::Effect::NotApplied);
    assert!(failure.human_message().contains("concurrency slot"));
    assert!(failure.human_message().contains("`api`"));
    assert!(!failure.model_message().contains("api"));
    // The expired waiter left the queue: a release goes to nobody, and
    // the next caller gets the slot at once.
    drop(_a);
    let again = gate.enter(far, Duration::ZERO, 0).await;
    assert!(again.is_ok_and(|s| s.waited.is_zero()));
}

#[tokio::test(start_paused = true)]
async fn a_released_slot_goes_to_the_first_waiter() {
    let (clock, slots) = slots();
    let slots = Arc::new(slots);
    let one = NonZeroU32::MIN;
    let held = slots.provider_gate("api", Some(one), None);
    let far = Deadline::after(clock.now(), Duration::from_secs(60));
    let first = held.enter(far, Duration::ZERO, 0).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for n in 0..3u32 {
        let (slots, own, order) = (slots.clone(), clock.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let gate = slots.provider_gate("api", Some(one), None);
            let slot = gate.enter(far, Duration::ZERO, 0).await;
            order.lock().unwrap_or_else(|p| p.into_inner()).push(n);
            own.sleep(Duration::from_millis(10)).await;
            drop(slot);
        }));
        // Let each waiter queue before the next one arrives.
        clock.sleep(Duration::from_millis(1)).await;
    }
    drop(first);
    for w in waiters {
        let _ = w.await;
    }
    let order = order.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(order, vec![0, 1, 2]);
}

#[test]
fn a_second_ceiling_for_a_known_group_keeps_the_first() {
    let (_, slots) = slots();
    let first = slots.provider_gate("api", Some(two()), None);
    let second = slots.provider_gate("api", Some(NonZeroU32::MIN), None);
    assert_eq!(second.ceiling(), two());
    assert!(Arc::ptr_eq(&first.governed, &second.governed));
}

#[test]
fn a_group_without_a_rate_or_a_ceiling_is_not_governed() {
    let (_, slots) = slots();
    assert!(slots.governed("api", GroupLimits::default()).is_none());
    assert!(slots.governed("api", rate(20.0, 20)).is_some());
}

#[test]
fn a_group_without_a_ceiling_keeps_no_ceiling_and_a_ceiling_starts_at_its_max() {
    let (_, slots) = slots();
    let rated = slots.governed("rated", rate(20.0, 20));
    assert_eq!(rated.map(|g| g.limit()), Some(MAX_CONCURRENCY_CEILING));
    let capped = GroupLimits {
        rate: None,
        max_concurrency: NonZeroU32::new(20),
    };
    assert_eq!(
        slots.governed("capped", capped).map(|g| g.limit()),
        Some(20)
    );
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_waiter_is_woken_by_the_timer_when_the_bucket_refills() {
    let (clock, slots) = slots();
    let (tenant, run) = ids();
    let caller = interactive(&tenant, &run);
    let Some(gate) = slots.governed("api", rate(10.0, 1)) else {
        unreachable!("a rate is governed")
    };
    let far = Deadline::after(clock.now(), Duration::from_secs(60));
    let first = gate.enter_for(caller, far, Duration::ZERO).await;
    assert!(first.is_ok_and(|s| s.waited.is_zero()));
    // The second waits for the bucket: nobody releases anything, the
    // timer alone wakes it, 100 ms later.
    let second = gate.enter_for(caller, far, Duration::ZERO).await;
    let second = second.ok();
    assert_eq!(
        second.as_ref().map(|s| s.waited),
        Some(Duration::from_millis(100))
    );
    assert!(matches!(
        second.and_then(|s| s.cause),
        Some(Cause::RateLimited { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_call_the_bucket_admits_only_after_its_latest_start_is_shed_at_once() {
    let (clock, slots) = slots();
    let (tenant, run) = ids();
    let caller = interactive(&tenant, &run);
    let Some(gate) = slots.governed("api", rate(1.0, 1)) else {
        unreachable!("a rate is governed")
    };
    let deadline = Deadline::after(clock.now(), Duration::from_millis(1_500));
    let _first = gate
        .enter_for(caller, deadline, Duration::from_millis(200))
        .await;
    let started = clock.now();
    // The bucket refills in 1 s; the call needs 600 ms of the 1.5 s.
    let shed = gate
        .enter_for(caller, deadline, Duration::from_millis(600))
        .await
        .err();
    assert_eq!(clock.now(), started, "shed without waiting");
    assert!(matches!(
        shed.map(|s| s.reason),
        Some(ShedReason::NoTime { .. })
    ));
    // Its ticket left the queue: once the bucket refills, the next
    // caller goes at once.
    clock.sleep(Duration::from_secs(1)).await;
    let far = Deadline::after(clock.now(), Duration::from_secs(60));
    let next = gate.enter_for(caller, far, Duration::ZERO).await;
    assert!(next.is_ok_and(|s| s.waited.is_zero()));
}

#[tokio::test(start_paused = true)]
async fn overload_shrinks_the_limit_and_successes_in_use_grow_it_back() {
    let (clock, slots) = slots();
    let (tenant, run) = ids();
    let caller = interactive(&tenant, &run);
    let capped = GroupLimits {
        rate: None,
        max_concurrency: NonZeroU32::new(4),
    };
    let Some(gate) = slots.governed("api", capped) else {
        unreachable!("a ceiling is governed")
    };
    let far = Deadline::after(clock.now(), Duration::from_secs(600));
    let slot = gate.enter_for(caller, far, Duration::ZERO).await;
    let adjustment = slot.map(|s| s.finish(Completion::Overloaded)).ok();
    assert!(matches!(
        adjustment,
        Some(Adjustment::Shrunk { old: 4, new: 3, .. })
    ));
    assert_eq!(gate.limit(), 3);
    // Rounds of three calls in flight, each answering in 10 ms.
    let mut grew = false;
    for _ in 0..3 {
        let mut held = Vec::new();
        for _ in 0..3 {
            held.extend(gate.enter_for(caller, far, Duration::ZERO).await.ok());
        }
        clock.sleep(Duration::from_millis(10)).await;
        for slot in held {
            grew |= matches!(slot.finish(Completion::SUCCEEDED), Adjustment::Grew { .. });
        }
    }
    assert!(grew);
    assert_eq!(gate.limit(), 4, "back at the ceiling, never above");
}
