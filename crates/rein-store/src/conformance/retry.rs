//! Conformance checks of the retry outcomes
//! ([`HealthStore::merge_retry_outcomes`], [`HealthStore::retry_outcomes`]).
//!
//! [`HealthStore::merge_retry_outcomes`]: crate::HealthStore::merge_retry_outcomes
//! [`HealthStore::retry_outcomes`]: crate::HealthStore::retry_outcomes

use std::future::Future;
use std::pin::Pin;

use rein_core::retry::{RETRY_RATE_HALF_LIFE, RetryRecord, SuccessRate};

use super::{BASE_MS, join_all, unique};
use crate::Timestamp;

/// [`BASE_MS`] in ms: these checks count halving windows in plain ms.
const BASE: u64 = BASE_MS.as_millis();

/// A time of these checks as the store takes it.
fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}
use crate::{RetryOutcomes, Store, StoreError};

/// One window of [`RETRY_RATE_HALF_LIFE`], in ms.
fn window() -> u64 {
    u64::try_from(RETRY_RATE_HALF_LIFE.as_millis()).unwrap()
}

/// The start of a window, so that the checks know which halvings fall
/// between two times.
fn start() -> u64 {
    BASE / window() * window()
}

/// `failed` failed and `succeeded` successful first retries.
fn first_retries(failed: u32, succeeded: u32) -> RetryRecord {
    let mut r = RetryRecord::default();
    for _ in 0..failed {
        r.record(2, false);
    }
    for _ in 0..succeeded {
        r.record(2, true);
    }
    r
}

async fn stored(store: &dyn Store, target: &str, now_ms: u64) -> Option<RetryOutcomes> {
    let all = store.retry_outcomes(at(now_ms)).await.unwrap();
    all.into_iter().find(|o| o.target == target)
}

/// Deltas add up by target and ordinal: a merge returns the sum and a
/// read lists it; an empty delta writes nothing.
pub async fn retry_merges_add_deltas_and_are_listed(store: &dyn Store) {
    let (a, b) = (unique("provider:a"), unique("tool:b"));
    let mut later = RetryRecord::default();
    later.record(4, true);
    let first = store
        .merge_retry_outcomes(
            &[(a.clone(), first_retries(3, 1)), (b.clone(), later)],
            at(start() + 1),
        )
        .await
        .unwrap();
    assert_eq!(first.len(), 2, "{first:?}");
    let second = store
        .merge_retry_outcomes(&[(a.clone(), first_retries(2, 0))], at(start() + 5))
        .await
        .unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(
        second[0].record.rate(2),
        SuccessRate {
            successes: 1,
            tries: 6
        },
        "the sum of both deltas"
    );
    let read = stored(store, &a, start() + 6).await.expect("listed");
    assert_eq!(read.record, first_retries(5, 1));
    assert_eq!(read.updated_at_ms, at(start() + 5));
    let other = stored(store, &b, start() + 6).await.expect("listed");
    assert_eq!(other.record.rate(4).tries, 1, "the third-and-later slot");
    assert_eq!(other.record.rate(3).tries, 0);
    assert_eq!(other.record.rate(2).tries, 0);
    let again = store
        .merge_retry_outcomes(&[(a.clone(), RetryRecord::default())], at(start() + 9))
        .await
        .unwrap();
    assert_eq!(again[0].record, first_retries(5, 1));
    assert_eq!(
        stored(store, &a, start() + 9).await.unwrap().updated_at_ms,
        at(start() + 5),
        "an empty delta writes nothing"
    );
}

/// Stored counts halve once per window passed: a read decays them
/// without writing, a merge writes the decayed sum plus its delta, and
/// counts decayed to nothing are not listed.
pub async fn retry_outcomes_fade_per_window(store: &dyn Store) {
    let target = unique("provider:fading");
    store
        .merge_retry_outcomes(&[(target.clone(), first_retries(8, 4))], at(start()))
        .await
        .unwrap();
    let next = start() + window();
    let seen = stored(store, &target, next).await.unwrap();
    assert_eq!(seen.record, first_retries(4, 2), "one window: halved");
    assert_eq!(
        stored(store, &target, start() + 1).await.unwrap().record,
        first_retries(8, 4),
        "a read wrote nothing"
    );
    let merged = store
        .merge_retry_outcomes(
            &[(target.clone(), first_retries(1, 0))],
            at(next + 2 * window()),
        )
        .await
        .unwrap();
    assert_eq!(
        merged[0].record,
        first_retries(2, 0),
        "12 tries (4 successes) halved thrice, plus 1 failed"
    );
    assert!(
        stored(store, &target, next + 40 * window()).await.is_none(),
        "decayed to nothing: not listed"
    );
}

/// A bad target refuses the whole merge: nothing of it is written.
pub async fn retry_merge_refusals_write_nothing(store: &dyn Store) {
    let good = unique("tool:good");
    for bad in [
        "",
        "tool:a\nb",
        &"x".repeat(crate::MAX_RETRY_TARGET_LEN + 1),
    ] {
        let result = store
            .merge_retry_outcomes(
                &[
                    (good.clone(), first_retries(1, 0)),
                    (bad.to_owned(), first_retries(1, 0)),
                ],
                BASE_MS,
            )
            .await;
        assert!(
            matches!(
                result,
                Err(StoreError::Invalid {
                    what: "retry target",
                    ..
                })
            ),
            "{bad:?}: {result:?}"
        );
    }
    assert_eq!(stored(store, &good, BASE).await, None);
}

/// Concurrent merges of one target all count.
pub async fn retry_concurrent_merges_all_count(store: &dyn Store) {
    const PROCESSES: u32 = 12;
    let target = unique("provider:race");
    let futures = (0..PROCESSES)
        .map(|_| {
            let target = target.clone();
            Box::pin(async move {
                store
                    .merge_retry_outcomes(&[(target, first_retries(1, 1))], at(start()))
                    .await
                    .unwrap();
            }) as Pin<Box<dyn Future<Output = ()> + Send + '_>>
        })
        .collect();
    join_all(futures).await;
    let sum = stored(store, &target, start()).await.unwrap();
    assert_eq!(
        sum.record,
        first_retries(PROCESSES, PROCESSES),
        "no merge was lost"
    );
}
