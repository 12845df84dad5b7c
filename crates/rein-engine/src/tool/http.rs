//! The HTTP tool adapter: one attempt of a tool call over HTTP, classified
//! into the error contract (see [`crate::tool`] for why the adapter
//! classifies). A tool's own structured error body (`ErrorBody`) wins
//! over inference from the status code.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rein_core::failure::{TransportError, TransportPhase};
use rein_core::header::{
    ATTEMPT_HEADER, ATTEMPT_ID_HEADER, DEADLINE_HEADER, IDEMPOTENCY_REPLAYED_HEADER,
    INTENT_ID_HEADER, RUN_ID_HEADER, TOOL_REPLAYED_HEADER,
};
use rein_core::idempotency::IdempotencyKey;
use rein_core::{Category, Clock, Effect, Failure};
use serde_json::{Map, Value, json};

use super::ErrorBody;
// NOTE: re-exported so that `tool::http::{Attempt, ToolOutput}` (and the
// former `tool_http::…`) keep working for embedders.
pub use super::{Attempt, ToolOutput};
use crate::{SystemClock, Timer};

/// Where and how to call one tool over HTTP.
///
/// Its credential headers and the userinfo of its URLs are taught to the
/// redactor at every request ([`rein_core::redact`]), so a target built
/// by hand is protected like one from a config; its `Debug` shows neither.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpTarget {
    /// The tool's name: the target of its failures.
    pub name: String,
    /// The URL arguments are sent to.
    pub url: String,
    /// The HTTP method (POST unless configured).
    pub method: reqwest::Method,
    /// Extra headers.
    pub headers: BTreeMap<String, String>,
    /// The header the idempotency key travels in.
    pub idempotency_header: String,
    /// `GET {status_url}?key=K` looks a call up by its key.
    pub status_url: Option<String>,
    /// Results above this size are truncated.
    pub max_result_bytes: usize,
}

impl HttpTarget {
    /// The secrets this target holds: credential-named headers and the
    /// userinfo of its URLs.
    fn teach_secrets(&self) {
        let headers = self
            .headers
            .iter()
            .flat_map(|(name, value)| rein_core::redact::header_secrets(name, value));
        let urls = std::iter::once(&self.url)
            .chain(&self.status_url)
            .flat_map(|url| rein_core::redact::url_secrets(url, &[]));
        crate::secrets::teach(headers.chain(urls));
    }
}

impl std::fmt::Debug for HttpTarget {
    // By hand: header values may be credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers = rein_core::redact::shown(&self.headers);
        f.debug_struct("HttpTarget")
            .field("name", &self.name)
            .field("url", &rein_core::redact::text(&self.url))
            .field("method", &self.method)
            .field("headers", &headers)
            .field("idempotency_header", &self.idempotency_header)
            .field(
                "status_url",
                &self.status_url.as_deref().map(rein_core::redact::text),
            )
            .field("max_result_bytes", &self.max_result_bytes)
            .finish()
    }
}

/// Calls tools over HTTP with one shared client.
#[derive(Clone)]
pub struct HttpToolAdapter {
    client: reqwest::Client,
    /// Times the first byte and reads the wall clock for `Retry-After`.
    clock: Arc<dyn Timer>,
}

