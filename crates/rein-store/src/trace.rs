//! [`SpanRef`]: a span of a run's trace, kept with the run so that a
//! process that drives it later (a queue worker, a resume, a takeover)
//! can tie its spans to the trace the run began in.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::StoreError;

/// A span by its W3C Trace Context ids: a trace id (32 lowercase hex
/// digits, not all zero), a span id (16, not all zero) and whether it was
/// sampled. Stored and serialized as a `traceparent` header value
/// (`00-<trace id>-<span id>-<01|00>`).
///
/// # Why in the store, and why not the SDK's type
///
/// A queued run is accepted by one process and driven by another, maybe
/// after a crash by a third; only the store connects them. The store
/// knows no tracing SDK, so the ids travel as the header's own text, which
/// any SDK reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpanRef {
    trace_id: String,
    span_id: String,
    sampled: bool,
}

impl SpanRef {
    /// The span `span_id` of trace `trace_id`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] when an id is not lowercase hex of its
    /// length, or is all zeros (W3C: an invalid id).
    pub fn new(trace_id: &str, span_id: &str, sampled: bool) -> Result<SpanRef, StoreError> {
        for (what, id, len) in [("trace id", trace_id, 32), ("span id", span_id, 16)] {
            let hex = id.len() == len
                && id
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            if !hex || id.bytes().all(|b| b == b'0') {
                return Err(StoreError::Invalid {
                    what,
                    expected: format!("{len} lowercase hex digits, not all zero"),
                    found: format!("{:?}", id.chars().take(64).collect::<String>()),
                });
            }
        }
        Ok(SpanRef {
            trace_id: trace_id.to_owned(),
            span_id: span_id.to_owned(),
            sampled,
        })
    }

    /// Reads a `traceparent` value of version `00` (as
    /// [`SpanRef::to_traceparent`] writes).
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for anything else.
    pub fn parse_traceparent(text: &str) -> Result<SpanRef, StoreError> {
        let invalid = || StoreError::Invalid {
            what: "traceparent",
            expected: "00-<32 hex trace id>-<16 hex span id>-<2 hex flags>".to_owned(),
            found: format!("{:?}", text.chars().take(64).collect::<String>()),
        };
        let parts: Vec<&str> = text.split('-').collect();
        let [version, trace_id, span_id, flags] = parts.as_slice() else {
            return Err(invalid());
        };
        if *version != "00" || flags.len() != 2 {
            return Err(invalid());
        }
        let flags = u8::from_str_radix(flags, 16).map_err(|_| invalid())?;
        SpanRef::new(trace_id, span_id, flags & 1 == 1)
    }

    /// The value of a `traceparent` header naming this span.
    pub fn to_traceparent(&self) -> String {
        let flags = if self.sampled { "01" } else { "00" };
        format!("00-{}-{}-{flags}", self.trace_id, self.span_id)
    }

    /// The trace, as 32 hex digits.
    pub fn trace_id(&self) -> &str {
        &self.trace_id
    }

    /// The span, as 16 hex digits.
    pub fn span_id(&self) -> &str {
        &self.span_id
    }

    /// Whether the span was sampled (its trace is recorded).
    pub fn sampled(&self) -> bool {
        self.sampled
    }
}

impl fmt::Display for SpanRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_traceparent())
    }
}

impl Serialize for SpanRef {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_traceparent())
    }
}

impl<'de> Deserialize<'de> for SpanRef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        SpanRef::parse_traceparent(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";

    #[test]
    fn a_span_round_trips_through_its_traceparent_and_serde() {
        for sampled in [true, false] {
            let span = SpanRef::new(TRACE, SPAN, sampled).unwrap();
            let text = span.to_traceparent();
            assert_eq!(SpanRef::parse_traceparent(&text).unwrap(), span);
            let json = serde_json::to_value(&span).unwrap();
            assert_eq!(json, text.as_str());
            assert_eq!(serde_json::from_value::<SpanRef>(json).unwrap(), span);
        }
    }

    #[test]
    fn bad_ids_and_shapes_are_refused_with_the_value() {
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
        ] {
            let err = SpanRef::parse_traceparent(bad).unwrap_err();
            assert!(matches!(err, StoreError::Invalid { .. }), "{bad}: {err}");
        }
    }
}
