//! Property tests of idempotency keys (public API only).
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use rein_core::idempotency::{IdempotencyKey, Normalizer};
use rein_core::{IntentId, TenantId, ToolClass};
use serde_json::{Map, Value};

fn key(tenant: &str, intent: &str, args: &Value) -> IdempotencyKey {
    IdempotencyKey::derive(
        ToolClass::IdempotentWrite,
        &TenantId::new(tenant).unwrap(),
        &IntentId::new(intent).unwrap(),
        "tool",
        args,
        &Normalizer::default(),
    )
    .unwrap()
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-z ]{0,12}".prop_map(Value::from),
    ]
}

fn fields() -> impl Strategy<Value = Vec<(String, Value)>> {
    prop::collection::btree_map("[a-z]{1,8}", leaf(), 0..8).prop_map(|m| m.into_iter().collect())
}

fn object(fields: &[(String, Value)]) -> Value {
    let mut map = Map::new();
    for (k, v) in fields {
        map.insert(k.clone(), v.clone());
    }
    Value::Object(map)
}

fn padded(value: &Value, pad: &str) -> Value {
    match value {
        Value::String(s) => Value::String(format!("{pad}{s}{pad}")),
        other => other.clone(),
    }
}

proptest! {
    /// Keys are stable under key reordering and surrounding whitespace.
    #[test]
    fn keys_are_stable_under_reordering_and_whitespace(
        fields in fields(),
        shuffle_seed in any::<u64>(),
        pad in "[ \t\n]{0,3}",
    ) {
        let mut reordered: Vec<_> = fields.iter().map(|(k, v)| (k.clone(), padded(v, &pad))).collect();
        // A deterministic permutation (serde_json's map sorts, so also check
        // the JSON text order by building from the permuted text).
        let n = reordered.len().max(1);
        reordered.rotate_left((shuffle_seed as usize) % n);
        let text = format!(
            "{{{}}}",
            reordered
                .iter()
                .map(|(k, v)| format!("{}{pad}:{pad}{}", serde_json::to_string(k).unwrap(), v))
                .collect::<Vec<_>>()
                .join(",")
        );
        let parsed: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(key("t", "i", &object(&fields)), key("t", "i", &parsed));
    }

    /// Keys differ across tenants and across intents.
    #[test]
    fn keys_differ_across_tenants_and_intents(
        fields in fields(),
        a in "[a-z0-9]{1,10}",
        b in "[a-z0-9]{1,10}",
    ) {
        prop_assume!(a != b);
        let args = object(&fields);
        prop_assert_ne!(key(&a, "i", &args), key(&b, "i", &args));
        prop_assert_ne!(key("t", &a, &args), key("t", &b, &args));
    }

    /// Any JSON value normalizes without panicking, and the canonical form is
    /// a fixed point: normalizing its own parse gives the same bytes.
    #[test]
    fn canonical_form_is_a_fixed_point(fields in fields()) {
        let n = Normalizer::default();
        let once = n.canonical_json(&object(&fields));
        let reparsed: Value = serde_json::from_slice(&once).unwrap();
        prop_assert_eq!(n.canonical_json(&reparsed), once);
    }
}
