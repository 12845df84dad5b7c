//! Drain: what `rein serve` does when it is told to stop (SIGTERM,
//! SIGINT, or the `shutdown` future of [`crate::serve`]).
//!
//! # Why drain instead of stopping
//!
//! A process that just exits drops its callers' connections mid-run and
//! leaves its runs `running` under claims nobody renews: queued work waits
//! for the claim to expire, a sync run is closed `orphaned` much later. A
//! drain keeps every promise it can, and all of it within
//! `server.shutdown_grace`, which is the *whole* time from the signal to
//! the exit (an orchestrator's SIGKILL comes after its own grace, so rein
//! must be done by then, hand-on included):
//!
//! ```text
//!  signal ─> finish: /readyz 503, new work refused (503, Retry-After),
//!            │        workers pick nothing new, queued runs stay queued;
//!            │        work admitted before the signal goes on
//!            │
//!            ├─ all of it ended ────────────────────────┐
//!            └─ grace − INTERRUPT_WAIT − CLOSE_WAIT ────┤
//!                                                       v
//!            hand on: every run still driven here is interrupted (also
//!            │        one that started only now); each stops at a safe
//!            │        point, records run_interrupted, releases its claim
//!            │
//!            ├─ all handed on ──────────────────────────┐
//!            └─ grace − CLOSE_WAIT ─────────────────────┤
//!                                                       v
//!            close:   listener closed, event streams end, connections
//!                     finish their response and close, until the grace
//!                     ends; one log line says what was finished, what was
//!                     handed on and what was cut; exit 0
//! ```
//!
//! "Work" is every run this engine drives *and* every admitted piece of
//! work that is not a run yet: a `POST` still reading its body, reserving
//! its idempotency key or claiming its run, a queue worker between picking
//! a run and driving it, a takeover. Each holds an [`Admission`] for its
//! whole life; admissions are taken only while not draining, so the drain
//! waits for exactly the work admitted before it began.
//!
//! A handed-on run is resumed at once by another server on the same store
//! (or this one restarted): its claim is gone, so nobody waits for a lease
//! ([`crate::queue::worker`]'s takeover). A sync run's caller is answered 202 with
//! the run's location instead of losing the connection.
//!
//! # Budget
//!
//! | phase | ends at (from the signal) |
//! | --- | --- |
//! | finish | `shutdown_grace` − [`INTERRUPT_WAIT`] − [`CLOSE_WAIT`], at the earliest at once |
//! | hand on | `shutdown_grace` − [`CLOSE_WAIT`], at least [`MIN_HAND_ON`] after the finish |
//! | close | `shutdown_grace`, at least [`MIN_CLOSE`] after the hand-on |
//!
//! So a grace under 7 s interrupts at once, and `rein serve` exits within
//! `shutdown_grace`, or [`MIN_HAND_ON`] + [`MIN_CLOSE`] (1.5 s) when the
//! grace is shorter. A run still settling its effects, or whose write is
//! still in flight, when the hand-on phase ends is cut at exit: its claim
//! stays until its lease expires (or a server of this machine sees the
//! process gone), and the summary names it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rein_core::{EventKind, RunId};
use rein_engine::run::HandOn;
use rein_store::{LeaseKind, RunStatus, StoreExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::http::problem::Problem;
use crate::http::state::AppState;
use rein_core::plural::count;

/// The part of `server.shutdown_grace` kept for interrupted runs to reach
/// their safe point, record it and release their claims.
pub const INTERRUPT_WAIT: Duration = Duration::from_secs(5);

/// The part of `server.shutdown_grace` kept for connections to deliver
/// their last response once the work is over.
pub const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The least time interrupted runs get, however short the grace.
pub const MIN_HAND_ON: Duration = Duration::from_secs(1);

/// The least time connections get to close, however short the grace.
pub const MIN_CLOSE: Duration = Duration::from_millis(500);

/// Seconds a refused client is told to wait (`Retry-After`): by then a
/// load balancer has taken this server out.
const RETRY_AFTER_SECS: u32 = 1;

/// When each phase of a drain ends, counted from the signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phases {
    /// The end of the finish phase: runs are interrupted then.
    pub finish: Duration,
    /// The end of the hand-on phase: the listener closes then.
    pub hand_on: Duration,
    /// The end of the close phase: the process exits then at the latest.
    pub close: Duration,
}

impl Phases {
    /// The phases of a drain with `grace` in all (see the [budget](self#budget)).
    pub fn of(grace: Duration) -> Phases {
        let finish = grace.saturating_sub(INTERRUPT_WAIT + CLOSE_WAIT);
        let hand_on = grace.saturating_sub(CLOSE_WAIT).max(finish + MIN_HAND_ON);
        let close = grace.max(hand_on + MIN_CLOSE);
        Phases {
            finish,
            hand_on,
            close,
        }
    }
}

