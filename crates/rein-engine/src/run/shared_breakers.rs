//! Breaker openings and Retry-After cooldowns shared across nodes through the store
//! (issue 7 item 2: "Breaker state can be shared across nodes through the
//! store").
//!
//! # Why
//!
//! Each engine keeps its breaker arms in memory: health memory of one
//! process. Several `rein serve` processes sharing one database and one
//! provider would each have to spend five failed calls (and their callers'
//! deadlines) before refusing a provider that another node already knows
//! is down. With [`EngineBuilder::shared_breakers`] on, a node publishes
//! its provider arm's opening to the store ([`Store::publish_breaker_open`])
//! and the other nodes refuse calls to that provider until the opening
//! ends, exactly as if their own arm were open: a `circuit_open`
//! [`Failure`] with `retry_after` (which moves a model chain on to its
//! fallback), and a `call_rejected` event that says `"shared": true` and
//! which node opened it.
//!
//! # What is shared, and what is not
//!
//! - Openings of **every** arm: providers, tools and resource groups
//!   (issue 16 item 4: health memory across runs and processes, so the
//!   eleventh run does not start by calling the tool that failed the last
//!   ten). A tool's **Retry-After** is shared too, as a cooldown
//!   (`cooldown.tool.NAME`) that every run of every process honours, this
//!   one's included (no local arm holds it), until it ends.
//! - A provider's **429 pause** (its `Retry-After` or
//!   `x-ratelimit-reset-*`, which pauses the provider's gate in this
//!   process) is published as `pause.provider.NAME`; every other process
//!   reads it before its next call to that provider and pauses its own
//!   gate until the same instant (`rein run` at its first call). A pause
//!   only lengthens (the store keeps the later end, and so does a gate),
//!   never shortens, and ends by itself: nothing clears it.
//! - The model is told: a tool refused now carries "unavailable until
//!   HH:MM UTC; choose another way" in the description it sees, and one
//!   whose local arm is half-open "recently unstable" (`run::health`).
//! - Only the *opening*, not the counts nor the half-open probing. Each
//!   node's own arm still decides; a shared opening is an extra "do not
//!   call before `until`". After `until`, calls reach the local arm again,
//!   and the local arm (closed, or half-open with its bounded probes)
//!   decides — so the nodes probe independently, at most a few probes each.
//! - A node ignores its own openings (its arm already holds them), and
//!   consults the shared view only while its own arm is not open (an open
//!   local arm rejects by itself, with its own rationale).
//! - When a node's arm closes after successful probes it clears the
//!   opening it published, and only that one: an opening another node
//!   published since is newer evidence and stays until it ends.
//!
//! # Cost on the hot path
//!
//! Off by default: no store traffic at all. When on, a provider call reads
//! a cached view of the openings; the view is refreshed from the store at
//! most once per `refresh` interval, by whichever call first finds it stale
//! (the others use the stale view meanwhile — never one store read per
//! call). A publish or clear is one store write per breaker transition,
//! which is rare by design. So a node learns of another's opening within
//! `refresh` plus the store's latency.
//!
//! # Pushed where the store notifies
//!
//! On a store that notifies (PostgreSQL's `LISTEN`/`NOTIFY`, see
//! `rein_store::Notification`), every publish and clear is announced to
//! every node as [`Notification::HealthChanged`]; a node then re-reads the
//! openings at its next call, however young its view, so an opening on
//! node A is honoured on node B as soon as the notification arrives rather
//! than after B's `refresh`. The announcement is only a hint: the view is
//! still read from the store, a `Resync` or a lagging receiver also
//! forces a read, and the `refresh` poll stays as the fallback (SQLite,
//! which does not notify, polls alone). Draining the receiver costs each
//! call a `try_recv` loop, and only while sharing is on.
//!
//! # Failures of the store
//!
//! A failed read or write is logged and otherwise ignored: the local arms
//! keep protecting each node, so the shared view can only add refusals,
//! never remove the local ones. The view stays as last read until the
//! next refresh.
//!
//! [`Store::publish_breaker_open`]: rein_store::Store::publish_breaker_open
//! [`Failure`]: rein_core::Failure

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein_core::breaker::{ArmKey, ArmKind, Transition};
use rein_core::event::{CallRejected, CircuitOpen, CircuitRejected};
use rein_core::{Clock, ConfigError, Failure, Instant};
use rein_store::{BreakerOpening, MAX_BREAKER_ARM_LEN, Notification, Store};
use tokio::sync::broadcast::{self, error::TryRecvError};

