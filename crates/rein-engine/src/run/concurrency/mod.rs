//! The governor's async shell: one [`Governor`] per resource group (and per
//! limited provider), shared by every run of the engine, in front of each
//! attempt — step 4 of the guarded call (invariant 7).
//!
//! # Why
//!
//! A resource group is one backend shared by several tools; its rate and
//! ceiling are what that backend can take, whoever calls. So the governors
//! live in the engine, not in a run: a run that fans out cannot crowd the
//! backend, and two runs together cannot either. The decisions themselves
//! are rein-core's (`rein_core::governor`, pure, told `now`); this module
//! only reads the clock, holds the lock, parks waiters and wakes them.
//!
//! # How
//!
//! - [`GroupSlots`] maps a group name to its governor, built the first time
//!   a call of the group is made from the registry's settings
//!   ([`GroupLimits`]). A group with neither a rate nor a ceiling has no
//!   governor: it costs the one map lookup that finds none.
//! - [`Gate::enter`] reads the clock once and asks [`Governor::admit`]. A
//!   queued request whose `not_before` (when the buckets could admit it
//!   behind the calls queued before it in its lane) leaves no room before
//!   its latest start (the deadline minus what the call needs; a parallel
//!   turn's call plans against the turn's horizon, see
//!   `guarded::govern::latest_start`) is cancelled and shed at once;
//!   otherwise it parks on a oneshot channel, bounded by that latest
//!   start, and is shed if nothing comes. Dropping the wait (the run was
//!   interrupted) cancels the ticket.
//! - Waiters are woken by [`Governor::poll`], which runs after every queued
//!   admission, every release and every cancel, and from a timer at the
//!   instant of [`Blocked::Until`] (one task per earliest instant, on the
//!   engine's [`Timer`], so paused test time drives it).
//! - A [`Slot`] is RAII: dropped, it releases its permit with the call's
//!   [`Completion`] (set by [`Slot::finish`]; a slot dropped unfinished
//!   teaches the limit nothing), so adaptive concurrency learns from
//!   latency and from 429 / overload / timeouts.
//!
//! Each *attempt* (the HTTP request or command, and the lookup by key that
//! settles it) holds one slot; the wait before a retry does not, so a call
//! backing off does not keep others out.
//!
//! # Settings
//!
//! | registry `[resource_groups.NAME]` | governor | why |
//! | --- | --- | --- |
//! | `rate_per_sec`, `burst` | the request bucket | same meaning, same default burst |
//! | `max_concurrency = N` | adaptive limit in `[1, N]`, starting at `N` | the operator's ceiling is where a healthy backend runs; the limit only goes below it on evidence (429, overload, timeouts, latency rising past 1.5 × its baseline) and grows back by one per round of successes |
//! | `max_concurrency` unset | no ceiling (a fixed limit of 100 000) | as before the governor: the governor's own default of 64, or a start at 8, would silently cap every fan-out of a group that only asked for a rate |
//!
//! Every provider has a gate too ([`GroupSlots::provider_gate`]): its
//! `max_concurrency` as a fixed ceiling (no adaptation), its
//! `tokens_per_minute` bucket charged with each call's prompt bound and
//! reserved output and settled with the usage ([`Slot::settle`]), and the
//! pause a 429 with `Retry-After` sets ([`Gate::pause_until`]); callers are
//! served in arrival order. With a cluster, a provider with limits shares
//! them through the lease `provider:NAME`.
//!
//! Tenant and class: a tool call is admitted for its run's tenant, in its
//! agent tree's class: [`Class::Batch`] when the root run was queued
//! (`RunRequest::enqueued`, kept across a resume by its `run_started`),
//! [`Class::Interactive`] otherwise. At a busy group interactive calls go
//! first, and batch keeps its reserved share (`batch_share`, 10 % by
//! default) so it is never starved (rein-core's `FairQueue`).
//!
//! NOTE: the first settings seen for a group hold for the engine's
//! lifetime; agents bound from one registry always agree. A binding that
//! names other settings for the same group is logged and the first ones
//! stay (changing the limits under waiters would briefly break either the
//! old or the new ones).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rein_core::deadline::Deadline;
use rein_core::governor::Settled;
use rein_core::governor::{
    Adjustment, Admit, Blocked, Cause, Class, Completion, ConcurrencyConfig, Governor,
    GovernorConfig, MAX_CONCURRENCY_CEILING, Permit, Poll, Rejection, Request, Ticket,
};
use rein_core::registry::{RateLimit, TokenLimit};
use rein_core::{Category, Failure, Instant, RunId, TenantId};
use tokio::sync::{oneshot, watch};

