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

/// The environment variable that arms a crash point.
pub const CRASH_ENV: &str = "REIN_CRASH_AT";

/// Every crash point, as named in [`CRASH_ENV`].
pub const CRASH_POINTS: [&str; 5] = [
    "before_pending",
    "after_pending",
    "after_call",
    "mid_compensation",
    "during_checkpoint",
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
