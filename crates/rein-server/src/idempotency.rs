//! `Idempotency-Key` on run submissions, exactly as seed 004's table says.
//!
//! | condition | result |
//! | --- | --- |
//! | first request reserves the key | the endpoint executes |
//! | same key, completed 2xx | stored status, body, content type and `Location` replayed, `Idempotency-Replayed: true` |
//! | same key, still in progress, its holder alive | 409 `idempotency-in-progress` |
//! | same key, in progress, its holder died, nothing ran | the reservation is released and this request executes |
//! | same key, in progress, its holder died, its sync run still being recovered | 202, `Location` and the run's current view, `Idempotency-Replayed: true`, `Retry-After: 1`; not stored |
//! | same key, in progress, its holder died, its run ended (or it was queued) | the record is completed with the run's view (200 sync, 202 queued) and replayed |
//! | same key, different method, path or raw body | 422 `idempotency-mismatch` |
//! | key empty, longer than `max_key_length`, or not visible ASCII | 400 `idempotency-key-invalid` |
//! | key on a body that sets `"stream": true` | 400 `idempotency-stream` |
//! | idempotency disabled, header present | 501 `idempotency-disabled`; nothing executes |
//! | the endpoint answers non-2xx or fails | the reservation is released |
//!
//! # Why in the store
//!
//! A client's retry may reach another `rein serve` process sharing the
//! database: the reservation must be one atomic write visible to all of
//! them, not a map in one process's memory.
//!
//! # When the process holding a key dies
//!
//! Every reservation names its holder (this process, with a token of its
//! own) and, for a run submission, the run it starts. A queued submission
//! is reserved, enqueued and answered in one write (`Store::submit_queued`),
//! so it is never left in progress. A sync submission's record outlives a
//! process killed mid-run; a retry then resolves it ([`crate::submission`]):
//! never a 409 once the holder is gone (a process of this host that exited,
//! or a claim nobody renewed for a lease), and never a second run. While
//! the dead holder's run is being recovered (taken over, or closed by the
//! orphan scan) the honest answer is 202 with its location: the run exists,
//! its end is not known yet. Once it ended, the replay is its final view,
//! as the holder would have answered.

use std::future::Future;
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rein_core::{RunId, TenantId};
use rein_store::{Holder, IdempotencySettlement, NewReservation, Reservation, StoredResponse};
use sha2::{Digest, Sha256};

use crate::problem::Problem;
use crate::recovery::now_ms;
use crate::runs::Answer;
use crate::state::AppState;

/// The request header.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";
/// The header on a replayed response.
pub const REPLAYED: &str = "Idempotency-Replayed";

/// The request's idempotency key, validated; `None` without the header.
///
/// # Errors
///
/// The 400 and 501 rows of the table.
pub fn key(state: &AppState, headers: &HeaderMap, body: &[u8]) -> Result<Option<String>, Problem> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let settings = state.settings.idempotency;
    if !settings.enabled {
        return Err(Problem::new(
            StatusCode::NOT_IMPLEMENTED,
            "idempotency-disabled",
            "Idempotency is disabled",
            "this server does not honour Idempotency-Key; omit the header to run without it",
        ));
    }
    let invalid = |detail: String| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "idempotency-key-invalid",
            "Invalid Idempotency-Key",
            detail,
        )
    };
    // Visible ASCII only: no spaces or tabs (an HTTP header value may hold
    // them, the store refuses control characters), so what the client
    // sent is exactly the key. NOTE: the OpenAPI document's `pattern` for
    // the header (`runs::create_run`) says the same.
    let key = value
        .to_str()
        .ok()
        .filter(|k| k.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            invalid("the Idempotency-Key header must be visible ASCII, without spaces".into())
        })?;
    if key.is_empty() {
        return Err(invalid("the Idempotency-Key header is empty".into()));
    }
    if key.chars().count() > settings.max_key_length {
        return Err(invalid(format!(
            "the Idempotency-Key is {} characters; at most {} are allowed",
            key.chars().count(),
            settings.max_key_length
        ))
        .with(serde_json::json!({"max_key_length": settings.max_key_length})));
    }
    let streams = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .is_some_and(|v| v.get("stream") == Some(&serde_json::Value::Bool(true)));
    if streams {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "idempotency-stream",
            "Idempotency-Key on a streaming request",
            "a streamed response cannot be stored and replayed; drop the key or `stream: true`",
        ));
    }
    Ok(Some(key.to_owned()))
}

