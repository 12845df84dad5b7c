//! Every POST is `application/json`: otherwise 415, and nothing runs.
//!
//! # Why
//!
//! A browser sends a cross-site POST without asking first (no preflight)
//! only with one of three content types — `text/plain`,
//! `application/x-www-form-urlencoded`, `multipart/form-data` — so an API
//! that accepts nothing but `application/json` cannot be driven by a form
//! or a `no-cors` fetch even where [`crate::http::exposure`]'s `Origin` check had
//! nothing to look at. It also gives a client that sent XML a 415 naming
//! what it sent, instead of a JSON syntax error at line 1 column 1.
//!
//! The type compares case-insensitively and may carry parameters
//! (`application/json; charset=utf-8`). Bodiless POSTs (cancel, resume) are
//! POSTs too: they say `Content-Type: application/json` with an empty body
//! or `{}`.

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::http::problem::Problem;

/// The one media type POST bodies may have.
pub const JSON: &str = "application/json";

/// Whether `headers` declare a JSON body.
pub fn declares_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().trim())
        .is_some_and(|essence| essence.eq_ignore_ascii_case(JSON))
}

/// The 415 for a request whose `Content-Type` is not JSON.
pub fn unsupported(headers: &HeaderMap) -> Problem {
    let received = headers
        .get(header::CONTENT_TYPE)
        .map(crate::http::exposure::shown);
    let detail = match &received {
        Some(ct) => {
            format!("POST bodies must be `{JSON}`, but this request's Content-Type is `{ct}`")
        }
        None => format!("POST bodies must be `{JSON}`, but this request has no Content-Type"),
    };
    Problem::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported-media-type",
        "Unsupported media type",
        detail,
    )
    .with(json!({"received": received, "accepted": [JSON]}))
}

/// The middleware: refuses a request that is not JSON. It is layered on
/// each POST route's `post` method only (`crate::router`'s `post_json`), so
/// every request it sees is a POST.
pub async fn require_json(request: Request, next: Next) -> Response {
    if !declares_json(request.headers()) {
        let mut problem = unsupported(request.headers()).into_response();
        // RFC 9110 §15.5.16: say which types would have been accepted.
        problem.headers_mut().insert(
            header::HeaderName::from_static("accept-post"),
            header::HeaderValue::from_static(JSON),
        );
        return problem;
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(ct: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(ct) = ct {
            headers.insert(header::CONTENT_TYPE, ct.parse().unwrap());
        }
        headers
    }

    #[test]
    fn json_with_or_without_parameters_in_any_case_is_json() {
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON;charset=UTF-8",
        ] {
            assert!(declares_json(&with(Some(ok))), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/xml",
            "application/jsonp",
            // A structured suffix is another type, which the API does not
            // read (RFC 6839): refused like any other.
            "application/merge-patch+json",
            "application/problem+json",
            "application/vnd.api+json; charset=utf-8",
            "multipart/form-data; boundary=x",
            "application/x-www-form-urlencoded",
        ] {
            assert!(!declares_json(&with(Some(bad))), "{bad}");
        }
        assert!(!declares_json(&with(None)));
    }

    #[test]
    fn the_415_names_what_was_received() {
        let p = unsupported(&with(Some("application/xml")));
        assert_eq!(p.status, 415);
        assert!(p.detail.contains("`application/xml`"), "{}", p.detail);
        let p = unsupported(&with(None));
        assert!(p.detail.contains("no Content-Type"), "{}", p.detail);
    }
}
