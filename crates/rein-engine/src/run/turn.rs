//! One model turn along the agent's model chain.

use rein_core::deadline::Budget;
use rein_core::{Category, Clock};

use crate::provider::{Message, ModelRequest, ModelResponse};

use super::ctx::RunCtx;
use super::emitter::Correlation;
use super::engine::Engine;
use super::{End, model_chain};

/// Output tokens a model call must have room for to be worth making: below
/// this the answer is all but certain to be cut off, so the run ends
/// `budget_exhausted` instead of paying for a truncated turn.
pub const MIN_OUTPUT_TOKENS: u64 = rein_core::budget_view::MIN_ANSWER_TOKENS;

/// A turn's answer: the response, the price of the model that gave it, and
/// what its attempt reserved (settled with the response's usage by the
/// step).
pub(super) struct Answer {
    pub(super) response: ModelResponse,
    pub(super) price: Option<rein_core::registry::Price>,
    pub(super) reservation: model_chain::ceiling::Reservation,
}

impl Engine {
    /// One model turn along the agent's model chain: each link with
    /// classified retries under its provider's concurrency limit and
    /// breaker arm, within the run's deadline; the next link on a transient
    /// failure, a larger-context link on a context overflow.
    pub(super) async fn model_turn(
        &self,
        ctx: &RunCtx<'_>,
        messages: &[Message],
        tools: Vec<serde_json::Value>,
        budget: &mut Budget,
        step: u32,
    ) -> Result<Answer, End> {
        let agent = ctx.agent;
        let c = Correlation {
            step,
            ..Correlation::default()
        };
        // The output ceiling is decided per attempt, by the chain, for the
        // model that will answer it (`model_chain::ceiling`).
        let request = ModelRequest {
            model: agent.model.clone(),
            messages: messages.to_vec(),
            // As `final_turn` offers them: with a note for each tool rein
            // would refuse now (`health`), or none on the last turn.
            tools,
            max_tokens: None,
            options: Default::default(),
            continuation: false,
        };
        let chain = model_chain::Chain {
            primary: model_chain::LinkRef {
                provider: &agent.provider,
                model: &agent.model,
                price: agent.price,
                max_output: agent.max_output_tokens,
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
            model_chain::Reply::Complete(response) => Ok(Answer {
                response,
                price: answered.price,
                reservation: answered.reservation,
            }),
            // Not asked for: a run's turns are whole.
            model_chain::Reply::Stream { .. } | model_chain::Reply::Embedded(_) => {
                // Nothing was charged for it: the turn ends.
                let grant = answered.reservation.grant;
                let _ = budget.settle(grant, Default::default(), self.clock.now());
                Err(End::ModelFailed(
                    Category::Unknown,
                    "a stream or embeddings where a whole turn was asked for".into(),
                ))
            }
        }
    }
}
