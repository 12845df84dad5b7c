//! `Idempotency-Key` on run submissions, exactly as seed 004's table says.
//!
//! | condition | result |
//! | --- | --- |
//! | first request reserves the key | the endpoint executes |
//! | same key, completed 2xx | stored status, body, content type, `Location` and the answer's other headers (the gateway's `Rein-Model`, `Rein-Fallback`) replayed, `Idempotency-Replayed: true` |
//! | same key, still in progress, its holder alive (renewing its reservation) | 409 `idempotency-in-progress` |
//! | same key, in progress, its holder gone, nothing ran | the reservation is released and this request executes |
//! | same key, in progress, its holder gone, its sync run still being recovered | 202, `Location` and the run's current view, `Retry-After: 1`; not stored, not a replay |
//! | same key, in progress, its holder gone, its run ended (or it was queued) | the record is completed with the run's view (200 sync, 202 queued) and replayed |
//! | same key, different method, path or raw body | 422 `idempotency-mismatch` |
//! | key empty, longer than `max_key_length`, or not visible ASCII | 400 `idempotency-key-invalid` |
//! | key on a body that sets `"stream": true` | 400 `idempotency-stream` |
//! | idempotency disabled, header present | 501 `idempotency-disabled`; nothing executes |
//! | the endpoint answers non-2xx, fails or panics, and started no run | the reservation is released |
//! | the same after its run was created | completed with the run's final view if it ended, else given up for the next retry to resolve from the run: never released, so never a second run |
//! | a sync run handed on by a draining server | 202 to its caller, not stored; the reservation is given up, so retries get the recovering 202, then the run's final view |
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
//! own) and, for a run submission, the run it starts; the holder renews it
//! every third of `server.queue.lease` while the request executes
//! (`Renewal`). A queued submission is reserved, enqueued and answered in
//! one write (`Store::submit_queued`), so it is never left in progress. A
//! sync submission's record outlives a process killed mid-run; a retry
//! then resolves it ([`crate::api::submission`]): a 409 only while the holder
//! renews (never longer than a lease after a holder died), and never a
//! second run: a release is refused in the store's write when the run
//! exists, and the run is created only while the reservation is still its
//! holder's. While the dead holder's run is being recovered (taken over, or
//! closed by the orphan scan) the honest answer is 202 with its location:
//! the run exists, its end is not known yet. Once it ended, the replay is
//! its final view, as the holder would have answered.

use std::future::Future;
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rein_core::{RunId, TenantId};
use rein_store::{
    Holder, IdempotencySettled, IdempotencySettlement, NewReservation, Reservation,
    ReservationFence, StoredResponse,
};
use sha2::{Digest, Sha256};

use crate::api::runs::Answer;
use crate::http::problem::Problem;
use crate::http::state::AppState;
use crate::lifecycle::recovery::now_ms;

/// The request header.
///
/// NOTE: `DEFAULT_CORS_ALLOWED_HEADERS` (rein-core) lists it.
pub const IDEMPOTENCY_KEY: &str = rein_core::header::IDEMPOTENCY_KEY_HEADER;
/// The header on a replayed response.
pub const REPLAYED: &str = rein_core::header::IDEMPOTENCY_REPLAYED_HEADER;

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
    // The first answer's own (the gateway's `Rein-Model`, …); one the
    // store holds that is not a header name and value is left out.
    for (name, value) in stored.headers {
        if let (Ok(name), Ok(value)) = (
            header::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            headers.insert(name, value);
        }
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

/// The lease of a reservation's holder, in ms: `server.queue.lease`, the
/// lease of run claims. The holder renews its reservation every third of
/// it while it works ([`Renewal`]).
fn lease(state: &AppState) -> std::time::Duration {
    state.settings.queue.lease
}

/// The reservation of `key` for the request with fingerprint `print`, held
/// by a fresh holder of this process (for `run`, when the request starts
/// one whose id is known), now; and that holder's id.
pub fn new_reservation(
    state: &AppState,
    tenant: &TenantId,
    key: &str,
    print: String,
    run: Option<RunId>,
) -> (NewReservation, String) {
    let now = now_ms();
    let retention = state.settings.idempotency.retention;
    let owner = holder_id();
    let reservation = NewReservation {
        tenant: tenant.clone(),
        key: key.to_owned(),
        fingerprint: print,
        holder: Some(Holder {
            owner: owner.clone(),
            run_id: run,
            until_ms: now.saturating_add(lease(state)),
        }),
        now_ms: now,
        expires_at_ms: now.saturating_add(retention),
    };
    (reservation, owner)
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
    in_progress_problem().into_response()
}

/// The problem of [`in_progress`].
pub fn in_progress_problem() -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "idempotency-in-progress",
        "Request in progress",
        "a request with this Idempotency-Key is still being processed; wait and query the run instead of submitting again",
    )
}

/// How often a reservation found in progress is resolved and tried again
/// before answering 409: once its dead holder's record is released (or
/// settled by another retry meanwhile), the next reservation wins or
/// replays, unless yet another retry took the key in between.
pub const RESERVE_ROUNDS: usize = 3;

