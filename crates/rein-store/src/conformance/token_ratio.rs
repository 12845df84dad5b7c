//! Conformance checks of the learned token ratios
//! ([`HealthStore::merge_token_ratios`], [`HealthStore::token_ratios`]).
//!
//! [`HealthStore::merge_token_ratios`]: crate::HealthStore::merge_token_ratios
//! [`HealthStore::token_ratios`]: crate::HealthStore::token_ratios

use std::future::Future;
use std::pin::Pin;

use rein_core::token_ratio::TokenRatio;

use super::{BASE_MS, join_all, ms, unique};
use crate::{Store, StoreError};

/// A ratio of `samples` samples whose least is `least` bytes per token.
fn ratio(samples: u64, least: f64) -> TokenRatio {
    TokenRatio::from_parts(samples, least)
}

async fn stored(store: &dyn Store, model: &str) -> Option<TokenRatio> {
    store
        .token_ratios()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.model == model)
        .map(|r| r.stored.ratio)
}

/// Merges add samples and keep the least ratio: what a second process
/// starts from is every process's learning, never a looser bound.
pub async fn token_ratio_merges_add_samples_and_keep_the_least(store: &dyn Store) {
    let (a, b) = (unique("openai/gpt"), unique("anthropic/claude"));
    let first = store
        .merge_token_ratios(
            &[(a.clone(), ratio(3, 4.0)), (b.clone(), ratio(1, 3.5))],
            BASE_MS,
        )
        .await
        .unwrap();
    assert_eq!(first.len(), 2);
    let second = store
        .merge_token_ratios(&[(a.clone(), ratio(2, 2.5))], BASE_MS + ms(1))
        .await
        .unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].stored.ratio, ratio(5, 2.5), "summed, least kept");
    assert_eq!(second[0].stored.updated_at_ms, BASE_MS + ms(1));
    // A looser ratio later does not loosen it.
    store
        .merge_token_ratios(&[(a.clone(), ratio(1, 9.0))], BASE_MS + ms(2))
        .await
        .unwrap();
    assert_eq!(stored(store, &a).await, Some(ratio(6, 2.5)));
    assert_eq!(stored(store, &b).await, Some(ratio(1, 3.5)));
    // A delta without samples writes nothing, and reports what is stored.
    let empty = store
        .merge_token_ratios(&[(b.clone(), TokenRatio::new())], BASE_MS + ms(3))
        .await
        .unwrap();
    assert_eq!(empty[0].stored.ratio, ratio(1, 3.5));
    assert_eq!(empty[0].stored.updated_at_ms, BASE_MS);
    let none = unique("none/yet");
    let nothing = store
        .merge_token_ratios(&[(none.clone(), TokenRatio::new())], BASE_MS)
        .await
        .unwrap();
    assert!(nothing.is_empty());
    assert_eq!(stored(store, &none).await, None);
}

/// A malformed model key is refused, and nothing of the merge is written.
pub async fn token_ratio_merge_refusals_write_nothing(store: &dyn Store) {
    let good = unique("good/model");
    for bad in [String::new(), "a\nb".to_owned(), "x".repeat(401)] {
        let refused = store
            .merge_token_ratios(
                &[(good.clone(), ratio(1, 4.0)), (bad, ratio(1, 4.0))],
                BASE_MS,
            )
            .await;
        assert!(
            matches!(refused, Err(StoreError::Invalid { .. })),
            "{refused:?}"
        );
    }
    assert_eq!(stored(store, &good).await, None, "nothing was written");
}

/// Concurrent merges of one model all count.
pub async fn token_ratio_concurrent_merges_all_count(store: &dyn Store) {
    const PROCESSES: u64 = 12;
    let model = unique("race/model");
    let futures = (0..PROCESSES)
        .map(|n| {
            let model = model.clone();
            Box::pin(async move {
                store
                    .merge_token_ratios(&[(model, ratio(2, 3.0 + n as f64))], BASE_MS)
                    .await
                    .unwrap();
            }) as Pin<Box<dyn Future<Output = ()> + Send + '_>>
        })
        .collect();
    join_all(futures).await;
    assert_eq!(
        stored(store, &model).await,
        Some(ratio(2 * PROCESSES, 3.0)),
        "no merge was lost, the least was kept"
    );
}
