//! Classification at the adapter boundary: HTTP status, `Retry-After`, and
//! transport errors.

use std::time::{Duration, SystemTime};

use super::{Category, Effect, Failure};

/// The phase a transport error happened in, which decides its [`Effect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportPhase {
    /// Before any byte of the request was written (DNS, connect, TLS).
    BeforeSend,
    /// After the request, or part of it, was written.
    AfterSend,
}

/// A transport-level failure, as an HTTP client reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportError {
    /// The connection was refused.
    Refused,
    /// The connection was reset or closed unexpectedly.
    Reset,
    /// The call did not complete within its allowance.
    Timeout,
}

/// A `Retry-After` value that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Retry-After must be a number of seconds or an HTTP date, but it is {value:?}")]
pub struct RetryAfterError {
    /// The refused header value.
    pub value: String,
}

/// Reads a `Retry-After` header value: delay-seconds or an HTTP date.
///
/// A date in the past means "now" (zero). `now` is the wall-clock time the
/// response arrived, passed in because rein-core does not read clocks.
///
/// # Errors
///
/// [`RetryAfterError`] when the value is neither form.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Result<Duration, RetryAfterError> {
    let trimmed = value.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return trimmed
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| RetryAfterError {
                value: value.to_owned(),
            });
    }
    let at = httpdate::parse_http_date(trimmed).map_err(|_| RetryAfterError {
        value: value.to_owned(),
    })?;
    Ok(at.duration_since(now).unwrap_or(Duration::ZERO))
}

impl Failure {
    /// Classifies a non-success HTTP status from `target`; `None` for
    /// 1xx–2xx, which are not failures.
    ///
    /// | status | category | retryable | effect |
    /// | --- | --- | --- | --- |
    /// | 408 | transient | yes | not_applied |
    /// | 429 | rate_limited | yes | not_applied |
    /// | 500, 502, 504 | transient | yes | maybe_applied |
    /// | 503 | transient | yes | not_applied |
    /// | 529 | overloaded | yes | not_applied |
    /// | 400, 422 | invalid_arguments | no | not_applied |
    /// | 401 | unauthorized | no | not_applied |
    /// | 403 | forbidden | no | not_applied |
    /// | 404, 410 | not_found | no | not_applied |
    /// | 409 | conflict | no | not_applied |
    /// | 413 | context_overflow | no | not_applied |
    /// | other 4xx | invalid_arguments | no | not_applied |
    /// | 3xx and others | unknown | no | not_applied |
    /// | other 5xx | unknown | no | maybe_applied |
    ///
    /// 500, 502 and 504 are `maybe_applied` because the server or an
    /// upstream behind a gateway may have acted before failing; 503 and 529
    /// are refusals at the door. A `Retry-After` that cannot be read is
    /// ignored (the failure keeps local backoff) and noted in the human
    /// message; it never turns the failure into a different one.
    pub fn from_http_status(
        target: &str,
        status: u16,
        retry_after: Option<&str>,
        now: SystemTime,
    ) -> Option<Failure> {
        let (category, effect) = match status {
            100..=299 => return None,
            408 => (Category::Transient, Effect::NotApplied),
            429 => (Category::RateLimited, Effect::NotApplied),
            500 | 502 | 504 => (Category::Transient, Effect::MaybeApplied),
            503 => (Category::Transient, Effect::NotApplied),
            529 => (Category::Overloaded, Effect::NotApplied),
            400 | 422 => (Category::InvalidArguments, Effect::NotApplied),
            401 => (Category::Unauthorized, Effect::NotApplied),
            403 => (Category::Forbidden, Effect::NotApplied),
            404 | 410 => (Category::NotFound, Effect::NotApplied),
            409 => (Category::Conflict, Effect::NotApplied),
            413 => (Category::ContextOverflow, Effect::NotApplied),
            500..=599 => (Category::Unknown, Effect::MaybeApplied),
            400..=499 => (Category::InvalidArguments, Effect::NotApplied),
            _ => (Category::Unknown, Effect::NotApplied),
        };
        let mut failure = Failure::new(target, category).with_effect(effect);
        let mut human = format!("{target} answered HTTP {status}");
        if let Some(value) = retry_after {
            match parse_retry_after(value, now) {
                Ok(wait) if failure.retryable => {
                    failure = failure.with_retry_after(wait);
                    human.push_str(&format!(" with Retry-After {wait:?}"));
                }
                Ok(_) => {}
                Err(err) => human.push_str(&format!(" ({err}; ignored)")),
            }
        }
        Some(failure.with_human_message(human))
    }

