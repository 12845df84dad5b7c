//! Resolving an idempotency record found `in_progress`: is its holder
//! still working, and if not, what did its request do?
//!
//! The decision is [`rein_core::submission::resolve`]'s; this module reads
//! what it needs from the store and the process table, and applies it.
//! A holder is judged by its own reservation, never by its run's claim
//! (a process that took the run over renews that claim, and would make a
//! dead holder look alive for the whole recovery):
//!
//! | holder recorded as | gone when |
//! | --- | --- |
//! | a process provably of this machine ([`Owner::is_local`]) that exited | at once |
//! | any other (elsewhere, or alive here) | its reservation was not renewed for a lease (`holder_until_ms` passed), or its holder gave it up (a draining server that handed its run on) |
//! | a holder from before renewals (schema 7) | a lease after the record last changed |
//! | nobody, or a holder the record does not belong to ([`IdempotencyRecord::holder_is_trusted`]) | never: the record blocks its key until it expires |
//!
//! The holder renews its reservation every third of `server.queue.lease`
//! while it works (`crate::api::idempotency`), so no key whose holder died
//! stays blocked (409) longer than that lease after its last renewal.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rein_core::submission::{Liveness, Resolution, RunState, Submission, resolve};
use rein_engine::lease::Owner;
use rein_store::{
    IdempotencyRecord, IdempotencySettled, IdempotencySettlement, RunRecord, StoredResponse,
    Timestamp,
};
use serde_json::Value;

use crate::api::idempotency::{in_progress, replay};
use crate::api::runs::{Mode, RunView, location};
use crate::http::problem::Problem;
use crate::http::state::AppState;
use crate::lifecycle::recovery::now_ms;

/// What became of a record found in progress.
pub enum Resolved {
    /// The answer to send.
    Answer(Response),
    /// The record changed (its dead holder's record was released, or
    /// another retry settled it meanwhile): reserve the key again, which
    /// executes afresh or replays what is stored.
    Again,
}

/// Resolves `record` (found `in_progress` by a request with `body`).
pub async fn resolve_in_progress(
    state: &Arc<AppState>,
    record: &IdempotencyRecord,
    body: &[u8],
) -> Resolved {
    let lease = state.settings.queue.lease;
    let (Some(owner), Some(liveness)) =
        (record.owner.as_deref(), liveness(record, now_ms(), lease))
    else {
        // Nobody to ask about: the record blocks its key until it expires.
        return Resolved::Answer(in_progress());
    };
    let submission = match serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| serde_json::from_value::<Mode>(v.get("mode")?.clone()).ok())
    {
        Some(Mode::Queued) => Submission::Queued,
        _ => Submission::Sync,
    };
    let settle = |settlement: IdempotencySettlement| async move {
        state
            .store
            .settle_idempotency(&record.tenant, &record.key, owner, settlement, now_ms())
            .await
    };
    // Twice at most: a release refused because the run exists after all
    // (its holder created it a moment ago) is resolved again from the run.
    for _ in 0..2 {
        let run = match &record.run_id {
            Some(id) => match state.store.get_run(id).await {
                Ok(run) => run,
                Err(e) => return Resolved::Answer(Problem::from(e).into_response()),
            },
            None => None,
        };
        let run_state = match &run {
            None => RunState::Absent,
            Some(run) if run.status.is_finished() => RunState::Finished,
            Some(_) => RunState::InFlight,
        };
        let resolution = resolve(liveness, run_state, submission);
        tracing::info!(tenant = %record.tenant, ?liveness, ?run_state, ?resolution, "resolving an idempotency record in progress");
        match (resolution, run) {
            (Resolution::Wait, _) => return Resolved::Answer(in_progress()),
            (Resolution::Release, _) => match settle(IdempotencySettlement::Release).await {
                Ok(IdempotencySettled::RunExists) => continue,
                Ok(_) => return Resolved::Again,
                Err(e) => return Resolved::Answer(Problem::from(e).into_response()),
            },
            (Resolution::Recovering, Some(run)) => {
                return Resolved::Answer(recovering(&run, body));
            }
            (Resolution::Complete, Some(run)) => {
                let stored = match submission {
                    Submission::Sync => final_answer(&run, body),
                    Submission::Queued => answer(&run, body, StatusCode::ACCEPTED),
                };
                // Fenced: when another retry resolved it first, the record
                // holds its answer; reserving again replays that one, so
                // every retry gets the same bytes.
                return match settle(IdempotencySettlement::Complete(stored.clone())).await {
                    Ok(IdempotencySettled::Applied) => Resolved::Answer(replay(stored)),
                    Ok(_) => Resolved::Again,
                    Err(e) => Resolved::Answer(Problem::from(e).into_response()),
                };
            }
            // A resolution that needs a run always has one (see `resolve`).
            (Resolution::Recovering | Resolution::Complete, None) => {
                return Resolved::Answer(in_progress());
            }
        }
    }
    Resolved::Answer(in_progress())
}

