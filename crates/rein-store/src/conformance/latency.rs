//! Conformance checks of the latency histograms ([`HealthStore::merge_latency`],
//! [`HealthStore::latency_histograms`]).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rein_core::latency::LatencyHistogram;

use super::{BASE_MS, join_all, ms, unique};
use crate::{LatencyRecord, Store, StoreError};

fn of(ms: &[u64]) -> LatencyHistogram {
    let mut h = LatencyHistogram::new();
    for &m in ms {
        h.record(Duration::from_millis(m));
    }
    h
}

async fn stored(store: &dyn Store, subject: &str) -> Option<LatencyRecord> {
    let rows = store.latency_histograms().await.unwrap();
    assert!(
        rows.corrupt.iter().all(|c| c.subject != subject),
        "{subject} must not be reported corrupt: {:?}",
        rows.corrupt
    );
    rows.records.into_iter().find(|r| r.subject == subject)
}

/// Deltas add up: a merge returns the sum, and a read lists it.
pub async fn latency_merges_add_deltas_and_are_listed(store: &dyn Store) {
    let (a, b) = (unique("tool:a"), unique("model:p/m"));
    let first = store
        .merge_latency(
            &[(a.clone(), of(&[10, 20, 30])), (b.clone(), of(&[500]))],
            BASE_MS,
        )
        .await
        .unwrap();
    assert!(first.corrupt.is_empty());
    let got: Vec<(&str, u64)> = first
        .records
        .iter()
        .map(|r| (r.subject.as_str(), r.histogram.samples()))
        .collect();
    assert!(
        got.contains(&(a.as_str(), 3)) && got.contains(&(b.as_str(), 1)),
        "{got:?}"
    );
    let second = store
        .merge_latency(&[(a.clone(), of(&[40, 2_000]))], BASE_MS + ms(5))
        .await
        .unwrap();
    let sum = second.records.iter().find(|r| r.subject == a).unwrap();
    assert_eq!(
        sum.histogram,
        of(&[10, 20, 30, 40, 2_000]),
        "the sum of both deltas"
    );
    let read = stored(store, &a).await.expect("the subject is listed");
    assert_eq!(read.histogram, of(&[10, 20, 30, 40, 2_000]));
    assert_eq!(read.updated_at_ms, BASE_MS + ms(5));
    assert_eq!(stored(store, &b).await.unwrap().histogram, of(&[500]));
    // An empty delta writes nothing and still reports the sum.
    let again = store
        .merge_latency(&[(a.clone(), LatencyHistogram::new())], BASE_MS + ms(9))
        .await
        .unwrap();
    assert_eq!(again.records.len(), 1);
    assert_eq!(again.records[0].histogram.samples(), 5);
    assert_eq!(
        stored(store, &a).await.unwrap().updated_at_ms,
        BASE_MS + ms(5)
    );
}

/// A bad subject refuses the whole merge: nothing of it is written.
pub async fn latency_merge_refusals_write_nothing(store: &dyn Store) {
    let good = unique("tool:good");
    for bad in [
        "",
        "tool:a\nb",
        &"x".repeat(crate::MAX_LATENCY_SUBJECT_LEN + 1),
    ] {
        let err = store
            .merge_latency(
                &[(good.clone(), of(&[1])), (bad.to_owned(), of(&[1]))],
                BASE_MS,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Invalid {
                    what: "latency subject",
                    ..
                }
            ),
            "{err}"
        );
    }
    assert_eq!(
        stored(store, &good).await,
        None,
        "the good subject was not written"
    );
}

/// Concurrent merges of one subject all count.
pub async fn latency_concurrent_merges_all_count(store: &dyn Store) {
    const PROCESSES: u64 = 12;
    let subject = unique("tool:race");
    let futures = (0..PROCESSES)
        .map(|n| {
            let subject = subject.clone();
            Box::pin(async move {
                store
                    .merge_latency(&[(subject, of(&[n + 1, 100]))], BASE_MS)
                    .await
                    .unwrap();
            }) as Pin<Box<dyn Future<Output = ()> + Send + '_>>
        })
        .collect();
    join_all(futures).await;
    let sum = stored(store, &subject).await.unwrap();
    assert_eq!(sum.histogram.samples(), 2 * PROCESSES, "no merge was lost");
}