use super::concurrency::Gate;
use super::emitter::{Correlation, Emitter, unix_ms};
use super::{Engine, EngineBuilder};

/// A sensible refresh interval for [`EngineBuilder::shared_breakers`]: how
/// stale a node's view of the other nodes' openings may be (`rein serve`
/// uses it).
pub const DEFAULT_SHARED_BREAKERS_REFRESH: Duration = Duration::from_secs(1);

impl EngineBuilder {
    /// Shares provider breaker openings with every engine on the same store
    /// (issue 7 item 2): this engine publishes
    /// its provider arms' openings as `node`, and refuses calls to a
    /// provider another node opened until that opening ends, re-reading the
    /// openings at most every `refresh` (zero: before every provider call,
    /// for tests). Off by default.
    ///
    /// `node` must be 1 to 200 bytes without control characters, and
    /// unique per process (`rein serve` uses its node id); [`build`]
    /// refuses another.
    ///
    /// Only provider arms are shared, and only their openings: each node's
    /// own arm still counts failures and probes. Another node's opening
    /// refuses a call exactly like an open local arm — a `circuit_open`
    /// failure with `retry_after`, and a `call_rejected` event with
    /// `"shared": true` and `"opened_by"` — while this node's own arm is
    /// not open; after it ends, calls reach the local arm again. When this
    /// node's arm closes after successful probes it clears the opening it
    /// published. A store that cannot be read or written is logged and
    /// otherwise ignored (the local arms keep deciding).
    ///
    /// [`build`]: EngineBuilder::build
    pub fn shared_breakers(mut self, node: impl Into<String>, refresh: Duration) -> Self {
        self.shared_breakers = Some((node.into(), refresh));
        self
    }
}

/// The shared view of one engine, when [`EngineBuilder::shared_breakers`]
/// is on.
pub(super) struct SharedBreakers {
    /// This engine's node id, as it publishes openings.
    node: String,
    refresh: Duration,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    view: Mutex<View>,
    /// Set while one call refreshes the view, so the others do not.
    refreshing: AtomicBool,
    /// The store's notifications, subscribed at the first refresh.
    notified: Mutex<Notified>,
    /// Bumped for every health change notified: a view read before the
    /// latest bump is stale, whatever its age.
    changes: AtomicU64,
}

/// Whether the store pushes health changes to this engine.
enum Notified {
    /// Not asked yet (the first refresh asks, on the runtime).
    Unsubscribed,
    /// The store notifies: changes arrive here.
    Listening(broadcast::Receiver<Notification>),
    /// The store does not notify (or stopped): the `refresh` poll alone.
    Polling,
}

/// The openings last read, other nodes' only, by arm.
#[derive(Default)]
struct View {
    read_at: Option<Instant>,
    /// [`SharedBreakers::changes`] when this view was read.
    read_after: u64,
    openings: HashMap<String, BreakerOpening>,
}

/// The store arm name of `provider`'s arm: `provider.{name}`.
fn arm_of(provider: &str) -> String {
    arm_name(ArmKind::Provider, provider)
}

/// The store name of an arm: `{kind}.{name}` (`tool.get_order`).
fn arm_name(kind: ArmKind, name: &str) -> String {
    ArmKey::new(kind, name).to_string()
}

/// The prefix of a Retry-After cooldown's store name
/// (`cooldown.tool.send_email`).
const COOLDOWN: &str = "cooldown.";

/// The store name of an arm's Retry-After cooldown.
fn cooldown_of(kind: ArmKind, name: &str) -> String {
    format!("{COOLDOWN}{}", arm_name(kind, name))
}

/// The prefix of a provider pause's store name (`pause.provider.openai`).
const PAUSE: &str = "pause.";

/// The store name of `provider`'s pause after a 429 that said when to
/// come back.
fn pause_of(provider: &str) -> String {
    format!("{PAUSE}{}", arm_of(provider))
}

/// The sabotage switch (`REIN_SABOTAGE`, `crash-points` builds only) under
/// which a provider's 429 pause stays this process's: it is not
/// published, so the other processes keep calling the provider.
const UNSHARED_PROVIDER_PAUSE: &str = "unshared_provider_pause";

