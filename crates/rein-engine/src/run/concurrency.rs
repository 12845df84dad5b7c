//! Concurrency ceilings of resource groups: at most `max_concurrency`
//! attempts of a group's tools in flight at once, across every run of the
//! engine (invariant 7).
//!
//! # Why
//!
//! A resource group is one backend shared by several tools; its ceiling is
//! what that backend can take, whoever calls. So the slots live in the
//! engine, not in a run: a run that fans out cannot crowd the backend, and
//! two runs together cannot either.
//!
//! # How
//!
//! One FIFO-fair [`tokio::sync::Semaphore`] per group with a ceiling,
//! created the first time a call of the group is made. Each *attempt* (the
//! HTTP request or command, and the lookup by key that settles it) holds
//! one slot; the wait before a retry does not, so a call backing off does
//! not keep others out. Waiting is bounded by the call's deadline: a slot
//! that does not come in time fails the attempt with a `timeout` that was
//! certainly not applied, and the retry decision takes it from there.
//! Waiters are served in arrival order, so no run or tenant starves behind
//! a busier one.
//!
//! A group without a ceiling costs one map lookup per call and nothing per
//! attempt.
//!
//! NOTE: the first ceiling seen for a group holds for the engine's
//! lifetime; agents bound from one registry always agree. A binding that
//! names another ceiling for the same group is logged and the first one
//! stays (changing the permits under waiters would briefly break either
//! the old or the new ceiling).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein_core::deadline::Deadline;
use rein_core::{Category, Failure};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::Timer;

/// The slots of every resource group with a ceiling, by group name.
#[derive(Default)]
pub(super) struct GroupSlots {
    groups: Mutex<HashMap<String, (NonZeroU32, Arc<Semaphore>)>>,
}

impl GroupSlots {
    /// The gate of `group` under `limit`, creating its slots the first time
    /// the group is seen.
    pub(super) fn gate<'g>(&self, group: &'g str, limit: NonZeroU32) -> Gate<'g> {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let (ceiling, slots) = match groups.get(group) {
            Some((ceiling, slots)) => (*ceiling, slots.clone()),
            None => {
                let slots = Arc::new(Semaphore::new(permits(limit)));
                groups.insert(group.to_owned(), (limit, slots.clone()));
                (limit, slots)
            }
        };
        drop(groups);
        if ceiling != limit {
            tracing::warn!(
                group,
                ceiling = ceiling.get(),
                requested = limit.get(),
                "resource group already has another max_concurrency in this engine; the first one holds"
            );
        }
        Gate {
            group,
            ceiling,
            slots,
        }
    }
}

/// A semaphore's permits for a ceiling (a `u32` always fits).
fn permits(limit: NonZeroU32) -> usize {
    usize::try_from(limit.get())
        .unwrap_or(Semaphore::MAX_PERMITS)
        .min(Semaphore::MAX_PERMITS)
}

/// One call's access to its resource group's slots, resolved once per call.
pub(super) struct Gate<'g> {
    group: &'g str,
    ceiling: NonZeroU32,
    slots: Arc<Semaphore>,
}

/// A held slot: released when dropped. Owned, so a streamed answer can
/// hold its provider slot until the stream ends.
pub(super) struct Slot {
    _permit: OwnedSemaphorePermit,
    /// How long the attempt queued for it.
    pub(super) waited: Duration,
}

/// No slot came before the deadline.
#[derive(Debug, Clone, Copy)]
pub(super) struct WaitExpired {
    /// How long the attempt queued.
    pub(super) waited: Duration,
}

