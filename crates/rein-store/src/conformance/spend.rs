//! Conformance checks of API keys' spend ([`SpendStore`]).
//!
//! [`SpendStore`]: crate::SpendStore

use std::future::Future;
use std::pin::Pin;

use rein_core::TenantId;

use super::{join_all, unique, unique_tenant};
use crate::{SpendDelta, SpendQuery, Store, StoreError};

fn delta(tenant: &TenantId, key: &str, model: &str, day: u32, tokens: u64) -> SpendDelta {
    SpendDelta {
        tenant: tenant.clone(),
        key: key.to_owned(),
        model: model.to_owned(),
        day,
        tokens,
        cost_micros: tokens * 3,
    }
}

fn window(tenant: &TenantId, key: Option<&str>, from_day: u32, until_day: u32) -> SpendQuery {
    SpendQuery {
        tenant: Some(tenant.clone()),
        key: key.map(str::to_owned),
        from_day,
        until_day,
    }
}

/// Additions to one row sum; rows are told apart by key, model and day;
/// a query selects its tenant, key and days, by day then key then model.
pub async fn spend_adds_per_key_model_and_day(store: &dyn Store) {
    let tenant = unique_tenant("spend");
    let other = unique_tenant("spend-other");
    store
        .add_spend(&[
            delta(&tenant, "ci", "openai/gpt", 20_000, 100),
            delta(&tenant, "ci", "openai/gpt", 20_000, 50),
            delta(&tenant, "ci", "anthropic/claude", 20_000, 7),
            delta(&tenant, "ci", "openai/gpt", 20_001, 1),
            delta(&tenant, "bot", "openai/gpt", 20_000, 9),
            delta(&other, "ci", "openai/gpt", 20_000, 1_000),
        ])
        .await
        .unwrap();
    store
        .add_spend(&[delta(&tenant, "ci", "openai/gpt", 20_000, 10)])
        .await
        .unwrap();
    let day = store
        .spend(&window(&tenant, Some("ci"), 20_000, 20_001))
        .await
        .unwrap();
    let got: Vec<(&str, u64, u64)> = day
        .iter()
        .map(|r| (r.model.as_str(), r.tokens, r.cost_micros))
        .collect();
    assert_eq!(got, [("anthropic/claude", 7, 21), ("openai/gpt", 160, 480)]);
    let all = store
        .spend(&window(&tenant, None, 19_000, 21_000))
        .await
        .unwrap();
    let got: Vec<(u32, &str, &str, u64)> = all
        .iter()
        .map(|r| (r.day, r.key.as_str(), r.model.as_str(), r.tokens))
        .collect();
    assert_eq!(
        got,
        [
            (20_000, "bot", "openai/gpt", 9),
            (20_000, "ci", "anthropic/claude", 7),
            (20_000, "ci", "openai/gpt", 160),
            (20_001, "ci", "openai/gpt", 1),
        ],
        "another tenant's key of the same name is not counted"
    );
    let before = store
        .spend(&window(&tenant, None, 19_000, 20_000))
        .await
        .unwrap();
    assert!(before.is_empty(), "until is exclusive: {before:?}");
}

/// A malformed delta is refused, and nothing of the call is written.
pub async fn spend_refusals_write_nothing(store: &dyn Store) {
    let tenant = unique_tenant("spend-bad");
    for (key, model) in [("", "m/x"), ("k", ""), ("k", &"x".repeat(257) as &str)] {
        let refused = store
            .add_spend(&[
                delta(&tenant, "good", "m/x", 1, 5),
                delta(&tenant, key, model, 1, 5),
            ])
            .await;
        assert!(
            matches!(refused, Err(StoreError::Invalid { .. })),
            "{refused:?}"
        );
    }
    let rows = store.spend(&window(&tenant, None, 0, 10)).await.unwrap();
    assert!(rows.is_empty(), "nothing was written: {rows:?}");
}

/// Concurrent additions to one row all count.
pub async fn spend_concurrent_additions_all_count(store: &dyn Store) {
    const PROCESSES: u64 = 12;
    let tenant = unique_tenant("spend-race");
    let key = unique("key");
    let futures = (0..PROCESSES)
        .map(|_| {
            let (tenant, key) = (tenant.clone(), key.clone());
            Box::pin(async move {
                store
                    .add_spend(&[
                        delta(&tenant, &key, "a/m", 5, 2),
                        delta(&tenant, &key, "b/m", 5, 1),
                    ])
                    .await
                    .unwrap();
            }) as Pin<Box<dyn Future<Output = ()> + Send + '_>>
        })
        .collect();
    join_all(futures).await;
    let rows = store
        .spend(&window(&tenant, Some(&key), 5, 6))
        .await
        .unwrap();
    let got: Vec<(&str, u64)> = rows.iter().map(|r| (r.model.as_str(), r.tokens)).collect();
    assert_eq!(
        got,
        [("a/m", 2 * PROCESSES), ("b/m", PROCESSES)],
        "no addition was lost"
    );
}