/// Runs `execute` under the key's reservation (a request that starts no
/// run: the gateway's).
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
    guarded_run(state, tenant, key, method, path, body, None, move |_| {
        execute()
    })
    .await
}

/// Runs `execute` under the key's reservation, held by this process and
/// naming `run`, the run `execute` starts (when its id is known before):
/// a retry after this process died answers from that run (see
/// [`crate::api::submission`]). `execute` gets the reservation's fence: the run
/// it creates must be fenced on it (`RunRequest::reservation`), so that a
/// holder a retry took for dead never creates a second run.
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
    F: FnOnce(ReservationFence) -> Fut,
    Fut: Future<Output = Result<Answer, Problem>>,
{
    let print = fingerprint(method, path, body);
    for _ in 0..RESERVE_ROUNDS {
        let (reservation, owner) = new_reservation(state, tenant, key, print.clone(), run.clone());
        let reservation = match state.store.reserve_idempotency_as(reservation).await {
            Ok(r) => r,
            Err(e) => return Problem::from(e).into_response(),
        };
        match reservation {
            Reservation::Reserved => {
                let fence = ReservationFence {
                    tenant: tenant.clone(),
                    key: key.to_owned(),
                    owner,
                };
                return execute_reserved(state, fence, run, body, execute).await;
            }
            Reservation::InProgress(record) => {
                match crate::api::submission::resolve_in_progress(state, &record, body).await {
                    crate::api::submission::Resolved::Answer(response) => return response,
                    crate::api::submission::Resolved::Again => continue,
                }
            }
            other => return decided(other),
        }
    }
    in_progress()
}

/// Executes a request whose key this process just reserved (`fence`), and
/// settles the reservation with its answer.
///
/// | the request | its reservation |
/// | --- | --- |
/// | answered 2xx | completed with the answer (retried while the store is briefly unavailable) |
/// | a sync run that has not ended (202: handed on by a draining server, or taken over by another process) | given up: a retry finds it recovering, then completes it with the run's final view |
/// | failed, answered non-2xx, or panicked, and its run does not exist | released: a retry executes afresh |
/// | the same, but its run exists (it may have made effects) | completed with the run's final view when it ended, else given up for a retry to resolve from the run |
async fn execute_reserved<F, Fut>(
    state: &Arc<AppState>,
    fence: ReservationFence,
    run: Option<RunId>,
    body: &[u8],
    execute: F,
) -> Response
where
    F: FnOnce(ReservationFence) -> Fut,
    Fut: Future<Output = Result<Answer, Problem>>,
{
    rein_engine::crash::point("after_reservation");
    let renewal = Renewal::start(state, fence.clone());
    // A panic while executing must not leave the key to the heartbeat's
    // lapse alone, nor release a key whose run exists: the guard settles
    // it on unwind as a failure.
    let mut guard = SettleOnDrop {
        state: state.clone(),
        fence: fence.clone(),
        run: run.clone(),
        body: body.to_vec(),
        armed: true,
    };
    let result = execute(fence.clone()).await;
    guard.armed = false;
    drop(renewal);
    match result {
        Ok(answer) if answer.provisional => {
            give_up(state.store.as_ref(), &fence).await;
            answer.into_response()
        }
        Ok(answer) if answer.status.is_success() => {
            let stored = answer.stored();
            let settled = settle_retrying(
                state.store.as_ref(),
                &fence,
                IdempotencySettlement::Complete(stored),
            )
            .await;
            match settled {
                Ok(IdempotencySettled::Applied) => {}
                // A retry took this process for dead and resolved the
                // record from its run: what it stored is this run's too.
                Ok(_) => {
                    tracing::warn!(tenant = %fence.tenant, "the idempotency record was resolved by a retry meanwhile")
                }
                // The renewals stopped: a retry resolves the record from
                // the run once a lease has passed.
                Err(e) => {
                    tracing::error!(tenant = %fence.tenant, "cannot record the idempotent answer: {e}")
                }
            }
            answer.into_response()
        }
        other => {
            settle_failed(state.store.as_ref(), &fence, run.as_ref(), body).await;
            match other {
                Ok(answer) => answer.into_response(),
                Err(problem) => problem.into_response(),
            }
        }
    }
}

