//! One model turn along the agent's model chain.

use rein_core::deadline::{Budget, Dimension, Exhausted};
use rein_core::event::{BudgetExhausted, BudgetScope};
use rein_core::{Category, Clock};

use crate::provider::{Message, ModelRequest, ModelResponse};

use super::ctx::RunCtx;
use super::emitter::Correlation;
use super::engine::Engine;
use super::{End, model_chain};

/// Output tokens a model call must have room for to be worth making: below
/// this the answer is all but certain to be cut off, so the run ends
/// `budget_exhausted` instead of paying for a truncated turn.
pub const MIN_OUTPUT_TOKENS: u64 = 64;

impl Engine {
    /// One model turn along the agent's model chain: each link with
    /// classified retries under its provider's concurrency limit and
    /// breaker arm, within the run's deadline; the next link on a transient
    /// failure, a larger-context link on a context overflow.
    pub(super) async fn model_turn(
        &self,
        ctx: &RunCtx<'_>,
        messages: &[Message],
        budget: &mut Budget,
        step: u32,
    ) -> Result<(ModelResponse, Option<rein_core::registry::Price>), End> {
        let agent = ctx.agent;
        let c = Correlation {
            step,
            ..Correlation::default()
        };
        // The prompt is charged too, so the output ceiling is what the
        // token budget leaves after the prompt; a call without room for a
        // useful answer is not made (a breach cannot be undone afterwards).
        let prompt = ctx
            .last_input_tokens
            .load(std::sync::atomic::Ordering::Acquire);
        let max_tokens = match budget.remaining(self.clock.now()).tokens {
            Some(left) if left < prompt.saturating_add(MIN_OUTPUT_TOKENS) => {
                let exhausted = Exhausted {
                    dimension: Dimension::Tokens,
                    needed: prompt.saturating_add(MIN_OUTPUT_TOKENS),
                    remaining: left,
                };
                ctx.emitter.emit(
                    &c,
                    BudgetExhausted {
                        reason: Some(
                            "the next prompt and a minimal answer do not fit the tokens left"
                                .into(),
                        ),
                        prompt_tokens_at_least: Some(prompt),
                        min_output_tokens: Some(MIN_OUTPUT_TOKENS),
                        ..BudgetExhausted::new(BudgetScope::ModelCall, exhausted)
                    },
                );
                return Err(End::Budget(exhausted));
            }
            Some(left) => Some(left - prompt),
            None => None,
        };
        let request = ModelRequest {
            model: agent.model.clone(),
            messages: messages.to_vec(),
            // With a note for each tool rein would refuse now (`health`).
            tools: self.tools_with_health(agent).await,
            max_tokens,
            options: Default::default(),
        };
        let chain = model_chain::Chain {
            primary: model_chain::LinkRef {
                provider: &agent.provider,
                model: &agent.model,
                price: agent.price,
            },
            fallbacks: &agent.fallbacks,
            context: &agent.context_fallbacks,
        };
        let answered = self
            .ask_chain(
                ctx,
                &c,
                chain,
                &request,
                budget,
                model_chain::Mode::Complete,
            )
            .await?;
        match answered.reply {
            model_chain::Reply::Complete(response) => Ok((response, answered.price)),
            // Not asked for: a run's turns are whole.
            model_chain::Reply::Stream { .. } => Err(End::ModelFailed(
                Category::Unknown,
                "a streamed reply where a whole one was asked for".into(),
            )),
        }
    }
}
