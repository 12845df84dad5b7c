//! A stream cut after its first token, finished without the caller
//! noticing anything but an event and a mark on the stream's last event.
//!
//! # Why
//!
//! The chain commits to a link at its first event: from then on the caller
//! holds text, and a failure used to end the stream with an in-band error
//! (a cut, a stall, a malformed event, a body without its terminator). A
//! caller that streams a long answer loses all of it to one dropped
//! connection. So [`recovering`] watches the stream, and when it fails
//! after text, [`Engine::continue_answer`] asks the binding for the rest:
//!
//! 1. **Continued**: the request again with the text sent as an assistant
//!    prefix ([`ModelRequest::continuation`]), streamed; links that do not
//!    continue a prefix are passed over ([`ModelProvider::carries`]). The
//!    model writes only what extends the text, which is forwarded.
//! 2. **Regenerated**: when no link continues one, the request again,
//!    whole and not streamed; only an answer that begins with exactly the
//!    text sent is used, and only its rest is forwarded.
//! 3. Otherwise the stream ends with its error, as before.
//!
//! Tool-call deltas are never spliced: a stream that had sent a fragment
//! of a tool call ends with its error (its arguments cannot be continued
//! safely). Every attempt is a `stream_recovered` event; a recovered
//! stream carries one [`StreamEvent::Recovered`] per recovery, before the
//! rest, so a wire marks its last event.
//!
//! # What is charged
//!
//! Each attempt is a model call of its own, charged and counted like any
//! (the cut one with what it consumed). The final turn's usage is the
//! answering call's: its prompt includes the prefix, its output only what
//! it wrote.
//!
//! [`ModelProvider::carries`]: crate::provider::ModelProvider::carries

use std::future::Future;
use std::pin::Pin;

use futures_util::StreamExt;
use rein_core::event::{LinkName, Recovery, StreamRecovered};
use rein_core::{Category, Effect, Failure};

use super::{Mode, ModelAnswer, ModelAsk, ModelBinding, ModelError, ModelReply};
use crate::provider::{
    BYTES_PER_TOKEN_ESTIMATE, Message, ModelRequest, ModelResponse, StreamEvent, TurnStream,
    ready_turn,
};
use crate::run::Engine;
use crate::run::emitter::{Correlation, Emitter};

/// The most recoveries of one stream: a link that cuts every stream it
/// starts should not hold the caller for the whole deadline.
pub const MAX_STREAM_RECOVERIES: u32 = 2;

/// A stream cut after its first token: what the caller already has.
#[derive(Debug, Clone)]
pub struct Cut {
    /// The text forwarded so far, in full.
    pub sent: String,
    /// Why the stream failed.
    pub failure: Failure,
    /// The link whose stream it was.
    pub link: LinkName,
}

/// The rest of a cut answer.
pub struct Resumed {
    /// What extends the text sent, ending in the answering call's turn.
    pub rest: TurnStream,
    /// The link that wrote it.
    pub link: LinkName,
    /// The recovery, as its event said it.
    pub event: StreamRecovered,
}

/// Asks for the rest of a cut answer ([`Engine::continue_answer`], with
/// what is left of the caller's deadline); `Err` carries the
/// `stream_recovered` event of the failed attempt's reason.
pub type Resume =
    Box<dyn FnMut(Cut) -> Pin<Box<dyn Future<Output = Result<Resumed, ModelError>> + Send>> + Send>;

/// `turn`, answered by `link`, recovered through `resume` when it fails
/// after text (see the module's documentation).
pub fn recovering(turn: TurnStream, link: LinkName, resume: Resume) -> TurnStream {
    let splice = Splice {
        turn,
        resume,
        link,
        sent: String::new(),
        tools: false,
        recovered: 0,
        done: false,
    };
    Box::pin(futures_util::stream::unfold(splice, Splice::next))
}

/// The state of a stream being recovered.
struct Splice {
    turn: TurnStream,
    resume: Resume,
    /// The link whose stream is being read.
    link: LinkName,
    /// The text forwarded so far.
    sent: String,
    /// Whether a tool-call fragment was forwarded.
    tools: bool,
    recovered: u32,
    done: bool,
}