impl<'g> Gate<'g> {
    /// The group's name.
    pub(super) fn group(&self) -> &'g str {
        self.group
    }

    /// The group's ceiling.
    pub(super) fn ceiling(&self) -> NonZeroU32 {
        self.ceiling
    }

    /// Takes a slot, queueing (in arrival order) until one is free or
    /// `deadline` passes.
    ///
    /// # Errors
    ///
    /// [`WaitExpired`] when no slot came before the deadline.
    pub(super) async fn enter(
        &self,
        clock: &dyn Timer,
        deadline: Deadline,
    ) -> Result<Slot, WaitExpired> {
        // A free slot is taken without a timer. `try_acquire` never jumps
        // the queue: while anyone waits, no permit is free.
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            return Ok(Slot {
                _permit: permit,
                waited: Duration::ZERO,
            });
        }
        let started = clock.now();
        let remaining = deadline.remaining(started);
        let acquired = clock
            .timeout(remaining, self.slots.clone().acquire_owned())
            .await;
        let waited = clock.now().saturating_duration_since(started);
        match acquired {
            Ok(Ok(permit)) => Ok(Slot {
                _permit: permit,
                waited,
            }),
            // Timed out, or closed (never: the engine does not close them).
            Ok(Err(_)) | Err(_) => Err(WaitExpired { waited }),
        }
    }
}

impl WaitExpired {
    /// The structured failure of the attempt that was not made.
    pub(super) fn failure(&self, tool: &str, gate: &Gate<'_>) -> Failure {
        Failure::new(tool, Category::Timeout).with_human_message(format!(
            "{tool} was not called: it waited {:?} for a concurrency slot of resource group `{}` (max_concurrency = {}) and none came before the call's deadline",
            self.waited,
            gate.group(),
            gate.ceiling()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SystemClock;
    use rein_core::Clock;

    fn two() -> NonZeroU32 {
        NonZeroU32::new(2).unwrap_or(NonZeroU32::MIN)
    }

    #[tokio::test(start_paused = true)]
    async fn enter_with_a_free_slot_does_not_wait() {
        let clock = SystemClock::new();
        let slots = GroupSlots::default();
        let gate = slots.gate("api", two());
        let deadline = Deadline::after(clock.now(), Duration::from_secs(1));
        let slot = gate.enter(&clock, deadline).await;
        assert!(slot.is_ok_and(|s| s.waited.is_zero()));
    }

    #[tokio::test(start_paused = true)]
    async fn enter_when_full_until_the_deadline_expires_with_the_wait() {
        let clock = SystemClock::new();
        let slots = GroupSlots::default();
        let gate = slots.gate("api", two());
        let far = Deadline::after(clock.now(), Duration::from_secs(60));
        let _a = gate.enter(&clock, far).await;
        let _b = gate.enter(&clock, far).await;
        let near = Deadline::after(clock.now(), Duration::from_millis(250));
        let expired = gate.enter(&clock, near).await.err();
        assert_eq!(expired.map(|e| e.waited), Some(Duration::from_millis(250)));
        let failure = expired
            .map(|e| e.failure("get_order", &gate))
            .unwrap_or_else(|| Failure::new("x", Category::Unknown));
        assert_eq!(failure.category(), Category::Timeout);
        assert_eq!(failure.effect(), rein_core::Effect::NotApplied);
        assert!(failure.human_message().contains("concurrency slot"));
        assert!(failure.human_message().contains("`api`"));
        assert!(!failure.model_message().contains("api"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_slot_goes_to_the_first_waiter() {
        let clock = Arc::new(SystemClock::new());
        let slots = Arc::new(GroupSlots::default());
        let one = NonZeroU32::MIN;
        let held = slots.gate("api", one);
        let far = Deadline::after(clock.now(), Duration::from_secs(60));
        let first = held.enter(clock.as_ref(), far).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for n in 0..3u32 {
            let (slots, own, order) = (slots.clone(), clock.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let gate = slots.gate("api", one);
                let slot = gate.enter(own.as_ref(), far).await;
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
        let slots = GroupSlots::default();
        let first = slots.gate("api", two());
        let second = slots.gate("api", NonZeroU32::MIN);
        assert_eq!(second.ceiling(), two());
        assert!(Arc::ptr_eq(&first.slots, &second.slots));
    }
}