/// The fingerprint of a request: method, path and the raw body bytes.
/// Equivalent JSON serialized differently is a different request, on
/// purpose: the client must reuse the exact bytes on a transport retry.
pub fn fingerprint(method: &str, path: &str, body: &[u8]) -> String {
    let mut hash = Sha256::new();
    hash.update(method.as_bytes());
    hash.update(b"\n");
    hash.update(path.as_bytes());
    hash.update(b"\n");
    hash.update(body);
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The stored response of a completed request, as a replay.
pub fn replay(stored: StoredResponse) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let mut response = (status, stored.body).into_response();
    let headers = response.headers_mut();
    if let Some(ct) = stored
        .content_type
        .and_then(|c| HeaderValue::from_str(&c).ok())
    {
        headers.insert(header::CONTENT_TYPE, ct);
    }
    if let Some(location) = stored.location.and_then(|l| HeaderValue::from_str(&l).ok()) {
        headers.insert(header::LOCATION, location);
    }
    headers.insert(REPLAYED, HeaderValue::from_static("true"));
    response
}

/// A fresh holder id for one reservation: this process (so a retry can
/// tell whether it died) and a token of its own (so settlements are fenced
/// to this reservation, not any of the process).
pub fn holder_id() -> String {
    format!(
        "{}#{}",
        rein_engine::lease::Owner::current(),
        uuid::Uuid::now_v7().simple()
    )
}

/// The reservation of `key` for the request with fingerprint `print`, held
/// by `holder`, now.
pub fn new_reservation(
    state: &AppState,
    tenant: &TenantId,
    key: &str,
    print: String,
    holder: Holder,
) -> NewReservation {
    let now = now_ms();
    let retention =
        u64::try_from(state.settings.idempotency.retention.as_millis()).unwrap_or(u64::MAX);
    NewReservation {
        tenant: tenant.clone(),
        key: key.to_owned(),
        fingerprint: print,
        holder: Some(holder),
        now_ms: now,
        expires_at_ms: now.saturating_add(retention),
    }
}

/// The answer to a reservation that found a completed record, or one of
/// another request.
pub fn decided(reservation: Reservation) -> Response {
    match reservation {
        Reservation::Replay(record) => match record.response {
            Some(stored) => replay(stored),
            None => Problem::internal("a completed idempotency record has no response").into_response(),
        },
        Reservation::Mismatch(_) => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency-mismatch",
            "Idempotency-Key reused for another request",
            "this Idempotency-Key was used with a different method, path or body; reuse the original bytes, or use a new key for a new operation",
        )
        .into_response(),
        Reservation::InProgress(_) => in_progress(),
        Reservation::Reserved => {
            Problem::internal("a fresh reservation has no answer yet").into_response()
        }
    }
}

/// The 409 of a request whose first attempt is still being processed.
pub fn in_progress() -> Response {
    Problem::new(
        StatusCode::CONFLICT,
        "idempotency-in-progress",
        "Request in progress",
        "a request with this Idempotency-Key is still being processed; wait and query the run instead of submitting again",
    )
    .into_response()
}

/// How often a reservation found in progress is resolved and tried again
/// before answering 409: once its dead holder's record is released, the
/// next reservation wins, unless another retry took the key meanwhile.
const RESERVE_ROUNDS: usize = 2;

/// Runs `execute` under the key's reservation.
#[allow(clippy::too_many_arguments)]
pub async fn guarded<F, Fut>(
    state: &Arc<AppState>,
    tenant: &TenantId,
    key: &str,
    method: &str,
    path: &str,
    body: &[u8],
    execute: F,
) -> Response
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Answer, Problem>>,
{
    guarded_run(state, tenant, key, method, path, body, None, execute).await
}