use crate::Timer;

mod cluster;
pub(crate) use cluster::Cluster;
pub use cluster::{DEFAULT_SHARE_RENEWAL, SHARE_LEASE_TTL_RENEWALS};

/// What the registry sets for one resource group: its request bucket and
/// its ceiling. Neither: the group is not governed.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GroupLimits {
    /// `rate_per_sec` and `burst`.
    pub rate: Option<RateLimit>,
    /// `max_concurrency`.
    pub max_concurrency: Option<NonZeroU32>,
}

impl GroupLimits {
    /// Whether the group has anything to govern.
    pub fn is_governed(&self) -> bool {
        self.rate.is_some() || self.max_concurrency.is_some()
    }

    /// The governor config of a tool group (see the module's settings
    /// table).
    fn config(&self) -> GovernorConfig {
        GovernorConfig::tool_group(self.rate, self.max_concurrency)
    }
}

/// A limit fixed at `n`.
fn fixed(n: u32) -> ConcurrencyConfig {
    let mut c = ConcurrencyConfig::default();
    c.min = n;
    c.max = n;
    c.initial = Some(n);
    c
}

/// Who asks for a slot: the tenant and run a call is made for, and its
/// class.
#[derive(Debug, Clone, Copy)]
pub(super) struct Caller<'a> {
    pub(super) tenant: &'a TenantId,
    pub(super) run: &'a RunId,
    pub(super) class: Class,
}

/// The governors of every governed resource group (or provider), by name.
pub(super) struct GroupSlots {
    clock: Arc<dyn Timer>,
    groups: Mutex<HashMap<String, Arc<Governed>>>,
    /// The nodes this engine divides its groups' limits with, when it
    /// shares a store with them (`cluster.rs`).
    cluster: Option<Arc<Cluster>>,
}

impl GroupSlots {
    /// No governor yet; each is made on its group's first call, on `clock`.
    pub(super) fn new(clock: Arc<dyn Timer>) -> GroupSlots {
        GroupSlots {
            clock,
            groups: Mutex::new(HashMap::new()),
            cluster: None,
        }
    }

    /// The same, dividing each group's limits with the other nodes of
    /// `cluster`.
    pub(super) fn shared(clock: Arc<dyn Timer>, cluster: Option<Arc<Cluster>>) -> GroupSlots {
        GroupSlots {
            cluster,
            ..GroupSlots::new(clock)
        }
    }