type Item = Result<StreamEvent, Failure>;

impl Splice {
    async fn next(mut self) -> Option<(Item, Splice)> {
        while !self.done {
            let item = self.turn.next().await?;
            match item {
                Ok(StreamEvent::Delta(delta)) => {
                    self.tools |= !delta.tool_calls.is_empty();
                    if let Some(text) = &delta.text {
                        self.sent.push_str(text);
                    }
                    return Some((Ok(StreamEvent::Delta(delta)), self));
                }
                // A continuation's count of its prompt is not the caller's.
                Ok(StreamEvent::PromptTokens(_)) if self.recovered > 0 => {}
                Ok(StreamEvent::Done(mut response)) => {
                    self.done = true;
                    if self.recovered > 0 {
                        response.text = (!self.sent.is_empty()).then(|| self.sent.clone());
                    }
                    return Some((Ok(StreamEvent::Done(response)), self));
                }
                Ok(other) => return Some((Ok(other), self)),
                Err(failure) if self.recoverable(&failure) => {
                    let cut = Cut {
                        sent: self.sent.clone(),
                        failure: failure.clone(),
                        link: self.link.clone(),
                    };
                    match (self.resume)(cut).await {
                        Ok(resumed) => {
                            self.recovered += 1;
                            self.turn = resumed.rest;
                            self.link = resumed.link;
                            return Some((Ok(StreamEvent::Recovered(resumed.event)), self));
                        }
                        Err(e) => {
                            self.done = true;
                            let message = format!(
                                "{}; recovering it failed: {}",
                                failure.human_message(),
                                e.message
                            );
                            return Some((Err(failure.with_human_message(message)), self));
                        }
                    }
                }
                Err(failure) => {
                    self.done = true;
                    return Some((Err(failure), self));
                }
            }
        }
        None
    }

    /// Whether a failure of the stream is worth recovering: text was sent,
    /// no tool-call fragment was, and the failure is the transport's or
    /// the provider's passing state (never a refusal, a filter or a
    /// cancellation), and the answer did not arrive whole (a whole answer
    /// refused for its format is the model's doing: continuing it would
    /// only extend the prose).
    fn recoverable(&self, failure: &Failure) -> bool {
        !self.tools
            && !self.sent.is_empty()
            && self.recovered < MAX_STREAM_RECOVERIES
            && failure.effect() != Effect::Applied
            && matches!(
                failure.category(),
                Category::Transient
                    | Category::Timeout
                    | Category::Overloaded
                    | Category::RateLimited
                    | Category::Unknown
            )
    }
}

/// The request that asks `request`'s model to extend `prefix` (the text
/// sent, its trailing whitespace left out: the Messages API refuses a
/// prefill that ends in it, and chat templates tokenize it badly).
fn continuation(request: &ModelRequest, prefix: &str) -> ModelRequest {
    let mut next = request.clone();
    next.messages.push(Message::Assistant {
        content: Some(prefix.to_owned()),
        tool_calls: Vec::new(),
    });
    next.continuation = true;
    // What the caller's ceiling leaves after the text sent (a rough count,
    // one token per BYTES_PER_TOKEN_ESTIMATE bytes).
    next.max_tokens = next.max_tokens.map(|max| {
        max.saturating_sub((prefix.len() as u64) / BYTES_PER_TOKEN_ESTIMATE)
            .max(1)
    });
    next
}

/// The rest of a regenerated answer: what follows `sent`, when the answer
/// begins with it.
fn rest_of(mut response: ModelResponse, sent: &str) -> Option<ModelResponse> {
    let text = response.text.take().unwrap_or_default();
    let rest = text.strip_prefix(sent)?;
    response.text = (!rest.is_empty()).then(|| rest.to_owned());
    Some(response)
}

