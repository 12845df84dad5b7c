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

use crate::gateway::dialect::Dialect;

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
    /// Seconds after which a retry may succeed, sent as `Retry-After`.
    #[serde(skip)]
    #[schema(ignore)]
    pub retry_after: Option<u32>,
    /// The challenge of a 401, sent as `WWW-Authenticate` (RFC 6750).
    #[serde(skip)]
    #[schema(ignore)]
    pub challenge: Option<Challenge>,
}

/// What a 401 says about the bearer key (RFC 6750 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Challenge {
    /// No bearer key was presented (or another scheme): the realm only.
    Missing,
    /// A bearer key was presented and is not valid: `invalid_token`.
    InvalidToken,
}

impl Challenge {
    /// The `WWW-Authenticate` value.
    pub fn header_value(self) -> &'static str {
        match self {
            Challenge::Missing => r#"Bearer realm="rein""#,
            Challenge::InvalidToken => r#"Bearer realm="rein", error="invalid_token""#,
        }
    }
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
            retry_after: None,
            challenge: None,
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

    /// 401: no valid API key, with the `WWW-Authenticate` `challenge`.
    pub fn unauthorized(detail: impl Into<String>, challenge: Challenge) -> Problem {
        let mut problem = Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unauthorized",
            detail,
        );
        problem.challenge = Some(challenge);
        problem
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
        use rein_store::StoreError;
        match e {
            // The request lost a race with another writer, or asked to
            // change a run that already ended: the run's state, not a
            // fault of rein.
            e if e.is_conflict() || matches!(e, StoreError::FinishedRun { .. }) => Problem::new(
                StatusCode::CONFLICT,
                "conflict",
                "Conflict with the run's state",
                e.to_string(),
            ),
            e if e.is_transient() => Problem::unavailable(e.to_string()),
            e => Problem::internal(e.to_string()),
        }
    }
}

/// Turns an error answer that is not yet problem+json (axum's own: a
/// method a route does not have, a request it cannot extract) into one,
/// keeping its status and headers (`Allow` on a 405).
///
/// # Why
///
/// Clients branch on `type`; an error of any other shape is one they
/// cannot read. The handlers answer with [`Problem`]s; this catches what
/// the router answers before a handler runs.
pub async fn plain_errors_as_problems(
    method: axum::http::Method,
    uri: axum::http::Uri,
    request_headers: axum::http::HeaderMap,
    response: Response,
) -> Response {
    let status = response.status();
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|ct| ct.as_bytes().starts_with(b"application/problem+json"));
    // The dashboard's error pages (`crate::ui`) are HTML for a person,
    // written so on purpose.
    let is_html = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|ct| ct.as_bytes().starts_with(b"text/html"));
    if !(status.is_client_error() || status.is_server_error()) || is_html {
        return response;
    }
    // The gateway's paths, and unknown ones under `/v1/` that are not
    // rein's own, answer in their caller's wire format.
    let dialect = Dialect::of(uri.path(), &request_headers);
    let openai = dialect == Some(Dialect::OpenAi);
    let anthropic = dialect == Some(Dialect::Anthropic);
    if is_problem {
        return if openai {
            with_openai_error(response).await
        } else if anthropic {
            as_anthropic_error(response).await
        } else {
            response
        };
    }
    let (mut parts, body) = response.into_parts();
    // axum's rejections are one short line.
    let bytes = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let title = status.canonical_reason().unwrap_or("Error");
    let kind = match status {
        StatusCode::BAD_REQUEST => "bad-request".to_owned(),
        StatusCode::NOT_FOUND => "not-found".to_owned(),
        StatusCode::PAYLOAD_TOO_LARGE => "payload-too-large".to_owned(),
        _ => title.to_ascii_lowercase().replace(' ', "-"),
    };
    let text = String::from_utf8_lossy(&bytes);
    let detail = match text.trim() {
        // The router adds `Allow` after this layer has run.
        _ if status == StatusCode::METHOD_NOT_ALLOWED => format!(
            "{method} is not allowed on {}; the Allow header lists the methods that are",
            uri.path()
        ),
        "" => format!("{method} {}: {title}", uri.path()),
        text => text.to_owned(),
    };
    let problem = Problem::new(status, &kind, title, detail).into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    let (problem_parts, body) = problem.into_parts();
    parts.headers.extend(problem_parts.headers);
    let response = Response::from_parts(parts, body);
    if openai {
        with_openai_error(response).await
    } else if anthropic {
        as_anthropic_error(response).await
    } else {
        response
    }
}

