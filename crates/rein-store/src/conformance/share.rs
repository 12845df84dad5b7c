//! Conformance checks of the share leases ([`Store::renew_share_lease`],
//! [`Store::release_share_lease`]).

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;

use super::{BASE_MS, join_all, ms, unique};
use crate::{MAX_SHARE_LEASE_LEN, Store, StoreError};

/// A renewal lists every live holder of its group, itself included, sorted;
/// a renewal moves the expiry; other groups are apart.
pub async fn share_renewals_list_the_live_holders_of_their_group(store: &dyn Store) {
    let (group, other) = (unique("group"), unique("group"));
    let (a, b) = (unique("node-a"), unique("node-b"));
    let first = store
        .renew_share_lease(&group, &b, BASE_MS, BASE_MS + ms(3_000))
        .await
        .unwrap();
    assert_eq!(first, std::slice::from_ref(&b), "alone");
    let both = store
        .renew_share_lease(&group, &a, BASE_MS + ms(1), BASE_MS + ms(3_001))
        .await
        .unwrap();
    assert_eq!(both, [a.clone(), b.clone()], "both, sorted");
    let apart = store
        .renew_share_lease(&other, &a, BASE_MS + ms(1), BASE_MS + ms(3_001))
        .await
        .unwrap();
    assert_eq!(
        apart,
        std::slice::from_ref(&a),
        "another group's holders are apart"
    );
    // b renews: its lease now outlives a's.
    store
        .renew_share_lease(&group, &b, BASE_MS + ms(2_000), BASE_MS + ms(9_000))
        .await
        .unwrap();
    let later = store
        .renew_share_lease(&group, &b, BASE_MS + ms(3_001), BASE_MS + ms(9_000))
        .await
        .unwrap();
    assert_eq!(
        later,
        std::slice::from_ref(&b),
        "a's lease expired at 3001 (inclusive)"
    );
    // a comes back: a new lease, listed again.
    let back = store
        .renew_share_lease(&group, &a, BASE_MS + ms(3_002), BASE_MS + ms(6_000))
        .await
        .unwrap();
    assert_eq!(back, [a, b]);
}

/// A release removes only the releasing node's lease of that group.
pub async fn share_release_removes_only_its_own_lease(store: &dyn Store) {
    let group = unique("group");
    let (a, b) = (unique("node-a"), unique("node-b"));
    for node in [&a, &b] {
        store
            .renew_share_lease(&group, node, BASE_MS, BASE_MS + ms(3_000))
            .await
            .unwrap();
    }
    assert!(store.release_share_lease(&group, &a).await.unwrap());
    assert!(
        !store.release_share_lease(&group, &a).await.unwrap(),
        "released once"
    );
    assert!(
        !store
            .release_share_lease(&unique("group"), &b)
            .await
            .unwrap(),
        "b holds no lease of another group"
    );
    let left = store
        .renew_share_lease(&group, &b, BASE_MS + ms(1), BASE_MS + ms(3_000))
        .await
        .unwrap();
    assert_eq!(left, [b]);
}

/// Malformed groups or nodes, and an expiry not after now, are refused and
/// write nothing.
pub async fn share_lease_refusals(store: &dyn Store) {
    let group = unique("group");
    let node = unique("node");
    let long = "x".repeat(MAX_SHARE_LEASE_LEN + 1);
    for (g, n, now, until) in [
        ("", node.as_str(), BASE_MS, BASE_MS + ms(1)),
        (group.as_str(), "", BASE_MS, BASE_MS + ms(1)),
        (group.as_str(), "a\nb", BASE_MS, BASE_MS + ms(1)),
        (long.as_str(), node.as_str(), BASE_MS, BASE_MS + ms(1)),
        (group.as_str(), node.as_str(), BASE_MS, BASE_MS),
    ] {
        let err = store.renew_share_lease(g, n, now, until).await.unwrap_err();
        assert!(matches!(err, StoreError::Invalid { .. }), "{err}");
    }
    let err = store.release_share_lease(&group, "").await.unwrap_err();
    assert!(matches!(err, StoreError::Invalid { .. }), "{err}");
    let other = unique("node");
    let listed = store
        .renew_share_lease(&group, &other, BASE_MS, BASE_MS + ms(10))
        .await
        .unwrap();
    assert_eq!(listed, [other], "no refused renewal was written");
}

/// Concurrent renewals of one group by many nodes, on two handles (two
/// processes): each renewal and its listing are one step, so the listings
/// form a chain — each one a superset of the one before — and the last
/// lists every node. A backend that listed outside the renewal's
/// transaction would let two nodes each see only itself.
pub async fn two_handles_renewing_share_leases_see_each_other(
    store: &dyn Store,
    other: &dyn Store,
) {
    const NODES: usize = 12;
    let group = unique("group");
    let nodes: Vec<String> = (0..NODES).map(|n| unique(&format!("node-{n}"))).collect();
    let futures = nodes
        .iter()
        .enumerate()
        .map(|(n, node)| {
            let handle = if n % 2 == 0 { store } else { other };
            let group = group.clone();
            Box::pin(async move {
                let listed = handle
                    .renew_share_lease(&group, node, BASE_MS, BASE_MS + ms(60_000))
                    .await
                    .unwrap();
                assert!(listed.contains(node), "a renewal lists its own node");
                listed.into_iter().collect::<BTreeSet<String>>()
            }) as Pin<Box<dyn Future<Output = BTreeSet<String>> + Send + '_>>
        })
        .collect();
    let mut listings = join_all(futures).await;
    listings.sort_by_key(BTreeSet::len);
    for pair in listings.windows(2) {
        assert!(
            pair[0].is_subset(&pair[1]) && pair[0].len() < pair[1].len(),
            "renewals are serial: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
    let all: BTreeSet<String> = nodes.into_iter().collect();
    assert_eq!(
        listings.last(),
        Some(&all),
        "the last renewal lists every node"
    );
}
