//! A queue worker starts a run from the record its pick just read
//! (`Engine::run_picked`), without reading it again: one store round trip
//! fewer between a run's submission and its start (issue 15, the quiet
//! tenant's queue wait). The snapshot may be stale by the time it is
//! started; what decides is unchanged (the claim, and the start's commit,
//! which only moves a run that is still `queued`), so a run cancelled
//! after the pick read it never starts.
//!
//! Real parts: a SQLite file, the testkit's order desk on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{agent, answer, script};
use rein_core::{EventKind, Outcome, RunId, TenantId};
use rein_engine::run::{AcceptAll, Closing, End, Engine, EngineError, RunRequest};
use rein_store::{RunStatus, Store, StoreExt as _};
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{Faults, OrderDesk, OrderDeskConfig};

async fn setup() -> (OrderDesk, tempfile::TempDir, Arc<dyn Store>, Engine) {
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(Faults::none()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let engine = Engine::builder(store.clone())
        .node("node-a")
        .rng_seed(7)
        .build()
        .unwrap();
    (desk, dir, store, engine)
}

/// The picked record of a run just queued, as the worker's pick reads it.
async fn queue_and_pick(
    engine: &Engine,
    store: &dyn Store,
    agent: &rein_engine::run::AgentBinding,
) -> rein_store::RunRecord {
    let tenant = TenantId::new("quiet").unwrap();
    let run_id = engine
        .enqueue(
            agent,
            tenant.clone(),
            "Say done.".into(),
            Some(RunId::new("queued-1").unwrap()),
        )
        .await
        .unwrap();
    let backlogs = store.tenant_backlogs(Some(&tenant), 8).await.unwrap();
    backlogs[0]
        .oldest
        .iter()
        .find(|r| r.run_id == run_id)
        .cloned()
        .unwrap()
}

fn request(record: &rein_store::RunRecord) -> RunRequest {
    RunRequest {
        tenant: Some(record.tenant.clone()),
        input: record.input.clone(),
        ..RunRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_picked_run_starts_from_its_record_and_ends() {
    let (desk, _dir, store, engine) = setup().await;
    let agent = agent(&desk, script(serde_json::json!([answer("done")])), false);
    let picked = queue_and_pick(&engine, &*store, &agent).await;
    let out = engine
        .run_picked(&agent, &AcceptAll, request(&picked), picked.clone())
        .await
        .unwrap();
    assert_eq!(out.run_id, picked.run_id);
    assert_eq!(out.report.outcome, Outcome::Succeeded);
    let events = store.events(&picked.run_id, 0).await.unwrap();
    let started = events.iter().find(|e| e.kind() == EventKind::RunStarted);
    assert!(started.is_some(), "the run started: {events:?}");
}

/// Cancelled between the pick's read and the start: the stale record says
/// `queued`, the store says cancelled, and the store wins. Nothing starts,
/// and the claim the start took is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cancelled_after_the_pick_read_it_never_starts() {
    let (desk, _dir, store, engine) = setup().await;
    let agent = agent(&desk, script(serde_json::json!([answer("done")])), false);
    let picked = queue_and_pick(&engine, &*store, &agent).await;
    engine
        .close(
            &picked,
            Closing {
                outcome: Outcome::Cancelled,
                end: End::Closed {
                    error_type: None,
                    reason: "cancelled while queued".into(),
                },
                events: Vec::new(),
                expect: Some(RunStatus::Queued),
            },
        )
        .await
        .unwrap();
    assert_eq!(picked.status, RunStatus::Queued, "the snapshot is stale");
    let started = engine
        .run_picked(&agent, &AcceptAll, request(&picked), picked.clone())
        .await;
    assert!(
        matches!(started, Err(EngineError::NotResumable { .. })),
        "a stale pick must not start a cancelled run: {:?}",
        started.map(|o| o.report.outcome)
    );
    let events = store.events(&picked.run_id, 0).await.unwrap();
    assert!(
        !events.iter().any(|e| e.kind() == EventKind::RunStarted),
        "no start recorded: {events:?}"
    );
    let run = store.get_run(&picked.run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Finished(Outcome::Cancelled));
    assert!(
        store
            .leases_of_run(&picked.run_id)
            .await
            .unwrap()
            .is_empty(),
        "the start's claim is released"
    );
}
