//! Validating one proposed call before any tool sees it.

use rein_core::event::{CallRejected, Refused};
use rein_core::loop_guard::LoopGuard;
use rein_core::{Category, Failure, IntentId, ToolClass};
use serde_json::Value;

use super::ctx::RunCtx;
use super::emitter::Correlation;
use super::engine::{Engine, new_id};
use super::guarded::Planned;
use super::{ArgValidator, ParsedArgs, parse_args};

/// How a refusal of cut-off arguments begins (the truncation event finds
/// them by it).
pub(super) const CUT_ARGUMENTS: &str = "the arguments were cut off";

impl Engine {
    /// Validates one proposed call. A refusal is a clarification for the
    /// model; the tool never sees the call.
    pub(super) fn validate_call(
        &self,
        ctx: &RunCtx<'_>,
        guard: &LoopGuard,
        validator: &dyn ArgValidator,
        call: &crate::provider::ToolCall,
        step: u32,
        position: usize,
    ) -> Result<Planned, (String, Value, String)> {
        let c = Correlation {
            step,
            ..Correlation::default()
        };
        let refuse = |category: Category, reason: String, args: Value| {
            ctx.emitter.emit(
                &c,
                CallRejected::Refused(Refused {
                    tool: call.name.clone(),
                    call_id: Some(call.id.clone()),
                    category: Some(category),
                    reason: reason.clone(),
                }),
            );
            let failure = Failure::new(&call.name, category).with_human_message(reason.clone());
            let mut text = failure.model_message().to_owned();
            if category == Category::InvalidArguments {
                // The problems are rein's own short descriptions (schema
                // paths), not raw tool output: they tell the model what to fix.
                text.push_str(" problems: ");
                text.push_str(&reason);
            }
            Err((text, args, reason))
        };
        let Some(tool) = ctx.agent.tools.get(&call.name) else {
            let known: Vec<&str> = ctx.agent.tools.keys().map(String::as_str).collect();
            return refuse(
                Category::InvalidArguments,
                format!("unknown tool; available tools: {}", known.join(", ")),
                Value::Null,
            );
        };
        if !guard.is_available(&tool.name) {
            return refuse(
                Category::CircuitOpen,
                "tool disabled for the rest of this run after repeated failures".into(),
                Value::Null,
            );
        }
        let mut salvaged = false;
        let args = match parse_args(&call.arguments) {
            ParsedArgs::Complete(v) => v,
            // Salvaging a cut-off call is safe for a read; for a write an
            // optional field lost in the cut would silently change what is
            // done, so the model is asked again.
            ParsedArgs::Salvaged { value, .. } if tool.class == ToolClass::Read => {
                salvaged = true;
                value
            }
            ParsedArgs::Salvaged { dropped_bytes, .. } => {
                return refuse(
                    Category::InvalidArguments,
                    format!(
                        "{CUT_ARGUMENTS} ({dropped_bytes} bytes incomplete); a call with side effects is never made from partial arguments — send the complete call"
                    ),
                    Value::Null,
                );
            }
            ParsedArgs::Invalid { reason } => {
                return refuse(Category::InvalidArguments, reason, Value::Null);
            }
        };
        if let Err(problems) = validator.validate(&tool.name, &args) {
            return refuse(Category::InvalidArguments, problems.join("; "), args);
        }
        Ok(Planned {
            intent_id: new_id::<IntentId>(),
            call_id: call.id.clone(),
            tool: tool.name.clone(),
            args,
            step,
            position,
            salvaged,
        })
    }
}