    /// The gate of `group` governed by `limits`, or `None` for a group with
    /// nothing to govern.
    pub(super) fn governed<'g>(&self, group: &'g str, limits: GroupLimits) -> Option<Gate<'g>> {
        if !limits.is_governed() {
            return None;
        }
        Some(self.gate_with(group, limits, Some(group.to_owned()), || limits.config()))
    }

    /// The gate of `group` as [`GroupSlots::governed`] makes it, but with
    /// its concurrency limit fixed at the ceiling (the `fixed_concurrency`
    /// sabotage: the adaptive limit that never adapts).
    #[cfg(feature = "sabotage")]
    pub(super) fn governed_fixed<'g>(
        &self,
        group: &'g str,
        limits: GroupLimits,
    ) -> Option<Gate<'g>> {
        if !limits.is_governed() {
            return None;
        }
        Some(self.gate_with(group, limits, Some(group.to_owned()), || {
            let mut config = limits.config();
            config.concurrency = fixed(config.concurrency.max);
            config
        }))
    }

    /// The gate of provider `provider`: a fixed ceiling of its
    /// `max_concurrency` (none: unlimited), its token bucket
    /// (`tokens_per_minute`), and its pause after a 429. Every provider has
    /// one, so a 429 holds the provider for every run of the engine. Its
    /// share lease (when limits are shared with a cluster) is named
    /// `provider:NAME`, apart from any resource group of the same name.
    pub(super) fn provider_gate<'g>(
        &self,
        provider: &'g str,
        limit: Option<NonZeroU32>,
        tokens: Option<TokenLimit>,
    ) -> Gate<'g> {
        let limits = GroupLimits {
            rate: None,
            max_concurrency: limit,
        };
        // A provider without limits has nothing to divide: only its pause,
        // which is this process's.
        let lease = (limit.is_some() || tokens.is_some()).then(|| format!("provider:{provider}"));
        self.gate_with(provider, limits, lease, || {
            GovernorConfig::provider(limit, tokens)
        })
    }

    /// Gives up this node's share leases of every group it governs (see
    /// `cluster.rs`); nothing without a cluster.
    pub(super) async fn leave_cluster(&self) {
        let Some(cluster) = &self.cluster else {
            return;
        };
        let names: Vec<String> = {
            let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            groups.values().map(|g| g.lease.clone()).collect()
        };
        cluster.leave(&names).await;
    }

    /// Calls waiting in `group`'s governor.
    pub(super) fn queued(&self, group: &str) -> usize {
        let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        groups.get(group).map_or(0, |g| g.lock().governor.queued())
    }

    /// What every governor here holds now: the operator's capacity view
    /// ([`super::GroupUse`]), each a resource group's until the caller
    /// says otherwise (the engine keeps providers' slots apart).
    pub(super) fn uses(&self) -> Vec<super::GroupUse> {
        let governed: Vec<Arc<Governed>> = {
            let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            groups.values().cloned().collect()
        };
        let mut uses: Vec<super::GroupUse> = governed
            .iter()
            .map(|g| {
                let state = g.lock();
                let limit = state.governor.concurrency();
                // Without `max_concurrency` the ceiling is the governor's
                // own bound, which no operator set: shown as none.
                let bounded = g.limits.max_concurrency.is_some();
                super::GroupUse {
                    kind: super::GateKind::ResourceGroup,
                    name: g.name.clone(),
                    limit: bounded.then(|| limit.limit()),
                    ceiling: bounded.then(|| limit.max()),
                    in_flight: limit.in_flight(),
                    queued: state.governor.queued(),
                }
            })
            .collect();
        uses.sort_by(|a, b| a.name.cmp(&b.name));
        uses
    }

    /// The current limit of `group`'s governor.
    pub(super) fn limit(&self, group: &str) -> Option<u32> {
        let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        groups
            .get(group)
            .map(|g| g.lock().governor.concurrency().limit())
    }

    fn gate_with<'g>(
        &self,
        group: &'g str,
        limits: GroupLimits,
        lease: Option<String>,
        config: impl FnOnce() -> GovernorConfig,
    ) -> Gate<'g> {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let governed = match groups.get(group) {
            Some(governed) => governed.clone(),
            None => {
                let cluster = self.cluster.as_ref().filter(|_| lease.is_some());
                let (joiner, joined) = watch::channel(cluster.is_none());
                let mut governed = Governed::new(group, limits, config(), &self.clock, joined);
                if let Some(lease) = lease {
                    governed.lease = lease;
                }
                let governed = Arc::new(governed);
                if let Some(cluster) = cluster {
                    cluster.join(&governed, joiner);
                }
                groups.insert(group.to_owned(), governed.clone());
                governed
            }
        };
        drop(groups);
        if governed.limits != limits {
            tracing::warn!(
                group,
                first = ?governed.limits,
                requested = ?limits,
                "resource group already has other limits in this engine; the first ones hold"
            );
        }
        Gate { group, governed }
    }
}

/// One group's governor and the waiters it will hand permits to.
struct Governed {
    name: String,
    /// The name of its share lease in the store (`cluster.rs`): the
    /// group's, or `provider:NAME` for a provider.
    lease: String,
    limits: GroupLimits,
    clock: Arc<dyn Timer>,
    /// The caller of a gate entered without one (a provider's slot): one
    /// tenant, so its queue is served in arrival order.
    anonymous: Option<(TenantId, RunId)>,
    /// `true` once this node knows its part of the group's limits (at
    /// once for a group not shared with other nodes).
    joined: watch::Receiver<bool>,
    state: Mutex<State>,
}

