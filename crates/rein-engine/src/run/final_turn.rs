//! The planner's view of its budget, and the last minimal-output turn
//! (issue 16, item 5; the pure parts are [`rein_core::budget_view`]).
//!
//! Before every fresh turn the step asks [`Engine::next_turn`], which
//!
//! 1. tells the model what is left (`[agents.NAME.planner] show_budget`):
//!    one user message at the end of the request, never kept in the
//!    transcript, so it is always the current remainder and the prompt
//!    estimate counts it as an addition;
//! 2. decides whether the budget is short ([`shortfall`]): what is left
//!    cannot cover the turn, the fastest tool's round trip and the turn
//!    that reads its result, at the observed or declared medians; or
//!    tokens (cost) for two calls of the prompt with tools;
//! 3. if so (`final_turn`), asks once more with **no tools offered**, the
//!    instruction to answer from what is known, and `max_tokens` limited
//!    by the same ceiling every call gets ([`ceiling`]): the reservation
//!    rules hold, the last turn never overshoots. `final_turn_requested`
//!    records why. The step then ends the run with
//!    [`End::FinalTurn`]: `budget_exhausted`, the answer attached.

use rein_core::Clock;
use rein_core::budget_view::{BudgetView, FINAL_TURN_INSTRUCTION, TurnNeeds, shortfall};
use rein_core::deadline::{Dimension, Exhausted};
use rein_core::event::FinalTurnRequested;

use crate::provider::{FinishReason, Message};

use super::End;
use super::ctx::RunCtx;
use super::emitter::Correlation;
use super::engine::Engine;
use super::model_chain::TurnHost;
use super::model_chain::ceiling::{PromptMeter, ceiling, prompt_estimate};
use super::step::{LoopState, Turn};
use super::turn::Answer;

/// A fresh turn's answer, and whether it was the last minimal-output one.
pub(super) struct Asked {
    pub(super) answer: Answer,
    /// Why the budget was short, when this was the last turn.
    pub(super) last: Option<Exhausted>,
}

impl Engine {
    /// How the prompt of the agent's turn is bounded: by the tokenizer or
    /// the most cautious ratio of its chain's models, as the chain takes it.
    fn primary_meter(&self, ctx: &RunCtx<'_>) -> PromptMeter {
        let agent = ctx.agent;
        let links = || {
            std::iter::once((agent.provider.name(), agent.model.as_str())).chain(
                agent
                    .fallbacks
                    .iter()
                    .chain(&agent.context_fallbacks)
                    .map(|l| (l.provider.name(), l.model.as_str())),
            )
        };
        let ratios = &self.shared.token_ratios;
        ratios.request(links().map(|(_, m)| m));
        ratios.meter_of(links())
    }

    /// Asks the next turn as the agent's planner settings and what is left
    /// say: with the budget note, and without tools when the budget is
    /// too short for another tool round trip.
    pub(super) async fn next_turn(
        &self,
        ctx: &RunCtx<'_>,
        state: &mut LoopState,
    ) -> Result<Asked, End> {
        let agent = ctx.agent;
        // The stored latency, before the model's profile is read.
        self.load_learned().await;
        let now = self.clock.now();
        let left = state.budget.remaining(now);
        let note = BudgetView::new(left).note();
        let tools = self.tools_with_health(agent).await;
        let mut messages = state.messages.clone();
        if agent.planner.show_budget {
            messages.push(Message::user(note.clone()));
        }
        let short = if agent.planner.final_turn && !tools.is_empty() {
            let needs = TurnNeeds {
                // The primary's observed latency once trusted.
                model_p50: self
                    .shared
                    .latency
                    .plan_model(agent.provider.name(), &agent.model, agent.model_latency)
                    .profile
                    .p50(),
                fastest_tool_p50: agent
                    .tools
                    .values()
                    .map(|t| self.shared.latency.plan(t, None).profile.p50())
                    .min(),
                prompt_tokens: prompt_estimate(
                    &messages,
                    &tools,
                    ctx.last_input_tokens(),
                    &self.primary_meter(ctx),
                ),
                price: agent.price,
            };
            shortfall(&needs, &left)
        } else {
            None
        };
        let Some(short) = short else {
            let answer = self
                .model_turn(ctx, &messages, tools, &mut state.budget, state.step)
                .await?;
            return Ok(Asked { answer, last: None });
        };
        // The last turn: the instruction joins the note (one message, so a
        // provider that wants alternating roles gets one user turn).
        let instruction = if agent.planner.show_budget {
            messages.pop();
            format!("{note}\n{FINAL_TURN_INSTRUCTION}")
        } else {
            FINAL_TURN_INSTRUCTION.to_owned()
        };
        messages.push(Message::user(instruction));
        // What the primary's call will be allowed: the same ceiling the
        // chain computes for it (the event says what the model was given).
        let prompt = prompt_estimate(
            &messages,
            &[],
            ctx.last_input_tokens(),
            &self.primary_meter(ctx),
        );
        let max_tokens = ceiling(
            &state.budget,
            now,
            prompt,
            agent.max_output_tokens,
            agent.price,
            None,
        )
        .ok()
        .and_then(|c| c.max_tokens);
        ctx.emitter.emit(
            &Correlation {
                step: state.step,
                ..Correlation::default()
            },
            FinalTurnRequested {
                short,
                reason: reason(&short),
                note,
                max_tokens,
            },
        );
        let answer = self
            .model_turn(ctx, &messages, Vec::new(), &mut state.budget, state.step)
            .await?;
        Ok(Asked {
            answer,
            last: Some(short),
        })
    }
}

/// Why the budget is short, for a human.
fn reason(short: &Exhausted) -> String {
    let what = match short.dimension {
        Dimension::WallClock => "time (ms)",
        Dimension::Tokens => "tokens",
        Dimension::Cost => "money (µ$)",
        Dimension::Steps => "steps",
    };
    format!(
        "too little {what} left for another tool round trip and the turn that reads its result: needs {}, {} remain",
        short.needed, short.remaining
    )
}

/// How the run ends after the last turn, given how the turn itself ended
/// (`handled`, from `handle_turn`): with the model's answer as
/// [`End::FinalTurn`], whatever it proposed (no tool runs after it) —
/// unless a content filter stopped it, or its usage broke a ceiling (the
/// reservation makes that impossible with an honest provider; it is said
/// as it is if it happens).
pub(super) fn after_last_turn(short: Exhausted, turn: &Turn, handled: Option<End>) -> End {
    let response = &turn.response;
    match handled {
        Some(end @ End::ModelFailed(..)) if response.finish == FinishReason::ContentFilter => end,
        Some(end @ End::Budget(_)) if response.finish != FinishReason::Length => end,
        _ => End::FinalTurn {
            short,
            answer: response.text.clone(),
        },
    }
}
