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

use rein_core::event::{ModelCallFinished, ModelCallResult};
use rein_core::{Category, Event, EventData};

/// Logs `event` at the level an operator needs (see the module docs).
/// `with_run` is false for an emitter whose run id names no run (see
/// [`Emitter::without_run_in_logs`](super::Emitter::without_run_in_logs)):
/// the line then has no `run` field.
pub(super) fn log(event: &Event, with_run: bool) {
    let run = with_run.then(|| event.run_id.as_str());
    match &event.data {
        EventData::BreakerStateChanged(d) => {
            let arm = d.arm.as_str();
            let name = d.name.as_str();
            let transition = d.transition.as_str();
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
        EventData::ModelFallbackUsed(d) => {
            let primary = d.primary.provider.as_str();
            let answered = d.answered.provider.as_str();
            let model = d.answered.model.as_str();
            tracing::warn!(
                run,
                primary,
                answered,
                model,
                "model fallback: {primary} failed, {answered} answered"
            );
        }
        EventData::ModelCallFinished(d) if is_rejected_key(d) => {
            let provider = d.provider.as_str();
            let (category, key_env, reason) = match &d.result {
                ModelCallResult::Failed(f) => (
                    f.category.as_str(),
                    f.key_env.as_deref().unwrap_or("(none: no key is sent)"),
                    f.reason.as_str(),
                ),
                ModelCallResult::Answered(_) => ("", "", ""),
            };
            tracing::error!(
                run,
                provider,
                category,
                key_env,
                "provider {provider} rejected its key ({category}); check the variable {key_env}: {reason}"
            );
        }
        data => {
            let kind = event.kind().as_str();
            // The JSON form is made inside the macro: only when the debug
            // line is wanted (off by default, and every gateway call
            // emits three such events).
            tracing::debug!(
                run,
                step = event.step,
                kind,
                data = %data.to_value().unwrap_or_default(),
                "event"
            )
        }
    }
}

/// Whether a model call failed because the provider refused the key.
fn is_rejected_key(call: &ModelCallFinished) -> bool {
    matches!(
        call.category(),
        Some(Category::Unauthorized | Category::Forbidden)
    )
}