/// The routes that answer like OpenAI's API, whose errors carry OpenAI's
/// `error` member beside the problem's own.
///
/// NOTE: `crate::router` routes the gateway under this path.
pub const OPENAI_ROUTES: [&str; 2] = ["/v1/chat/completions", crate::gateway::responses::PATH];

/// The routes that answer like Anthropic's API: their errors are
/// Anthropic's `{"type": "error", "error": {…}}` instead of problems (its
/// SDKs read nothing else).
///
/// NOTE: `crate::router` routes the gateway under this path.
pub const ANTHROPIC_ROUTES: [&str; 2] = [
    crate::gateway::anthropic::PATH,
    crate::gateway::count_tokens::PATH,
];

/// The largest problem body [`with_openai_error`] reads.
const MAX_PROBLEM_BYTES: usize = 64 * 1024;

/// OpenAI's `error` member for `problem`: its `message` is the detail, its
/// `type` what OpenAI's SDKs map the status to, its `code` the problem
/// kind, its `param` the problem's `field`.
pub fn openai_error(problem: &serde_json::Value) -> serde_json::Value {
    let status = problem["status"].as_u64().unwrap_or(500);
    let kind = match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    };
    let code = problem["type"]
        .as_str()
        .and_then(|t| t.rsplit('/').next())
        .map(|k| k.replace('-', "_"));
    serde_json::json!({
        "message": problem["detail"],
        "type": kind,
        "param": problem.get("field").cloned().unwrap_or(serde_json::Value::Null),
        "code": code,
    })
}

/// `response` (a problem) with an OpenAI `error` member, unless it has
/// one: what the gateway's clients read from every error, whether the
/// gateway, the router or a guard before it answered.
///
/// A problem that already has the member, is not a JSON object, or whose
/// body may be over [`MAX_PROBLEM_BYTES`] (its size is unknown or larger)
/// passes unchanged, bytes and headers as they were: the body is never
/// read past what can be put back.
async fn with_openai_error(response: Response) -> Response {
    use http_body::Body as _;
    let (mut parts, body) = response.into_parts();
    let small = body
        .size_hint()
        .upper()
        .is_some_and(|upper| upper <= MAX_PROBLEM_BYTES as u64);
    if !small {
        return Response::from_parts(parts, body);
    }
    let bytes = match axum::body::to_bytes(body, MAX_PROBLEM_BYTES).await {
        Ok(bytes) => bytes,
        // The body failed as it was read: what was sent cannot be put back.
        Err(e) => {
            let problem = Problem::internal(format!("the error answer could not be read: {e}"));
            return problem_with_openai_error(problem);
        }
    };
    let mut problem = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(problem @ serde_json::Value::Object(_)) if problem.get("error").is_none() => problem,
        _ => return Response::from_parts(parts, axum::body::Body::from(bytes)),
    };
    problem["error"] = openai_error(&problem);
    match serde_json::to_vec(&problem) {
        Ok(body) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, axum::body::Body::from(body))
        }
        Err(_) => Response::from_parts(parts, axum::body::Body::from(bytes)),
    }
}