struct State {
    governor: Governor,
    waiters: HashMap<Ticket, oneshot::Sender<Permit>>,
    /// The instant the earliest pending wake-up timer fires at.
    wake_at: Option<Instant>,
    /// Whether the cluster's division has been applied once.
    shared: bool,
}

impl Governed {
    fn new(
        group: &str,
        limits: GroupLimits,
        config: GovernorConfig,
        clock: &Arc<dyn Timer>,
        joined: watch::Receiver<bool>,
    ) -> Governed {
        let governor = Governor::new(config).unwrap_or_else(|e| {
            // The registry's checks keep this from happening (rein check
            // refuses what the governor cannot take); a binding built by
            // hand falls back to no limit rather than failing its calls.
            tracing::error!(
                group,
                "resource group limits the governor cannot take ({e}); the group is not limited"
            );
            let mut open = GovernorConfig::default();
            open.concurrency = fixed(MAX_CONCURRENCY_CEILING);
            Governor::new(open).unwrap_or_else(|_| unreachable_governor())
        });
        Governed {
            name: group.to_owned(),
            lease: group.to_owned(),
            limits,
            clock: clock.clone(),
            anonymous: TenantId::new("anonymous")
                .ok()
                .zip(RunId::new("anonymous").ok()),
            joined,
            state: Mutex::new(State {
                governor,
                waiters: HashMap::new(),
                wake_at: None,
                shared: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands every waiter whose turn has come its permit, and arranges to
    /// be called again when a bucket will have refilled.
    fn pump(self: &Arc<Self>, state: &mut State, now: Instant) {
        loop {
            match state.governor.poll(now) {
                Poll::Granted(grant) => {
                    let undelivered = match state.waiters.remove(&grant.ticket) {
                        Some(waiter) => waiter.send(grant.permit).err(),
                        None => Some(grant.permit),
                    };
                    // A waiter that left between its cancel and this grant:
                    // the slot goes back unused.
                    if let Some(permit) = undelivered {
                        let _ = state
                            .governor
                            .release(permit, Completion::Ignored, None, now);
                    }
                }
                Poll::Blocked(Blocked::Until { at, .. }) => {
                    let scheduled = state.wake_at.is_some_and(|w| w > now && w <= at);
                    if !scheduled {
                        state.wake_at = Some(at);
                        self.wake_at(at);
                    }
                    return;
                }
                Poll::Blocked(Blocked::Release) | Poll::Idle => return,
            }
        }
    }

    /// A timer that polls again at `at`.
    fn wake_at(self: &Arc<Self>, at: Instant) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let me = Arc::clone(self);
        runtime.spawn(async move {
            me.clock.sleep_until(at).await;
            let now = me.clock.now();
            let mut state = me.lock();
            if state.wake_at == Some(at) {
                state.wake_at = None;
            }
            me.pump(&mut state, now);
        });
    }

    fn release(self: &Arc<Self>, permit: Permit, completion: Completion) -> Adjustment {
        self.release_used(permit, completion, None).adjustment
    }

    /// Releases `permit`, settling its token charge with `used` tokens
    /// when known.
    fn release_used(
        self: &Arc<Self>,
        permit: Permit,
        completion: Completion,
        used: Option<u64>,
    ) -> rein_core::governor::Released {
        let now = self.clock.now();
        let mut state = self.lock();
        let released = state.governor.release(permit, completion, used, now);
        self.pump(&mut state, now);
        released
    }

    /// Takes `ticket` out of the queue; a permit granted to it meanwhile
    /// goes back unused.
    fn cancel(self: &Arc<Self>, ticket: Ticket, granted: Option<Permit>) {
        let now = self.clock.now();
        let mut state = self.lock();
        state.waiters.remove(&ticket);
        let _ = state.governor.cancel(ticket);
        if let Some(permit) = granted {
            let _ = state
                .governor
                .release(permit, Completion::Ignored, None, now);
        }
        self.pump(&mut state, now);
    }
}

/// A governor built from the defaults with a fixed ceiling always
/// validates; this is never reached.
fn unreachable_governor() -> Governor {
    let mut config = GovernorConfig::default();
    config.concurrency = fixed(1);
    match Governor::new(config) {
        Ok(g) => g,
        Err(e) => unreachable!("the default governor config is valid: {e}"),
    }
}

/// One call's access to its resource group's governor, resolved once per
/// call.
pub(super) struct Gate<'g> {
    group: &'g str,
    governed: Arc<Governed>,
}

/// A held slot of a group: released when dropped, with the completion
/// [`finish`](Slot::finish) set (none: the limit learns nothing). Owned, so
/// a streamed answer can hold its provider slot until the stream ends.
pub(super) struct Slot {
    held: Option<(Arc<Governed>, Permit)>,
    /// How long the attempt queued for it.
    pub(super) waited: Duration,
    /// Why it queued, when it did (the rationale of `rate_limited`).
    pub(super) cause: Option<Cause>,
}

impl Slot {
    /// The resource group (or provider) the slot belongs to.
    pub(super) fn group(&self) -> &str {
        self.held.as_ref().map_or("", |(g, _)| g.name.as_str())
    }

    /// Releases a model call's slot with the tokens the provider counted
    /// (`None`: unknown, the estimate stays charged): how the token
    /// bucket's charge was corrected, for a provider with one.
    pub(super) fn settle(mut self, used: Option<u64>) -> Option<Settled> {
        let (governed, permit) = self.held.take()?;
        governed
            .release_used(permit, Completion::Ignored, used)
            .settled
    }

    /// The tokens the slot's admission charged (its estimate).
    pub(super) fn charged(&self) -> u64 {
        self.held.as_ref().map_or(0, |(_, p)| p.tokens())
    }

    /// Releases the slot now with how its call ended; the adjustment of
    /// the group's limit is what `concurrency_adjusted` records.
    pub(super) fn finish(mut self, completion: Completion) -> Adjustment {
        match self.held.take() {
            Some((governed, permit)) => governed.release(permit, completion),
            None => Adjustment::Unchanged,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((governed, permit)) = self.held.take() {
            let _ = governed.release(permit, Completion::Ignored);
        }
    }
}

/// The `call_shed` reason of a call admitted after a wait that left it
/// less than it needs (the check is the caller's: the gate does not know
/// the budget).
pub(super) const BUDGET_AFTER_WAIT: &str = "budget_after_wait";

/// Why a call was not let through: it is shed, never sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum ShedReason {
    /// The group's buckets admit it only at `not_before` (behind the calls
    /// queued before it in its own lane), past `latest`, the latest instant
    /// it could start and still finish: shed before it waits.
    NoTime {
        /// When the buckets could admit it.
        not_before: Instant,
        /// The latest instant it could have started.
        latest: Instant,
        /// Why it would have waited.
        cause: Cause,
    },
    /// It waited until its latest start and no slot came.
    WaitExpired {
        /// Why it waited.
        cause: Cause,
    },
    /// The governor can never grant it.
    Rejected(Rejection),
    /// This node did not learn its part of the group's limits (shared
    /// with the other nodes on its store) before its latest start.
    ShareUnknown,
}

impl ShedReason {
    /// The reason's name as events show it.
    pub(super) fn as_str(&self) -> &'static str {
        match self {
            ShedReason::NoTime { .. } => "no_time",
            ShedReason::WaitExpired { .. } => "wait_expired",
            ShedReason::Rejected(_) => "rejected",
            ShedReason::ShareUnknown => "share_unknown",
        }
    }
}

/// A call the governor did not let through.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shed {
    /// How long the attempt queued.
    pub(super) waited: Duration,
    /// Why it was shed.
    pub(super) reason: ShedReason,
}

