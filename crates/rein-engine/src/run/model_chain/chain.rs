//! The chain: which link is asked next after a failure, and which failure
//! is surfaced when every link failed.

use std::collections::VecDeque;

use rein_core::deadline::{Budget, Cost};
use rein_core::event::{
    AbandonReason, LinkName, ModelFallbackUsed, MovedOn, RetryAbandoned, RetryTarget,
};
use rein_core::retry::{GiveUpReason, Worth};
use rein_core::{Category, Failure};

use super::{Answered, Chain, LinkRef, Mode, TurnHost};
use crate::provider::ModelRequest;
use crate::run::Engine;
use crate::run::MIN_OUTPUT_TOKENS;
use crate::run::emitter::Correlation;
use crate::run::report::End;
use crate::run::retry_worth::fallback_not_worth_it;

/// How one link ended without an answer.
pub(super) enum LinkEnd {
    /// The turn moves on (a transient failure with a next link ready, or a
    /// context overflow).
    MoveOn(Failure),
    /// The link's API cannot carry the request (see
    /// [`ModelProvider::carries`](crate::provider::ModelProvider::carries)):
    /// the turn moves on, and the refusal is never what a turn whose later
    /// links failed reports.
    PassOver(Failure),
    /// The turn ends.
    Stop(End),
}

/// The end of a turn whose every link failed surfaces the first failure,
/// naming every link tried.
fn surface_first(
    end: End,
    moved_on: &[(String, String, Failure)],
    passed_over: &[usize],
    last: LinkRef<'_>,
) -> End {
    // An overflow that a larger window resolved is not the root cause of
    // what failed after it: the first failure after the last overflow is
    // (or, when none, the end itself). Nor is a link that could not carry
    // the request when a later one tried and failed.
    let after_overflow = moved_on
        .iter()
        .rposition(|(_, _, f)| f.category() == Category::ContextOverflow)
        .map_or(0, |i| i + 1);
    let first_tried = (after_overflow..moved_on.len()).find(|i| !passed_over.contains(i));
    let first = match first_tried.and_then(|i| moved_on.get(i)) {
        Some((_, _, first)) => first.clone(),
        None if after_overflow == 0 && passed_over.is_empty() => return end,
        None => match &end {
            End::ModelFailed(category, message) => {
                Failure::new(last.provider.name(), *category).with_human_message(message.clone())
            }
            _ => return end,
        },
    };
    match end {
        End::ModelFailed(..) => {
            let mut tried: Vec<String> = moved_on
                .iter()
                .map(|(p, m, _)| format!("{p}/{m}"))
                .collect();
            let last = format!("{}/{}", last.provider.name(), last.model);
            if !tried.contains(&last) {
                tried.push(last);
            }
            End::ModelFailed(
                first.category(),
                format!(
                    "{} (every link failed; tried {})",
                    first.human_message(),
                    tried.join(", ")
                ),
            )
        }
        other => other,
    }
}

impl Engine {
    /// The worth of trying `next` as a fallback with a prompt of at most
    /// `prompt` tokens: the host's value of success × the arm's measured
    /// success rate as a fallback, against the most it may spend at its
    /// price (the prompt and its output cap, a minimal answer's worth
    /// without one) and its median's share of what is left. `None` when
    /// the host has no value of success.
    fn weigh_fallback(
        &self,
        host: &dyn TurnHost,
        next: LinkRef<'_>,
        prompt: u64,
        budget: &Budget,
    ) -> Option<Worth> {
        let value = host.value_of_success()?;
        let (provider, model) = (next.provider.name(), next.model);
        let money = next.price.map_or(Cost::ZERO, |p| {
            p.cost(prompt, next.max_output.map_or(MIN_OUTPUT_TOKENS, u64::from))
        });
        let p50 = self
            .shared
            .latency
            .plan_model(provider, model, host.model_latency())
            .profile
            .p50();
        let remaining = budget.deadline().remaining(self.clock.now());
        self.fallback_worth((provider, model), Some(value), money, (p50, remaining))
    }

