//! RFC 9457 problem details: every error of the API.
//!
//! # Why stable types
//!
//! Clients branch on `type`, not on prose: a retrying client must tell "in
//! progress, wait" (409 `idempotency-in-progress`) from "you changed the
//! request" (422 `idempotency-mismatch`) without parsing `detail`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The prefix of every problem `type`.
pub const PROBLEM_BASE: &str = "https://rein.dev/problems/";

/// An API error as `application/problem+json`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Problem {
    /// A stable URI naming the kind of problem.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the kind.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong this time, for a human.
    pub detail: String,
    /// Extra machine-readable members (a field name, known agents, …).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub extra: Option<serde_json::Value>,
}

impl Problem {
    /// A problem of `kind` (the last segment of its type URI).
    pub fn new(status: StatusCode, kind: &str, title: &str, detail: impl Into<String>) -> Problem {
        Problem {
            kind: format!("{PROBLEM_BASE}{kind}"),
            title: title.to_owned(),
            status: status.as_u16(),
            detail: detail.into(),
            extra: None,
        }
    }

    /// Adds machine-readable members.
    pub fn with(mut self, extra: serde_json::Value) -> Problem {
        self.extra = Some(extra);
        self
    }

    /// 400: the request cannot be understood as sent.
    pub fn bad_request(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "bad-request",
            "Bad request",
            detail,
        )
    }

    /// 401: no valid API key.
    pub fn unauthorized(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unauthorized",
            detail,
        )
    }

    /// 404: unknown, or another tenant's (indistinguishable on purpose).
    pub fn not_found(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::NOT_FOUND, "not-found", "Not found", detail)
    }

    /// 413: the body is over the configured limit.
    pub fn too_large(limit: usize) -> Problem {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            "Payload too large",
            format!("the request body is over the limit of {limit} bytes"),
        )
        .with(serde_json::json!({"limit_bytes": limit}))
    }

    /// 500: something in rein failed; the detail names it.
    pub fn internal(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            detail,
        )
    }

    /// 503: the store (or another dependency) is unavailable right now.
    pub fn unavailable(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Service unavailable",
            detail,
        )
    }
}

impl From<rein_store::StoreError> for Problem {
    fn from(e: rein_store::StoreError) -> Problem {
        if e.is_transient() {
            Problem::unavailable(e.to_string())
        } else {
            Problem::internal(e.to_string())
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}
