//! The partial-failure decision: whether a failed run keeps its effects,
//! undoes them or hands them to a human.

use rein_core::report::End;
use rein_core::{Category, RunReport};

/// Whether the failure that stopped the run is one that time may fix: a
/// rate limit, a timeout, an open breaker, an exhausted budget. Then the
/// effects are kept and the run is recoverable by resuming.
pub(super) fn fixable_by_time(end: &End, report: &RunReport) -> bool {
    match end {
        End::Budget(_) => true,
        // A model that is down may come back; one that refuses the
        // credentials or the request will not.
        End::ModelFailed(category, _) => matches!(
            category,
            Category::Transient
                | Category::Timeout
                | Category::RateLimited
                | Category::Overloaded
                | Category::CircuitOpen
        ),
        // Never settled: an interrupted run is handed on before this.
        End::Interrupted => true,
        End::Loop(_)
        | End::StoreFailed(_)
        | End::Settling(_)
        | End::Cancelled(_)
        | End::Closed { .. }
        | End::Internal(_) => false,
        End::Answer(_) => report.incomplete.iter().all(|a| {
            matches!(
                a.category,
                Category::Transient
                    | Category::Timeout
                    | Category::RateLimited
                    | Category::Overloaded
                    | Category::CircuitOpen
                    | Category::BudgetExhausted
            )
        }),
    }
}
