//! The `Retry-After` value a fault or a scripted error answers with.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A `Retry-After` header value, in either of its two HTTP forms.
///
/// # Why
///
/// rein must honour both forms (RFC 9110 §10.2.3): delay-seconds and an
/// HTTP date. The test services can send either so both parsing paths are
/// exercised over real HTTP.
///
/// JSON form: `{"seconds": 3600}` or `{"date": "Sun, 06 Nov 1994 08:49:37 GMT"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryAfter {
    /// `Retry-After: <seconds>`.
    Seconds(u64),
    /// `Retry-After: <HTTP date>`; whole seconds only, as the format allows.
    Date(#[serde(with = "http_date")] SystemTime),
}

impl RetryAfter {
    /// The header value to send.
    pub fn header_value(&self) -> String {
        match self {
            RetryAfter::Seconds(secs) => secs.to_string(),
            RetryAfter::Date(at) => httpdate::fmt_http_date(*at),
        }
    }

    /// How long the client is asked to wait, seen at `now`; a date in the
    /// past means zero.
    pub fn delay_from(&self, now: SystemTime) -> Duration {
        match self {
            RetryAfter::Seconds(secs) => Duration::from_secs(*secs),
            RetryAfter::Date(at) => at.duration_since(now).unwrap_or(Duration::ZERO),
        }
    }

    /// [`delay_from`](Self::delay_from) in whole milliseconds, as the
    /// structured error body's `retry_after_ms` carries it.
    pub(crate) fn millis_from(&self, now: SystemTime) -> u64 {
        u64::try_from(self.delay_from(now).as_millis()).unwrap_or(u64::MAX)
    }
}

mod http_date {
    use super::*;

    pub(super) fn serialize<S: Serializer>(at: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&httpdate::fmt_http_date(*at))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let text = String::deserialize(d)?;
        httpdate::parse_http_date(&text).map_err(|_| {
            serde::de::Error::custom(format!(
                "retry_after.date must be an HTTP date like \"Sun, 06 Nov 1994 08:49:37 GMT\", but it is {text:?}"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn seconds_and_date_round_trip_through_json() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        for value in [RetryAfter::Seconds(3600), RetryAfter::Date(at)] {
            let json = serde_json::to_string(&value).unwrap();
            assert_eq!(serde_json::from_str::<RetryAfter>(&json).unwrap(), value);
        }
        assert_eq!(
            serde_json::to_value(RetryAfter::Date(at)).unwrap(),
            serde_json::json!({"date": "Sun, 06 Nov 1994 08:49:37 GMT"})
        );
    }

    #[test]
    fn date_in_the_past_waits_zero() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        let now = at + Duration::from_secs(5);
        assert_eq!(RetryAfter::Date(at).delay_from(now), Duration::ZERO);
        assert_eq!(RetryAfter::Seconds(2).millis_from(now), 2000);
    }
}