/// The drain's state, shared by handlers, workers and the accept loop.
#[derive(Debug, Default)]
pub struct Drain {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Whether draining began, and how much work was admitted before: one
    /// lock, so that no work is admitted after the drain counted it.
    gate: Mutex<Gate>,
    /// The admitted count, for whoever waits for it to reach zero.
    admitted: watch::Sender<usize>,
    draining: CancellationToken,
    closing: CancellationToken,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            gate: Mutex::default(),
            admitted: watch::Sender::new(0),
            draining: CancellationToken::new(),
            closing: CancellationToken::new(),
        }
    }
}

#[derive(Debug, Default)]
struct Gate {
    draining: bool,
    admitted: usize,
}

impl Inner {
    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A piece of work admitted before the drain began: the drain waits for
/// it (and hands its run on) as long as any clone of it lives.
#[derive(Debug, Clone)]
pub struct Admission {
    _admitted: Arc<Admitted>,
}

#[derive(Debug)]
struct Admitted(Arc<Inner>);

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut gate = self.0.gate();
        gate.admitted = gate.admitted.saturating_sub(1);
        self.0.admitted.send_replace(gate.admitted);
    }
}

impl Drain {
    /// Admits a piece of work, unless the server is draining: its
    /// [`Admission`] must live as long as the work.
    pub fn admit(&self) -> Option<Admission> {
        let mut gate = self.inner.gate();
        if gate.draining {
            return None;
        }
        gate.admitted += 1;
        self.inner.admitted.send_replace(gate.admitted);
        Some(Admission {
            _admitted: Arc::new(Admitted(self.inner.clone())),
        })
    }

    /// Starts draining: new work is refused and workers stop picking.
    pub fn begin(&self) {
        self.inner.gate().draining = true;
        self.inner.draining.cancel();
    }

    /// Whether the server is draining (or closing).
    pub fn is_draining(&self) -> bool {
        self.inner.draining.is_cancelled()
    }

    /// Resolves once draining started.
    pub async fn started(&self) {
        self.inner.draining.cancelled().await;
    }

    /// The work is over: open event streams end.
    pub fn close(&self) {
        self.begin();
        self.inner.closing.cancel();
    }

    /// Resolves once the server is closing.
    pub async fn closing(&self) {
        self.inner.closing.cancelled().await;
    }

    /// How many admissions live now.
    pub fn admitted(&self) -> usize {
        *self.inner.admitted.borrow()
    }

    /// Waits until no admission lives and `state`'s engine drives no run,
    /// or `until`; whether it got there.
    async fn settled(&self, state: &AppState, until: Instant) -> bool {
        let mut admitted = self.inner.admitted.subscribe();
        let mut live = state.engine.live_count();
        loop {
            let work = *admitted.borrow_and_update();
            let runs = *live.borrow_and_update();
            if work == 0 && runs == 0 {
                return true;
            }
            tokio::select! {
                // The senders live as long as the drain and the engine.
                _ = admitted.changed() => {}
                _ = live.changed() => {}
                () = tokio::time::sleep_until(until) => return false,
            }
        }
    }
}

/// What became of a root run that was in flight during a drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// It ended here, with this outcome.
    Finished(String),
    /// It stopped at a safe point, recorded it and released its claim: the
    /// next server on the store resumes it at once.
    HandedOn,
    /// It was still driven here when the process exited (settling its
    /// effects, or a write still in flight): its claim stays until its
    /// lease expires, or until a server of this machine sees this process
    /// gone; then it is taken over (queued work) or closed as orphaned.
    Cut,
    /// It stopped, but its interruption could not be recorded (the store
    /// refused): it is resumed as the work of a dead process would be.
    Unrecorded,
}

/// What a drain did, for its log line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drained {
    /// Root runs in flight during the drain, and what became of each.
    pub runs: Vec<(RunId, Fate)>,
    /// Queued runs nobody had started, left queued.
    pub left_queued: u64,
}

impl Drained {
    fn with(&self, fate: fn(&Fate) -> bool) -> Vec<&RunId> {
        self.runs
            .iter()
            .filter(|(_, f)| fate(f))
            .map(|(id, _)| id)
            .collect()
    }

    /// The runs that ended here.
    pub fn finished(&self) -> Vec<&RunId> {
        self.with(|f| matches!(f, Fate::Finished(_)))
    }

    /// The runs handed on.
    pub fn handed_on(&self) -> Vec<&RunId> {
        self.with(|f| *f == Fate::HandedOn)
    }