/// `turn` without the leading whitespace of its text: the caller already
/// has the whitespace a trimmed prefix left out.
fn without_leading_space(turn: TurnStream) -> TurnStream {
    Box::pin(turn.scan(true, |leading, item| {
        let item = match item {
            Ok(StreamEvent::Delta(mut delta)) if *leading => {
                if let Some(text) = delta.text.take() {
                    let trimmed = text.trim_start();
                    *leading = trimmed.is_empty();
                    delta.text = (!trimmed.is_empty()).then(|| trimmed.to_owned());
                }
                *leading &= delta.tool_calls.is_empty();
                Ok(StreamEvent::Delta(delta))
            }
            other => other,
        };
        std::future::ready(Some(item))
    }))
}

impl Engine {
    /// The rest of an answer `binding` was streaming when it was `cut`
    /// after its first token: continued on a link that continues an
    /// assistant prefix, else regenerated whole and used only when it
    /// begins with the text sent ([`recovering`]). `ask` is the original
    /// request with what is left of the caller's deadline. Emits one
    /// `stream_recovered` event either way.
    ///
    /// # Errors
    ///
    /// [`ModelError`] when neither worked; its message says why.
    pub async fn continue_answer(
        &self,
        binding: &ModelBinding,
        ask: ModelAsk,
        cut: &Cut,
    ) -> Result<Resumed, ModelError> {
        let tenant = ask
            .tenant
            .as_ref()
            .map_or(crate::metrics::NONE, rein_core::TenantId::as_str);
        let emitter = Emitter::new(
            crate::run::new_id::<rein_core::RunId>(),
            self.clock.clone(),
            ask.observer.clone(),
        )
        .with_metrics(
            self.shared.metrics.clone(),
            self.shared.metrics.scope(tenant, crate::metrics::NONE),
        )
        .without_run_in_logs();
        let outcome = self.resume_cut(binding, ask, cut).await;
        let event = StreamRecovered {
            cut: cut.link.clone(),
            category: cut.failure.category(),
            reason: cut.failure.human_message().to_owned(),
            sent_chars: cut.sent.chars().count() as u64,
            recovery: match &outcome {
                Ok((recovery, _)) => *recovery,
                Err(_) => Recovery::Failed,
            },
            answered: outcome.as_ref().ok().map(|(_, a)| LinkName {
                provider: a.provider.clone(),
                model: a.model.clone(),
            }),
            failure: outcome.as_ref().err().map(|e| e.message.clone()),
        };
        emitter.emit(&Correlation::default(), event.clone());
        drop(emitter.drain());
        let (_, answer) = outcome?;
        let link = LinkName {
            provider: answer.provider,
            model: answer.model,
        };
        let rest = match answer.reply {
            ModelReply::Stream(rest) => rest,
            ModelReply::Complete(response) => ready_turn(response),
            ModelReply::Embedded(_) => {
                return Err(ModelError {
                    category: Category::Unknown,
                    message: "embeddings where the rest of an answer was asked for".to_owned(),
                    retry_after: None,
                });
            }
        };
        Ok(Resumed { rest, link, event })
    }