/// Whether the reservation's holder can still answer (see the module's
/// table); `None` when the record names no holder it can be judged by.
fn liveness(record: &IdempotencyRecord, now_ms: Timestamp, lease: Duration) -> Option<Liveness> {
    let owner = record.owner.as_deref()?;
    if !record.holder_is_trusted() {
        return None;
    }
    if is_gone(owner) {
        return Some(Liveness::Gone);
    }
    let until = record
        .holder_until_ms
        .unwrap_or(record.updated_at_ms.saturating_add(lease));
    Some(if until > now_ms {
        Liveness::Alive
    } else {
        Liveness::Gone
    })
}

/// Whether the holder `owner` is provably gone: a process this process can
/// see (same host, boot and pid namespace) that no longer runs. The one
/// predicate claims, takeover and submissions share
/// ([`Owner::is_gone_id`]); an owner it cannot check is judged by its
/// renewals.
fn is_gone(owner: &str) -> bool {
    Owner::is_gone_id(owner)
}

/// The run's view as its submission's answer shows it: with the
/// submission's metadata.
fn view(run: &RunRecord, body: &[u8]) -> Vec<u8> {
    let metadata = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("metadata").cloned())
        .unwrap_or(Value::Null);
    let view = RunView {
        metadata: Some(metadata),
        ..RunView::of(run.clone())
    };
    serde_json::to_vec(&view).unwrap_or_default()
}

/// The answer `status` with the run's view, as stored for replays.
fn answer(run: &RunRecord, body: &[u8], status: StatusCode) -> StoredResponse {
    StoredResponse {
        status: status.as_u16(),
        content_type: Some("application/json".to_owned()),
        location: Some(location(&run.run_id)),
        headers: Vec::new(),
        body: view(run, body),
    }
}

/// The answer of a sync submission (with `body`) whose run ended: its
/// final view, 200, as its holder would have answered.
pub fn final_answer(run: &RunRecord, body: &[u8]) -> StoredResponse {
    answer(run, body, StatusCode::OK)
}