/// How long a settlement is offered to a store that is briefly
/// unavailable (as long as a run's commit is), the first pause (doubled
/// each time) and the largest.
const SETTLE_PATIENCE: std::time::Duration = rein_engine::run::STORE_PATIENCE;
const SETTLE_FIRST_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);
const SETTLE_MAX_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// [`rein_store::Store::settle_idempotency`] of `fence`'s record, offered
/// again with bounded backoff while the store is briefly unavailable.
async fn settle_retrying(
    store: &dyn rein_store::Store,
    fence: &ReservationFence,
    settlement: IdempotencySettlement,
) -> Result<IdempotencySettled, rein_store::StoreError> {
    let mut pause = SETTLE_FIRST_PAUSE;
    let mut attempt = 1;
    // tokio's clock, which the pauses sleep on (paused in tests).
    let began = tokio::time::Instant::now();
    loop {
        let settled = store
            .settle_idempotency(
                &fence.tenant,
                &fence.key,
                &fence.owner,
                settlement.clone(),
                now_ms(),
            )
            .await;
        match settled {
            // As long as a run's commit is offered again: a key left
            // `in_progress` by a blink blocks its retries for a lease, or
            // holds no answer for a run that ended.
            Err(e) if e.is_transient() && began.elapsed() < SETTLE_PATIENCE => {
                tracing::warn!(tenant = %fence.tenant, attempt, "the idempotency record is not settled yet: {e}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(SETTLE_MAX_PAUSE);
                attempt += 1;
            }
            settled => return settled,
        }
    }
}

/// Gives `fence`'s reservation up while this process lives: held until
/// now, so that a retry resolves it at once from its run (a draining
/// server that handed its run on; a run whose end this process cannot
/// record).
async fn give_up(store: &dyn rein_store::Store, fence: &ReservationFence) {
    if let Err(e) = store
        .renew_idempotency(&fence.tenant, &fence.key, &fence.owner, now_ms())
        .await
    {
        // Its renewals stopped: it lapses within a lease anyway.
        tracing::warn!(tenant = %fence.tenant, "cannot give the idempotency reservation up: {e}");
    }
}

/// Settles the reservation of a request that failed (non-2xx, an error, a
/// panic): released when no run of it exists; when its run exists (it may
/// have made effects), completed with the run's final view if it ended,
/// else given up for a retry to resolve from the run. Never released while
/// the run exists: a retry would start a second one.
async fn settle_failed(
    store: &dyn rein_store::Store,
    fence: &ReservationFence,
    run: Option<&RunId>,
    body: &[u8],
) {
    match settle_retrying(store, fence, IdempotencySettlement::Release).await {
        Ok(IdempotencySettled::Applied | IdempotencySettled::Superseded) => return,
        Ok(IdempotencySettled::RunExists) => {}
        Err(e) => {
            tracing::error!(tenant = %fence.tenant, "cannot release the idempotency reservation: {e}");
            give_up(store, fence).await;
            return;
        }
    }
    let ended = match run {
        Some(run) => match store.get_run(run).await {
            Ok(Some(record)) if record.status.is_finished() => Some(record),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(tenant = %fence.tenant, %run, "cannot read the run of a failed request: {e}");
                None
            }
        },
        None => None,
    };
    let Some(record) = ended else {
        give_up(store, fence).await;
        return;
    };
    let answer = crate::api::submission::final_answer(&record, body);
    match settle_retrying(store, fence, IdempotencySettlement::Complete(answer)).await {
        Ok(_) => {}
        Err(e) => {
            tracing::error!(tenant = %fence.tenant, "cannot record the run's answer: {e}");
            give_up(store, fence).await;
        }
    }
}

/// The heartbeat of a reservation this process holds: renews it every
/// third of the lease while the request executes, so that a retry at any
/// node takes the holder for alive (409) exactly as long as it works, and
/// for gone within a lease of its last renewal. Stops when dropped.
struct Renewal(tokio::task::JoinHandle<()>);

impl Renewal {
    fn start(state: &Arc<AppState>, fence: ReservationFence) -> Renewal {
        let store = state.store.clone();
        let clock = state.engine.clock().clone();
        let lease = state.settings.queue.lease;
        let every = state.settings.queue.lease / 3;
        Renewal(tokio::spawn(async move {
            loop {
                clock.sleep(every).await;
                let until = now_ms().saturating_add(lease);
                match store
                    .renew_idempotency(&fence.tenant, &fence.key, &fence.owner, until)
                    .await
                {
                    Ok(true) => {}
                    // Resolved by a retry that took this process for dead
                    // (it stalled for a lease): the request's run, if it
                    // was not created yet, never will be (it is fenced).
                    Ok(false) => {
                        tracing::warn!(tenant = %fence.tenant, "the idempotency reservation was resolved by a retry; no longer renewed");
                        return;
                    }
                    // Transient: the next beat tries again.
                    Err(e) => {
                        tracing::warn!(tenant = %fence.tenant, "cannot renew the idempotency reservation: {e}")
                    }
                }
            }
        }))
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Settles a reservation as failed ([`settle_failed`]) when dropped while
/// armed (the execution unwound).
struct SettleOnDrop {
    state: Arc<AppState>,
    fence: ReservationFence,
    run: Option<RunId>,
    body: Vec<u8>,
    armed: bool,
}

impl Drop for SettleOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let store = self.state.store.clone();
        let fence = self.fence.clone();
        let run = self.run.take();
        let body = std::mem::take(&mut self.body);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                settle_failed(store.as_ref(), &fence, run.as_ref(), &body).await;
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
        state.engine.clock().sleep(every).await;
        if !crate::lifecycle::singleton::holds(
            &state,
            crate::lifecycle::singleton::IDEMPOTENCY_SWEEP,
            every,
        )
        .await
        {
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
