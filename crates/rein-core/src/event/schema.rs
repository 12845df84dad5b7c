//! The event schema's version, and the one name schema 1 wrote that
//! schema 2 spells differently.
//!
//! # Versions
//!
//! | schema | written by | durations | money |
//! | --- | --- | --- | --- |
//! | 1 | events without `v` | `*_ms` counts, and serde's `{"secs", "nanos"}` in budgets and breaker transitions | integer micro-dollars (`cost`, `cost_micros`) |
//! | 2 | `"v": 2` | `*_ms` counts, and text (`"5m"`) in budgets | dollars (`cost_usd`, `needed_usd`) |
//!
//! Every schema-1 event still decodes: the budget types read both of
//! their forms ([`crate::deadline`]), and `upgrade` renames the one
//! payload key that changed unit. An event from a newer rein (`v` above
//! [`EVENT_SCHEMA`]) is refused by name rather than half read.

use serde_json::Value;

use super::EventKind;

/// The schema version rein writes (`"v"` of every event).
pub const EVENT_SCHEMA: u32 = 2;

/// `data` of a `kind` event as schema 2 names it.
pub(crate) fn upgrade(kind: EventKind, mut data: Value) -> Value {
    if kind == EventKind::ModelCallFinished
        && let Some(object) = data.as_object_mut()
        && !object.contains_key("cost_usd")
        && let Some(micros) = object.remove("cost_micros")
    {
        let usd = match micros.as_u64() {
            Some(micros) => Value::from(crate::deadline::Cost::from_micros(micros).usd()),
            // Not a count: left for the decoder to name.
            None => micros,
        };
        object.insert("cost_usd".to_owned(), usd);
    }
    data
}
