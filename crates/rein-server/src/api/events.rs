//! A run's events: a JSON list, or a live server-sent-event stream that
//! ends with the run's terminal event.
//!
//! # Why follow the store
//!
//! The stream must work whichever process drives the run (a queue worker
//! on another node, a resume): the store is the one place every event
//! reaches, so the stream follows it rather than an in-process channel.
//! Where the store notifies ([`rein_store::RunStore::notifications`]:
//! PostgreSQL), the stream reads again when a commit of its run is
//! announced, or after a [`Notification::Resync`] (the listener
//! reconnected: it re-reads from the last `seq` it sent, so nothing is
//! lost); elsewhere it polls every [`POLL`].
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use rein_core::{Event, EventKind, RunId};
use rein_store::Notification;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::broadcast;
use utoipa::{IntoParams, ToSchema};

use crate::api::runs::owned;
use crate::http::auth::Tenant;
use crate::http::extract::Segment;
use crate::http::problem::Problem;
use crate::http::state::AppState;

/// The header an SSE client resumes with: the id of the last event seen.
///
/// NOTE: `DEFAULT_CORS_ALLOWED_HEADERS` (rein-core) lists it, so a
/// browser page on a `[server.cors]` origin may send it.
pub const LAST_EVENT_ID: &str = "Last-Event-ID";

/// How often a live stream looks for new events on a store that does not
/// notify.
pub const POLL: Duration = Duration::from_millis(50);

/// Query of the events endpoint.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events with a greater `seq`.
    pub after: Option<u64>,
}

fn sse_event(e: &Event) -> SseEvent {
    SseEvent::default()
        .event(e.kind().as_str())
        .id(e.seq.to_string())
        .data(serde_json::to_string(e).unwrap_or_default())
}

fn live(
    state: Arc<AppState>,
    run_id: RunId,
    after: u64,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    // Subscribed before the first read: a commit announced between a read
    // and the wait is still waiting in the receiver.
    let notified = state.store.notifications();
    // (next seq to ask after, pending batch, finished, notifications)
    stream::unfold(
        (after, Vec::<Event>::new(), false, notified),
        move |(mut after, mut pending, mut done, mut notified)| {
            let state = state.clone();
            let run_id = run_id.clone();
            async move {
                loop {
                    if let Some(e) = (!pending.is_empty()).then(|| pending.remove(0)) {
                        if e.kind() == EventKind::RunFinished {
                            done = true;
                        }
                        return Some((Ok(sse_event(&e)), (after, pending, done, notified)));
                    }
                    if done {
                        return None;
                    }
                    match state.store.events(&run_id, after).await {
                        Ok(batch) if !batch.is_empty() => {
                            after = batch.last().map_or(after, |e| e.seq);
                            pending = batch;
                        }
                        // Nothing new: a run that already ended ends the
                        // stream, after the events of its end. NOTE: its
                        // last commit writes the status with those events,
                        // and it may land between the read above and the
                        // status read, so the events are read once more.
                        Ok(_) => match state.store.get_run(&run_id).await {
                            Ok(Some(record)) if record.status.is_finished() => {
                                match state.store.events(&run_id, after).await {
                                    Ok(batch) if !batch.is_empty() => {
                                        after = batch.last().map_or(after, |e| e.seq);
                                        pending = batch;
                                        done = true;
                                    }
                                    _ => return None,
                                }
                            }
                            // A closing server ends its streams; the client
                            // reconnects elsewhere with `Last-Event-ID`.
                            _ => tokio::select! {
                                () = next_read(&state, &mut notified, &run_id) => {}
                                () = state.drain.closing() => return None,
                            },
                        },
                        Err(e) => {
                            tracing::warn!(run = %run_id, "event stream: {e}");
                            state.engine.clock().sleep(POLL * 4).await;
                        }
                    }
                }
            }
        },
    )
}

/// Waits until a live stream of `run_id` should read the store again: a
/// notification of a commit of the run, a resync or a lag (something may
/// have been missed) where the store notifies; [`POLL`] where it does
/// not, or once its notifications ended.
async fn next_read(
    state: &AppState,
    notified: &mut Option<broadcast::Receiver<Notification>>,
    run_id: &RunId,
) {
    use broadcast::error::RecvError;
    let Some(receiver) = notified else {
        state.engine.clock().sleep(POLL).await;
        return;
    };
    loop {
        match receiver.recv().await {
            Ok(Notification::RunChanged(changed)) if changed == *run_id => return,
            Ok(Notification::Resync) | Err(RecvError::Lagged(_)) => return,
            Ok(_) => {}
            Err(RecvError::Closed) => {
                *notified = None;
                return;
            }
        }
    }
}

/// What `GET /v1/runs/{id}/events` answers as JSON.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventList {
    /// The run.
    pub run_id: String,
    /// Its events after `after`, in `seq` order (each as the event
    /// stream's wire form: `seq`, `at_ms`, `kind`, `data`, …).
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<Event>,
}

/// The run's events; `Accept: text/event-stream` streams them live until
/// the run ends (resume with `Last-Event-ID`).
#[utoipa::path(
    get, path = "/v1/runs/{id}/events", tag = "runs",
    params(("id" = String, Path, description = "The run"), EventsQuery),
    responses((status = 200, description = "The events as JSON, or an SSE stream ending with run_finished",
               content((EventList = "application/json"), (String = "text/event-stream"))),
              (status = 400, description = "invalid query", body = Problem),
              (status = 401, description = "missing or invalid API key", body = Problem),
              (status = 404, description = "unknown run, or another tenant's", body = Problem)),
    security(("bearer" = []))
)]
pub async fn get_events(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Segment(id): Segment,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let Query(query) = query.map_err(|e| {
        // `field` points into a JSON body; a query parameter is named as
        // one instead.
        Problem::bad_request(format!("invalid query: {e}")).with(json!({"parameter": "after"}))
    })?;
    let record = owned(&state, &tenant, &id).await?;
    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"));
    let last_seen = headers
        .get(LAST_EVENT_ID)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let after = query.after.or(last_seen).unwrap_or(0);
    if wants_stream {
        let stream = live(state.clone(), record.run_id, after);
        return Ok(Sse::new(stream)
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    let events = state.store.events(&record.run_id, after).await?;
    Ok(Json(EventList {
        run_id: record.run_id.to_string(),
        events,
    })
    .into_response())
}
