//! The desk's HTTP surface.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rein_core::Effect;
use rein_core::deadline::DEADLINE_HEADER;
use serde::Deserialize;
use serde_json::{Value, json};

use super::state::{Desk, Success, Tool, ToolError};
use super::{
    ATTEMPT_HEADER, ErrorBody, Fault, Faults, IDEMPOTENCY_KEY_HEADER, INTENT_ID_HEADER,
    REPLAYED_HEADER, RUN_ID_HEADER, ReinHeaders,
};
use crate::server::aborting_body;

pub(crate) fn router(desk: Arc<Desk>) -> Router {
    Router::new()
        .route("/tools/{name}", post(call_tool))
        .route("/tools/{name}/status", get(lookup_by_key))
        .route(
            "/_faults",
            get(get_faults).post(set_faults).delete(clear_faults),
        )
        .route("/_log", get(get_log))
        .route("/_release", post(release_held))
        .fallback(no_route)
        .with_state(desk)
}

/// An answer before it is sent, so a `LoseResponse` fault can cut it.
struct Answer {
    status: StatusCode,
    retry_after: Option<String>,
    replayed: bool,
    body: Vec<u8>,
}

impl Answer {
    fn from_result(result: Result<Success, ToolError>) -> Answer {
        match result {
            Ok(success) => Answer {
                status: StatusCode::OK,
                retry_after: None,
                replayed: success.replayed,
                body: success.body.to_string().into_bytes(),
            },
            Err(err) => Answer::from_error(err),
        }
    }