/// 202 for a sync submission whose holder is gone while its run is still
/// being recovered: the run exists, its end is not known yet. Not stored,
/// and not a replay (nothing stored is replayed): no
/// `Idempotency-Replayed`.
fn recovering(run: &RunRecord, body: &[u8]) -> Response {
    let mut response = (StatusCode::ACCEPTED, view(run, body)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(location) = HeaderValue::from_str(&location(&run.run_id)) {
        headers.insert(header::LOCATION, location);
    }
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(owner: &str, updated_at_ms: u64, until: Option<u64>) -> IdempotencyRecord {
        IdempotencyRecord {
            tenant: rein_core::TenantId::new("acme").unwrap(),
            key: "k".into(),
            fingerprint: "0".repeat(64),
            state: rein_store::IdempotencyState::InProgress,
            response: None,
            created_at_ms: Timestamp::from_millis(1_000),
            updated_at_ms: Timestamp::from_millis(updated_at_ms),
            expires_at_ms: Timestamp::from_millis(u64::MAX),
            owner: Some(owner.to_owned()),
            run_id: None,
            holder_since_ms: until.map(|_| Timestamp::from_millis(1_000)),
            holder_until_ms: until.map(Timestamp::from_millis),
        }
    }

    #[test]
    fn a_holder_is_alive_while_it_renews_its_reservation() {
        let me = format!("{}#token", Owner::current());
        // Renewed until 9 s: alive at 8.999 s, whatever the lease.
        assert_eq!(
            liveness(
                &record(&me, 1_000, Some(9_000)),
                Timestamp::from_millis(8_999),
                Duration::from_millis(3_000)
            ),
            Some(Liveness::Alive)
        );
        assert_eq!(
            liveness(
                &record(&me, 1_000, Some(9_000)),
                Timestamp::from_millis(9_000),
                Duration::from_millis(3_000)
            ),
            Some(Liveness::Gone),
            "a holder alive here that stopped renewing (stalled) is gone too"
        );
    }

    #[test]
    fn a_holder_elsewhere_that_renews_is_alive_past_any_lease() {
        // The gateway's model call takes two minutes with a 60 s lease:
        // renewed, its holder at another node is never taken for dead.
        let elsewhere = "pid:1@some-other-host#token";
        assert_eq!(
            liveness(
                &record(elsewhere, 1_000, Some(121_000)),
                Timestamp::from_millis(120_000),
                Duration::from_millis(60_000)
            ),
            Some(Liveness::Alive)
        );
        assert_eq!(
            liveness(
                &record(elsewhere, 1_000, Some(121_000)),
                Timestamp::from_millis(121_000),
                Duration::from_millis(60_000)
            ),
            Some(Liveness::Gone)
        );
    }

    #[test]
    fn a_holder_of_this_machine_that_exited_is_gone_at_once() {
        let me = format!("{}#token", Owner::current());
        // Above any pid_max: no such process.
        let gone = me.replacen(&format!("pid:{}", std::process::id()), "pid:999999999", 1);
        let is_local = Owner::parse(&gone).is_some_and(|o| o.is_local());
        assert_eq!(
            liveness(
                &record(&gone, 1_000, Some(u64::MAX)),
                Timestamp::from_millis(2_000),
                Duration::from_millis(3_000)
            ),
            Some(if is_local {
                Liveness::Gone
            } else {
                // This machine's identity cannot be proven (no boot id):
                // judged by its renewals instead.
                Liveness::Alive
            })
        );
    }

    #[test]
    fn a_holder_from_before_renewals_is_alive_for_a_lease_after_its_last_change() {
        let elsewhere = "pid:1@some-other-host#token";
        assert_eq!(
            liveness(
                &record(elsewhere, 1_000, None),
                Timestamp::from_millis(3_999),
                Duration::from_millis(3_000)
            ),
            Some(Liveness::Alive)
        );
        assert_eq!(
            liveness(
                &record(elsewhere, 1_000, None),
                Timestamp::from_millis(4_000),
                Duration::from_millis(3_000)
            ),
            Some(Liveness::Gone)
        );
    }

    #[test]
    fn a_record_without_a_trusted_holder_is_never_judged() {
        let mut replaced = record("pid:1@some-other-host#token", 50_000, Some(1_500));
        // Reserved again at 50 s by a rein that does not know the holder
        // columns: they belong to the reservation at 1 s.
        replaced.created_at_ms = Timestamp::from_millis(50_000);
        assert_eq!(
            liveness(
                &replaced,
                Timestamp::from_millis(60_000),
                Duration::from_millis(3_000)
            ),
            None
        );
        let mut nobody = record("x", 1_000, None);
        nobody.owner = None;
        assert_eq!(
            liveness(
                &nobody,
                Timestamp::from_millis(60_000),
                Duration::from_millis(3_000)
            ),
            None
        );
    }
}
