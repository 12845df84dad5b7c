//! What every HTTP model provider shares: the allowance check, one
//! non-streamed JSON call, and the classification of transport failures
//! and error answers into [`Failure`]s.
//!
//! # Why one module
//!
//! A 429 from OpenAI and a 429 from Anthropic must reach the retry policy
//! as the same failure, and a fix to the classification must reach every
//! provider at once; so the providers build their requests and read their
//! answers, and this module decides what went wrong.

use std::time::{Duration, SystemTime};

use rein_core::failure::{TransportError, TransportPhase};
use rein_core::redact::truncated;
use rein_core::{Category, Failure};
use serde_json::Value;

use crate::Timer;

/// The allowance of one call: the run's remainder capped by the provider's
/// own timeout.
///
/// # Errors
///
/// A `budget_exhausted` failure when nothing is left: no call is made.
pub(super) fn allowance(
    name: &str,
    allowance: Duration,
    timeout: Duration,
) -> Result<Duration, Failure> {
    let allowance = allowance.min(timeout);
    if allowance.is_zero() {
        return Err(Failure::new(name, Category::BudgetExhausted)
            .with_human_message("no time left for a model call"));
    }
    Ok(allowance)
}

/// Sends one non-streamed request and reads its body within `allowance`,
/// measured on `clock`.
///
/// # Errors
///
/// A transport failure, or the classified error answer for a non-2xx
/// status.
pub(super) async fn post_json(
    name: &str,
    builder: reqwest::RequestBuilder,
    allowance: Duration,
    clock: &dyn Timer,
) -> Result<String, Failure> {
    let started = clock.now();
    let elapsed = || clock.now().saturating_duration_since(started);
    let response = builder
        .timeout(allowance)
        .send()
        .await
        .map_err(|e| transport_failure(name, &e, elapsed(), allowance))?;
    let status = response.status().as_u16();
    let retry_after = retry_after(&response);
    let text = response
        .text()
        .await
        .map_err(|e| transport_failure(name, &e, elapsed(), allowance))?;
    if !(200..300).contains(&status) {
        return Err(http_failure(
            name,
            status,
            retry_after.as_deref(),
            &text,
            clock.system_now(),
        ));
    }
    Ok(text)
}

/// The `Retry-After` header of a response, as text; for a 429 without
/// one, the later of OpenAI's `x-ratelimit-reset-requests` and
/// `x-ratelimit-reset-tokens` (when the account's buckets refill), as
/// whole seconds rounded up.
///
/// # Why the reset headers
///
/// An OpenAI-compatible server that answers 429 often says *when* in its
/// rate-limit headers instead of `Retry-After`. They are read on a 429
/// only: on other answers they describe buckets that are not empty.
pub(super) fn retry_after(response: &reqwest::Response) -> Option<String> {
    let headers = response.headers();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(value) = header(reqwest::header::RETRY_AFTER.as_str()) {
        return Some(value.to_owned());
    }
    if response.status() != reqwest::StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"]
        .into_iter()
        .filter_map(|name| header(name).and_then(parse_reset))
        .max()
        .map(|reset| reset.as_secs_f64().ceil().max(1.0).to_string())
}

/// An OpenAI rate-limit reset (`1s`, `6m0s`, `20ms`, `1.5s`, `1h2m3s`);
/// `None` for anything else.
fn parse_reset(text: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (0.001, 2)
        } else if rest.starts_with('s') {
            (1.0, 1)
        } else if rest.starts_with('m') {
            (60.0, 1)
        } else if rest.starts_with('h') {
            (3600.0, 1)
        } else {
            return None;
        };
        rest = &rest[len..];
        total = total.checked_add(Duration::try_from_secs_f64(number * unit).ok()?)?;
    }
    Some(total)
}

/// Classifies a transport error: refused before sending, timed out, or
/// reset after sending.
pub(super) fn transport_failure(
    name: &str,
    e: &reqwest::Error,
    elapsed: Duration,
    allowance: Duration,
) -> Failure {
    let (kind, phase) = if e.is_connect() {
        (TransportError::Refused, TransportPhase::BeforeSend)
    } else if e.is_timeout() || elapsed >= allowance {
        (TransportError::Timeout, TransportPhase::AfterSend)
    } else {
        (TransportError::Reset, TransportPhase::AfterSend)
    };
    Failure::from_transport(name, kind, phase).with_human_message(format!("{name}: {e}"))
}

