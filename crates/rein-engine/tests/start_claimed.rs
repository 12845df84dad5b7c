//! A run started by its caller (a sync run) is created already claimed: a
//! queue worker of another process that finds it queued at once cannot
//! take it (issue 17: a sync `POST /v1/agents/{agent}/runs` answered `409
//! not-resumable` when a worker claimed the fresh run first).
//!
//! Real parts: one SQLite file opened twice (two processes sharing the
//! store), two engines, the testkit's order desk on loopback. The
//! competitor acts at the one moment that matters, the instant the run
//! exists: a store hook holds the starting engine there (right after the
//! run is created, or right before its claim is taken when the two are
//! apart) until the competitor has tried.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::{agent, answer, script};
use rein_core::{EventKind, Outcome, RunId, TenantId};
use rein_engine::run::{AcceptAll, Engine, EngineError, RunRequest};
use rein_store::{
    Intercept, Intercepted, Lease, LeaseChange, NewRun, ReservationFence, RunRecord, RunStatus,
    Store, StoreError,
};
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{Faults, OrderDesk, OrderDeskConfig};
use tokio::sync::{mpsc, oneshot};

/// The run that just came to exist, and the answer awaited before the
/// starting engine goes on.
type Window = (RunId, oneshot::Sender<()>);

/// Holds the starting engine in the window between its run's creation and
/// its next store call, once, while a competitor acts.
struct InTheWindow {
    armed: Mutex<Option<mpsc::UnboundedSender<Window>>>,
}

impl InTheWindow {
    /// Hands the run to the competitor (the first time only) and waits
    /// until it has tried to take it.
    async fn hold(&self, run_id: &RunId) {
        let Some(competitor) = self.armed.lock().unwrap().take() else {
            return;
        };
        let (tried, wait) = oneshot::channel();
        competitor.send((run_id.clone(), tried)).unwrap();
        wait.await.unwrap();
    }
}

#[async_trait::async_trait]
impl Intercept for InTheWindow {
    async fn create_run_claimed(
        &self,
        inner: &dyn Store,
        run: NewRun,
        claim: Lease,
        fence: Option<&ReservationFence>,
    ) -> Result<RunRecord, StoreError> {
        let created = inner.create_run_claimed(run, claim, fence).await?;
        self.hold(&created.run_id).await;
        Ok(created)
    }

    async fn change_lease(
        &self,
        inner: &dyn Store,
        change: LeaseChange,
    ) -> Result<Option<Lease>, StoreError> {
        // A run created apart from its claim: the window is before the
        // claim's acquire.
        if let LeaseChange::Acquire(lease) = &change
            && lease.lease_id.starts_with("run:")
        {
            self.hold(&lease.run_id).await;
        }
        inner.change_lease(change).await
    }
}

/// What the competitor saw and did.
#[derive(Debug)]
struct Competed {
    /// The run was listed as queued work in its tenant's backlog.
    listed_queued: bool,
    /// Its attempt to drive the run as queued work.
    drove: Result<Outcome, EngineError>,
}

/// While a sync run of engine A is in the window, engine B (another
/// process on the same SQLite file) does what a queue worker does: lists
/// the backlog, finds the fresh run queued, and starts it as enqueued
/// work. B is refused (the run is claimed, by a live process), and A
/// drives its own run to its end: one start, one outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_sync_run_cannot_be_taken_by_a_queue_worker() {
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(Faults::none()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let (to_competitor, mut windows) = mpsc::unbounded_channel::<Window>();
    let hooked: Arc<dyn Store> = Arc::new(Intercepted::new(
        Arc::new(SqliteStore::open(&path).unwrap()),
        InTheWindow {
            armed: Mutex::new(Some(to_competitor)),
        },
    ));
    let other: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).unwrap());
    let engine_a = Engine::builder(hooked.clone())
        .node("node-a")
        .rng_seed(7)
        .build()
        .unwrap();
    let engine_b = Engine::builder(other.clone())
        .node("node-b")
        .rng_seed(8)
        .build()
        .unwrap();
    let agent_a = agent(
        &desk,
        script(serde_json::json!([answer("done by A")])),
        false,
    );
    let agent_b = agent(
        &desk,
        script(serde_json::json!([answer("done by B")])),
        false,
    );

    let competitor = tokio::spawn(async move {
        let (run_id, tried) = windows.recv().await.unwrap();
        let backlogs = other.tenant_backlogs(None, 16).await.unwrap();
        let listed_queued = backlogs
            .iter()
            .flat_map(|b| b.oldest.iter())
            .any(|r| r.run_id == run_id && r.status == RunStatus::Queued);
        let drove = engine_b
            .run(
                &agent_b,
                &AcceptAll,
                RunRequest {
                    run_id: Some(run_id.clone()),
                    tenant: Some(TenantId::new("default").unwrap()),
                    input: "Say done.".into(),
                    enqueued: true,
                    ..RunRequest::default()
                },
            )
            .await
            .map(|out| out.report.outcome);
        tried.send(()).unwrap();
        Competed {
            listed_queued,
            drove,
        }
    });

    let run_id = RunId::new("sync-run-1").unwrap();
    let sync = engine_a
        .run(
            &agent_a,
            &AcceptAll,
            RunRequest {
                run_id: Some(run_id.clone()),
                input: "Say done.".into(),
                ..RunRequest::default()
            },
        )
        .await;
    let competed = competitor.await.unwrap();

    assert!(
        competed.listed_queued,
        "the competitor must find the fresh run as queued work: {competed:?}"
    );
    match &competed.drove {
        Err(EngineError::NotResumable { reason, .. }) => assert!(
            reason.contains("live process"),
            "refused because the run is claimed: {reason}"
        ),
        other => panic!("a queue worker must not take a fresh sync run, got {other:?}"),
    }
    let out = sync.expect("the sync caller drives its own run");
    assert_eq!(out.run_id, run_id);
    assert_eq!(out.report.outcome, Outcome::Succeeded);
    assert!(!out.interrupted);
    let events = hooked.events(&run_id, 0).await.unwrap();
    let starts = events
        .iter()
        .filter(|e| e.kind() == EventKind::RunStarted)
        .count();
    assert_eq!(starts, 1, "one start of the run: {events:?}");
    assert_eq!(
        out.report.answer.as_deref(),
        Some("done by A"),
        "the sync caller's model answered the run"
    );
    let run = hooked.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Finished(Outcome::Succeeded));
}
