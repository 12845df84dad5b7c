//! The chain: which link is asked next after a failure, and which failure
//! is surfaced when every link failed.

use std::collections::VecDeque;

use rein_core::deadline::Budget;
use rein_core::event::{LinkName, ModelFallbackUsed, MovedOn};
use rein_core::{Category, Failure};

use super::{Answered, Chain, LinkRef, Mode, TurnHost};
use crate::provider::ModelRequest;
use crate::run::Engine;
use crate::run::emitter::Correlation;
use crate::run::report::End;

/// How one link ended without an answer.
pub(super) enum LinkEnd {
    /// The turn moves on (a transient failure with a next link ready, or a
    /// context overflow).
    MoveOn(Failure),
    /// The turn ends.
    Stop(End),
}

/// The end of a turn whose every link failed surfaces the first failure,
/// naming every link tried.
fn surface_first(end: End, moved_on: &[(String, String, Failure)], last: LinkRef<'_>) -> End {
    // An overflow that a larger window resolved is not the root cause of
    // what failed after it: the first failure after the last overflow is
    // (or, when none, the end itself).
    let after_overflow = moved_on
        .iter()
        .rposition(|(_, _, f)| f.category() == Category::ContextOverflow)
        .map_or(0, |i| i + 1);
    let first = match moved_on.get(after_overflow) {
        Some((_, _, first)) => first.clone(),
        None if after_overflow == 0 => return end,
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
        // The same prompt goes to every link: estimated once.
        let prompt =
            super::ceiling::prompt_estimate(&base.messages, &base.tools, host.last_input_tokens());
        // Each link that failed, and the failure that moved the turn on.
        let mut moved_on: Vec<(String, String, Failure)> = Vec::new();
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
                Err(LinkEnd::Stop(end)) => return Err(surface_first(end, &moved_on, link)),
                Err(LinkEnd::MoveOn(f)) => f,
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
                Some(next) => link = next,
                None => {
                    return Err(surface_first(
                        End::ModelFailed(category, message),
                        &moved_on,
                        link,
                    ));
                }
            }
        }
    }
}
