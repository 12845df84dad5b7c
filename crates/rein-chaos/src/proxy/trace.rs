//! What the proxy saw and did, per request, and how many requests were in
//! flight at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use super::rule::Injection;

/// The proxy's account of one request: what came in, what was injected,
/// what the upstream answered and what the client got.
///
/// # Why
///
/// An invariant checker must compare what rein *believes* happened with
/// what did: "the upstream applied this key once", "the attempt after a
/// reset carried the same intent id". The trace is that ground truth on
/// the wire, independent of rein's own ledger.
///
/// Records are appended when a request is done, so the trace is in
/// completion order; `seq` gives the order of arrival. A record is in the
/// trace before the client can see the end of its answer, so a client that
/// has its answer (or its error) can read its record at once.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TraceRecord {
    /// Arrival number, from 0, over the proxy's life.
    pub seq: u64,
    /// Unix time in milliseconds when the request head was parsed.
    pub at_ms: u64,
    /// The HTTP method.
    pub method: String,
    /// The request target as received: path and query.
    pub path: String,
    /// The tool called, as [`tool_of`](super::tool_of) names it.
    pub tool: Option<String>,
    /// The `Idempotency-Key` header.
    pub idempotency_key: Option<String>,
    /// The `Rein-Run-Id` header.
    pub run_id: Option<String>,
    /// The `Rein-Intent-Id` header.
    pub intent_id: Option<String>,
    /// The `Rein-Attempt` header, when it is a number.
    pub attempt: Option<u32>,
    /// The request body as lossy UTF-8, cut at
    /// [`TRACE_BODY_CAP`](super::TRACE_BODY_CAP) bytes.
    pub request_body: String,
    /// The fault done to the request, if a rule fired.
    pub injected: Option<Injection>,
    /// Whether the request was sent upstream.
    pub forwarded: bool,
    /// The upstream's status, when it answered.
    pub upstream_status: Option<u16>,
    /// Why the upstream could not be reached or its body broke off.
    pub upstream_error: Option<String>,
    /// What the client got.
    pub client_saw: ClientSaw,
    /// Unix time in milliseconds when the proxy was done with the request.
    pub finished_ms: u64,
}

/// What the client of one request got from the proxy.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ClientSaw {
    /// A complete answer.
    Response {
        /// Its status.
        status: u16,
    },
    /// A connection reset before any byte.
    Reset,
    /// A status and headers, then a body cut short by a close.
    Truncated {
        /// The status sent.
        status: u16,
        /// How many body bytes were sent.
        bytes: usize,
    },
    /// A status and headers of a chunked body, then silence, then a close.
    Idle {
        /// The status sent.
        status: u16,
    },
    /// The upstream could not be reached; the proxy answered 502.
    BadGateway,
    /// The client hung up before the proxy answered.
    ClientGone,
}

/// The number of requests in flight, over all and per tool, with peaks.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    inner: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    now: usize,
    peak: usize,
    /// Tool calls only (`/tools/{name}`, not status lookups).
    calls_now: usize,
    calls_peak: usize,
    tools: HashMap<String, ToolCount>,
}

#[derive(Debug, Default)]
struct ToolCount {
    now: usize,
    peak: usize,
}

impl InFlight {
    /// Counts a request in; it is counted out when the guard drops.
    pub(crate) fn enter(self: &Arc<Self>, tool: Option<&str>) -> InFlightGuard {
        let mut counts = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        counts.now += 1;
        counts.peak = counts.peak.max(counts.now);
        if tool.is_some_and(|t| !t.contains('/')) {
            counts.calls_now += 1;
            counts.calls_peak = counts.calls_peak.max(counts.calls_now);
        }
        if let Some(tool) = tool {
            let entry = counts.tools.entry(tool.to_owned()).or_default();
            entry.now += 1;
            entry.peak = entry.peak.max(entry.now);
        }
        InFlightGuard {
            counts: Arc::clone(self),
            tool: tool.map(str::to_owned),
        }
    }

    fn exit(&self, tool: Option<&str>) {
        let mut counts = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        counts.now = counts.now.saturating_sub(1);
        if tool.is_some_and(|t| !t.contains('/')) {
            counts.calls_now = counts.calls_now.saturating_sub(1);
        }
        if let Some(entry) = tool.and_then(|t| counts.tools.get_mut(t)) {
            entry.now = entry.now.saturating_sub(1);
        }
    }

    /// The most requests ever in flight at once.
    pub(crate) fn peak(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .peak
    }

    /// The most tool calls (status lookups excluded) ever in flight at once.
    pub(crate) fn peak_calls(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .calls_peak
    }

    /// Requests in flight now.
    pub(crate) fn now(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .now
    }

    /// The most calls of `tool` ever in flight at once.
    pub(crate) fn peak_of(&self, tool: &str) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tools
            .get(tool)
            .map_or(0, |t| t.peak)
    }
}

/// One request counted in flight; dropping it counts the request out.
#[derive(Debug)]
pub(crate) struct InFlightGuard {
    counts: Arc<InFlight>,
    tool: Option<String>,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.counts.exit(self.tool.as_deref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_follow_overlap_and_survive_exits() {
        let counts = Arc::new(InFlight::default());
        let a1 = counts.enter(Some("a"));
        let a2 = counts.enter(Some("a"));
        let none = counts.enter(None);
        drop(a1);
        let b = counts.enter(Some("b"));
        drop((a2, none, b));
        let a3 = counts.enter(Some("a"));
        drop(a3);
        assert_eq!(counts.peak(), 3);
        assert_eq!(counts.peak_of("a"), 2);
        assert_eq!(counts.peak_of("b"), 1);
        assert_eq!(counts.peak_of("c"), 0);
    }
}