    /// Asks for the rest of `cut`: continued, else regenerated.
    async fn resume_cut(
        &self,
        binding: &ModelBinding,
        ask: ModelAsk,
        cut: &Cut,
    ) -> Result<(Recovery, ModelAnswer), ModelError> {
        let prefix = cut.sent.trim_end();
        if !prefix.is_empty() {
            let continued = ModelAsk {
                request: continuation(&ask.request, prefix),
                deadline: ask.deadline,
                stream: true,
                cancel: ask.cancel.clone(),
                observer: ask.observer.clone(),
                tenant: ask.tenant.clone(),
                trace_parent: ask.trace_parent.clone(),
            };
            match self
                .ask_binding(binding, continued, Mode::Stream(binding.stream))
                .await
            {
                Ok(mut answer) => {
                    if prefix.len() < cut.sent.len()
                        && let ModelReply::Stream(rest) = answer.reply
                    {
                        answer.reply = ModelReply::Stream(without_leading_space(rest));
                    }
                    return Ok((Recovery::Continued, answer));
                }
                // No link continues a prefix: regenerate.
                Err(e) if e.category == Category::InvalidArguments => {}
                Err(e) => return Err(e),
            }
        }
        let mut regenerated = self.ask_binding(binding, ask, Mode::Complete).await?;
        let ModelReply::Complete(response) = regenerated.reply else {
            return Err(ModelError {
                category: Category::Unknown,
                message: "a stream where a whole answer was asked for".to_owned(),
                retry_after: None,
            });
        };
        let Some(rest) = rest_of(response, &cut.sent) else {
            return Err(ModelError {
                category: Category::Unknown,
                message: format!(
                    "no link continues an assistant prefix, and the regenerated answer \
                     ({}/{}) does not begin with the {} already sent",
                    regenerated.provider,
                    regenerated.model,
                    rein_core::plural::count(cut.sent.chars().count(), "character")
                ),
                retry_after: None,
            });
        };
        regenerated.reply = ModelReply::Complete(rest);
        Ok((Recovery::Regenerated, regenerated))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::provider::{Delta, FinishReason, TokenUsage};

    fn delta(text: &str) -> Item {
        Ok(StreamEvent::Delta(Delta {
            text: Some(text.to_owned()),
            tool_calls: Vec::new(),
        }))
    }

    fn done(text: &str) -> Item {
        Ok(StreamEvent::Done(ModelResponse {
            text: Some(text.to_owned()),
            tool_calls: Vec::new(),
            finish: FinishReason::Stop,
            stop_sequence: None,
            usage: TokenUsage::default(),
        }))
    }

    fn cut() -> Item {
        Err(Failure::new("primary", Category::Transient).with_human_message("cut"))
    }

    fn link(provider: &str) -> LinkName {
        LinkName {
            provider: provider.to_owned(),
            model: "m".to_owned(),
        }
    }

    fn stream(items: Vec<Item>) -> TurnStream {
        Box::pin(futures_util::stream::iter(items))
    }

    /// Resumes with `rests` in order, recording each cut's text sent.
    fn resume(
        rests: Vec<Vec<Item>>,
        seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    ) -> Resume {
        let mut rests = rests.into_iter();
        Box::new(move |cut: Cut| {
            seen.lock().unwrap().push(cut.sent.clone());
            let next = rests.next();
            Box::pin(async move {
                let rest = next.ok_or(ModelError {
                    category: Category::Transient,
                    message: "no link answered".to_owned(),
                    retry_after: None,
                })?;
                Ok(Resumed {
                    rest: stream(rest),
                    link: link("backup"),
                    event: StreamRecovered {
                        cut: cut.link,
                        category: cut.failure.category(),
                        reason: cut.failure.human_message().to_owned(),
                        sent_chars: cut.sent.len() as u64,
                        recovery: Recovery::Continued,
                        answered: Some(link("backup")),
                        failure: None,
                    },
                })
            })
        })
    }

    async fn run(first: Vec<Item>, rests: Vec<Vec<Item>>) -> (Vec<Item>, Vec<String>) {
        let seen = std::sync::Arc::default();
        let items = recovering(
            stream(first),
            link("primary"),
            resume(rests, std::sync::Arc::clone(&seen)),
        )
        .collect()
        .await;
        let seen = seen.lock().unwrap().clone();
        (items, seen)
    }

    fn text_of(items: &[Item]) -> String {
        items
            .iter()
            .filter_map(|i| match i {
                Ok(StreamEvent::Delta(d)) => d.text.clone(),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn a_cut_after_text_is_continued_and_the_last_turn_is_whole() {
        let (items, seen) = run(
            vec![delta("The quick "), delta("brown"), cut()],
            vec![vec![delta(" fox"), done(" fox")]],
        )
        .await;
        assert_eq!(seen, ["The quick brown"]);
        assert_eq!(text_of(&items), "The quick brown fox");
        assert!(matches!(items[2], Ok(StreamEvent::Recovered(_))));
        let Some(Ok(StreamEvent::Done(last))) = items.last() else {
            panic!("{items:?}")
        };
        assert_eq!(last.text.as_deref(), Some("The quick brown fox"));
    }

    #[tokio::test]
    async fn a_continuation_cut_again_is_recovered_again_up_to_the_limit() {
        let (items, seen) = run(
            vec![delta("a"), cut()],
            vec![
                vec![delta("b"), cut()],
                vec![delta("c"), cut()],
                vec![done("never")],
            ],
        )
        .await;
        assert_eq!(seen, ["a", "ab"], "at most {MAX_STREAM_RECOVERIES}");
        assert!(matches!(items.last(), Some(Err(_))), "{items:?}");
    }

    #[tokio::test]
    async fn nothing_sent_a_tool_call_sent_a_refusal_or_a_whole_answer_is_not_recovered() {
        let (items, seen) = run(vec![cut()], vec![vec![done("x")]]).await;
        assert!(seen.is_empty() && matches!(items[..], [Err(_)]));

        let call = Ok(StreamEvent::Delta(Delta {
            text: None,
            tool_calls: vec![crate::provider::ToolCallDelta {
                index: 0,
                id: Some("c".into()),
                name: Some("send".into()),
                arguments: "{\"to\":".into(),
            }],
        }));
        let (items, seen) = run(vec![delta("x"), call, cut()], vec![vec![done("x")]]).await;
        assert!(seen.is_empty(), "a tool call is never spliced");
        assert!(matches!(items.last(), Some(Err(_))));

        let filtered = Err(Failure::new("primary", Category::ContentBlocked));
        let (_, seen) = run(vec![delta("x"), filtered], vec![vec![done("x")]]).await;
        assert!(seen.is_empty());

        // A whole answer refused for its format (answer_format's failure).
        let misformatted = Err(Failure::new("primary", Category::Transient)
            .with_retryable(false)
            .with_effect(Effect::Applied));
        let (_, seen) = run(vec![delta("x"), misformatted], vec![vec![done("x")]]).await;
        assert!(seen.is_empty(), "a whole answer is not continued");
    }

    #[tokio::test]
    async fn a_failed_recovery_ends_with_the_cut_and_why() {
        let (items, _) = run(vec![delta("x"), cut()], vec![]).await;
        let Some(Err(f)) = items.last() else {
            panic!("{items:?}")
        };
        assert!(
            f.human_message()
                .contains("recovering it failed: no link answered"),
            "{f:?}"
        );
    }

    #[test]
    fn a_regenerated_answer_is_used_only_when_it_extends_the_text_sent() {
        let response = |text: &str| ModelResponse {
            text: Some(text.to_owned()),
            tool_calls: Vec::new(),
            finish: FinishReason::Stop,
            stop_sequence: None,
            usage: TokenUsage::default(),
        };
        assert_eq!(
            rest_of(response("The quick brown fox"), "The quick ")
                .unwrap()
                .text
                .as_deref(),
            Some("brown fox")
        );
        assert!(rest_of(response("A slow fox"), "The quick ").is_none());
    }

    #[test]
    fn a_continuation_asks_to_extend_the_trimmed_prefix_within_the_ceiling() {
        let request = ModelRequest {
            model: "m".into(),
            messages: vec![Message::user("go")],
            tools: Vec::new(),
            max_tokens: Some(100),
            options: Default::default(),
            continuation: false,
        };
        let next = continuation(&request, "forty bytes of text, more or less ....");
        assert!(next.continuation);
        assert_eq!(
            next.prefix(),
            Some("forty bytes of text, more or less ....")
        );
        assert_eq!(next.max_tokens, Some(91));
    }

    #[tokio::test]
    async fn the_whitespace_a_trimmed_prefix_left_out_is_not_sent_twice() {
        let items: Vec<Item> =
            without_leading_space(stream(vec![delta(" "), delta("\n fox"), done("fox")]))
                .collect()
                .await;
        assert_eq!(text_of(&items), "fox");
    }
}
