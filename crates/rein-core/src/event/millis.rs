//! Durations on the wire as whole milliseconds (the `*_ms` fields).
//!
//! NOTE: a duration past `u64::MAX` milliseconds is written as
//! `u64::MAX`, as the engine always wrote them.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn serialize<S: Serializer>(d: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(ms(*d))
}

pub(super) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    u64::deserialize(deserializer).map(Duration::from_millis)
}

/// The same for an optional duration (`null` when absent).
pub(super) mod option {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(in super::super) fn serialize<S: Serializer>(
        d: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => serializer.serialize_u64(super::ms(*d)),
            None => serializer.serialize_none(),
        }
    }

    pub(in super::super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<u64>::deserialize(deserializer).map(|ms| ms.map(Duration::from_millis))
    }
}
