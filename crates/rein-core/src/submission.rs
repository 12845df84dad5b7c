//! The life of an idempotent submission's record, and what a retry that
//! finds it still `in_progress` does: [`resolve`].
//!
//! ```text
//!               ┌──(its holder answered 2xx)───────────────────────► completed
//!               ├──(its holder failed, and no run of it exists)──────► released
//!   reserved ───┼──(its holder failed after its run was created)─────► completed with the
//!               │                                                     run's view if it ended;
//!               │                                                     else given up (gone) ─┐
//!               ├──(a draining holder handed its run on)─► given up (gone) ─────────────────┤
//!               └──(its holder is gone) ◄──────────────────────────────────────────────────┘
//!                     └─► resolve(): completed from its run
//!                                    | released (nothing ran)
//!                                    | still recovering (202, asked again later)
//! ```
//!
//! # Why
//!
//! A reservation used to block its key until it expired (a day by
//! default) when the process holding it was killed: every retry answered
//! 409 "still being processed", and a client that gave up and used a new
//! key ran the operation twice. A reservation names its holder (the
//! process executing the request) and the run the request starts; once
//! the holder is gone, a retry settles the record from what the store
//! knows of that run. The holder renews its reservation while it works
//! (its own heartbeat, not its run's claim, which a process taking the run
//! over renews too), so a retry waits (409) at most a lease after the
//! holder's last renewal.
//!
//! | holder | its run | submission | resolution |
//! | --- | --- | --- | --- |
//! | alive | any | any | [`Resolution::Wait`]: 409, the holder answers |
//! | gone | absent | any | [`Resolution::Release`]: nothing ran; this request executes |
//! | gone | exists | queued | [`Resolution::Complete`]: its 202 answer names the run, whatever the run is doing |
//! | gone | in flight | sync | [`Resolution::Recovering`]: 202 with the run's location and current view, not stored; the run is being taken over or closed, and a later retry replays its final view |
//! | gone | finished | sync | [`Resolution::Complete`]: its final view (200), stored and replayed like the answer the holder would have given |

/// Whether the process holding a reservation can still answer it (the
/// holder itself is `rein_store::Holder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Liveness {
    /// It renews its reservation: it will answer.
    Alive,
    /// It cannot answer any more: a process of this host that is gone, a
    /// reservation nobody renewed for a whole lease, or one its holder gave
    /// up (a draining server that handed its run on).
    Gone,
}

/// What the store says of the run a reservation's request started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunState {
    /// There is no such run (or the request starts none): nothing ran.
    Absent,
    /// It exists and has not finished (`queued`, `running`, awaiting
    /// approval).
    InFlight,
    /// It finished.
    Finished,
}

/// How the request was submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Submission {
    /// The answer is the run's final view.
    Sync,
    /// The answer is 202 with the run's location.
    Queued,
}

/// What a retry does with a record it found `in_progress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resolution {
    /// Its holder is alive: 409, the holder will answer.
    Wait,
    /// Nothing ran: release the record (fenced on the dead holder) and
    /// execute this request.
    Release,
    /// Its run is still being recovered: 202 with the run's location, the
    /// record left as it is.
    Recovering,
    /// Complete the record (fenced on the dead holder) with the answer the
    /// run gives now, and replay it.
    Complete,
}

/// The resolution of an `in_progress` record (see the module's table).
///
/// ```
/// use rein_core::submission::{resolve, Liveness, Resolution, RunState, Submission};
/// assert_eq!(resolve(Liveness::Gone, RunState::Absent, Submission::Sync), Resolution::Release);
/// assert_eq!(resolve(Liveness::Alive, RunState::Finished, Submission::Sync), Resolution::Wait);
/// ```
pub fn resolve(holder: Liveness, run: RunState, submission: Submission) -> Resolution {
    match (holder, run, submission) {
        (Liveness::Alive, _, _) => Resolution::Wait,
        (Liveness::Gone, RunState::Absent, _) => Resolution::Release,
        (Liveness::Gone, _, Submission::Queued) => Resolution::Complete,
        (Liveness::Gone, RunState::InFlight, Submission::Sync) => Resolution::Recovering,
        (Liveness::Gone, RunState::Finished, Submission::Sync) => Resolution::Complete,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    const HOLDERS: [Liveness; 2] = [Liveness::Alive, Liveness::Gone];
    const RUNS: [RunState; 3] = [RunState::Absent, RunState::InFlight, RunState::Finished];
    const SUBMISSIONS: [Submission; 2] = [Submission::Sync, Submission::Queued];

    #[test]
    fn resolve_while_the_holder_lives_always_waits() {
        for run in RUNS {
            for submission in SUBMISSIONS {
                assert_eq!(resolve(Liveness::Alive, run, submission), Resolution::Wait);
            }
        }
    }

    #[test]
    fn resolve_after_the_holder_died_never_waits() {
        for run in RUNS {
            for submission in SUBMISSIONS {
                assert_ne!(resolve(Liveness::Gone, run, submission), Resolution::Wait);
            }
        }
    }

    #[test]
    fn resolve_releases_exactly_when_nothing_ran() {
        for holder in HOLDERS {
            for run in RUNS {
                for submission in SUBMISSIONS {
                    let released = resolve(holder, run, submission) == Resolution::Release;
                    assert_eq!(
                        released,
                        holder == Liveness::Gone && run == RunState::Absent,
                        "{holder:?} {run:?} {submission:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_sync_run_in_flight_is_recovering_until_it_finishes() {
        assert_eq!(
            resolve(Liveness::Gone, RunState::InFlight, Submission::Sync),
            Resolution::Recovering
        );
        assert_eq!(
            resolve(Liveness::Gone, RunState::Finished, Submission::Sync),
            Resolution::Complete
        );
        assert_eq!(
            resolve(Liveness::Gone, RunState::InFlight, Submission::Queued),
            Resolution::Complete,
            "a queued answer only names the run"
        );
    }

    #[test]
    fn every_resolution_is_reachable() {
        let mut seen = BTreeSet::new();
        for holder in HOLDERS {
            for run in RUNS {
                for submission in SUBMISSIONS {
                    seen.insert(format!("{:?}", resolve(holder, run, submission)));
                }
            }
        }
        assert_eq!(seen.len(), 4, "{seen:?}");
    }
}
