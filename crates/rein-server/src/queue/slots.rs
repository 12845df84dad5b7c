//! Run slots (`server.quotas.run_slots`): how many runs this process
//! executes at once, shared between interactive and batch work.
//!
//! # Why
//!
//! Sync runs (a caller waits on the answer; its SSE stream follows it) are
//! interactive; queued runs are batch. Sharing every slot first come, first
//! served lets a batch flood hold them all while a person waits. So:
//!
//! - `interactive_reserve` slots are never given to batch work: a sync run
//!   finds one free however many queued runs wait (batch cannot starve
//!   interactive);
//! - waiters are served by the governor's [`FairQueue`]: interactive ahead
//!   of batch, tenants by deficit round robin within a class, and batch
//!   keeps `batch_share` of the contended grants under an interactive flood
//!   (interactive cannot starve batch entirely).
//!
//! Without `run_slots` nothing is held back: sync runs start at once and
//! queued runs are bounded by `queue.workers`, as before.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rein_core::governor::{Class, FairQueue};
use rein_core::registry::RunSlots as SlotSettings;
use rein_core::{Instant, TenantId};
use tokio::sync::oneshot;

/// The run slots of one process.
#[derive(Debug)]
pub struct RunSlots {
    settings: Option<SlotSettings>,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Slots held, interactive then batch.
    held: [u32; 2],
    waiting: FairQueue<Waiter>,
}

#[derive(Debug)]
struct Waiter {
    class: Class,
    granted: oneshot::Sender<()>,
}

/// A slot held until dropped (or no slot at all without `run_slots`).
#[derive(Debug)]
pub struct Slot {
    held: Option<(Arc<RunSlots>, Class)>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((slots, class)) = self.held.take() {
            slots.release(class);
        }
    }
}

/// A waiter's side until its grant is taken: dropped before that (the
/// caller gave up), a grant already sent is given back.
struct Pending {
    granted: oneshot::Receiver<()>,
    slots: Arc<RunSlots>,
    class: Class,
    settled: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.settled {
            self.granted.close();
            if self.granted.try_recv().is_ok() {
                self.slots.release(self.class);
            }
        }
    }
}

fn lane(class: Class) -> usize {
    match class {
        Class::Interactive => 0,
        Class::Batch => 1,
    }
}

