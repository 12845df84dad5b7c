//! The W3C `traceparent`: read from a caller, sent to tools and providers.
//!
//! Parsing and formatting are the SDK's [`TraceContextPropagator`]'s (the
//! spec's version, length and all-zero rules), not rein's own.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::{Context, trace::SpanContext};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use rein_core::header::TRACEPARENT_HEADER;

/// A caller's trace context: the span a run or gateway call belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceParent(SpanContext);

/// A `traceparent` header that is not W3C Trace Context.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the traceparent header must be W3C Trace Context (\"00-<32 hex trace id>-<16 hex span id>-<2 hex flags>\"), but it is {value:?}"
)]
pub struct TraceParentError {
    /// What the caller sent (at most its first 64 characters).
    pub value: String,
}

struct One<'a>(&'a str);

impl Extractor for One<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        key.eq_ignore_ascii_case(TRACEPARENT_HEADER)
            .then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT_HEADER]
    }
}

impl TraceParent {
    /// Parses a `traceparent` header value.
    ///
    /// # Errors
    ///
    /// [`TraceParentError`] when it is not a valid W3C Trace Context
    /// (wrong shape, an all-zero id, an unknown version's bad shape).
    pub fn parse(value: &str) -> Result<TraceParent, TraceParentError> {
        // The field lengths the spec fixes; the SDK pads a short id.
        let parts: Vec<&str> = value.trim().split('-').collect();
        let shaped = parts.len() >= 4
            && [2, 32, 16, 2]
                .iter()
                .zip(&parts)
                .all(|(len, part)| part.len() == *len);
        let cx = TraceContextPropagator::new().extract(&One(value.trim()));
        let span = cx.span().span_context().clone();
        if shaped && span.is_valid() {
            Ok(TraceParent(span))
        } else {
            Err(TraceParentError {
                value: value.chars().take(64).collect(),
            })
        }
    }

    /// The span of the current context (a call being sent), if any: the
    /// parent of a child run started from it.
    pub fn current() -> Option<TraceParent> {
        let cx = Context::current();
        let span = cx.span().span_context().clone();
        span.is_valid().then_some(TraceParent(span))
    }

    /// The trace this context belongs to, as 32 hex digits.
    pub fn trace_id(&self) -> String {
        self.0.trace_id().to_string()
    }

    /// The caller's span, as 16 hex digits.
    pub fn span_id(&self) -> String {
        self.0.span_id().to_string()
    }

    /// This context as the store keeps it with a run.
    pub fn to_span(&self) -> Option<rein_store::SpanRef> {
        span_ref(&self.0)
    }

    /// A context the store kept with a run ([`TraceParent::to_span`]).
    pub fn from_span(span: &rein_store::SpanRef) -> Option<TraceParent> {
        TraceParent::parse(&span.to_traceparent()).ok()
    }

    /// The span this context names, as a link from another span.
    pub(super) fn span_context(&self) -> SpanContext {
        self.0.clone()
    }

    /// The context a run starts its root span in.
    pub(super) fn context(&self) -> Context {
        Context::new().with_remote_span_context(self.0.clone())
    }
}

/// `span` as the store keeps it; `None` for an invalid span.
pub(super) fn span_ref(span: &SpanContext) -> Option<rein_store::SpanRef> {
    if !span.is_valid() {
        return None;
    }
    rein_store::SpanRef::new(
        &span.trace_id().to_string(),
        &span.span_id().to_string(),
        span.is_sampled(),
    )
    .ok()
}

/// The headers of [`inject`], collected for a request builder.
#[derive(Default)]
struct Headers(Vec<(String, String)>);

impl Injector for Headers {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_owned(), value));
    }
}

/// `request` with the `traceparent` of the current context (the span of
/// the attempt or model call being sent: see
/// [`RunTrace::attempt_context`](super::RunTrace::attempt_context)), when
/// there is one; unchanged otherwise.
pub fn inject(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    let cx = Context::current();
    if !cx.span().span_context().is_valid() {
        return request;
    }
    let mut headers = Headers::default();
    TraceContextPropagator::new().inject_context(&cx, &mut headers);
    headers
        .0
        .into_iter()
        .fold(request, |request, (name, value)| {
            request.header(name, value)
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_w3c_traceparent_parses_and_keeps_its_ids() {
        let p =
            TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(p.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(p.span_id(), "00f067aa0ba902b7");
        let stored = p.to_span().unwrap();
        assert_eq!(
            stored.to_traceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(TraceParent::from_span(&stored), Some(p));
    }

    #[test]
    fn malformed_or_all_zero_traceparents_are_refused_with_the_value() {
        for bad in [
            "",
            "hello",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            let err = TraceParent::parse(bad).unwrap_err();
            assert_eq!(err.value, bad);
            assert!(err.to_string().contains("W3C Trace Context"));
        }
    }
}
