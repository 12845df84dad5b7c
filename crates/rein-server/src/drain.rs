//! Drain: what `rein serve` does when it is told to stop (SIGTERM,
//! SIGINT, or the `shutdown` future of [`crate::serve`]).
//!
//! # Why drain instead of stopping
//!
//! A process that just exits drops its callers' connections mid-run and
//! leaves its runs `running` under claims nobody renews: queued work waits
//! for the claim to expire, a sync run is closed `orphaned` much later. A
//! drain keeps every promise it can within `server.shutdown_grace`:
//!
//! ```text
//!  signal ─> draining: /readyz 503, new work refused (503, Retry-After),
//!            │         workers pick nothing new, queued runs stay queued
//!            │
//!            ├─ every run in flight ended ─────────────┐
//!            └─ shutdown_grace ran out: interrupt ─────┤  each run stops at a
//!                                                      │  safe point, records
//!                                                      │  run_interrupted and
//!                                                      │  releases its claim
//!                                                      v
//!            closing: listener closed, event streams end, connections
//!            finish their response and close; one log line says what was
//!            finished and what was handed on; exit 0
//! ```
//!
//! A handed-on run is resumed at once by another server on the same store
//! (or this one restarted): its claim is gone, so nobody waits for a lease
//! ([`crate::worker`]'s takeover). A sync run's caller is answered 202 with
//! the run's location instead of losing the connection.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rein_core::RunId;
use rein_store::RunStatus;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::problem::Problem;
use crate::state::AppState;

/// How long interrupted runs get to reach their safe point and record it
/// (a settlement in progress may take longer: it finishes, or a restart
/// resumes it).
pub const INTERRUPT_WAIT: Duration = Duration::from_secs(5);

/// The least time connections get to deliver their last response once the
/// work is over, even when the grace is used up.
pub const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// How often the drain looks whether the runs in flight have ended.
const POLL: Duration = Duration::from_millis(20);

/// Seconds a refused client is told to wait (`Retry-After`): by then a
/// load balancer has taken this server out.
const RETRY_AFTER_SECS: u32 = 1;

/// The drain's state, shared by handlers, workers and the accept loop.
#[derive(Debug, Default)]
pub struct Drain {
    draining: CancellationToken,
    closing: CancellationToken,
}

impl Drain {
    /// Starts draining: new work is refused and workers stop picking.
    pub fn begin(&self) {
        self.draining.cancel();
    }

    /// Whether the server is draining (or closing).
    pub fn is_draining(&self) -> bool {
        self.draining.is_cancelled()
    }

    /// Resolves once draining started.
    pub async fn started(&self) {
        self.draining.cancelled().await;
    }

    /// The work is over: open event streams end.
    pub fn close(&self) {
        self.draining.cancel();
        self.closing.cancel();
    }

    /// Resolves once the server is closing.
    pub async fn closing(&self) {
        self.closing.cancelled().await;
    }
}

/// What a drain did, for its log line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drained {
    /// Runs in flight when the drain began that ended here.
    pub finished: Vec<RunId>,
    /// Runs this process stopped at a safe point and left resumable, their
    /// claims released.
    pub handed_on: Vec<RunId>,
    /// Queued runs nobody had started, left queued.
    pub left_queued: usize,
    /// Whether the grace ran out (runs were interrupted).
    pub interrupted: bool,
}