    fn from_error(err: ToolError) -> Answer {
        let status = StatusCode::from_u16(err.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&ErrorBody { error: err.detail })
            .unwrap_or_else(|_| br#"{"error":{"category":"unknown","retryable":false,"retry_after_ms":null,"effect":"not_applied","message":"cannot encode the error"}}"#.to_vec());
        Answer {
            status,
            retry_after: err.retry_after.map(|r| r.header_value()),
            replayed: false,
            body,
        }
    }

    fn into_response(self, lost: bool) -> Response {
        let mut builder = Response::builder()
            .status(self.status)
            .header(CONTENT_TYPE, "application/json");
        if let Some(value) = self
            .retry_after
            .and_then(|v| HeaderValue::from_str(&v).ok())
        {
            builder = builder.header(RETRY_AFTER, value);
        }
        if self.replayed {
            builder = builder.header(REPLAYED_HEADER, "true");
        }
        let body = if lost {
            aborting_body(&self.body)
        } else {
            Body::from(self.body)
        };
        builder
            .body(body)
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

fn rein_headers(headers: &HeaderMap) -> ReinHeaders {
    ReinHeaders {
        idempotency_key: header(headers, IDEMPOTENCY_KEY_HEADER),
        deadline_ms: header(headers, DEADLINE_HEADER),
        run_id: header(headers, RUN_ID_HEADER),
        intent_id: header(headers, INTENT_ID_HEADER),
        attempt: header(headers, ATTEMPT_HEADER),
        traceparent: header(headers, rein_core::header::TRACEPARENT_HEADER),
    }
}

/// The pipeline every tool request goes through: log arrival, take the
/// fault, delay, refuse or run `op`, report failure after applying, and cut
/// the response if it is to be lost.
async fn handle(
    desk: &Desk,
    method: &str,
    target: &str,
    writes: bool,
    headers: ReinHeaders,
    args: Value,
    op: impl FnOnce(&Desk, u64) -> Result<Success, ToolError>,
) -> Response {
    // The log keeps the arguments; a delay by size reads them too.
    let (seq, fault) = desk.arrive(method, target, headers, args.clone());
    if let Some(fault) = &fault {
        tracing::info!(target, seq, fault = fault.kind(), "injecting fault");
    }
    match &fault {
        Some(Fault::Delay(delay)) => tokio::time::sleep(*delay).await,
        Some(Fault::DelayPerUnit { arg, per_unit }) => {
            let units = args.get(arg).and_then(Value::as_u64).unwrap_or(0);
            let units = u32::try_from(units).unwrap_or(u32::MAX);
            tokio::time::sleep(per_unit.saturating_mul(units)).await;
        }
        Some(Fault::Hold) => desk.hold().await,
        _ => {}
    }
    let result = match &fault {
        Some(Fault::Status { code, retry_after }) => Err(ToolError::injected(
            *code,
            *retry_after,
            Effect::NotApplied,
            format!("{target} refused the request with HTTP {code} (injected fault)"),
        )),
        _ => op(desk, seq),
    };
    let result = match (&fault, result) {
        (Some(Fault::ApplyThenStatus { code }), Ok(_)) => Err(ToolError::injected(
            *code,
            None,
            if writes {
                Effect::MaybeApplied
            } else {
                Effect::NotApplied
            },
            format!("{target} failed with HTTP {code} after acting (injected fault)"),
        )),
        (_, result) => result,
    };
    let answer = Answer::from_result(result);
    let lost = matches!(fault, Some(Fault::LoseResponse));
    desk.finish(seq, answer.status.as_u16(), answer.replayed, lost);
    answer.into_response(lost)
}

fn tool_names() -> String {
    Tool::ALL.map(Tool::name).join(", ")
}

async fn call_tool(
    State(desk): State<Arc<Desk>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let headers = rein_headers(&headers);
    let parsed = serde_json::from_slice::<Value>(&body);
    let logged = parsed.as_ref().map_or(Value::Null, Clone::clone);
    let tool = Tool::parse(&name);
    let writes = tool.is_some_and(Tool::writes);
    let call_headers = headers.clone();
    let target = name.clone();
    handle(
        &desk,
        "POST",
        &target,
        writes,
        headers,
        logged,
        move |desk, seq| {
            let tool = tool.ok_or_else(|| {
                ToolError::not_found(format!(
                    "no tool named {name:?}; the tools are {}",
                    tool_names()
                ))
            })?;
            let args = parsed.map_err(|err| {
            ToolError::invalid(format!(
                "the request body must be a JSON object of arguments, but it does not parse: {err}"
            ))
        })?;
            desk.call(tool, seq, &call_headers, &args)
        },
    )
    .await
}

#[derive(Deserialize)]
struct LookupQuery {
    key: Option<String>,
}

async fn lookup_by_key(
    State(desk): State<Arc<Desk>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    query: Result<Query<LookupQuery>, QueryRejection>,
) -> Response {
    let target = format!("{name}/status");
    let key = query
        .ok()
        .and_then(|Query(q)| q.key)
        .filter(|k| !k.is_empty());
    let args = json!({ "key": key });
    handle(
        &desk,
        "GET",
        &target,
        false,
        rein_headers(&headers),
        args,
        move |desk, _| {
            let tool = Tool::parse(&name).filter(|t| t.is_keyed()).ok_or_else(|| {
                ToolError::not_found(format!(
                    "{name:?} has no status lookup; only tools that deduplicate by key do"
                ))
            })?;
            let key = key.ok_or_else(|| {
                ToolError::invalid(format!(
                    "a status lookup needs ?key=<{IDEMPOTENCY_KEY_HEADER}>, but none was given"
                ))
            })?;
            desk.lookup(tool, &key)
                .map(|body| Success {
                    body,
                    replayed: false,
                })
                .ok_or_else(|| {
                    ToolError::not_found(format!("no {name} was applied under key {key:?}"))
                })
        },
    )
    .await
}

async fn get_faults(State(desk): State<Arc<Desk>>) -> Response {
    axum::Json(desk.faults()).into_response()
}

async fn set_faults(State(desk): State<Arc<Desk>>, body: Bytes) -> Response {
    let faults = match serde_json::from_slice::<Faults>(&body) {
        Ok(faults) => faults,
        Err(err) => {
            return Answer::from_error(ToolError::invalid(format!(
                "POST /_faults needs a fault plan like {{\"send_email\": {{\"queue\": [{{\"kind\": \"status\", \"code\": 429}}]}}}}: {err}"
            )))
            .into_response(false);
        }
    };
    match desk.set_faults(faults) {
        Ok(()) => axum::Json(desk.faults()).into_response(),
        Err(err) => Answer::from_error(ToolError::invalid(err.to_string())).into_response(false),
    }
}

async fn clear_faults(State(desk): State<Arc<Desk>>) -> StatusCode {
    // An empty plan always validates.
    let _ = desk.set_faults(Faults::none());
    StatusCode::NO_CONTENT
}

async fn get_log(State(desk): State<Arc<Desk>>) -> Response {
    axum::Json(desk.log()).into_response()
}

/// Lets every request a `hold` fault keeps waiting go on.
async fn release_held(State(desk): State<Arc<Desk>>) -> StatusCode {
    desk.release_held();
    StatusCode::NO_CONTENT
}

async fn no_route() -> Response {
    Answer::from_error(ToolError::not_found(format!(
        "no such route; tools are POST /tools/{{name}} with name one of {}",
        tool_names()
    )))
    .into_response(false)
}
