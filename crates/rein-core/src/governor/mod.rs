//! The governor: rate limits per resource group, adaptive concurrency,
//! tiered tenant quotas and a weighted fair queue — step 4 of the guarded
//! call, as pure policies told `now`.
//!
//! # Why
//!
//! The fan-out of an agent is decided by the model and has no a priori
//! bound (seed 000, "Concurrency and Rate Limiting Across Tools"): a turn
//! may plan thirty-six calls, and the limit must hold where calls leave.
//! Limits hang on the downstream *resource group*, not the tool name —
//! thirty tools each limited to five reach one backend at a hundred and
//! fifty. Inside a group:
//!
//! | part | module | bounds |
//! | --- | --- | --- |
//! | [`TokenBucket`] | `bucket.rs` | calls per second with a burst; model tokens per minute, charged with the estimate and [settled](TokenBucket::settle) with the actual usage |
//! | [`AdaptiveLimit`] | `adaptive.rs` | calls in flight: AIMD over a latency EWMA and its baseline, shrinking ×0.9 on latency or overload, +1 per round of successes |
//! | quotas | `quota.rs` | global (the limit) / tenant (a weighted share, `tenant_max`) / run (`run_max`); borrowing of idle capacity, returned on demand |
//! | [`FairQueue`] | `fair.rs` | who waits least: deficit round robin between tenants by weight, interactive before batch with batch's reserved share |
//! | [`Governor`] | `state.rs` | composes them behind one [`admit`](Governor::admit) |
//! | [`Members`], [`Share`] | `share.rs` | a cluster: each of `n` live nodes runs at its part of the group's rate, burst and ceiling ([`share_among`](Governor::share_among)), so the cluster holds the group's limits |
//!
//! Nothing here reads the clock, sleeps, locks or does I/O; the success
//! path of `admit` allocates nothing once the group has seen the tenant
//! (and, with `run_max`, the run): `tests/governor_alloc.rs` counts.
//!
//! # Use (the engine at step 4 of the guarded call)
//!
//! The engine holds one [`Governor`] per resource group behind a lock, reads
//! the clock once per decision, and:
//!
//! ```text
//! admit(Request { tenant, run, class, tokens }, now)
//!   ├─ Granted(permit) ──▶ send … release(permit, completion, used_tokens, now)
//!   │                                  └─▶ Released { adjustment, settled }: `concurrency_adjusted`
//!   ├─ Queued { ticket, cause, not_before }: `rate_limited` / `quota_exceeded` from the cause;
//!   │     not_before past what the deadline allows → cancel(ticket), shed (`call_shed`);
//!   │     else wait for the ticket's permit, bounded by the deadline (then cancel and shed),
//!   │     and check the budget again before sending
//!   └─ Rejected(rejection) ──▶ shed: it can never be granted
//!
//! poll(now) after every queued admit, every release and cancel, and at Blocked::Until's instant:
//!   Granted(grant) → hand grant.permit to grant.ticket's waiter; poll again
//!   Blocked(Release) → wait for a release · Blocked(Until { at, .. }) → a timer at `at` · Idle
//! ```
//!
//! [`Completion::from_failure`] maps a failed call's category to what the
//! limit learns (429, overload and timeouts shrink it).
//!
//! # Config
//!
//! [`GovernorConfig`] is one resource group's. The registry's
//! `[resource_groups.NAME]` fields map onto it as the engine's wiring
//! (`rein-engine`'s `run/concurrency.rs`) does:
//!
//! | registry | governor | note |
//! | --- | --- | --- |
//! | `rate_per_sec` | `rate_per_sec` | same meaning and range check |
//! | `burst` | `burst` | same default: `rate_per_sec` rounded up |
//! | `max_concurrency` | `concurrency.max`, with `initial = max` and `min = 1` | unset in the registry means no ceiling (a fixed limit of 100 000), not the governor's own default of 64: a group that asks only for a rate keeps its fan-out |
//!
//! Everything else is new: `tokens_per_minute`, `token_burst`,
//! `concurrency.*`, `quotas.*` and `batch_share`. Validation names the field
//! as `governor.FIELD`; the loader prefixes the group's path and file.
//!
//! # Defaults
//!
//! | setting | default | range |
//! | --- | --- | --- |
//! | `rate_per_sec` | none (no request bucket) | [0.000001, 1e9] calls/s, kept to the millionth |
//! | `burst` | `rate_per_sec` rounded up | ≥ 1; needs `rate_per_sec` |
//! | `tokens_per_minute` | none (no token bucket) | [1, 1e12] |
//! | `token_burst` | `tokens_per_minute` | [1, 1e12]; needs `tokens_per_minute` |
//! | `concurrency.initial` | [`DEFAULT_INITIAL_CONCURRENCY`] = 8, clamped into [min, max] | [min, max] |
//! | `concurrency.min` | [`DEFAULT_MIN_CONCURRENCY`] = 1 | [1, max] |
//! | `concurrency.max` | [`DEFAULT_MAX_CONCURRENCY`] = 64 | [min, 100 000] |
//! | `concurrency.backoff` | [`DEFAULT_BACKOFF`] = 0.9 | (0, 1) |
//! | `concurrency.latency_tolerance` | [`DEFAULT_LATENCY_TOLERANCE`] = 1.5 × baseline | (1, 100] |
//! | `concurrency.smoothing` | [`DEFAULT_SMOOTHING`] = 0.1 | (0, 1] |
//! | `concurrency.baseline_interval` | [`DEFAULT_BASELINE_INTERVAL`] = 60 s | > 0 |
//! | `concurrency.warmup_samples` | [`DEFAULT_WARMUP_SAMPLES`] = 10 | ≥ 1 |
//! | `quotas.default_weight` | [`DEFAULT_TENANT_WEIGHT`] = 1 | [0.001, 1000]; needs `weights` |
//! | `quotas.weights` | none (all tenants equal) | each in [0.001, 1000] |
//! | `quotas.tenant_max` | none (up to the limit) | [1, concurrency.max) |
//! | `quotas.run_max` | none (up to the tenant's) | [1, tenant_max or concurrency.max) |
//! | `batch_share` | [`DEFAULT_BATCH_SHARE`] = 0.1 | [0.001, 0.5] |
//!
//! ```toml
//! rate_per_sec = 20.0
//! burst = 40
//! [concurrency]
//! max = 8
//! [quotas]
//! run_max = 4
//! weights = { acme = 2.0 }
//! ```