/// What an admission left the caller with.
enum Admitted {
    /// A slot, at once.
    Granted(Slot),
    /// A place in the queue, and why.
    Parked(Waiting, Cause),
}

/// A parked waiter: dropped before its permit came (its deadline, or the
/// run's interrupt), it cancels its ticket.
struct Waiting {
    governed: Arc<Governed>,
    ticket: Ticket,
    permit: Option<oneshot::Receiver<Permit>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        // No receiver left: the permit was delivered, nothing to cancel.
        let Some(mut rx) = self.permit.take() else {
            return;
        };
        self.governed.cancel(self.ticket, rx.try_recv().ok());
    }
}

impl<'g> Gate<'g> {
    /// The group's name.
    pub(super) fn group(&self) -> &'g str {
        self.group
    }

    /// The group's ceiling: its `max_concurrency`, or the governor's
    /// largest for a group that sets none.
    pub(super) fn ceiling(&self) -> NonZeroU32 {
        self.governed
            .limits
            .max_concurrency
            .or(NonZeroU32::new(MAX_CONCURRENCY_CEILING))
            .unwrap_or(NonZeroU32::MAX)
    }

    /// The group's request bucket, if it has one.
    pub(super) fn rate(&self) -> Option<RateLimit> {
        self.governed.limits.rate
    }

    /// Holds every call of the group until `until` (the provider answered
    /// 429 and said when to come back); `true` when that extended the
    /// pause. See [`Governor::pause_until`].
    pub(super) fn pause_until(&self, until: Instant) -> bool {
        let now = self.governed.clock.now();
        let mut state = self.governed.lock();
        let paused = state.governor.pause_until(until, now);
        self.governed.pump(&mut state, now);
        paused
    }

    /// The current concurrency limit (at most the ceiling).
    #[cfg(test)]
    pub(super) fn limit(&self) -> u32 {
        self.governed.lock().governor.concurrency().limit()
    }

    /// Takes a slot for a caller the gate does not tell apart from others
    /// (a provider's), charging `tokens` to its token bucket, queueing in
    /// arrival order until it is admitted or until the latest instant the
    /// call can start and still have `need` before `deadline`.
    ///
    /// # Errors
    ///
    /// [`Shed`] when no slot came before the deadline.
    pub(super) async fn enter(
        &self,
        deadline: Deadline,
        need: Duration,
        tokens: u64,
    ) -> Result<Slot, Shed> {
        match &self.governed.anonymous {
            Some((tenant, run)) => {
                let caller = Caller {
                    tenant,
                    run,
                    class: Class::Interactive,
                };
                self.enter_charged(caller, deadline, need, tokens).await
            }
            None => Err(Shed {
                waited: Duration::ZERO,
                reason: ShedReason::WaitExpired {
                    cause: Cause::Backlog { queued: 0 },
                },
            }),
        }
    }

    /// The decision at `now`, under the lock: a slot at once, a shed, or a
    /// waiter parked on its ticket.
    fn admit(
        &self,
        caller: Caller<'_>,
        tokens: u64,
        now: Instant,
        latest: Instant,
    ) -> Result<Admitted, Shed> {
        let governed = &self.governed;
        let request = Request::new(caller.tenant, caller.run)
            .class(caller.class)
            .tokens(tokens);
        let mut state = governed.lock();
        let (ticket, cause) = match state.governor.admit(request, now) {
            Admit::Granted(permit) => {
                return Ok(Admitted::Granted(Slot {
                    held: Some((governed.clone(), permit)),
                    waited: Duration::ZERO,
                    cause: None,
                }));
            }
            Admit::Rejected(rejection) => {
                return Err(Shed {
                    waited: Duration::ZERO,
                    reason: ShedReason::Rejected(rejection),
                });
            }
            Admit::Queued {
                ticket,
                cause,
                not_before,
            } if not_before > latest => {
                let _ = state.governor.cancel(ticket);
                governed.pump(&mut state, now);
                return Err(Shed {
                    waited: Duration::ZERO,
                    reason: ShedReason::NoTime {
                        not_before,
                        latest,
                        cause,
                    },
                });
            }
            Admit::Queued { ticket, cause, .. } => (ticket, cause),
        };
        let (tx, rx) = oneshot::channel();
        state.waiters.insert(ticket, tx);
        governed.pump(&mut state, now);
        let waiting = Waiting {
            governed: governed.clone(),
            ticket,
            permit: Some(rx),
        };
        Ok(Admitted::Parked(waiting, cause))
    }

    /// Takes a slot for `caller`, waiting (in the governor's fair order)
    /// until the group admits it or until the latest instant the call can
    /// start and still have `need` before `deadline`.
    ///
    /// # Errors
    ///
    /// [`Shed`] when the governor admits it only after that instant, no
    /// slot came by then, or it can never admit it.
    pub(super) async fn enter_for(
        &self,
        caller: Caller<'_>,
        deadline: Deadline,
        need: Duration,
    ) -> Result<Slot, Shed> {
        self.enter_charged(caller, deadline, need, 0).await
    }

    /// [`enter_for`](Gate::enter_for) charging `tokens` to the group's
    /// token bucket (a model call's prompt estimate and reserved output).
    async fn enter_charged(
        &self,
        caller: Caller<'_>,
        deadline: Deadline,
        need: Duration,
        tokens: u64,
    ) -> Result<Slot, Shed> {
        let governed = &self.governed;
        let mut now = governed.clock.now();
        let latest = Instant::from_origin(deadline.instant().since_origin().saturating_sub(need));
        if !*governed.joined.borrow() {
            // The first share lease renewal of the group is under way: a
            // call that went now would use the whole limit.
            let mut joined = governed.joined.clone();
            let clock: &dyn Timer = governed.clock.as_ref();
            let known = clock
                .timeout_at(latest, joined.wait_for(|j| *j))
                .await
                .is_ok_and(|r| r.is_ok());
            let started = now;
            now = governed.clock.now();
            if !known {
                return Err(Shed {
                    waited: now.saturating_duration_since(started),
                    reason: ShedReason::ShareUnknown,
                });
            }
        }
        let (mut waiting, cause) = match self.admit(caller, tokens, now, latest)? {
            Admitted::Granted(slot) => return Ok(slot),
            Admitted::Parked(waiting, cause) => (waiting, cause),
        };
        let granted = match waiting.permit.as_mut() {
            Some(rx) => {
                let clock: &dyn Timer = governed.clock.as_ref();
                clock.timeout_at(latest, rx).await.ok().and_then(Result::ok)
            }
            None => None,
        };
        let waited = governed.clock.now().saturating_duration_since(now);
        match granted {
            Some(permit) => {
                // Delivered: nothing to cancel.
                waiting.permit = None;
                Ok(Slot {
                    held: Some((governed.clone(), permit)),
                    waited,
                    cause: Some(cause),
                })
            }
            // Dropping `waiting` cancels the ticket (and gives back a
            // permit that came at the last moment).
            None => Err(Shed {
                waited,
                reason: ShedReason::WaitExpired { cause },
            }),
        }
    }
}

