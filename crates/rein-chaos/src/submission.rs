//! The submission layer: a client submits a run to `rein serve` (started
//! in-process on the scenario's store, behind a fault proxy) with an
//! `Idempotency-Key`, and retries as a careful client would: on a lost
//! response, a timeout, or 409 while the first attempt is in progress.
//!
//! # Why
//!
//! A double click or a transport retry must not start two runs. Only a
//! lost response or a slow first attempt shows whether the key held.

use std::sync::Arc;
use std::time::Duration;

use rein_engine::config::CompiledSchemas;
use rein_server::AppState;
use rein_store::{RunRecord, Store};
use tokio::sync::oneshot;

use crate::ChaosError;
use crate::evidence::SubmissionAttempt;
use crate::proxy::FaultProxy;
use crate::runner::INPUT;
use crate::scenario::{Plan, Submission};
use crate::world::WorldConfig;

/// How long after the client's last attempt a queued run may take to end.
const QUEUED_SETTLE: Duration = Duration::from_secs(30);

/// Submits the scenario's run through the server; returns what the client
/// saw and the runs the store holds once everything ended.
pub async fn submit(
    plan: &Plan,
    submission: Submission,
    world: &WorldConfig,
    store: Arc<dyn Store>,
    seed: u64,
    key: &str,
) -> Result<(Vec<SubmissionAttempt>, Vec<RunRecord>), ChaosError> {
    let setup = |what: &str, e: String| ChaosError::Setup(format!("{what}: {e}"));
    let client =
        rein_engine::run::http_client().map_err(|e| setup("HTTP client", e.to_string()))?;
    let engine =
        rein_server::build_engine(&world.registry, store.clone(), client.clone(), Some(seed))
            .map_err(|e| setup("the server's engine", e.to_string()))?;
    let models = rein_server::bind_models(&world.registry, &client)
        .map_err(|e| setup("model bindings", e.to_string()))?;
    let schemas =
        CompiledSchemas::compile(&world.registry).map_err(|e| setup("schemas", e.to_string()))?;
    let mut state = AppState::new(
        world.registry.clone(),
        schemas,
        store.clone(),
        engine,
        client,
        models,
    );
    state.workers = usize::from(submission.queued);
    let state = Arc::new(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| setup("the server's socket", e.to_string()))?;
    let addr = listener
        .local_addr()
        .map_err(|e| setup("the server's socket", e.to_string()))?;
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(rein_server::serve(state, listener, async move {
        let _ = stopped.await;
    }));
    let proxy = FaultProxy::start(&format!("http://{addr}"))
        .await
        .map_err(|e| setup("the server's proxy", e.to_string()))?;
    proxy.set_rules(plan.server_rules.clone());

    let agent = WorldConfig::agent_name(plan);
    let mode = if submission.queued { "queued" } else { "sync" };
    // The same bytes on every attempt: the key's fingerprint covers them.
    let body = serde_json::json!({"input": INPUT, "mode": mode}).to_string();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(submission.timeout_ms))
        .build()
        .map_err(|e| setup("the client", e.to_string()))?;
    let mut attempts = Vec::new();
    for _ in 0..submission.tries.max(1) {
        let sent = http
            .post(proxy.url(&format!("/v1/agents/{agent}/runs")))
            .header("content-type", "application/json")
            .header("Idempotency-Key", key)
            .body(body.clone())
            .send()
            .await;
        let attempt = match sent {
            Ok(r) => SubmissionAttempt {
                key: key.to_owned(),
                status: Some(r.status().as_u16()),
                replayed: r
                    .headers()
                    .get("idempotency-replayed")
                    .is_some_and(|v| v == "true"),
                location: r
                    .headers()
                    .get("location")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
            },
            Err(_) => SubmissionAttempt {
                key: key.to_owned(),
                status: None,
                replayed: false,
                location: None,
            },
        };
        let done = attempt.status.is_some_and(|s| (200..300).contains(&s))
            || attempt
                .status
                .is_some_and(|s| (400..500).contains(&s) && s != 409);
        attempts.push(attempt);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Whatever the client saw, wait for every run to end before judging.
    let give_up = tokio::time::Instant::now() + QUEUED_SETTLE;
    let runs = loop {
        let runs = store
            .list_runs(100)
            .await
            .map_err(|e| setup("reading the store", e.to_string()))?;
        if runs.iter().all(|r| r.status.is_finished()) || tokio::time::Instant::now() >= give_up {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let _ = stop.send(());
    let _ = server.await;
    Ok((attempts, runs))
}