impl Drained {
    /// The one line an operator reads.
    pub fn summary(&self, elapsed: Duration) -> String {
        let ids = |runs: &[RunId]| {
            runs.iter()
                .map(RunId::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut line = format!(
            "rein serve: drained in {:.1} s: finished {} run(s)",
            elapsed.as_secs_f64(),
            self.finished.len()
        );
        if !self.finished.is_empty() {
            line.push_str(&format!(" [{}]", ids(&self.finished)));
        }
        line.push_str(&format!("; handed on {} run(s)", self.handed_on.len()));
        if !self.handed_on.is_empty() {
            line.push_str(&format!(
                " [{}] (interrupted at a safe point, claims released: the next server on this store resumes them)",
                ids(&self.handed_on)
            ));
        }
        line.push_str(&format!("; {} queued run(s) left queued", self.left_queued));
        line
    }
}

/// Drains `state`'s work: refuses new work, waits for the runs in flight
/// for `server.shutdown_grace`, interrupts what is left.
pub async fn drain_work(state: &AppState) -> Drained {
    let grace = state.settings.shutdown_grace;
    let until = Instant::now() + grace;
    state.drain.begin();
    let in_flight = roots(state, state.engine.live_runs()).await;
    tracing::info!(
        in_flight = in_flight.len(),
        grace_s = grace.as_secs_f64(),
        "draining: new work is refused; runs in flight get server.shutdown_grace to finish"
    );
    let mut interrupted = false;
    if !settled(state, until).await {
        interrupted = true;
        tracing::warn!(
            runs = state.engine.live_runs().len(),
            "server.shutdown_grace ran out: interrupting the runs still in flight"
        );
        state.engine.interrupt();
        if !settled(state, Instant::now() + INTERRUPT_WAIT).await {
            tracing::warn!(
                runs = state.engine.live_runs().len(),
                "runs still settling their effects are left to a restart's resume"
            );
        }
    }
    let mut drained = Drained {
        interrupted,
        ..Drained::default()
    };
    for run_id in in_flight {
        match state.store.get_run(&run_id).await {
            Ok(Some(record)) if record.status.is_finished() => drained.finished.push(run_id),
            Ok(Some(record)) if record.status == RunStatus::Running => {
                drained.handed_on.push(run_id)
            }
            // Cancelled back to queued, or unreadable: say nothing wrong.
            _ => {}
        }
    }
    drained.left_queued = state
        .store
        .runs_with_status(RunStatus::Queued, usize::MAX)
        .await
        .map_or(0, |runs| runs.len());
    drained
}

/// Waits until this engine drives no run, or `until`; whether it got
/// there.
async fn settled(state: &AppState, until: Instant) -> bool {
    loop {
        if state.engine.live_runs().is_empty() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(POLL.min(until.saturating_duration_since(Instant::now()))).await;
    }
}

/// The root runs among `runs` (a child is handed on with its root).
async fn roots(state: &AppState, runs: Vec<RunId>) -> Vec<RunId> {
    let mut roots = Vec::new();
    for run_id in runs {
        if let Ok(Some(record)) = state.store.get_run(&run_id).await
            && record.parent_run_id.is_none()
        {
            roots.push(run_id);
        }
    }
    roots.sort();
    roots
}

/// Refuses new work while draining: every `POST` but a cancellation (which
/// stops work rather than starting it). Reads keep being answered.
pub async fn refuse_new_work(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let starts_work =
        request.method() == Method::POST && !request.uri().path().ends_with("/cancel");
    if starts_work && state.drain.is_draining() {
        let mut problem = Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            "Server is shutting down",
            "this server is draining and accepts no new work; send it to another server",
        );
        problem.retry_after = Some(RETRY_AFTER_SECS);
        return problem.into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_what_was_finished_and_what_was_handed_on() {
        let drained = Drained {
            finished: vec![RunId::new("r-1".to_owned()).unwrap()],
            handed_on: vec![
                RunId::new("r-2".to_owned()).unwrap(),
                RunId::new("r-3".to_owned()).unwrap(),
            ],
            left_queued: 4,
            interrupted: true,
        };
        let line = drained.summary(Duration::from_millis(2500));
        assert!(line.contains("drained in 2.5 s"), "{line}");
        assert!(line.contains("finished 1 run(s) [r-1]"), "{line}");
        assert!(line.contains("handed on 2 run(s) [r-2, r-3]"), "{line}");
        assert!(line.contains("4 queued run(s) left queued"), "{line}");
    }
}