impl Shed {
    /// The structured failure of the call that was not made.
    pub(super) fn failure(&self, tool: &str, gate: &Gate<'_>) -> Failure {
        let limits = match (gate.governed.limits.max_concurrency, gate.rate()) {
            (Some(max), Some(rate)) => format!(
                "max_concurrency = {max}, rate_per_sec = {}, burst = {}",
                rate.per_sec, rate.burst
            ),
            (Some(max), None) => format!("max_concurrency = {max}"),
            (None, Some(rate)) => {
                format!("rate_per_sec = {}, burst = {}", rate.per_sec, rate.burst)
            }
            (None, None) => "no limits".to_owned(),
        };
        let group = gate.group();
        let why = match self.reason {
            ShedReason::NoTime {
                not_before, latest, ..
            } => {
                let now = gate.governed.clock.now();
                format!(
                    "it would have had to wait {:?} for resource group `{group}` ({limits}), behind the calls queued before it, but it had to start within {:?} to finish before its deadline; it was shed without waiting",
                    not_before.saturating_duration_since(now),
                    latest.saturating_duration_since(now)
                )
            }
            ShedReason::WaitExpired { .. } => format!(
                "it waited {:?} for a concurrency slot of resource group `{group}` ({limits}) and none came in time to finish before the call's deadline",
                self.waited
            ),
            ShedReason::Rejected(rejection) => {
                format!("resource group `{group}` ({limits}) can never admit it: {rejection}")
            }
            ShedReason::ShareUnknown => format!(
                "it waited {:?} for this node's part of resource group `{group}` ({limits}), shared with the other nodes on its store, and the store did not answer in time",
                self.waited
            ),
        };
        Failure::new(tool, Category::Timeout)
            .with_human_message(format!("{tool} was not called: {why}"))
    }
}

#[cfg(test)]
mod tests;