    /// Asks one turn along `chain`. `base.model` is replaced by each link's.
    pub(crate) async fn ask_chain(
        &self,
        host: &dyn TurnHost,
        c: &Correlation,
        chain: Chain<'_>,
        base: &ModelRequest,
        budget: &mut Budget,
        mode: Mode,
    ) -> Result<Answered, End> {
        let mut transient: VecDeque<LinkRef<'_>> =
            chain.fallbacks.iter().map(LinkRef::from).collect();
        let mut context: VecDeque<LinkRef<'_>> = chain.context.iter().map(LinkRef::from).collect();
        let mut link = chain.primary;
        // What every process learned, before the first bound.
        self.load_learned().await;
        // The same prompt goes to every link: estimated once, by the
        // tokenizer or the most cautious ratio of the chain's models.
        let links = || {
            std::iter::once(chain.primary)
                .chain(chain.fallbacks.iter().map(LinkRef::from))
                .chain(chain.context.iter().map(LinkRef::from))
        };
        self.shared.token_ratios.request(links().map(|l| l.model));
        let meter = self
            .shared
            .token_ratios
            .meter_of(links().map(|l| (l.provider.name(), l.model)));
        let prompt = super::ceiling::prompt_estimate(
            &base.messages,
            &base.tools,
            host.last_input_tokens(),
            &meter,
        );
        // Sabotage hook `undersized_prompt_bound`: the bound is a quarter
        // of what it is, below what the provider counts.
        #[cfg(feature = "sabotage")]
        let prompt = if self.sabotage.undersized_prompt_bound {
            prompt / 4
        } else {
            prompt
        };
        // Each link that failed, and the failure that moved the turn on.
        let mut moved_on: Vec<(String, String, Failure)> = Vec::new();
        // Which of them were passed over, unasked ([`LinkEnd::PassOver`]).
        let mut passed_over: Vec<usize> = Vec::new();
        // The worth of the link being tried, when it is a fallback.
        let mut tried_worth: Option<Worth> = None;
        loop {
            let request = ModelRequest {
                model: link.model.to_owned(),
                ..base.clone()
            };
            let outcome = self
                .call_link(
                    host,
                    c,
                    link,
                    (&request, prompt),
                    budget,
                    transient.len(),
                    mode,
                )
                .await;
            if !moved_on.is_empty() {
                let answered = outcome.is_ok();
                let counted = answered
                    || matches!(
                        outcome,
                        Err(LinkEnd::MoveOn(_) | LinkEnd::Stop(End::ModelFailed(..)))
                    );
                if counted {
                    self.record_fallback(link.provider.name(), link.model, answered);
                }
            }
            let failure = match outcome {
                Ok((reply, reservation)) => {
                    if !moved_on.is_empty() {
                        host.emitter().emit(
                            c,
                            ModelFallbackUsed {
                                primary: LinkName {
                                    provider: chain.primary.provider.name().to_owned(),
                                    model: chain.primary.model.to_owned(),
                                },
                                answered: LinkName {
                                    provider: link.provider.name().to_owned(),
                                    model: link.model.to_owned(),
                                },
                                after: moved_on
                                    .iter()
                                    .map(|(p, m, f)| MovedOn {
                                        provider: p.to_string(),
                                        model: m.to_string(),
                                        category: f.category(),
                                        reason: f.human_message().to_owned(),
                                    })
                                    .collect(),
                                worth: tried_worth,
                            },
                        );
                    }
                    return Ok(Answered {
                        reply,
                        reservation,
                        price: link.price,
                        provider: link.provider.name().to_owned(),
                        model: link.model.to_owned(),
                        fell_back: !moved_on.is_empty(),
                    });
                }
                Err(LinkEnd::Stop(end)) => {
                    return Err(surface_first(end, &moved_on, &passed_over, link));
                }
                Err(LinkEnd::MoveOn(f)) => f,
                Err(LinkEnd::PassOver(f)) => {
                    passed_over.push(moved_on.len());
                    f
                }
            };
            let overflow = failure.category() == Category::ContextOverflow;
            let (category, message) = (failure.category(), failure.human_message().to_owned());
            moved_on.push((
                link.provider.name().to_owned(),
                link.model.to_owned(),
                failure,
            ));
            let next = if overflow {
                // A larger window, never the same model again; its own
                // transient failures are retried, not chained further.
                transient.clear();
                context.pop_front()
            } else {
                transient.pop_front()
            };
            match next {
                Some(next) => {
                    let worth = self.weigh_fallback(host, next, prompt, budget);
                    if let Some(worth) = worth.filter(|w| !w.worth_it()) {
                        let (p, m) = (next.provider.name(), next.model);
                        host.emitter().emit(
                            c,
                            RetryAbandoned {
                                target: RetryTarget::Provider(p.to_owned()),
                                attempts: u32::try_from(moved_on.len()).unwrap_or(u32::MAX),
                                reason: AbandonReason::GaveUp(GiveUpReason::NotWorthItsCost {
                                    worth,
                                }),
                                detail: Some(fallback_not_worth_it(p, m, &worth)),
                                category,
                            },
                        );
                        let end = surface_first(
                            End::ModelFailed(category, message),
                            &moved_on,
                            &passed_over,
                            link,
                        );
                        return Err(match end {
                            End::ModelFailed(category, message) => End::ModelFailed(
                                category,
                                format!("{message}; {}", fallback_not_worth_it(p, m, &worth)),
                            ),
                            other => other,
                        });
                    }
                    tried_worth = worth;
                    link = next;
                }
                None => {
                    return Err(surface_first(
                        End::ModelFailed(category, message),
                        &moved_on,
                        &passed_over,
                        link,
                    ));
                }
            }
        }
    }
}
