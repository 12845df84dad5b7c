//! Starting an enqueued run from the record a queue worker just picked
//! (`RunRequest::picked`): the start claims it without reading it again,
//! and a record gone stale in between (the run started and ended
//! elsewhere) starts nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{agent, answer, call, harness, script};
use rein_core::{EventKind, Outcome, TenantId};
use rein_engine::run::{AcceptAll, EngineError, RunRequest};
use rein_store::{RunStatus, Store};
use rein_testkit::order_desk::{Faults, GET_ORDER};
use serde_json::json;

fn turns() -> serde_json::Value {
    json!([
        call(GET_ORDER, json!({"order_id": "A-1001"})),
        answer("done")
    ])
}

fn request(record: &rein_store::RunRecord, picked: bool) -> RunRequest {
    RunRequest {
        run_id: Some(record.run_id.clone()),
        tenant: Some(record.tenant.clone()),
        input: record.input.clone(),
        enqueued: true,
        picked: picked.then(|| record.clone()),
        ..RunRequest::default()
    }
}

async fn starts(store: &dyn Store, record: &rein_store::RunRecord) -> usize {
    store
        .events(&record.run_id, 0)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.kind() == EventKind::RunStarted)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_picked_record_starts_its_run_and_a_stale_one_starts_nothing() {
    let h = harness(Faults::none()).await;
    let a = agent(&h.desk, script(turns()), false);
    let tenant = TenantId::new("acme").unwrap();
    let id = h
        .engine
        .enqueue(&a, tenant, "look it up".into(), None)
        .await
        .unwrap();
    // What a queue worker's pick read: the run, queued.
    let picked = h.store.get_run(&id).await.unwrap().unwrap();
    assert_eq!(picked.status, RunStatus::Queued);

    let out = h
        .engine
        .run(&a, &AcceptAll, request(&picked, true))
        .await
        .unwrap();
    assert_eq!(out.report.outcome, Outcome::Succeeded);
    assert_eq!(starts(&*h.store, &picked).await, 1);
    assert_eq!(h.desk.request_count(GET_ORDER), 1);

    // The same pick again, as a second worker holding the old read would
    // start it: the run ended meanwhile and let its claim go, so only the
    // start's own check stands between it and a second drive.
    let again = agent(&h.desk, script(turns()), false);
    let stale = h
        .engine
        .run(&again, &AcceptAll, request(&picked, true))
        .await;
    assert!(
        matches!(stale, Err(EngineError::NotResumable { .. })),
        "{stale:?}"
    );
    assert_eq!(starts(&*h.store, &picked).await, 1, "started once");
    assert_eq!(h.desk.request_count(GET_ORDER), 1, "its tool ran once");
    let record = h.store.get_run(&id).await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Finished(Outcome::Succeeded));
}