impl std::fmt::Debug for HttpToolAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpToolAdapter")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl HttpToolAdapter {
    /// An adapter over `client` (one pool per process), on the system clock.
    pub fn new(client: reqwest::Client) -> Self {
        HttpToolAdapter {
            client,
            clock: Arc::new(SystemClock::new()),
        }
    }

    /// Uses `clock` instead of the system clock (the engine's own).
    pub fn with_clock(mut self, clock: Arc<dyn Timer>) -> Self {
        self.clock = clock;
        self
    }

    /// Makes one attempt.
    ///
    /// # Errors
    ///
    /// A classified [`Failure`] carrying the attempt id.
    pub async fn invoke(
        &self,
        target: &HttpTarget,
        args: &Value,
        attempt: &Attempt<'_>,
    ) -> Result<ToolOutput, Failure> {
        let mut request = self
            .client
            .request(target.method.clone(), &target.url)
            .header(DEADLINE_HEADER, attempt.remaining.as_millis().to_string())
            .header(RUN_ID_HEADER, attempt.run_id.as_str())
            .header(INTENT_ID_HEADER, attempt.intent_id.as_str())
            .header(ATTEMPT_HEADER, attempt.number.to_string())
            .header(ATTEMPT_ID_HEADER, attempt.attempt_id.as_str())
            .json(args)
            .timeout(attempt.total_limit());
        for (name, value) in &target.headers {
            request = request.header(name, value);
        }
        // Set after the target's own headers: `traceparent` is reserved.
        request = crate::telemetry::inject(request);
        if let Some(key) = attempt.key {
            request = request.header(&target.idempotency_header, key.as_str());
        }
        let result = self
            .exchange(target, request, attempt.allowance, attempt.total_limit())
            .await;
        result.map_err(|f| f.with_attempt(attempt.attempt_id.clone()))
    }

    /// Looks a call up by its idempotency key: `Some(result)` when the tool
    /// applied it, `None` when it did not.
    ///
    /// # Errors
    ///
    /// A [`Failure`] when the lookup itself fails or the tool has no status
    /// endpoint (category `unknown`, not retryable).
    pub async fn lookup(
        &self,
        target: &HttpTarget,
        key: &IdempotencyKey,
        allowance: Duration,
    ) -> Result<Option<Value>, Failure> {
        let Some(status_url) = &target.status_url else {
            return Err(Failure::new(&target.name, Category::Unknown)
                .with_human_message(format!("{} has no status_url to look up keys", target.name)));
        };
        let mut request = self
            .client
            .get(status_url)
            .query(&[("key", key.as_str())])
            .header(DEADLINE_HEADER, allowance.as_millis().to_string())
            .timeout(allowance);
        for (name, value) in &target.headers {
            request = request.header(name, value);
        }
        match self.exchange(target, request, allowance, allowance).await {
            Ok(output) => Ok(Some(output.result)),
            Err(f) if f.category() == Category::NotFound => Ok(None),
            Err(f) => Err(f),
        }
    }

    /// Sends a request: the response must begin within `first_byte` and
    /// complete within `total`.
    async fn exchange(
        &self,
        target: &HttpTarget,
        request: reqwest::RequestBuilder,
        first_byte: Duration,
        total: Duration,
    ) -> Result<ToolOutput, Failure> {
        target.teach_secrets();
        let started = self.clock.now();
        let elapsed = || self.clock.now().saturating_duration_since(started);
        let response = match self.clock.timeout(first_byte, request.send()).await {
            Ok(sent) => {
                sent.map_err(|e| transport_failure(&target.name, &e, elapsed(), first_byte, false))?
            }
            Err(_) => {
                return Err(Failure::from_transport(
                    &target.name,
                    TransportError::Timeout,
                    TransportPhase::AfterSend,
                )
                .with_human_message(format!(
                    "{}: no response began within {first_byte:?}",
                    target.name
                )));
            }
        };
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let retry_after = header(reqwest::header::RETRY_AFTER.as_str());
        let replayed = header(TOOL_REPLAYED_HEADER).is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || header(IDEMPOTENCY_REPLAYED_HEADER).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let bytes = response
            .bytes()
            .await
            .map_err(|e| transport_failure(&target.name, &e, elapsed(), total, true))?;
        if !(200..300).contains(&status) {
            return Err(error_failure(
                &target.name,
                status,
                retry_after.as_deref(),
                &bytes,
                self.clock.system_now(),
            ));
        }
        let (mut result, truncated) = shape_result(&bytes, target.max_result_bytes);
        // A tool that echoes its credential (a debug endpoint, an error in
        // a 200) must not put it in the ledger, the checkpoint or the
        // model's context: known secrets go, URL queries stay (a presigned
        // URL in a result is data).
        rein_core::redact::known_json(&mut result);
        Ok(ToolOutput {
            result,
            truncated,
            replayed,
        })
    }
}

/// A transport error: before the request went out nothing happened; after,
/// the effect is unknown.
fn transport_failure(
    name: &str,
    e: &reqwest::Error,
    elapsed: Duration,
    allowance: Duration,
    headers_received: bool,
) -> Failure {
    let (kind, phase) = if e.is_connect() && !headers_received {
        (TransportError::Refused, TransportPhase::BeforeSend)
    } else if e.is_timeout() || elapsed >= allowance {
        (TransportError::Timeout, TransportPhase::AfterSend)
    } else {
        (TransportError::Reset, TransportPhase::AfterSend)
    };
    let what = if headers_received {
        "the response was lost after its headers"
    } else {
        "no response"
    };
    Failure::from_transport(name, kind, phase).with_human_message(format!("{name}: {what}: {e}"))
}

