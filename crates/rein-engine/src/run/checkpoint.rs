//! What a step makes durable for a resume.

use std::collections::BTreeSet;

use rein_core::Clock;
use rein_core::deadline::Budget;
use rein_store::Checkpoint;
use serde_json::json;

use crate::provider::Message;

use super::ctx::RunCtx;
use super::emitter::unix_ms;
use super::engine::Engine;
use super::guarded::{CallResult, millis};

impl Engine {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn checkpoint(
        &self,
        ctx: &RunCtx<'_>,
        budget: &Budget,
        messages: &[Message],
        calls: &[CallResult],
        facts: &BTreeSet<String>,
        tools_tried: &BTreeSet<String>,
        step: u32,
        elapsed_before_ms: u64,
        started: rein_core::Instant,
    ) -> Checkpoint {
        let now = self.clock.now();
        Checkpoint {
            run_id: ctx.run_id.clone(),
            step,
            messages: json!(messages),
            completed_intents: calls
                .iter()
                .filter(|c| c.outcome.is_ok())
                .map(|c| c.planned.intent_id.clone())
                .collect(),
            consumed: budget.used(),
            elapsed_ms: elapsed_before_ms + millis(now.saturating_duration_since(started)),
            // What a resume needs besides the transcript: every call's
            // result (for the report), the loop guard's progress inputs, and
            // how many model calls were served.
            state: json!({
                "calls": calls,
                "facts": facts,
                "tools_tried": tools_tried,
                "provider_calls": ctx.provider_calls.load(std::sync::atomic::Ordering::Acquire),
            }),
            at_ms: unix_ms(self.clock.system_now()),
        }
    }
}