/// The shared view a builder's `(node, refresh)` setting asks for, if
/// any, over the engine's store and clock.
///
/// # Errors
///
/// [`ConfigError::OutOfRange`] for a node id the store would refuse.
pub(super) fn from_settings(
    settings: Option<(String, Duration)>,
    store: &Arc<dyn Store>,
    clock: &Arc<dyn Clock>,
) -> Result<Option<Arc<SharedBreakers>>, ConfigError> {
    let Some((node, refresh)) = settings else {
        return Ok(None);
    };
    if node.is_empty() || node.len() > MAX_BREAKER_ARM_LEN || node.chars().any(char::is_control) {
        return Err(ConfigError::OutOfRange {
            field: "shared_breakers.node",
            expected: "1 to 200 bytes without control characters",
            found: format!("{node:?}"),
        });
    }
    Ok(Some(Arc::new(SharedBreakers {
        node,
        refresh,
        store: store.clone(),
        clock: clock.clone(),
        view: Mutex::default(),
        refreshing: AtomicBool::new(false),
        notified: Mutex::new(Notified::Unsubscribed),
        changes: AtomicU64::new(0),
    })))
}

/// Clears the refreshing flag even if the refreshing call is dropped
/// mid-read (its caller went away).
struct Refreshing<'a>(&'a AtomicBool);