/// `response` (a problem) as Anthropic's error body
/// ([`crate::gateway::anthropic::reshape`]), status and headers kept. A
/// body that cannot be read whole (over [`MAX_PROBLEM_BYTES`], or failing)
/// still answers in Anthropic's shape, with what is known: its status.
async fn as_anthropic_error(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_PROBLEM_BYTES)
        .await
        .unwrap_or_default();
    let problem = serde_json::from_slice::<serde_json::Value>(&bytes).unwrap_or_else(
        |_| serde_json::json!({"title": parts.status.canonical_reason().unwrap_or("Error")}),
    );
    let error = crate::gateway::anthropic::reshape(parts.status.as_u16(), &problem);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let body = serde_json::to_vec(&error).unwrap_or_default();
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// `problem` answered with its OpenAI `error` member.
fn problem_with_openai_error(problem: Problem) -> Response {
    let error = serde_json::to_value(&problem)
        .map(|value| openai_error(&value))
        .unwrap_or_default();
    let extra = match problem.extra.clone() {
        Some(serde_json::Value::Object(mut map)) => {
            map.insert("error".to_owned(), error);
            serde_json::Value::Object(map)
        }
        _ => serde_json::json!({"error": error}),
    };
    problem.with(extra).into_response()
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        // Every error body of the API is rendered here, so it is redacted
        // here: a detail quoting a store, bind or upstream error carries no
        // secret, URL query or userinfo out (rein_core::redact).
        let mut doc = serde_json::to_value(&self).unwrap_or_default();
        rein_core::redact::json(&mut doc);
        let body = serde_json::to_vec(&doc).unwrap_or_default();
        let mut response = (status, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(secs) = self.retry_after
            && let Ok(value) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        if let Some(challenge) = self.challenge {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge.header_value()),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rein_store::StoreError;

    #[tokio::test]
    async fn rendered_problems_carry_no_url_query_or_userinfo() {
        let problem = Problem::internal("cannot reach http://u:pw@db:1/x?token=abc")
            .with(serde_json::json!({"cause": "GET /y?key=v failed"}));
        let body = axum::body::to_bytes(problem.into_response().into_body(), 4096)
            .await
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            doc["detail"],
            "cannot reach http://[redacted]@db:1/x?[redacted]"
        );
        assert_eq!(doc["cause"], "GET /y?[redacted] failed");
    }

    #[test]
    fn store_conflicts_are_409_and_unavailability_503() {
        let conflict = Problem::from(StoreError::FinishedRun {
            run_id: "r-1".into(),
            outcome: rein_core::Outcome::Cancelled,
            requested: rein_store::RunStatus::Running,
        });
        assert_eq!(
            (conflict.status, conflict.kind.as_str()),
            (409, "https://rein.dev/problems/conflict")
        );
        let down = Problem::from(StoreError::Unavailable("locked".into()));
        assert_eq!(down.status, 503);
        let broken = Problem::from(StoreError::Backend("disk".into()));
        assert_eq!(broken.status, 500);
    }

    #[test]
    fn a_401_challenges_for_a_bearer_key_and_says_when_one_was_wrong() {
        let missing = Problem::unauthorized("no key", Challenge::Missing).into_response();
        assert_eq!(missing.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            missing.headers()[header::WWW_AUTHENTICATE],
            r#"Bearer realm="rein""#
        );
        let wrong = Problem::unauthorized("bad key", Challenge::InvalidToken).into_response();
        assert_eq!(
            wrong.headers()[header::WWW_AUTHENTICATE],
            r#"Bearer realm="rein", error="invalid_token""#
        );
        let other = Problem::bad_request("x").into_response();
        assert!(other.headers().get(header::WWW_AUTHENTICATE).is_none());
    }

    #[test]
    fn openai_errors_carry_message_type_code_and_param() {
        let problem = serde_json::to_value(
            Problem::bad_request("`model` is empty").with(serde_json::json!({"field": "/model"})),
        )
        .unwrap();
        assert_eq!(
            openai_error(&problem),
            serde_json::json!({"message": "`model` is empty", "type": "invalid_request_error",
                               "param": "/model", "code": "bad_request"})
        );
        let unauthorized =
            serde_json::to_value(Problem::unauthorized("no", Challenge::Missing)).unwrap();
        assert_eq!(openai_error(&unauthorized)["type"], "authentication_error");
        let media = serde_json::to_value(crate::http::media::unsupported(
            &axum::http::HeaderMap::new(),
        ))
        .unwrap();
        let error = openai_error(&media);
        assert_eq!(
            (error["type"].as_str(), error["code"].as_str()),
            (
                Some("invalid_request_error"),
                Some("unsupported_media_type")
            )
        );
        assert_eq!(error["param"], serde_json::Value::Null);
    }

    async fn body_of(response: Response) -> axum::body::Bytes {
        axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_problem_over_the_limit_passes_whole_and_one_with_the_member_byte_for_byte() {
        let uri: axum::http::Uri = "/v1/chat/completions".parse().unwrap();
        let big = Problem::bad_request("x".repeat(MAX_PROBLEM_BYTES + 1)).into_response();
        // What rendering the problem gives (redacted, as every problem is).
        let expected =
            body_of(Problem::bad_request("x".repeat(MAX_PROBLEM_BYTES + 1)).into_response()).await;
        let response = plain_errors_as_problems(
            axum::http::Method::POST,
            uri.clone(),
            axum::http::HeaderMap::new(),
            big,
        )
        .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body = body_of(response).await;
        assert_eq!(body.len(), expected.len(), "the body is not emptied");
        assert_eq!(body, expected);
        // Already shaped: not re-serialized (key order and spacing kept).
        let shaped = br#"{"type": "https://rein.dev/problems/x", "status": 400, "detail": "d", "title": "t", "error": {"code": "mine"}}"#;
        let length = shaped.len().to_string();
        let response = (
            StatusCode::BAD_REQUEST,
            [
                (header::CONTENT_TYPE, "application/problem+json"),
                (header::CONTENT_LENGTH, length.as_str()),
            ],
            &shaped[..],
        )
            .into_response();
        let response = plain_errors_as_problems(
            axum::http::Method::POST,
            uri,
            axum::http::HeaderMap::new(),
            response,
        )
        .await;
        assert_eq!(response.headers()[header::CONTENT_LENGTH], length.as_str());
        assert_eq!(&body_of(response).await[..], &shaped[..]);
    }

    #[tokio::test]
    async fn router_errors_on_the_gateway_route_get_the_openai_member_and_others_do_not() {
        let plain = || (StatusCode::METHOD_NOT_ALLOWED, "").into_response();
        let uri: axum::http::Uri = "/v1/chat/completions".parse().unwrap();
        let response = plain_errors_as_problems(
            axum::http::Method::GET,
            uri,
            axum::http::HeaderMap::new(),
            plain(),
        )
        .await;
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["status"], 405, "{value}");
        assert_eq!(value["error"]["type"], "invalid_request_error", "{value}");
        assert!(
            value["error"]["message"].as_str().unwrap().contains("GET"),
            "{value}"
        );
        let uri: axum::http::Uri = "/v1/runs/x".parse().unwrap();
        let response = plain_errors_as_problems(
            axum::http::Method::DELETE,
            uri,
            axum::http::HeaderMap::new(),
            plain(),
        )
        .await;
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(value.get("error").is_none(), "{value}");
        // A problem the gateway already shaped keeps its own member.
        let shaped = Problem::bad_request("x")
            .with(serde_json::json!({"error": {"message": "x", "type": "invalid_request_error", "code": "mine"}}))
            .into_response();
        let uri: axum::http::Uri = "/v1/chat/completions".parse().unwrap();
        let response = plain_errors_as_problems(
            axum::http::Method::POST,
            uri,
            axum::http::HeaderMap::new(),
            shaped,
        )
        .await;
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["error"]["code"], "mine");
    }
}