/// The parts of an error body both APIs share: OpenAI's `{"error":
/// {"message", "type", "code"}}` and Anthropic's `{"type": "error",
/// "error": {"type", "message"}}`.
struct ErrorBody<'a> {
    code: &'a str,
    error_type: &'a str,
    message: &'a str,
}

impl<'a> ErrorBody<'a> {
    fn read(error: &'a Value) -> Self {
        let field = |name: &str| error.get(name).and_then(Value::as_str).unwrap_or("");
        ErrorBody {
            code: field("code"),
            error_type: field("type"),
            message: field("message"),
        }
    }

    /// Whether the error says the input did not fit the context window,
    /// in either API's words.
    fn is_context_overflow(&self) -> bool {
        let lower = self.message.to_ascii_lowercase();
        self.code == "context_length_exceeded"
            || lower.contains("maximum context length")
            || lower.contains("prompt is too long")
            || lower.contains("context window")
            || lower.contains("exceed context limit")
    }

    fn is_content_filter(&self) -> bool {
        matches!(self.code, "content_filter" | "content_policy_violation")
    }

    /// The category an error type or code names, for an error that came
    /// without a status (in the middle of a stream).
    fn category(&self) -> Category {
        if self.is_context_overflow() {
            return Category::ContextOverflow;
        }
        if self.is_content_filter() {
            return Category::ContentBlocked;
        }
        for name in [self.error_type, self.code] {
            let category = match name {
                "rate_limit_error" | "rate_limit_exceeded" => Category::RateLimited,
                "overloaded_error" => Category::Overloaded,
                "api_error" | "server_error" => Category::Transient,
                "timeout_error" => Category::Timeout,
                "authentication_error" | "invalid_api_key" => Category::Unauthorized,
                "permission_error" => Category::Forbidden,
                "not_found_error" => Category::NotFound,
                "request_too_large" => Category::ContextOverflow,
                "invalid_request_error" => Category::InvalidArguments,
                _ => continue,
            };
            return category;
        }
        Category::Unknown
    }
}

/// Classifies an error answer by its status, refined by its body for what
/// the status alone cannot say (context length, content filter). Reads
/// OpenAI and Anthropic error bodies alike; `now` dates an HTTP-date
/// `Retry-After`.
pub(super) fn http_failure(
    name: &str,
    status: u16,
    retry_after: Option<&str>,
    body: &str,
    now: SystemTime,
) -> Failure {
    let parsed = serde_json::from_str::<Value>(body).unwrap_or(Value::Null);
    let error = parsed.get("error").unwrap_or(&Value::Null);
    let fields = ErrorBody::read(error);
    let human = format!(
        "{name} answered HTTP {status}: {}",
        truncated(fields.message, 300)
    );
    if fields.is_context_overflow() {
        return Failure::new(name, Category::ContextOverflow).with_human_message(human);
    }
    if fields.is_content_filter() {
        return Failure::new(name, Category::ContentBlocked).with_human_message(human);
    }
    match Failure::from_http_status(name, status, retry_after, now) {
        // Any other 5xx of a model API (501, 505, a CDN's 520–524) is the
        // provider's side failing: a model call is a read, so it is as
        // transient as a 502 — retried, and a reason to fall back.
        Some(f) if (500..=599).contains(&status) && f.category() == Category::Unknown => {
            Failure::new(name, Category::Transient).with_human_message(human)
        }
        Some(f) => f.with_human_message(human),
        None => Failure::new(name, Category::Unknown).with_human_message(human),
    }
}

/// Classifies an error object a stream carried instead of content.
pub(super) fn stream_error_failure(name: &str, error: &Value) -> Failure {
    let fields = ErrorBody::read(error);
    Failure::new(name, fields.category()).with_human_message(format!(
        "{name} sent an error in its stream ({}): {}",
        if fields.error_type.is_empty() {
            fields.code
        } else {
            fields.error_type
        },
        truncated(fields.message, 300)
    ))
}

/// A request body as JSON bytes, for the provider `name`. The wire request
/// types serialize without failing (their maps have string keys, and no
/// `Serialize` of theirs refuses); were one to fail, the call is refused
/// as not sent rather than sent without a body.
pub(super) fn encode(name: &str, body: &impl serde::Serialize) -> Result<Vec<u8>, Failure> {
    serde_json::to_vec(body).map_err(|e| {
        Failure::new(name, Category::InvalidArguments)
            .with_effect(rein_core::Effect::NotApplied)
            .with_human_message(format!("{name}: the request could not be written: {e}"))
    })
}

