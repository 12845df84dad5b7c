//! A boolean field whose value is fixed by the shape it belongs to.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A boolean that is always `V`: `ok: Flag<true>` writes `"ok": true` and
/// decodes only `true`.
///
/// # Why
///
/// Several payloads have shapes told apart by one boolean on the wire
/// (`"ok": true` with usage, `"ok": false` with a failure). Giving each
/// shape its own struct with a fixed flag lets an untagged enum pick the
/// shape by that flag, and makes a payload that says `ok` while carrying
/// a failure unrepresentable.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Flag<const V: bool>;

impl<const V: bool> Flag<V> {
    /// The value the flag stands for.
    pub const fn get(self) -> bool {
        V
    }
}

impl<const V: bool> fmt::Debug for Flag<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{V}")
    }
}

impl<const V: bool> Serialize for Flag<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bool(V)
    }
}

impl<'de, const V: bool> Deserialize<'de> for Flag<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if bool::deserialize(deserializer)? == V {
            Ok(Flag)
        } else {
            Err(serde::de::Error::custom(format!(
                "expected {V}, found {}",
                !V
            )))
        }
    }
}