/// An error answer: the tool's structured body if it sent one, else the
/// status code's classification; `now` dates an HTTP-date `Retry-After`.
fn error_failure(
    name: &str,
    status: u16,
    retry_after: Option<&str>,
    body: &[u8],
    now: SystemTime,
) -> Failure {
    let inferred = Failure::from_http_status(name, status, retry_after, now);
    let Ok(ErrorBody { error }) = serde_json::from_slice::<ErrorBody>(body) else {
        return inferred.unwrap_or_else(|| {
            Failure::new(name, Category::Unknown)
                .with_human_message(format!("{name} answered HTTP {status}"))
        });
    };
    // The tool's fields win; what it leaves out comes from the status code
    // (a 500 that does not say whether it acted stays `maybe_applied`).
    let inferred_effect = inferred
        .as_ref()
        .map_or(Effect::MaybeApplied, Failure::effect);
    let mut f =
        Failure::new(name, error.category).with_effect(error.effect.unwrap_or(inferred_effect));
    if let Some(retryable) = error.retryable {
        f = f.with_retryable(retryable);
    }
    let header_wait = inferred
        .as_ref()
        .and_then(Failure::retry_after)
        .or_else(|| retry_after.and_then(|v| rein_core::failure::parse_retry_after(v, now).ok()));
    if let Some(ms) = error.retry_after_ms {
        f = f.with_retry_after(Duration::from_millis(ms));
    } else if let Some(wait) = header_wait
        && f.retryable()
    {
        f = f.with_retry_after(wait);
    }
    let message = error.message.unwrap_or_default();
    f.with_human_message(format!("{name} answered HTTP {status}: {message}"))
}

/// The longest string kept per field when a result is truncated.
const TRUNCATED_STRING_CHARS: usize = 200;

/// Parses a result and enforces the size limit, keeping what matters.
///
/// A result over the limit keeps its top-level scalar fields (ids, status,
/// amounts — the structured key fields a model needs), shortens long
/// strings, drops nested values, and says so in `_truncated`. A non-JSON
/// body becomes `{"text": ...}`.
pub(crate) fn shape_result(bytes: &[u8], max: usize) -> (Value, bool) {
    let value = match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => v,
        Err(_) if bytes.is_empty() => Value::Null,
        Err(_) => json!({"text": String::from_utf8_lossy(bytes)}),
    };
    if bytes.len() <= max {
        return (value, false);
    }
    let mut kept = Map::new();
    let mut dropped = Vec::new();
    if let Value::Object(map) = &value {
        let mut used = 0usize;
        for (k, v) in map {
            let candidate = match v {
                Value::String(s) if s.chars().count() > TRUNCATED_STRING_CHARS => {
                    Value::String(s.chars().take(TRUNCATED_STRING_CHARS).collect::<String>() + "…")
                }
                Value::Array(_) | Value::Object(_) => {
                    dropped.push(k.clone());
                    continue;
                }
                other => other.clone(),
            };
            let size = k.len() + candidate.to_string().len() + 4;
            if used + size > max / 2 {
                dropped.push(k.clone());
                continue;
            }
            used += size;
            kept.insert(k.clone(), candidate);
        }
    } else if let Value::String(s) = &value {
        kept.insert(
            "text".into(),
            Value::String(s.chars().take(max / 2).collect::<String>() + "…"),
        );
    }
    kept.insert(
        "_truncated".into(),
        json!({
            "original_bytes": bytes.len(),
            "limit_bytes": max,
            "dropped_fields": dropped,
            "note": "result truncated to the size limit; nested fields were dropped",
        }),
    );
    (Value::Object(kept), true)
}

#[cfg(test)]
mod tests {
    use rein_core::registry::{DEFAULT_IDEMPOTENCY_HEADER, DEFAULT_MAX_RESULT_BYTES};
    use rein_core::{AttemptId, IntentId, RunId};

    use super::*;

    /// What the wall clock reads for an error answer; only relative
    /// `Retry-After` values occur here.
    const NOW: SystemTime = SystemTime::UNIX_EPOCH;