    /// Classifies a transport error from `target`.
    ///
    /// Anything before the request was sent is `not_applied`; a reset or a
    /// timeout after it was sent is `maybe_applied` — the target may have
    /// acted and only the answer was lost. A refusal after sending cannot
    /// happen and is treated as before.
    pub fn from_transport(target: &str, error: TransportError, phase: TransportPhase) -> Failure {
        let category = match error {
            TransportError::Timeout => Category::Timeout,
            TransportError::Refused | TransportError::Reset => Category::Transient,
        };
        let effect = match (error, phase) {
            (TransportError::Refused, _) | (_, TransportPhase::BeforeSend) => Effect::NotApplied,
            (_, TransportPhase::AfterSend) => Effect::MaybeApplied,
        };
        let what = match error {
            TransportError::Refused => "connection refused",
            TransportError::Reset => "connection reset",
            TransportError::Timeout => "timed out",
        };
        let when = match phase {
            TransportPhase::BeforeSend => "before the request was sent",
            TransportPhase::AfterSend => "after the request was sent",
        };
        Failure::new(target, category)
            .with_effect(effect)
            .with_human_message(format!("{target}: {what} {when}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> SystemTime {
        // Sun, 06 Nov 1994 08:49:37 GMT, the RFC 9110 example date.
        SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    #[test]
    fn status_408_and_5xx_are_transient_and_retryable() {
        for status in [408, 500, 502, 503, 504] {
            let f = Failure::from_http_status("t", status, None, now()).unwrap();
            assert_eq!(f.category(), Category::Transient, "{status}");
            assert!(f.retryable(), "{status}");
        }
    }

    #[test]
    fn status_500_502_504_may_have_applied_but_503_and_408_did_not() {
        let effect = |s| {
            Failure::from_http_status("t", s, None, now())
                .unwrap()
                .effect()
        };
        assert_eq!(effect(500), Effect::MaybeApplied);
        assert_eq!(effect(502), Effect::MaybeApplied);
        assert_eq!(effect(504), Effect::MaybeApplied);
        assert_eq!(effect(503), Effect::NotApplied);
        assert_eq!(effect(408), Effect::NotApplied);
    }

    #[test]
    fn status_4xx_are_not_retryable() {
        let expected = [
            (400, Category::InvalidArguments),
            (401, Category::Unauthorized),
            (403, Category::Forbidden),
            (404, Category::NotFound),
            (409, Category::Conflict),
            (422, Category::InvalidArguments),
        ];
        for (status, category) in expected {
            let f = Failure::from_http_status("t", status, Some("5"), now()).unwrap();
            assert_eq!(f.category(), category, "{status}");
            assert!(!f.retryable(), "{status}");
            assert_eq!(
                f.retry_after(),
                None,
                "a 4xx never carries a wait: {status}"
            );
            assert_eq!(f.effect(), Effect::NotApplied);
        }
    }

    #[test]
    fn other_caller_side_4xx_never_count_for_a_breaker() {
        for status in [405, 411, 415, 416, 451] {
            let f = Failure::from_http_status("t", status, None, now()).unwrap();
            assert!(!f.category().counts_for_breaker(), "{status}");
            assert!(!f.retryable(), "{status}");
        }
    }

    #[test]
    fn status_2xx_is_not_a_failure() {
        assert!(Failure::from_http_status("t", 200, None, now()).is_none());
        assert!(Failure::from_http_status("t", 204, None, now()).is_none());
    }

    #[test]
    fn status_429_reads_retry_after_in_seconds() {
        let f = Failure::from_http_status("search", 429, Some(" 7 "), now()).unwrap();
        assert_eq!(f.category(), Category::RateLimited);
        assert!(f.retryable());
        assert_eq!(f.retry_after(), Some(Duration::from_secs(7)));
    }

    #[test]
    fn status_429_reads_retry_after_as_http_date() {
        let f =
            Failure::from_http_status("search", 429, Some("Sun, 06 Nov 1994 08:50:07 GMT"), now())
                .unwrap();
        assert_eq!(f.retry_after(), Some(Duration::from_secs(30)));
    }

    #[test]
    fn retry_after_date_in_the_past_means_now() {
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now()),
            Ok(Duration::ZERO)
        );
    }

    #[test]
    fn malformed_retry_after_is_ignored_and_reported_to_humans() {
        for bad in ["soon", "-5", "1.5", "", "99999999999999999999999"] {
            assert!(parse_retry_after(bad, now()).is_err(), "{bad:?}");
            let f = Failure::from_http_status("t", 429, Some(bad), now()).unwrap();
            assert_eq!(f.retry_after(), None);
            assert_eq!(f.category(), Category::RateLimited);
            assert!(
                f.human_message().contains("ignored"),
                "{}",
                f.human_message()
            );
        }
    }

    #[test]
    fn transport_errors_before_send_are_not_applied() {
        for error in [
            TransportError::Refused,
            TransportError::Reset,
            TransportError::Timeout,
        ] {
            let f = Failure::from_transport("t", error, TransportPhase::BeforeSend);
            assert_eq!(f.effect(), Effect::NotApplied, "{error:?}");
            assert!(f.retryable());
        }
    }

    #[test]
    fn transport_reset_or_timeout_after_send_may_have_applied() {
        let reset = Failure::from_transport("t", TransportError::Reset, TransportPhase::AfterSend);
        assert_eq!(reset.effect(), Effect::MaybeApplied);
        assert_eq!(reset.category(), Category::Transient);
        let timeout =
            Failure::from_transport("t", TransportError::Timeout, TransportPhase::AfterSend);
        assert_eq!(timeout.effect(), Effect::MaybeApplied);
        assert_eq!(timeout.category(), Category::Timeout);
    }
}
