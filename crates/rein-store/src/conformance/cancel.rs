//! Conformance checks of cancel requests ([`Store::request_cancel`],
//! [`Store::cancel_request`]).

use crate::StoreExt as _;
use rein_core::Timestamp;
use rein_core::{Outcome, RunId};

use super::{BASE_MS, created, ms, report};
use crate::{CancelRequest, RunStatus, Store, StoreError};

fn request(run_id: &RunId, by: &str, at_ms: Timestamp) -> CancelRequest {
    CancelRequest {
        run_id: run_id.clone(),
        requested_by: by.to_owned(),
        requested_at_ms: at_ms,
    }
}

/// A request of a running (or queued) run is stored and read back; a
/// second request keeps the first whole; other runs have none.
pub async fn cancel_request_is_recorded_once_and_read_back(store: &dyn Store) {
    let queued = created(store, "cancel-queued").await;
    let running = created(store, "cancel-running").await;
    store
        .set_run_status(&running, RunStatus::Running, None, BASE_MS + ms(1))
        .await
        .unwrap();
    assert_eq!(store.cancel_request(&running).await.unwrap(), None);

    let first = request(&running, "node-a", BASE_MS + ms(2));
    let stored = store.request_cancel(first.clone()).await.unwrap();
    assert_eq!(stored, first, "the request as stored");
    let again = store
        .request_cancel(request(&running, "node-b", BASE_MS + ms(3)))
        .await
        .unwrap();
    assert_eq!(again, first, "a second request must keep the first whole");
    assert_eq!(store.cancel_request(&running).await.unwrap(), Some(first));

    // A queued run takes a request too: a process that starts it sees it.
    let q = request(&queued, "node-c", BASE_MS + ms(4));
    assert_eq!(store.request_cancel(q.clone()).await.unwrap(), q);
    assert_eq!(store.cancel_request(&queued).await.unwrap(), Some(q));

    let other = created(store, "cancel-other").await;
    assert_eq!(store.cancel_request(&other).await.unwrap(), None);
    let unknown = RunId::new(super::unique("cancel-unknown")).unwrap();
    assert_eq!(store.cancel_request(&unknown).await.unwrap(), None);
}

/// `cancel_requests` reads the requests of many runs at once: those
/// recorded, none for a run without one or unknown.
pub async fn cancel_requests_of_many_runs_in_one_read(store: &dyn Store) {
    let asked = created(store, "cancel-many-asked").await;
    let also = created(store, "cancel-many-also").await;
    let quiet = created(store, "cancel-many-quiet").await;
    let unknown = RunId::new(super::unique("cancel-many-unknown")).unwrap();
    assert_eq!(store.cancel_requests(&[]).await.unwrap(), Vec::new());
    let first = request(&asked, "node-a", BASE_MS + ms(1));
    let second = request(&also, "node-b", BASE_MS + ms(2));
    store.request_cancel(first.clone()).await.unwrap();
    store.request_cancel(second.clone()).await.unwrap();
    let mut read = store
        .cancel_requests(&[quiet, asked, unknown, also])
        .await
        .unwrap();
    read.sort_by_key(|r| r.requested_at_ms);
    assert_eq!(read, vec![first, second]);
}

/// Refusals write nothing: an unknown run is not found, a finished run
/// refuses (its outcome is final), a malformed requester is invalid.
pub async fn cancel_request_refusals_write_nothing(store: &dyn Store) {
    let unknown = RunId::new(super::unique("cancel-unknown")).unwrap();
    let err = store
        .request_cancel(request(&unknown, "node-a", BASE_MS))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound { what: "run", .. }),
        "an unknown run must be NotFound, got {err:?}"
    );

    let finished = created(store, "cancel-finished").await;
    store
        .set_run_status(&finished, RunStatus::Running, None, BASE_MS + ms(1))
        .await
        .unwrap();
    store
        .set_run_status(
            &finished,
            RunStatus::Finished(Outcome::PartialSuccess),
            Some(report(Outcome::PartialSuccess)),
            BASE_MS + ms(2),
        )
        .await
        .unwrap();
    let err = store
        .request_cancel(request(&finished, "node-a", BASE_MS + ms(3)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::FinishedRun {
                outcome: Outcome::PartialSuccess,
                ..
            }
        ),
        "a finished run must refuse a cancel request, got {err:?}"
    );
    assert_eq!(store.cancel_request(&finished).await.unwrap(), None);

    let running = created(store, "cancel-bad-requester").await;
    for bad in ["", "a\nb"] {
        let err = store
            .request_cancel(request(&running, bad, BASE_MS))
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Invalid { .. }),
            "requester {bad:?} must be invalid, got {err:?}"
        );
    }
    assert_eq!(store.cancel_request(&running).await.unwrap(), None);
}