impl Drop for Refreshing<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl SharedBreakers {
    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.view
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the notifications that arrived since the last call (the first
    /// call subscribes) and counts a health change among them in
    /// [`changes`](Self::changes).
    fn take_notified(&self) {
        let mut notified = self
            .notified
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if matches!(*notified, Notified::Unsubscribed) {
            // Whatever changed before is read by this first refresh: the
            // view has never been read.
            *notified = match self.store.notifications() {
                Some(receiver) => Notified::Listening(receiver),
                None => Notified::Polling,
            };
        }
        let Notified::Listening(receiver) = &mut *notified else {
            return;
        };
        let mut changed = false;
        loop {
            match receiver.try_recv() {
                // A missed notification may have been a health change.
                Ok(Notification::HealthChanged(_) | Notification::Resync)
                | Err(TryRecvError::Lagged(_)) => changed = true,
                Ok(_) => {}
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => {
                    tracing::warn!(node = %self.node, "the store stopped notifying; shared breakers poll every {:?}", self.refresh);
                    *notified = Notified::Polling;
                    break;
                }
            }
        }
        if changed {
            self.changes.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Re-reads the openings if the view is older than `refresh`, or a
    /// health change was notified since it was read, and no other call is
    /// re-reading them already.
    pub(super) async fn refresh(&self) {
        self.take_notified();
        let now = self.clock.now();
        let changes = self.changes.load(Ordering::Acquire);
        let stale = {
            let view = self.view();
            view.read_after != changes
                || view
                    .read_at
                    .is_none_or(|at| now.saturating_duration_since(at) >= self.refresh)
        };
        if !stale || self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let _flag = Refreshing(&self.refreshing);
        let now_ms = unix_ms(self.clock.system_now());
        let read = self.store.breaker_openings(now_ms).await;
        let mut view = self.view();
        // Read or not, the next try waits a whole interval (or the next
        // change notified): a store that is down is not asked on every
        // call. A change notified during the read bumped the counter past
        // the value this read started from, so the next call reads again.
        view.read_at = Some(now);
        view.read_after = changes;
        match read {
            Ok(openings) => {
                // Another node's openings; and every cooldown, this node's
                // too: no local arm holds a cooldown.
                view.openings = openings
                    .into_iter()
                    .filter(|o| o.opened_by != self.node || o.arm.starts_with(COOLDOWN))
                    .map(|o| (o.arm.clone(), o))
                    .collect();
            }
            Err(e) => {
                tracing::warn!(node = %self.node, "cannot read shared breaker openings; keeping the last view: {e}");
            }
        }
    }

    /// Another node's opening of `provider`'s arm in force now, with the
    /// time left.
    fn open(&self, provider: &str) -> Option<(BreakerOpening, Duration)> {
        self.open_named(&arm_of(provider))
    }

    /// The opening stored as `arm` in force now, with the time left.
    fn open_named(&self, arm: &str) -> Option<(BreakerOpening, Duration)> {
        let now_ms = unix_ms(self.clock.system_now());
        let view = self.view();
        let opening = view.openings.get(arm)?;
        opening.is_open(now_ms).then(|| {
            (
                opening.clone(),
                opening.open_until_ms.saturating_duration_since(now_ms),
            )
        })
    }

    /// What refuses a call to an arm now: another node's opening of it, or
    /// a Retry-After cooldown of it (any node's), whichever ends later.
    pub(super) fn refusal(&self, kind: ArmKind, name: &str) -> Option<(BreakerOpening, Duration)> {
        let opened = self.open_named(&arm_name(kind, name));
        let cooling = self.open_named(&cooldown_of(kind, name));
        match (opened, cooling) {
            (Some(a), Some(b)) => Some(if a.1 >= b.1 { a } else { b }),
            (a, b) => a.or(b),
        }
    }

    /// Publishes a Retry-After cooldown of an arm: every run of every
    /// process on the store refuses it for `retry_after` (this one at once:
    /// the view takes it before the store answers).
    pub(super) async fn cool_down(&self, kind: ArmKind, name: &str, retry_after: Duration) {
        let now_ms = unix_ms(self.clock.system_now());
        let opening = BreakerOpening {
            arm: cooldown_of(kind, name),
            open_until_ms: now_ms.saturating_add(retry_after),
            opened_by: self.node.clone(),
            reason: format!(
                "the target asked to wait {}s (Retry-After)",
                retry_after.as_secs()
            ),
            updated_at_ms: now_ms,
        };
        self.view()
            .openings
            .entry(opening.arm.clone())
            .and_modify(|o| {
                if o.open_until_ms < opening.open_until_ms {
                    *o = opening.clone();
                }
            })
            .or_insert_with(|| opening.clone());
        if let Err(e) = self.store.publish_breaker_open(opening).await {
            tracing::warn!(node = %self.node, name, "cannot publish a Retry-After cooldown: {e}");
        }
    }

    /// Another node's pause of `provider` in force now, with the time left
    /// (this node's own pause is its gate's already).
    pub(super) fn pause(&self, provider: &str) -> Option<(BreakerOpening, Duration)> {
        self.open_named(&pause_of(provider))
    }

    /// Publishes that `provider` answered 429 and asked to wait
    /// `retry_after`: every process on the store holds its calls to it
    /// until then. A publish never shortens a longer pause already stored
    /// (the store keeps the later end), and the pause ends by itself.
    pub(super) async fn publish_pause(&self, provider: &str, retry_after: Duration) {
        if crate::crash::sabotaged(UNSHARED_PROVIDER_PAUSE) {
            return;
        }
        let now_ms = unix_ms(self.clock.system_now());
        let opening = BreakerOpening {
            arm: pause_of(provider),
            open_until_ms: now_ms.saturating_add(retry_after),
            opened_by: self.node.clone(),
            reason: format!(
                "the provider answered 429 and asked to wait {} ms",
                retry_after.as_millis()
            ),
            updated_at_ms: now_ms,
        };
        match self.store.publish_breaker_open(opening).await {
            Ok(stored) => tracing::info!(
                node = %self.node,
                provider,
                until_ms = stored.open_until_ms.as_millis(),
                "published a provider's 429 pause: every process on the store holds its calls to it until then"
            ),
            Err(e) => {
                tracing::warn!(node = %self.node, provider, "cannot publish a provider's 429 pause: {e}");
            }
        }
    }

    /// Publishes (opened) or clears (closed) `provider`'s arm after a
    /// transition of this node's arm; other transitions change nothing.
    pub(super) async fn share(&self, provider: &str, transition: &Transition) {
        self.share_arm(ArmKind::Provider, provider, transition)
            .await;
    }

    /// [`share`](Self::share) for an arm of any kind.
    pub(super) async fn share_arm(&self, kind: ArmKind, name: &str, transition: &Transition) {
        let (arm, provider) = (arm_name(kind, name), name);
        match transition {
            Transition::Opened { reason, until, .. } => {
                let now_ms = unix_ms(self.clock.system_now());
                let left = until.saturating_duration_since(self.clock.now());
                let opening = BreakerOpening {
                    arm,
                    open_until_ms: now_ms.saturating_add(left),
                    opened_by: self.node.clone(),
                    reason: reason.to_string(),
                    updated_at_ms: now_ms,
                };
                if let Err(e) = self.store.publish_breaker_open(opening).await {
                    tracing::warn!(node = %self.node, provider, "cannot publish a breaker opening: {e}");
                }
            }
            Transition::Closed { .. } => {
                if let Err(e) = self.store.clear_breaker_open(&arm, &self.node).await {
                    tracing::warn!(node = %self.node, provider, "cannot clear a breaker opening: {e}");
                }
            }
            _ => {}
        }
    }

    /// [`share`](Self::share) in the background, for a transition seen
    /// where nothing can wait (the end of a stream).
    pub(super) fn share_later(self: &Arc<Self>, provider: &str, transition: &Transition) {
        if !matches!(
            transition,
            Transition::Opened { .. } | Transition::Closed { .. }
        ) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(provider, "no runtime to publish a breaker transition on");
            return;
        };
        let (shared, provider, transition) =
            (self.clone(), provider.to_owned(), transition.clone());
        runtime.spawn(async move { shared.share(&provider, &transition).await });
    }
}

impl Engine {
    /// The shared view, when on.
    pub(super) fn shared_breakers(&self) -> Option<&Arc<SharedBreakers>> {
        self.shared.shared_breakers.as_ref()
    }

    /// Refuses a call to `provider` that another node's opening forbids,
    /// while this node's own arm is not open: the `circuit_open` failure an
    /// open local arm gives, after a `call_rejected` event with
    /// `"shared": true`. `None` (call on to the local arm) when sharing is
    /// off or nothing forbids it.
    pub(super) async fn admit_shared(
        &self,
        emitter: &Emitter,
        c: &Correlation,
        provider: &str,
    ) -> Option<Failure> {
        self.admit_shared_arm(emitter, c, ArmKind::Provider, provider)
            .await
    }

    /// [`admit_shared`](Self::admit_shared) for an arm of any kind; a
    /// Retry-After cooldown of the arm (any node's) refuses it too.
    pub(super) async fn admit_shared_arm(
        &self,
        emitter: &Emitter,
        c: &Correlation,
        kind: ArmKind,
        provider: &str,
    ) -> Option<Failure> {
        let shared = self.shared_breakers()?;
        shared.refresh().await;
        let (opening, retry_after) = shared.refusal(kind, provider)?;
        let now = self.clock.now();
        let locally_open = self
            .shared
            .breakers()
            .get(kind, provider)
            .and_then(|arm| arm.open_until())
            .is_some_and(|until| until > now);
        if locally_open {
            return None;
        }
        emitter.emit(
            c,
            CallRejected::CircuitOpen(CircuitRejected {
                arm: kind,
                name: provider.to_owned(),
                reason: CircuitOpen::CircuitOpen,
                retry_after,
                shared: Some(true),
                opened_by: Some(opening.opened_by.clone()),
                open_reason: Some(opening.reason.clone()),
            }),
        );
        Some(Failure::circuit_open(provider, retry_after))
    }

    /// Holds `gate` (`provider`'s) until another node's pause of the
    /// provider ends, if one is in force: read from the store (at most
    /// every `refresh`, or at once on a notified change) before each call
    /// to the provider, so no call goes out into a pause another process
    /// was told of. `false` when sharing is off or nothing holds it.
    pub(super) async fn honour_shared_pause(&self, provider: &str, gate: &Gate<'_>) -> bool {
        let Some(shared) = self.shared_breakers() else {
            return false;
        };
        shared.refresh().await;
        let Some((opening, left)) = shared.pause(provider) else {
            return false;
        };
        let extended = gate.pause_until(self.clock.now() + left);
        if extended {
            tracing::info!(
                provider,
                opened_by = %opening.opened_by,
                pause_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                "another process was told to wait by this provider (429): every call to it waits until then"
            );
        }
        extended
    }

    /// How long until another node's opening of `provider` ends, as last
    /// read (for a caller's `Retry-After`).
    pub(super) fn shared_reopens_in(&self, provider: &str) -> Option<Duration> {
        self.shared_breakers()?
            .open(provider)
            .map(|(_, retry_after)| retry_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_arms_are_named_by_kind_and_name() {
        assert_eq!(arm_of("openai"), "provider.openai");
    }
}