    /// The one line an operator reads.
    pub fn summary(&self, elapsed: Duration) -> String {
        let ids = |runs: &[&RunId]| {
            runs.iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let finished = self.finished();
        let mut line = format!(
            "rein serve: drained in {:.1} s: finished {}",
            elapsed.as_secs_f64(),
            count(finished.len(), "run")
        );
        if !finished.is_empty() {
            line.push_str(&format!(" [{}]", ids(&finished)));
        }
        let handed_on = self.handed_on();
        line.push_str(&format!("; handed on {}", count(handed_on.len(), "run")));
        if !handed_on.is_empty() {
            line.push_str(&format!(
                " [{}] (interrupted at a safe point, claims released: the next server on this store resumes them)",
                ids(&handed_on)
            ));
        }
        let cut = self.with(|f| *f == Fate::Cut);
        if !cut.is_empty() {
            line.push_str(&format!(
                "; cut {} at exit [{}] (still settling or with a write in flight: claims held until their leases expire, then taken over or closed)",
                count(cut.len(), "run"),
                ids(&cut)
            ));
        }
        let unrecorded = self.with(|f| *f == Fate::Unrecorded);
        if !unrecorded.is_empty() {
            line.push_str(&format!(
                "; {} stopped without recording it [{}] (the store refused; resumed or closed like the runs of a dead process)",
                count(unrecorded.len(), "run"),
                ids(&unrecorded)
            ));
        }
        line.push_str(&format!(
            "; {} left queued",
            count(self.left_queued, "queued run")
        ));
        line
    }
}

/// Drains `state`'s work within `server.shutdown_grace` (see the
/// [budget](self#budget)), counted from `began`: refuses new work, waits
/// for the work admitted before, then interrupts what is left and waits
/// for it to be handed on.
pub async fn drain_work(state: &AppState, began: Instant) -> Drained {
    let grace = state.settings.shutdown_grace;
    let phases = Phases::of(grace);
    state.drain.begin();
    // Every run driven here from now on is accounted for in the summary.
    state.engine.note_runs();
    tracing::info!(
        runs = state.engine.live_runs().len(),
        admitted = state.drain.admitted(),
        grace_s = grace.as_secs_f64(),
        interrupt_after_s = phases.finish.as_secs_f64(),
        "draining: new work is refused; the work in flight gets until the interrupt to finish"
    );
    let finished = state.drain.settled(state, began + phases.finish).await;
    if !finished {
        tracing::warn!(
            runs = state.engine.live_runs().len(),
            admitted = state.drain.admitted(),
            "server.shutdown_grace: interrupting the work still in flight"
        );
    }
    // Unconditionally: work admitted before the drain that becomes a run
    // only now is handed on at once instead of running on into the exit.
    state.engine.interrupt(HandOn::AnyWorker);
    if !state.drain.settled(state, began + phases.hand_on).await {
        tracing::warn!(
            runs = state.engine.live_runs().len(),
            "runs still settling (or with a write in flight) are cut at exit"
        );
    }
    // What this process observed of its tools' and models' latency, and
    // how their retries ended, is shared before it exits (every run's end
    // flushed too; this catches gateway calls and runs still cut).
    state.engine.flush_latency().await;
    state.engine.flush_retry_outcomes().await;
    // The other nodes take this one's part of each group's limits back.
    state.engine.leave_shared_limits().await;
    // The spans of every run and gateway call ended here are exported
    // before the process exits (`[telemetry]`).
    if let Some(telemetry) = state.engine.telemetry() {
        telemetry.shutdown().await;
    }
    let mut drained = Drained::default();
    for run_id in roots(state, state.engine.noted_runs()).await {
        if let Some(fate) = fate(state, &run_id).await {
            drained.runs.push((run_id, fate));
        }
    }
    drained.left_queued = state
        .store
        .count_runs_with_status(RunStatus::Queued)
        .await
        .unwrap_or(0);
    drained
}

/// What became of `run_id`, from the store and the engine; `None` for a
/// run that is neither finished nor running (cancelled back to queued) or
/// cannot be read.
async fn fate(state: &AppState, run_id: &RunId) -> Option<Fate> {
    let record = state.store.get_run(run_id).await.ok()??;
    if let RunStatus::Finished(outcome) = record.status {
        return Some(Fate::Finished(outcome.as_str().to_owned()));
    }
    if record.status != RunStatus::Running {
        return None;
    }
    if state.engine.is_live(run_id) {
        return Some(Fate::Cut);
    }
    let events = state.store.events(run_id, 0).await.ok()?;
    let interrupted = events
        .iter()
        .rev()
        .find(|e| {
            matches!(
                e.kind(),
                EventKind::RunStarted | EventKind::RunResumed | EventKind::RunInterrupted
            )
        })
        .is_some_and(|e| e.kind() == EventKind::RunInterrupted);
    let claimed = state
        .store
        .leases_of_run(run_id)
        .await
        .ok()?
        .iter()
        .any(|l| l.kind == LeaseKind::Run);
    Some(if interrupted && !claimed {
        Fate::HandedOn
    } else {
        Fate::Unrecorded
    })
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
    roots
}

/// Admits new work, or refuses it while draining: every `POST` but a
/// cancellation (which stops work rather than starting it) gets 503
/// `draining` with `Retry-After`. An admitted request's [`Admission`] is in
/// its extensions (a handler that spawns the work clones it into the task)
/// and lives until its response body is done. Reads keep being answered.
pub async fn refuse_new_work(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let starts_work =
        request.method() == Method::POST && !request.uri().path().ends_with("/cancel");
    if !starts_work {
        return next.run(request).await;
    }
    let Some(admission) = state.drain.admit() else {
        let mut problem = Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            "Server is shutting down",
            "this server is draining and accepts no new work; send it to another server",
        );
        problem.retry_after = Some(RETRY_AFTER_SECS);
        return problem.into_response();
    };
    request.extensions_mut().insert(admission.clone());
    let response = next.run(request).await;
    // A streamed answer (the gateway's) is work until its last chunk.
    response.map(|body| {
        Body::new(AdmittedBody {
            body,
            _admission: admission,
        })
    })
}