mod adaptive;
mod bucket;
mod config;
mod constants;
mod decision;
mod fair;
mod quota;
mod share;
mod state;

pub use adaptive::{AdaptiveLimit, Adjustment, AtLimit, Completion, LimitPermit, ShrinkReason};
pub use bucket::{Acquire, Rate, Settled, TokenBucket};
pub use config::{BatchShare, ConcurrencyConfig, GovernorConfig, QuotaConfig, TenantWeights};
pub use constants::{
    DEFAULT_BACKOFF, DEFAULT_BASELINE_INTERVAL, DEFAULT_BATCH_SHARE, DEFAULT_INITIAL_CONCURRENCY,
    DEFAULT_LATENCY_TOLERANCE, DEFAULT_MAX_CONCURRENCY, DEFAULT_MIN_CONCURRENCY, DEFAULT_SMOOTHING,
    DEFAULT_TENANT_WEIGHT, DEFAULT_WARMUP_SAMPLES, MAX_BATCH_SHARE, MAX_CONCURRENCY_CEILING,
    MAX_LATENCY_TOLERANCE, MAX_RATE_PER_SEC, MAX_TENANT_WEIGHT, MAX_TOKENS_PER_MINUTE,
    MIN_RATE_PER_SEC, MIN_TENANT_WEIGHT,
};
pub use decision::{
    Admit, Blocked, BucketKind, Cause, DecisionKind, Grant, Poll, Rejection, Released, Ticket,
};
pub use fair::{Class, Dequeued, FairQueue};
pub use quota::QuotaTier;
pub use share::{Members, Share};
pub use state::{Governor, Permit, Request};
