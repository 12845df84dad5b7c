//! A store that blinks (issue 31): the store refuses each write of the
//! guarded call (its plan, its declaration, its `succeeded` mark) and of
//! settlement (a compensation's mark), the checkpoints and the end, either
//! a few times (a blink, absorbed by the engine's retry) or until the
//! runner heals it (an outage past the run's patience: the run is handed
//! on, never failed, and a resume once the store is back finishes it).
//!
//! What must hold besides the ten: the ledger, the events and the order
//! desk's log agree (invariant 11), and no run is failed by a transient
//! store fault nor ends with a record `pending` (invariant 12).
//!
//! On SQLite every refusal is the interceptor's, as the SQLite backend
//! reports a busy database or a closed connection; on PostgreSQL the
//! [`Flavour::Terminated`] faults terminate the scenario database's
//! backends for real (`pg_terminate_backend`) and let the commit meet the
//! dead connection.

use super::{Layer, Plan, Scenario, happy, third_update_conflicts, three_moves};
use crate::invariant::Invariant as I;
use crate::mechanism::Mechanism as M;
use crate::store_fault::{Flavour, StoreFault, Write};

/// A run's patience with a refusing store in the outage scenarios: long
/// enough for a few offers, short enough that an outage costs a fraction
/// of a second.
const PATIENCE_MS: u64 = 300;

fn refuses(write: Write, nth: u32, count: u32, flavour: Flavour) -> StoreFault {
    StoreFault::Refuses {
        write,
        nth,
        count,
        flavour,
    }
}

fn outage(write: Write, nth: u32, flavour: Flavour) -> StoreFault {
    StoreFault::Outage {
        write,
        nth,
        flavour,
    }
}

fn patient(plan: Plan) -> Plan {
    plan.tune(|t| t.store_patience_ms = Some(PATIENCE_MS))
}

const AGREE: [I; 3] = [
    I::LedgerAgreesWithEvents,
    I::NoTransientFailure,
    I::NothingDangles,
];

/// The store scenarios, C099 to C109.
pub(super) fn store() -> Vec<Scenario> {
    use Layer::Orchestration as L;
    vec![
        Scenario::new(99, L, "store-blink-plans",
            "The commit that plans the update is refused three times (a busy database): offered again, it lands; the update is made once and the run ends as it would have.",
            Plan::script(happy()).store(refuses(Write::Plans, 2, 3, Flavour::Busy)))
            .risks(AGREE),
        Scenario::new(100, L, "store-blink-declares",
            "The update's pending declaration meets a terminated connection three times (on PostgreSQL its backends are terminated for real): no call before it is durable, one effect, the run ends as it would have.",
            Plan::script(happy()).store(refuses(Write::Declares, 1, 3, Flavour::Terminated)))
            .risks([I::OneEffectPerKey, I::LedgerAgreesWithEvents, I::NoTransientFailure]),
        Scenario::new(101, L, "store-blink-succeeded-mark",
            "The update's succeeded mark is refused twice (connection refused): it lands with its ledger_recorded event, once, and the update is not repeated.",
            Plan::script(happy()).store(refuses(Write::Succeeded, 1, 2, Flavour::Refused)))
            .risks([I::OneEffectPerKey, I::LedgerAgreesWithEvents, I::NoTransientFailure]),
        Scenario::new(102, L, "store-blink-compensation-mark",
            "The 409 conflict forces compensation and the first compensation mark is refused twice (busy): each effect is undone once, in reverse order, and the ledger, the events and the desk agree.",
            Plan::script(three_moves()).desk(third_update_conflicts())
                .store(refuses(Write::Compensation, 1, 2, Flavour::Busy)))
            .risks([I::ReverseCompensation, I::LedgerAgreesWithEvents, I::NoTransientFailure])
            .expects([M::CompensationExecuted]),
        Scenario::new(103, L, "store-blink-checkpoint-and-end",
            "Every checkpoint is refused once and the run's end three times (terminated connections on PostgreSQL): all land, and the run ends succeeded with no record pending.",
            Plan::script(happy())
                .store(refuses(Write::Checkpoint, 1, 1, Flavour::Terminated))
                .store(refuses(Write::Checkpoint, 3, 1, Flavour::Closed))
                .store(refuses(Write::Checkpoint, 5, 1, Flavour::Closed))
                .store(refuses(Write::End, 1, 3, Flavour::Terminated)))
            .risks([I::StructuredFailures, I::LedgerAgreesWithEvents, I::NoTransientFailure]),
        Scenario::new(104, L, "store-outage-plans",
            "The store refuses the update's plan for longer than the run waits (300 ms): the run is handed on at a safe point, never failed, and a resume once the store is back plans it and ends as it would have.",
            patient(Plan::script(happy()).store(outage(Write::Plans, 2, Flavour::Closed))))
            .risks(AGREE)
            .expects([M::Resumed]),
        Scenario::new(105, L, "store-outage-declares",
            "The store refuses the update's declaration for longer than the run waits: the call is never made while it is refused, the run is handed on, and the resume makes it once.",
            patient(Plan::script(happy()).store(outage(Write::Declares, 1, Flavour::Busy))))
            .risks([I::OneEffectPerKey, I::LedgerAgreesWithEvents, I::NoTransientFailure])
            .expects([M::Resumed]),
        Scenario::new(106, L, "store-outage-succeeded-mark",
            "The update applied but the store refuses its succeeded mark for longer than the run waits: the mark is held and written when the store is back, the run is handed on (never reported succeeded while the record is pending), and the resume does not repeat the update.",
            patient(Plan::script(happy()).store(outage(Write::Succeeded, 1, Flavour::Refused))))
            .risks([I::OneEffectPerKey, I::LedgerAgreesWithEvents, I::NoTransientFailure])
            .expects([M::Resumed]),
        Scenario::new(107, L, "store-outage-compensation-mark",
            "The 409 conflict forces compensation and the store refuses the compensation marks for longer than the run waits: the restores are made once each, in reverse order, their marks are held and written when the store is back, and the run ends failed for its conflict, never for the store.",
            patient(Plan::script(three_moves()).desk(third_update_conflicts())
                .store(outage(Write::Compensation, 1, Flavour::Busy))))
            .risks([I::ReverseCompensation, I::OneEffectPerKey, I::LedgerAgreesWithEvents, I::NoTransientFailure])
            .expects([M::CompensationExecuted]),
        Scenario::new(108, L, "store-outage-checkpoint",
            "The store refuses checkpoints from the second on for longer than the run waits: the run is handed on after the update landed, and the resume does not repeat it.",
            patient(Plan::script(happy()).store(outage(Write::Checkpoint, 2, Flavour::Closed))))
            .risks([I::ResumeReusesIntents, I::LedgerAgreesWithEvents, I::NoTransientFailure])
            .expects([M::Resumed]),
        Scenario::new(109, L, "store-io-error-declares",
            "The update's declaration meets a disk I/O error, which is not transient: the call is never made, the run ends with the store's reason in a structured outcome, and the ledger, the events and the desk agree that nothing was moved.",
            Plan::script(happy()).store(refuses(Write::Declares, 1, 1, Flavour::Io)))
            .risks([I::StructuredFailures, I::LedgerAgreesWithEvents, I::NoTransientFailure]),
    ]
}