/// A response body that keeps its request's admission until it is done.
struct AdmittedBody {
    body: Body,
    _admission: Admission,
}

impl http_body::Body for AdmittedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> RunId {
        RunId::new(text.to_owned()).unwrap()
    }

    #[test]
    fn the_summary_names_what_was_finished_handed_on_and_cut() {
        let drained = Drained {
            runs: vec![
                (id("r-1"), Fate::Finished("succeeded".into())),
                (id("r-2"), Fate::HandedOn),
                (id("r-3"), Fate::HandedOn),
                (id("r-4"), Fate::Cut),
                (id("r-5"), Fate::Unrecorded),
            ],
            left_queued: 4,
        };
        let line = drained.summary(Duration::from_millis(2500));
        assert!(line.contains("drained in 2.5 s"), "{line}");
        assert!(line.contains("finished 1 run [r-1]"), "{line}");
        assert!(line.contains("handed on 2 runs [r-2, r-3]"), "{line}");
        assert!(line.contains("cut 1 run at exit [r-4]"), "{line}");
        assert!(
            line.contains("1 run stopped without recording it [r-5]"),
            "{line}"
        );
        assert!(line.contains("4 queued runs left queued"), "{line}");
        let calm = Drained::default().summary(Duration::ZERO);
        assert!(!calm.contains("cut") && !calm.contains("without"), "{calm}");
    }

    #[test]
    fn the_whole_drain_fits_in_the_grace_and_a_short_grace_hands_on_at_once() {
        // The default, 25 s, inside Kubernetes' 30 s with 5 s to spare.
        let default = Phases::of(rein_core::registry::ServerSpec::default().shutdown_grace);
        assert_eq!(
            default,
            Phases {
                finish: Duration::from_secs(18),
                hand_on: Duration::from_secs(23),
                close: Duration::from_secs(25),
            }
        );
        assert!(default.close + Duration::from_secs(5) <= Duration::from_secs(30));
        let zero = Phases::of(Duration::ZERO);
        assert_eq!(zero.finish, Duration::ZERO, "interrupted at once");
        assert_eq!(zero.hand_on, MIN_HAND_ON);
        assert_eq!(zero.close, MIN_HAND_ON + MIN_CLOSE);
        let short = Phases::of(Duration::from_secs(5));
        assert_eq!(
            (short.finish, short.hand_on, short.close),
            (
                Duration::ZERO,
                Duration::from_secs(3),
                Duration::from_secs(5)
            )
        );
        for secs in 0..=3600 {
            let grace = Duration::from_secs(secs);
            let p = Phases::of(grace);
            assert!(p.finish <= p.hand_on && p.hand_on <= p.close, "{p:?}");
            assert!(
                p.close <= grace.max(MIN_HAND_ON + MIN_CLOSE),
                "{secs} s: done within the grace"
            );
        }
    }

    #[test]
    fn no_work_is_admitted_once_draining_and_admissions_are_counted_until_dropped() {
        let drain = Drain::default();
        let first = drain.admit().expect("admitted before the drain");
        let copy = first.clone();
        let second = drain.admit().unwrap();
        assert_eq!(drain.admitted(), 2, "a clone is the same admission");
        drain.begin();
        assert!(drain.admit().is_none(), "refused while draining");
        assert_eq!(drain.admitted(), 2);
        drop(first);
        assert_eq!(drain.admitted(), 2, "its clone still lives");
        drop((copy, second));
        assert_eq!(drain.admitted(), 0);
    }
}