/// Runs `execute` under the key's reservation, held by this process and
/// naming `run`, the run `execute` starts (when its id is known before):
/// a retry after this process died answers from that run (see
/// [`crate::submission`]).
#[allow(clippy::too_many_arguments)]
pub async fn guarded_run<F, Fut>(
    state: &Arc<AppState>,
    tenant: &TenantId,
    key: &str,
    method: &str,
    path: &str,
    body: &[u8],
    run: Option<RunId>,
    execute: F,
) -> Response
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Answer, Problem>>,
{
    let print = fingerprint(method, path, body);
    let owner = holder_id();
    for _ in 0..RESERVE_ROUNDS {
        let holder = Holder {
            owner: owner.clone(),
            run_id: run.clone(),
        };
        let reservation = new_reservation(state, tenant, key, print.clone(), holder);
        let reservation = match state.store.reserve_idempotency_as(reservation).await {
            Ok(r) => r,
            Err(e) => return Problem::from(e).into_response(),
        };
        match reservation {
            Reservation::Reserved => {
                return execute_reserved(state, tenant, key, owner, execute).await;
            }
            Reservation::InProgress(record) => {
                match crate::submission::resolve_in_progress(state, &record, body).await {
                    crate::submission::Resolved::Answer(response) => return response,
                    crate::submission::Resolved::Released => continue,
                }
            }
            other => return decided(other),
        }
    }
    in_progress()
}

/// Executes a request whose key this process just reserved as `owner`,
/// and completes or releases the reservation with its answer.
async fn execute_reserved<F, Fut>(
    state: &Arc<AppState>,
    tenant: &TenantId,
    key: &str,
    owner: String,
    execute: F,
) -> Response
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Answer, Problem>>,
{
    // A panic while executing must not leave the key reserved for the
    // whole retention: the guard releases it on unwind.
    let mut guard = ReleaseOnDrop {
        store: state.store.clone(),
        tenant: tenant.clone(),
        key: key.to_owned(),
        owner: owner.clone(),
        armed: true,
    };
    let result = execute().await;
    guard.armed = false;
    let settle = |settlement: IdempotencySettlement| async move {
        match state
            .store
            .settle_idempotency(tenant, key, &owner, settlement, now_ms())
            .await
        {
            Ok(true) => {}
            // A retry took this process for dead and resolved the record
            // from its run: the answer it stored is this run's too.
            Ok(false) => {
                tracing::warn!(%tenant, "the idempotency record was resolved by a retry meanwhile")
            }
            Err(e) => tracing::error!(%tenant, "cannot record the idempotent answer: {e}"),
        }
    };
    match result {
        Ok(answer) if answer.status.is_success() => {
            let stored = StoredResponse {
                status: answer.status.as_u16(),
                content_type: Some("application/json".to_owned()),
                location: answer.location.clone(),
                body: answer.body.clone(),
            };
            settle(IdempotencySettlement::Complete(stored)).await;
            answer.into_response()
        }
        other => {
            settle(IdempotencySettlement::Release).await;
            match other {
                Ok(answer) => answer.into_response(),
                Err(problem) => problem.into_response(),
            }
        }
    }
}

/// Releases a reservation when dropped while armed (the execution
/// unwound).
struct ReleaseOnDrop {
    store: Arc<dyn rein_store::Store>,
    tenant: TenantId,
    key: String,
    owner: String,
    armed: bool,
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, tenant, key, owner) = (
            self.store.clone(),
            self.tenant.clone(),
            self.key.clone(),
            self.owner.clone(),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let release = IdempotencySettlement::Release;
                if let Err(e) = store
                    .settle_idempotency(&tenant, &key, &owner, release, now_ms())
                    .await
                {
                    tracing::error!(%tenant, "cannot release an abandoned reservation: {e}");
                }
            });
        }
    }
}

/// Records deleted per sweep query.
const SWEEP_BATCH: usize = 1000;

/// Deletes expired idempotency records, forever: every tenth of the
/// retention, at most once a minute, a batch at a time.
pub async fn sweep_forever(state: Arc<AppState>) {
    let retention = state.settings.idempotency.retention;
    let every = (retention / 10).clamp(
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(60),
    );
    loop {
        tokio::time::sleep(every).await;
        if !crate::singleton::holds(&state, crate::singleton::IDEMPOTENCY_SWEEP, every).await {
            continue;
        }
        loop {
            match state.store.sweep_idempotency(now_ms(), SWEEP_BATCH).await {
                Ok(SWEEP_BATCH) => continue,
                Ok(n) => {
                    if n > 0 {
                        tracing::info!(deleted = n, "expired idempotency records swept");
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!("idempotency sweep failed: {e}");
                    break;
                }
            }
        }
    }
}