impl RunSlots {
    /// Slots as `settings` says; `None`: unlimited.
    pub fn new(
        settings: Option<SlotSettings>,
        weights: rein_core::governor::TenantWeights,
    ) -> Self {
        let share = settings.map(|s| s.batch_share).unwrap_or_default();
        RunSlots {
            settings,
            inner: Mutex::new(Inner {
                held: [0, 0],
                waiting: FairQueue::new(weights, share),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for `tenant`'s work of `class`, waiting in fair order while
    /// none may be taken. Cancel-safe: a waiter dropped before its grant
    /// gives the slot on.
    pub async fn acquire(self: &Arc<Self>, tenant: &TenantId, class: Class, now: Instant) -> Slot {
        if self.settings.is_none() {
            return Slot { held: None };
        }
        let (granted, wait) = oneshot::channel();
        {
            let mut inner = self.lock();
            inner
                .waiting
                .enqueue(Waiter { class, granted }, tenant, class, 1, now);
            self.dispatch(&mut inner);
        }
        let mut pending = Pending {
            granted: wait,
            slots: self.clone(),
            class,
            settled: false,
        };
        let granted = (&mut pending.granted).await;
        pending.settled = true;
        Slot {
            // Unsent only when the queue dropped the waiter: nothing held.
            held: granted.ok().map(|()| (self.clone(), class)),
        }
    }

    fn release(&self, class: Class) {
        let mut inner = self.lock();
        let held = &mut inner.held[lane(class)];
        *held = held.saturating_sub(1);
        self.dispatch(&mut inner);
    }

    /// Slots held now, interactive then batch.
    pub fn held(&self) -> (u32, u32) {
        let inner = self.lock();
        (inner.held[0], inner.held[1])
    }

    /// Grants free slots to waiters in fair order.
    fn dispatch(&self, inner: &mut Inner) {
        let Some(s) = self.settings else { return };
        let total = s.total.get();
        let batch_max = total.saturating_sub(s.interactive_reserve);
        loop {
            let Inner { held, waiting } = &mut *inner;
            let free = |class: Class| {
                let all = held[0] + held[1];
                all < total && (class == Class::Interactive || held[1] < batch_max)
            };
            // A waiter that went away is taken out whatever the slots.
            let Some(next) =
                waiting.dequeue_where(Instant::ORIGIN, |w| w.granted.is_closed() || free(w.class))
            else {
                return;
            };
            let waiter = next.item;
            if waiter.granted.is_closed() || !free(waiter.class) {
                continue;
            }
            held[lane(waiter.class)] += 1;
            if waiter.granted.send(()).is_err() {
                held[lane(waiter.class)] -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use rein_core::governor::{BatchShare, TenantWeights};

    use super::*;

    fn slots(total: u32, reserve: u32) -> Arc<RunSlots> {
        Arc::new(RunSlots::new(
            Some(settings_of(total, reserve)),
            TenantWeights::default(),
        ))
    }

    fn settings_of(total: u32, reserve: u32) -> SlotSettings {
        let file: rein_core::registry::ConfigFile = toml::from_str(&format!(
            "[server.quotas]\nrun_slots = {total}\ninteractive_reserve = {reserve}\n"
        ))
        .unwrap();
        let registry = rein_core::registry::check(
            &[rein_core::registry::ConfigSource::new("rein.toml", file)],
            &|_| Vec::new(),
        )
        .unwrap();
        let s = registry.server().quotas.run_slots.unwrap();
        assert_eq!(s.batch_share, BatchShare::default());
        assert_eq!(s.total, NonZeroU32::new(total).unwrap());
        s
    }

    fn t(name: &str) -> TenantId {
        TenantId::new(name).unwrap()
    }

    const NOW: Instant = Instant::ORIGIN;

    /// Whether `f` is ready now (one poll).
    async fn ready<F: std::future::Future>(f: F) -> Option<F::Output> {
        tokio::time::timeout(Duration::ZERO, f).await.ok()
    }

    #[tokio::test(start_paused = true)]
    async fn batch_never_takes_the_reserved_slots() {
        let s = slots(3, 1);
        let b1 = s.acquire(&t("q"), Class::Batch, NOW).await;
        let b2 = s.acquire(&t("q"), Class::Batch, NOW).await;
        assert_eq!(s.held(), (0, 2));
        // A third batch run waits though a slot is free.
        let b3 = tokio::spawn({
            let s = s.clone();
            async move { s.acquire(&t("q"), Class::Batch, NOW).await }
        });
        tokio::task::yield_now().await;
        assert!(!b3.is_finished());
        // A sync run gets the reserved slot at once.
        let i1 = ready(s.acquire(&t("a"), Class::Interactive, NOW)).await;
        assert!(i1.is_some(), "the reserve is interactive's");
        assert_eq!(s.held(), (1, 2));
        drop(b1);
        let b3 = b3.await.unwrap();
        assert_eq!(s.held(), (1, 2));
        drop((b2, b3, i1));
        assert_eq!(s.held(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_reserve_batch_fills_every_slot() {
        let s = slots(2, 0);
        let _b1 = s.acquire(&t("q"), Class::Batch, NOW).await;
        let _b2 = s.acquire(&t("q"), Class::Batch, NOW).await;
        assert!(
            ready(s.acquire(&t("a"), Class::Interactive, NOW))
                .await
                .is_none(),
            "a sync run waits behind the batch flood"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn interactive_goes_first_and_batch_keeps_its_share() {
        let s = slots(1, 0);
        let first = s.acquire(&t("a"), Class::Interactive, NOW).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (i, class) in [Class::Batch]
            .into_iter()
            .chain(std::iter::repeat_n(Class::Interactive, 20))
            .enumerate()
        {
            let (s, order) = (s.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let slot = s.acquire(&t(&format!("t{}", i % 3)), class, NOW).await;
                order.lock().unwrap().push(class);
                tokio::task::yield_now().await;
                drop(slot);
            }));
            tokio::task::yield_now().await;
        }
        drop(first);
        for task in tasks {
            task.await.unwrap();
        }
        let order = order.lock().unwrap();
        let batch_at = order.iter().position(|c| *c == Class::Batch).unwrap();
        assert!(batch_at > 0, "interactive first: {order:?}");
        assert!(
            batch_at <= 10,
            "batch keeps 10 % of the contended grants: {order:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_passes_its_grant_on() {
        let s = slots(1, 0);
        let held = s.acquire(&t("a"), Class::Interactive, NOW).await;
        let gave_up = ready(s.acquire(&t("b"), Class::Interactive, NOW)).await;
        assert!(gave_up.is_none());
        let next = tokio::spawn({
            let s = s.clone();
            async move { s.acquire(&t("c"), Class::Interactive, NOW).await }
        });
        tokio::task::yield_now().await;
        drop(held);
        let next = next.await.unwrap();
        assert_eq!(s.held(), (1, 0));
        drop(next);
        assert_eq!(s.held(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_slots_never_wait() {
        let s = Arc::new(RunSlots::new(None, TenantWeights::default()));
        let a = t("a");
        let all: Vec<Slot> =
            futures_util::future::join_all((0..100).map(|_| s.acquire(&a, Class::Batch, NOW)))
                .await;
        assert_eq!(all.len(), 100);
        assert_eq!(s.held(), (0, 0));
    }
}
