//! The log lines an operator needs, read off the events as they are
//! emitted: breaker openings and closings, model fallbacks, a provider
//! rejecting its key.
//!
//! # Why from the events
//!
//! Every decision is already an [`Event`] with its rationale, emitted in
//! one place ([`Emitter::emit`](super::Emitter::emit)), after redaction.
//! Logging from there means a new breaker or fallback site cannot forget
//! its log line, and a log line never says more than the event (no key,
//! no raw URL). Levels: an opened breaker, a fallback and a rejected key
//! are `warn` (or `error` for the key: nothing works until an operator
//! acts); a breaker closing or probing is `info`; every other event is
//! `debug`, so `RUST_LOG=rein_engine=debug` shows a run's whole stream.

use rein_core::{Category, Event, EventKind};
use serde_json::Value;

/// Logs `event` at the level an operator needs (see the module docs).
/// `with_run` is false for an emitter whose run id names no run (see
/// [`Emitter::without_run_in_logs`](super::Emitter::without_run_in_logs)):
/// the line then has no `run` field.
pub(super) fn log(event: &Event, with_run: bool) {
    let data = &event.data;
    let run = with_run.then(|| event.run_id.as_str());
    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
    match event.kind {
        EventKind::BreakerStateChanged => {
            let arm = text(&data["arm"]);
            let name = text(&data["name"]);
            let transition = text(&data["transition"]["transition"]);
            if transition == "opened" {
                tracing::warn!(
                    run,
                    arm,
                    name,
                    transition,
                    "circuit breaker opened: calls to {name} are refused"
                );
            } else {
                tracing::info!(
                    run,
                    arm,
                    name,
                    transition,
                    "circuit breaker {transition}: {name}"
                );
            }
        }
        EventKind::ModelFallbackUsed => {
            let primary = text(&data["primary"]["provider"]);
            let answered = text(&data["answered"]["provider"]);
            let model = text(&data["answered"]["model"]);
            tracing::warn!(
                run,
                primary,
                answered,
                model,
                "model fallback: {primary} failed, {answered} answered"
            );
        }
        EventKind::ModelCallFinished if is_rejected_key(data) => {
            let provider = text(&data["provider"]);
            let category = text(&data["category"]);
            let key_env = data["key_env"]
                .as_str()
                .unwrap_or("(none: no key is sent)")
                .to_owned();
            let reason = text(&data["reason"]);
            tracing::error!(
                run,
                provider,
                category,
                key_env,
                "provider {provider} rejected its key ({category}); check the variable {key_env}: {reason}"
            );
        }
        kind => {
            tracing::debug!(run, step = event.step, kind = kind.as_str(), data = %data, "event")
        }
    }
}

/// Whether a model call failed because the provider refused the key.
fn is_rejected_key(data: &Value) -> bool {
    let category = data["category"].as_str().unwrap_or("");
    data["ok"] == false
        && (category == Category::Unauthorized.as_str() || category == Category::Forbidden.as_str())
}