/// A malformed answer: retryable, because a proxy in between may have
/// mangled it, and never a panic.
pub(super) fn malformed(name: &str, why: &str, text: &str) -> Failure {
    Failure::new(name, Category::Transient).with_human_message(format!(
        "{name} returned a malformed answer ({why}): {}",
        truncated(text, 200)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_resets_read_as_openai_writes_them() {
        let ms = Duration::from_millis;
        assert_eq!(parse_reset("1s"), Some(ms(1_000)));
        assert_eq!(parse_reset("6m0s"), Some(ms(360_000)));
        assert_eq!(parse_reset("20ms"), Some(ms(20)));
        assert_eq!(parse_reset("1.5s"), Some(ms(1_500)));
        assert_eq!(parse_reset("1h2m3s"), Some(ms(3_723_000)));
        assert_eq!(parse_reset(""), None);
        assert_eq!(parse_reset("soon"), None);
        assert_eq!(parse_reset("5"), None);
    }

    /// The wall clock of an error answer; only relative `Retry-After`
    /// values occur here.
    const NOW: std::time::SystemTime = std::time::SystemTime::UNIX_EPOCH;

    /// Issue 12 (review): the body was cut to 300 characters before it was
    /// redacted, so a key echoed across the cut left its start in clear.
    #[test]
    fn an_echoed_key_across_the_cut_leaves_nothing_in_clear() {
        const CANARY: &str = "sk-cut-canary-7d21f0a9";
        let mut secrets = rein_core::redact::Secrets::new();
        secrets.insert(CANARY).unwrap();
        rein_core::redact::register(&secrets);
        let message = format!("{}{CANARY}", "x".repeat(290));
        let body = serde_json::json!({"error": {"message": message}}).to_string();
        let failure = http_failure("openai", 401, None, &body, NOW);
        assert!(
            !failure.human_message().contains("sk-cut"),
            "{}",
            failure.human_message()
        );
        let stream = stream_error_failure("openai", &serde_json::json!({"message": message}));
        assert!(!stream.human_message().contains("sk-cut"));
        let bad = malformed(
            "openai",
            "not JSON",
            &format!("{}{CANARY}", "y".repeat(195)),
        );
        assert!(!bad.human_message().contains("sk-cut"));
    }

    #[test]
    fn anthropic_error_bodies_are_classified_like_openai_ones() {
        let ctx = http_failure(
            "a",
            400,
            None,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
            NOW,
        );
        assert_eq!(ctx.category(), Category::ContextOverflow);
        let overloaded = http_failure(
            "a",
            529,
            None,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            NOW,
        );
        assert_eq!(overloaded.category(), Category::Overloaded);
        assert!(overloaded.retryable());
        let bad = http_failure(
            "a",
            400,
            None,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}"#,
            NOW,
        );
        assert_eq!(bad.category(), Category::InvalidArguments);
    }

    #[test]
    fn stream_errors_are_classified_by_type() {
        let cases = [
            (
                r#"{"type":"overloaded_error","message":"Overloaded"}"#,
                Category::Overloaded,
            ),
            (
                r#"{"type":"rate_limit_error","message":"slow"}"#,
                Category::RateLimited,
            ),
            (
                r#"{"type":"server_error","message":"oops"}"#,
                Category::Transient,
            ),
            (
                r#"{"code":"context_length_exceeded","message":"x"}"#,
                Category::ContextOverflow,
            ),
            (r#"{"message":"???"}"#, Category::Unknown),
            ("null", Category::Unknown),
        ];
        for (error, category) in cases {
            let error: Value = serde_json::from_str(error).unwrap();
            assert_eq!(
                stream_error_failure("p", &error).category(),
                category,
                "{error}"
            );
        }
    }

    #[test]
    fn zero_allowance_makes_no_call() {
        let f = allowance("p", Duration::ZERO, Duration::from_secs(1)).unwrap_err();
        assert_eq!(f.category(), Category::BudgetExhausted);
        assert_eq!(
            allowance("p", Duration::from_secs(9), Duration::from_secs(2)).unwrap(),
            Duration::from_secs(2)
        );
    }
}