    /// A loopback HTTP server that answers one request with 200 and a JSON
    /// body echoing its `X-Api-Token` header, as a debug endpoint does.
    async fn echo_server() -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
            }
            let head = String::from_utf8_lossy(&seen).to_lowercase();
            let token = head
                .lines()
                .find_map(|l| l.strip_prefix("x-api-token: "))
                .unwrap_or("")
                .trim()
                .to_owned();
            let body = serde_json::json!({
                "debug": {"x-api-token": token},
                "download": "https://bucket.example/f?X-Amz-Signature=abc",
            })
            .to_string();
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(answer.as_bytes()).await.unwrap();
        });
        format!("http://{addr}/tools/echo")
    }

    /// Issue 12 (review): a target built by hand registered nothing, and a
    /// tool echoing its header put the secret in its result.
    #[tokio::test]
    async fn a_hand_built_target_echoing_its_credential_header_returns_it_redacted() {
        const CANARY: &str = "hand-built-canary-3e8a"; // lower case: the echo lowercases
        let target = HttpTarget {
            name: "echo".into(),
            url: echo_server().await,
            method: reqwest::Method::POST,
            headers: BTreeMap::from([("X-Api-Token".to_owned(), CANARY.to_owned())]),
            idempotency_header: DEFAULT_IDEMPOTENCY_HEADER.into(),
            status_url: None,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
        };
        assert!(!format!("{target:?}").contains(CANARY), "{target:?}");
        let run = RunId::new("r").unwrap();
        let intent = IntentId::new("i").unwrap();
        let attempt_id = AttemptId::new("a").unwrap();
        let attempt = Attempt {
            run_id: &run,
            intent_id: &intent,
            attempt_id: &attempt_id,
            number: 1,
            key: None,
            remaining: Duration::from_secs(10),
            allowance: Duration::from_secs(10),
        };
        let out = HttpToolAdapter::new(reqwest::Client::new())
            .invoke(&target, &serde_json::json!({}), &attempt)
            .await
            .unwrap();
        assert_eq!(
            out.result["debug"]["x-api-token"], "[redacted]",
            "{}",
            out.result
        );
        assert_eq!(
            out.result["download"], "https://bucket.example/f?X-Amz-Signature=abc",
            "a presigned URL in a result survives"
        );
    }

    #[test]
    fn structured_error_body_wins_over_the_status() {
        let body = br#"{"error":{"category":"conflict","retryable":false,"effect":"applied","message":"already shipped"}}"#;
        let f = error_failure("t", 500, None, body, NOW);
        assert_eq!(f.category(), Category::Conflict);
        assert_eq!(f.effect(), Effect::Applied);
        assert!(!f.retryable());
        assert!(f.human_message().contains("already shipped"));
        assert!(!f.model_message().contains("already shipped"));
    }

    #[test]
    fn structured_body_without_effect_keeps_the_status_inference() {
        let f = error_failure(
            "t",
            500,
            None,
            br#"{"error":{"category":"transient"}}"#,
            NOW,
        );
        assert_eq!(f.effect(), Effect::MaybeApplied);
        let f = error_failure(
            "t",
            503,
            None,
            br#"{"error":{"category":"transient"}}"#,
            NOW,
        );
        assert_eq!(f.effect(), Effect::NotApplied);
    }

    #[test]
    fn structured_rate_limit_carries_its_wait() {
        let body =
            br#"{"error":{"category":"rate_limited","retryable":true,"retry_after_ms":1500}}"#;
        let f = error_failure("t", 429, Some("99"), body, NOW);
        assert_eq!(f.retry_after(), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn unstructured_error_falls_back_to_the_status() {
        let f = error_failure("t", 503, Some("2"), b"<html>busy</html>", NOW);
        assert_eq!(f.category(), Category::Transient);
        assert_eq!(f.retry_after(), Some(Duration::from_secs(2)));
        let f = error_failure("t", 400, None, br#"{"error":"bad"}"#, NOW);
        assert_eq!(f.category(), Category::InvalidArguments);
    }

    #[test]
    fn oversized_results_keep_scalar_key_fields_and_say_so() {
        let big = json!({
            "order_id": "A-1001",
            "status": "shipped",
            "notes": "x".repeat(5000),
            "items": (0..500).map(|i| json!({"sku": i})).collect::<Vec<_>>(),
        });
        let bytes = serde_json::to_vec(&big).unwrap();
        let (v, truncated) = shape_result(&bytes, 1024);
        assert!(truncated);
        assert_eq!(v["order_id"], "A-1001");
        assert_eq!(v["status"], "shipped");
        assert!(v["notes"].as_str().unwrap().chars().count() <= TRUNCATED_STRING_CHARS + 1);
        assert!(v.get("items").is_none());
        assert_eq!(v["_truncated"]["dropped_fields"][0], "items");
        assert!(serde_json::to_vec(&v).unwrap().len() <= 1024);
    }

    #[test]
    fn small_and_non_json_results_pass_through() {
        assert_eq!(shape_result(br#"{"a":1}"#, 100), (json!({"a": 1}), false));
        assert_eq!(
            shape_result(b"plain", 100),
            (json!({"text": "plain"}), false)
        );
        assert_eq!(shape_result(b"", 100), (Value::Null, false));
    }
}
