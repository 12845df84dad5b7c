//! Named crash points: abort the process at a chosen point, for the crash
//! matrix of the chaos suite.
//!
//! # Why
//!
//! "A crash never loses or duplicates a side effect" is a claim about what
//! happens when the process dies between two writes. Only a real abort at
//! each of those points — not a graceful error path — proves it. With the
//! `crash-points` feature, setting `REIN_CRASH_AT=<point>[:<n>]` aborts the
//! process (`std::process::abort`, no unwinding, no flushing) the `n`-th
//! time (default 1) execution reaches `<point>`. Without the feature, or
//! without the variable, a crash point costs one branch.
//!
//! | point | where |
//! | --- | --- |
//! | `before_pending` | a call with side effects, before its ledger record is written |
//! | `after_pending` | after the `pending` record is durable, before the call |
//! | `after_call` | after the tool answered (or failed), before the result is recorded |
//! | `mid_compensation` | after `compensation_started` is durable, before the compensation call |
//! | `during_checkpoint` | before a step's checkpoint is written |
//! | `after_reservation` | `rein serve`: a request's `Idempotency-Key` is reserved, before the request executes (nothing of it ran) |
//! | `awaiting_approval` | a run paused for a human: its requests and status are durable, its claim not yet released |
//!
//! # Panic points
//!
//! With the same feature, `REIN_PANIC_AT=<point>[@<agent>]` makes every
//! run (of `<agent>` only, when given) panic each time it reaches
//! `<point>`: the sabotage that proves a panic is contained at the run's
//! boundary (the run fails, its effects settle, the worker lives on). It
//! panics on every hit, so a redelivered run panics again.
//!
//! | panic point | where |
//! | --- | --- |
//! | `run_start` | a new run, before it is recorded or claimed |
//! | `during_checkpoint` | before a step's checkpoint is written (its calls' effects are in the ledger) |
//! | `queue_worker` | `rein serve`'s queue worker, before it drives a queued run: outside the run's boundary, so the worker ends |
//! | `after_settlement` | a run that did not succeed, after its settlement and before its end is recorded: the contained run settles again, and that settlement panics too |

/// The environment variable naming the server mechanisms a test build
/// breaks on purpose (comma-separated), so a test can show its checker
/// sees the difference:
///
/// | switch | breaks |
/// | --- | --- |
/// | `fifo_queue` | `rein serve`'s queue workers start the oldest queued run, whoever's, instead of picking fairly between tenants |
/// | `no_tenant_floor` | `rein serve`'s tenant floor is lent like the rest: one tenant's runs may hold every queue worker, so another tenant's run waits for one of them to end (`rein-server/src/queue/floor.rs`) |
/// | `no_class_priority` | every tool call is admitted to its resource group's governor as batch work: a sync (interactive) run's calls wait behind a queued flood's in arrival order, with no priority and no reserved share (`run/guarded/govern.rs`) |
/// | `unshared_provider_pause` | a provider's 429 pause is not published to the store: the other processes keep calling the provider during it (`run/shared_breakers.rs`) |
/// | `whole_limit_per_node` | every process takes the whole of each resource group's limits, as if alone on its store, instead of its part among the nodes holding share leases (`run/concurrency/cluster.rs`) |
pub const SABOTAGE_ENV: &str = "REIN_SABOTAGE";

/// Whether `switch` is listed in [`SABOTAGE_ENV`]; always false without
/// the `crash-points` feature (no shipped binary breaks anything).
pub fn sabotaged(switch: &str) -> bool {
    ENABLED && std::env::var(SABOTAGE_ENV).is_ok_and(|v| v.split(',').any(|s| s.trim() == switch))
}

/// Whether this build has live crash and panic points (the `crash-points`
/// feature: test builds and deliberately crashable binaries only).
pub const ENABLED: bool = cfg!(feature = "crash-points");

/// The environment variable that arms a crash point.
pub const CRASH_ENV: &str = "REIN_CRASH_AT";

/// The environment variable that arms a panic point.
pub const PANIC_ENV: &str = "REIN_PANIC_AT";

/// Every panic point, as named in [`PANIC_ENV`].
pub const PANIC_POINTS: [&str; 4] = [
    "run_start",
    "during_checkpoint",
    "queue_worker",
    "after_settlement",
];

/// Every crash point, as named in [`CRASH_ENV`].
pub const CRASH_POINTS: [&str; 7] = [
    "before_pending",
    "after_pending",
    "after_call",
    "mid_compensation",
    "during_checkpoint",
    "after_reservation",
    "awaiting_approval",
];

#[cfg(feature = "crash-points")]
mod armed {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};

    static TARGET: OnceLock<Option<(String, u32)>> = OnceLock::new();
    static HITS: AtomicU32 = AtomicU32::new(0);

    fn target() -> &'static Option<(String, u32)> {
        TARGET.get_or_init(|| {
            let value = std::env::var(super::CRASH_ENV).ok()?;
            let (name, n) = match value.split_once(':') {
                Some((name, n)) => (name, n.trim().parse().ok()?),
                None => (value.as_str(), 1),
            };
            Some((name.trim().to_owned(), n))
        })
    }

    static PANIC_TARGET: OnceLock<Option<(String, Option<String>)>> = OnceLock::new();

    fn panic_target() -> &'static Option<(String, Option<String>)> {
        PANIC_TARGET.get_or_init(|| {
            let value = std::env::var(super::PANIC_ENV).ok()?;
            Some(match value.split_once('@') {
                Some((point, agent)) => (point.trim().to_owned(), Some(agent.trim().to_owned())),
                None => (value.trim().to_owned(), None),
            })
        })
    }

    pub fn panic_point(name: &str, agent: &str) {
        if let Some((point, only)) = panic_target()
            && point == name
            && only.as_deref().is_none_or(|only| only == agent)
        {
            panic!(
                "rein: panic point {name} reached in a run of agent {agent} ({})",
                super::PANIC_ENV
            );
        }
    }

    pub fn point(name: &str) {
        if let Some((target, n)) = target()
            && target == name
            && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *n
        {
            eprintln!("rein: crash point {name}:{n} reached; aborting");
            std::process::abort();
        }
    }
}

/// Aborts the process here if `REIN_CRASH_AT` names this point (and the
/// `crash-points` feature is on).
#[inline]
pub fn point(name: &str) {
    #[cfg(feature = "crash-points")]
    armed::point(name);
    #[cfg(not(feature = "crash-points"))]
    let _ = name;
}

/// Panics here if `REIN_PANIC_AT` names this point and (when it names one)
/// `agent` (and the `crash-points` feature is on).
#[inline]
pub fn panic_point(name: &str, agent: &str) {
    #[cfg(feature = "crash-points")]
    armed::panic_point(name, agent);
    #[cfg(not(feature = "crash-points"))]
    let _ = (name, agent);
}
