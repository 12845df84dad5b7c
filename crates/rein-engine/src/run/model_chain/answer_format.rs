//! A caller's `response_format`, checked where a link's answer is
//! received (issue 36).
//!
//! # Why here
//!
//! Every link of a chain answers the same request, but not every provider
//! honours `response_format` alike: an OpenAI model keeps to the schema,
//! an Anthropic one answers through a forced tool, an OpenAI-compatible
//! server may ignore the member and write prose. The chain is the one
//! place every answer passes, whichever link gave it and whichever wire
//! format the caller speaks, so the answer is checked here
//! ([`ResponseFormat::check`]) before it is passed on.
//!
//! # What a misformatted answer is
//!
//! A failure of the link that gave it, category `transient` and not
//! retryable: the next link is tried when there is one (another provider
//! is likelier to keep to the format than the same model asked again),
//! else the turn fails (the gateway's 502, naming the problem) instead of
//! answering prose with a 200. The provider did answer, so its breaker arm
//! counts a success and its tokens are charged.
//!
//! A stream is committed to its link at its first event, so a streamed
//! answer is checked when it ends: a misformatted one ends with this
//! failure in place of its last item, which the gateway sends as the wire
//! format's in-band error with no terminator, so the client raises instead
//! of taking the text for its answer.

use futures_util::StreamExt;
use rein_core::{Category, Effect, Failure};

use super::Reply;
use crate::provider::{FormatError, ModelRequest, ResponseFormat, StreamEvent, TokenUsage};

/// The format `request`'s answer must have: `None` unless it asks for
/// JSON. A `response_format` rein cannot read is the providers' to refuse
/// (the Anthropic provider does; an OpenAI-compatible server answers its
/// own 400), not checked here.
pub(super) fn expected(request: &ModelRequest) -> Option<ResponseFormat> {
    ResponseFormat::of(&request.options)
        .ok()
        .flatten()
        .filter(ResponseFormat::wants_json)
}

/// The failure of `provider`'s `model` for an answer that is not in the
/// format asked for.
fn misformatted(provider: &str, model: &str, error: &FormatError) -> Failure {
    Failure::new(provider, Category::Transient)
        .with_retryable(false)
        .with_effect(Effect::Applied)
        .with_human_message(format!(
            "{provider}/{model} answered, but not in the format asked for: {error}; \
             the answer is not passed on"
        ))
}

/// A whole answer not in the format asked for.
#[derive(Debug)]
pub(super) struct Misformatted {
    /// The link's failure.
    pub(super) failure: Failure,
    /// What the answer consumed, to be settled.
    pub(super) usage: TokenUsage,
}

/// `reply` when it has the `format` asked for (a stream: checked as it
/// ends); else the failure, with what the answer consumed.
pub(super) fn check(
    format: Option<&ResponseFormat>,
    (provider, model): (&str, &str),
    reply: Reply,
) -> Result<Reply, Box<Misformatted>> {
    let Some(format) = format else {
        return Ok(reply);
    };
    let whole = |response: &crate::provider::ModelResponse| {
        format.check(response).map_err(|e| {
            Box::new(Misformatted {
                failure: misformatted(provider, model, &e),
                usage: response.usage,
            })
        })
    };
    match reply {
        Reply::Complete(response) => {
            whole(&response)?;
            Ok(Reply::Complete(response))
        }
        Reply::Embedded(embeddings) => Ok(Reply::Embedded(embeddings)),
        Reply::Stream {
            first: StreamEvent::Done(response),
            rest,
        } => {
            whole(&response)?;
            Ok(Reply::Stream {
                first: StreamEvent::Done(response),
                rest,
            })
        }
        Reply::Stream { first, rest } => {
            let format = format.clone();
            let (provider, model) = (provider.to_owned(), model.to_owned());
            let rest = rest.map(move |item| match item {
                Ok(StreamEvent::Done(response)) => match format.check(&response) {
                    Ok(()) => Ok(StreamEvent::Done(response)),
                    Err(e) => Err(misformatted(&provider, &model, &e)
                        .with_tokens_spent(response.usage.total())),
                },
                other => other,
            });
            Ok(Reply::Stream {
                first,
                rest: Box::pin(rest),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::provider::{Delta, FinishReason, ModelResponse, collect_turn, ready_turn};

    fn request(format: serde_json::Value) -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            messages: Vec::new(),
            tools: Vec::new(),
            max_tokens: None,
            options: [("response_format".to_owned(), format)]
                .into_iter()
                .collect(),
            continuation: false,
        }
    }

    fn answer(text: &str) -> ModelResponse {
        ModelResponse {
            text: Some(text.to_owned()),
            tool_calls: Vec::new(),
            finish: FinishReason::Stop,
            stop_sequence: None,
            usage: TokenUsage {
                input: 10,
                output: 5,
            },
        }
    }

    #[test]
    fn only_a_json_format_is_expected() {
        assert!(expected(&request(json!({"type": "json_object"}))).is_some());
        assert!(expected(&request(json!({"type": "text"}))).is_none());
        assert!(expected(&request(json!({"type": "grammar"}))).is_none());
        assert!(expected(&request(json!({"nope": 1}))).is_none());
    }

    #[tokio::test]
    async fn prose_fails_the_link_whole_or_at_the_end_of_its_stream() {
        let format = expected(&request(json!({"type": "json_object"})));
        let link = ("openai", "gpt-x");
        let Err(misformatted) = check(
            format.as_ref(),
            link,
            Reply::Complete(answer("Sure, here it is.")),
        ) else {
            panic!("prose passed");
        };
        let (failure, usage) = (misformatted.failure, misformatted.usage);
        assert_eq!(failure.category(), Category::Transient);
        assert!(!failure.retryable());
        assert!(
            failure.human_message().contains("openai/gpt-x"),
            "{}",
            failure.human_message()
        );
        assert_eq!(usage.total(), 15);
        assert!(check(format.as_ref(), link, Reply::Complete(answer("{}"))).is_ok());
        // Streamed: the first event is out; the end is the failure.
        let mut stream = ready_turn(answer("Sure."));
        let first = stream.next().await.unwrap().unwrap();
        assert!(matches!(first, StreamEvent::Delta(Delta { .. })));
        let Ok(Reply::Stream { rest, .. }) = check(
            format.as_ref(),
            link,
            Reply::Stream {
                first,
                rest: stream,
            },
        ) else {
            panic!("a stream is checked as it ends");
        };
        let failure = collect_turn("openai", rest).await.unwrap_err();
        assert_eq!(failure.tokens_spent(), 15);
        assert!(failure.human_message().contains("not JSON"));
    }
}
