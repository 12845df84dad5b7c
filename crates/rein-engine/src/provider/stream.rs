//! Streamed model turns: the provider-neutral events, the limits a stream
//! runs under, and the assembly of fragments into a [`ModelResponse`].

use std::pin::Pin;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use rein_core::registry::{DEFAULT_STREAM_FIRST_BYTE_TIMEOUT, DEFAULT_STREAM_IDLE_TIMEOUT};
use rein_core::{Category, Failure};

use super::{FinishReason, ModelResponse, TokenUsage, ToolCall};

/// Characters per token assumed when a provider reports no usage: a
/// conservative rule of thumb for English and JSON (about 4 bytes per
/// token), used only to charge budgets for calls that failed or streamed
/// without usage.
pub const BYTES_PER_TOKEN_ESTIMATE: u64 = 4;

/// A provider's stream timeouts, as configured.
///
/// | setting | default |
/// | --- | --- |
/// | `first_byte` | [`DEFAULT_STREAM_FIRST_BYTE_TIMEOUT`] (20 s) |
/// | `idle` | [`DEFAULT_STREAM_IDLE_TIMEOUT`] (10 s) |
///
/// NOTE: the registry's `[providers.NAME.stream]` defaults, so that a
/// provider an embedder builds streams like one `rein run` builds.
///
/// # Why two limits
///
/// A model may think for a long time before its first token, but once it
/// streams, a gap of seconds means the stream is dead. One overall timeout
/// long enough for the first case lets a dead stream hold a run (and a
/// concurrency slot) for that whole time; so the first event and the gaps
/// between events have separate limits, and the call's allowance caps both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSettings {
    first_byte: Duration,
    idle: Duration,
}

/// Stream settings that were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamSettingsError {
    /// A limit was zero, which would fail every stream at once.
    #[error("stream {limit} timeout must be greater than zero, but it is {value:?}")]
    Zero {
        /// `first_byte` or `idle`.
        limit: &'static str,
        /// The refused value.
        value: Duration,
    },
}

impl Default for StreamSettings {
    fn default() -> Self {
        StreamSettings {
            first_byte: DEFAULT_STREAM_FIRST_BYTE_TIMEOUT,
            idle: DEFAULT_STREAM_IDLE_TIMEOUT,
        }
    }
}

impl StreamSettings {
    /// Settings with a time-to-first-event limit and an inter-event idle
    /// limit.
    ///
    /// # Errors
    ///
    /// [`StreamSettingsError::Zero`] when either limit is zero.
    pub fn new(first_byte: Duration, idle: Duration) -> Result<Self, StreamSettingsError> {
        for (limit, value) in [("first_byte", first_byte), ("idle", idle)] {
            if value.is_zero() {
                return Err(StreamSettingsError::Zero { limit, value });
            }
        }
        Ok(StreamSettings { first_byte, idle })
    }

    /// The time-to-first-event limit.
    pub fn first_byte(&self) -> Duration {
        self.first_byte
    }

    /// The inter-event idle limit.
    pub fn idle(&self) -> Duration {
        self.idle
    }

    /// The limits of one call with `allowance` left of the run's deadline.
    pub fn limits(&self, allowance: Duration) -> StreamLimits {
        StreamLimits {
            allowance,
            first_byte: self.first_byte,
            idle: self.idle,
        }
    }
}

/// The limits of one streamed call.
///
/// Every limit is capped by `allowance`: a stream that keeps sending events
/// still ends, with a `timeout` failure, when the allowance runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// What is left of the run's deadline for this call.
    pub allowance: Duration,
    /// From the request until the first server-sent event (headers
    /// included): a server that sends headers and then nothing fails here.
    pub first_byte: Duration,
    /// The longest gap between two events once the stream has started.
    pub idle: Duration,
}

/// One fragment of a tool call, as it streams.
///
/// `index` identifies the call within the turn; `id` and `name` usually
/// arrive on its first fragment only, and the `arguments` pieces
/// concatenate to the call's JSON arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallDelta {
    /// Which call of the turn, from 0 in order of first appearance for
    /// providers that do not number them.
    pub index: usize,
    /// The model's id for the call, when this fragment carries it.
    pub id: Option<String>,
    /// The tool's name, when this fragment carries it.
    pub name: Option<String>,
    /// The next piece of the arguments text (may be empty).
    pub arguments: String,
}

/// A piece of a turn as it arrives, the same for every provider.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    /// The next piece of the text, if this event carries text.
    pub text: Option<String>,
    /// Tool-call fragments this event carries.
    pub tool_calls: Vec<ToolCallDelta>,
}

impl Delta {
    /// Whether the delta carries nothing.
    pub fn is_empty(&self) -> bool {
        self.text.as_deref().is_none_or(str::is_empty) && self.tool_calls.is_empty()
    }
}

/// What a [`TurnStream`] yields.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// The provider's count of the prompt's tokens, when it gave one
    /// before the answer's first fragment (Anthropic's `message_start`):
    /// at most once, before any [`StreamEvent::Delta`]. A gateway announces
    /// it where its wire format does, as the provider's API would.
    PromptTokens(u64),
    /// A fragment, to forward as it arrives.
    Delta(Delta),
    /// The complete turn, assembled from every fragment: the last event.
    Done(ModelResponse),
    /// The stream failed after its first token and rein recovered it: the
    /// deltas that follow extend the text already sent, and the last turn
    /// is whole. Only a recovering stream yields it
    /// ([`recovering`](crate::run::recovering)), never a provider; a wire
    /// marks its last event with it.
    Recovered(rein_core::event::StreamRecovered),
}

/// A streamed turn.
///
/// # Contract
///
/// At most one `Ok(PromptTokens)`, zero or more `Ok(Delta)`, then exactly
/// one terminal item — `Ok(Done)`
/// with the whole turn, or `Err(Failure)` — then the end. A stream that
/// is cut (dropped connection, stall past a limit, unparseable event) ends
/// in `Err`, never in `Done`: a partial answer is never presented as a
/// complete one. The failure's human message says whether content had
/// already been produced, and its [`Failure::tokens_spent`] charges what
/// the call consumed.
pub type TurnStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, Failure>> + Send>>;

/// A stream of one already complete turn: its content as one delta, then
/// the turn.
pub fn ready_turn(response: ModelResponse) -> TurnStream {
    let delta = Delta {
        text: response.text.clone(),
        tool_calls: response
            .tool_calls
            .iter()
            .enumerate()
            .map(|(index, call)| ToolCallDelta {
                index,
                id: Some(call.id.clone()),
                name: Some(call.name.clone()),
                arguments: call.arguments.clone(),
            })
            .collect(),
    };
    let mut items = Vec::with_capacity(2);
    if !delta.is_empty() {
        items.push(Ok(StreamEvent::Delta(delta)));
    }
    items.push(Ok(StreamEvent::Done(response)));
    Box::pin(futures_util::stream::iter(items))
}

/// Drains a turn stream into its complete turn.
///
/// # Errors
///
/// The stream's failure; or an `unknown` failure of `target` when the
/// stream ended without a terminal item (a provider bug).
pub async fn collect_turn(target: &str, mut stream: TurnStream) -> Result<ModelResponse, Failure> {
    while let Some(item) = stream.next().await {
        match item? {
            StreamEvent::PromptTokens(_) | StreamEvent::Delta(_) | StreamEvent::Recovered(_) => {}
            StreamEvent::Done(response) => return Ok(response),
        }
    }
    Err(
        Failure::new(target, Category::Unknown).with_human_message(format!(
            "{target}: the stream ended without a complete turn"
        )),
    )
}

/// A tool call being assembled.
#[derive(Debug, Default)]
struct PartialCall {
    index: usize,
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// Fragments assembled into a turn, plus what the provider reported about
/// it so far.
#[derive(Debug, Default)]
pub(super) struct Assembly {
    text: String,
    /// In order of first appearance; looked up by index, so a provider's
    /// sparse or huge indices cost nothing.
    calls: Vec<PartialCall>,
    pub(super) finish: Option<FinishReason>,
    /// The stop sequence the provider said stopped the turn.
    pub(super) stop_sequence: Option<String>,
    pub(super) input_tokens: Option<u64>,
    pub(super) output_tokens: Option<u64>,
}

/// How many tokens a failed or usage-less stream is charged.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spent {
    pub(super) usage: TokenUsage,
    pub(super) estimated: bool,
}

impl Spent {
    /// Nothing: a stream that received nothing was charged nothing.
    pub(super) const NONE: Spent = Spent {
        usage: TokenUsage {
            input: 0,
            output: 0,
        },
        estimated: false,
    };
}

impl Assembly {
    pub(super) fn apply(&mut self, delta: &Delta) {
        if let Some(text) = &delta.text {
            self.text.push_str(text);
        }
        for piece in &delta.tool_calls {
            let position = match self.calls.iter().position(|c| c.index == piece.index) {
                Some(p) => p,
                None => {
                    self.calls.push(PartialCall {
                        index: piece.index,
                        ..PartialCall::default()
                    });
                    self.calls.len() - 1
                }
            };
            let call = &mut self.calls[position];
            if let Some(id) = &piece.id
                && !id.is_empty()
            {
                call.id = Some(id.clone());
            }
            if let Some(name) = &piece.name
                && !name.is_empty()
            {
                call.name = Some(name.clone());
            }
            call.arguments.push_str(&piece.arguments);
        }
    }

    /// Whether any text or tool call has arrived.
    pub(super) fn produced(&self) -> bool {
        !self.text.is_empty() || !self.calls.is_empty()
    }

    /// What has arrived, for a failure message.
    pub(super) fn describe(&self) -> String {
        if !self.produced() {
            return "before any content was produced".to_owned();
        }
        let cut = self
            .calls
            .last()
            .is_some_and(|c| serde_json::from_str::<serde_json::Value>(&c.arguments).is_err());
        format!(
            "after content was produced ({} of text, {}{}); it is \
             discarded, not returned as an answer",
            rein_core::plural::count(self.text.chars().count(), "character"),
            rein_core::plural::count(self.calls.len(), "tool call"),
            if cut {
                ", the last with cut-off arguments"
            } else {
                ""
            }
        )
    }

    /// Tokens consumed so far: what the provider reported, else an
    /// estimate of one token per [`BYTES_PER_TOKEN_ESTIMATE`] bytes of the
    /// request body (`request_bytes`) and of the output received.
    ///
    /// When the stream `failed`, a reported output count may be stale
    /// (Anthropic's `message_start` says 1; the cumulative count comes only
    /// with `message_delta`), so the larger of it and the estimate is
    /// charged: a budget may be charged a little too much, never too little.
    pub(super) fn spent(&self, request_bytes: usize, failed: bool) -> Spent {
        let output_bytes: usize =
            self.text.len() + self.calls.iter().map(|c| c.arguments.len()).sum::<usize>();
        let estimate = |bytes: usize| (bytes as u64).div_ceil(BYTES_PER_TOKEN_ESTIMATE);
        let (input, input_estimated) = match self.input_tokens {
            Some(n) => (n, false),
            None => (estimate(request_bytes), true),
        };
        let guess = estimate(output_bytes);
        let (output, output_estimated) = match self.output_tokens {
            Some(n) if !failed || n >= guess => (n, false),
            _ => (guess, guess > 0),
        };
        Spent {
            usage: TokenUsage { input, output },
            estimated: input_estimated || output_estimated,
        }
    }

    /// The complete turn, once the provider said why it stopped.
    ///
    /// # Errors
    ///
    /// The reason, when a tool call has no name (the stream is malformed).
    /// Leaves the assembly empty on success and untouched on failure, so
    /// a failure can still describe what had arrived.
    pub(super) fn finish(
        &mut self,
        finish: FinishReason,
        usage: TokenUsage,
    ) -> Result<ModelResponse, String> {
        if let Some(call) = self.calls.iter().find(|c| c.name.is_none()) {
            return Err(format!("tool call {} has no function name", call.index));
        }
        let this = std::mem::take(self);
        let mut tool_calls = Vec::with_capacity(this.calls.len());
        for (i, call) in this.calls.into_iter().enumerate() {
            tool_calls.push(ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{i}")),
                name: call.name.unwrap_or_default(),
                arguments: if call.arguments.is_empty() {
                    String::from("{}")
                } else {
                    call.arguments
                },
            });
        }
        // As for a non-streamed answer: an unknown or missing reason on a
        // turn with tool calls means tool calls.
        let finish = match finish {
            FinishReason::Other if !tool_calls.is_empty() => FinishReason::ToolCalls,
            other => other,
        };
        Ok(ModelResponse {
            text: (!this.text.is_empty()).then_some(this.text),
            tool_calls,
            finish,
            stop_sequence: this.stop_sequence,
            usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(index: usize, id: Option<&str>, name: Option<&str>, args: &str) -> ToolCallDelta {
        ToolCallDelta {
            index,
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            arguments: args.to_owned(),
        }
    }

    #[test]
    fn assembly_joins_text_and_interleaved_tool_call_fragments() {
        let mut a = Assembly::default();
        for delta in [
            Delta {
                text: Some("Look".into()),
                tool_calls: vec![],
            },
            Delta {
                text: Some("ing".into()),
                tool_calls: vec![piece(0, Some("c0"), Some("get_order"), "{\"a\":")],
            },
            Delta {
                text: None,
                tool_calls: vec![
                    piece(7, Some("c7"), Some("send"), ""),
                    piece(0, None, None, "1}"),
                ],
            },
        ] {
            a.apply(&delta);
        }
        assert!(a.produced());
        let r = a
            .finish(FinishReason::ToolCalls, TokenUsage::default())
            .unwrap();
        assert_eq!(r.text.as_deref(), Some("Looking"));
        assert_eq!(r.tool_calls[0].arguments, "{\"a\":1}");
        assert_eq!(r.tool_calls[1].id, "c7");
        assert_eq!(
            r.tool_calls[1].arguments, "{}",
            "no arguments means an empty object"
        );
    }

    #[test]
    fn a_tool_call_without_a_name_is_malformed_not_a_panic() {
        let mut a = Assembly::default();
        a.apply(&Delta {
            text: None,
            tool_calls: vec![piece(usize::MAX, None, None, "{}")],
        });
        assert!(
            a.finish(FinishReason::ToolCalls, TokenUsage::default())
                .is_err()
        );
    }

    #[test]
    fn spent_prefers_reported_usage_and_estimates_the_rest() {
        let mut a = Assembly::default();
        let none = a.spent(400, true);
        assert_eq!(none.usage.input, 100);
        assert_eq!(none.usage.output, 0);
        assert!(none.estimated);
        a.apply(&Delta {
            text: Some("12345678".into()),
            tool_calls: vec![],
        });
        a.input_tokens = Some(7);
        let some = a.spent(400, true);
        assert_eq!(
            some.usage,
            TokenUsage {
                input: 7,
                output: 2
            }
        );
        assert!(some.estimated, "the output is still an estimate");
        a.output_tokens = Some(3);
        assert!(!a.spent(400, true).estimated);
        a.output_tokens = Some(1);
        let stale = a.spent(400, true);
        assert_eq!(
            stale.usage.output, 2,
            "a stale count is not trusted after a failure"
        );
        assert!(stale.estimated);
        assert_eq!(
            a.spent(400, false).usage.output,
            1,
            "a finished stream's count is"
        );
    }

    #[test]
    fn describe_says_whether_content_was_produced_and_cut() {
        let mut a = Assembly::default();
        assert!(a.describe().contains("before any content"));
        a.apply(&Delta {
            text: None,
            tool_calls: vec![piece(0, Some("c"), Some("t"), "{\"a\": ")],
        });
        let d = a.describe();
        assert!(d.contains("after content was produced"), "{d}");
        assert!(d.contains("cut-off arguments"), "{d}");
    }

    #[test]
    fn settings_refuse_zero_limits() {
        assert!(StreamSettings::new(Duration::ZERO, Duration::from_secs(1)).is_err());
        let err = StreamSettings::new(Duration::from_secs(1), Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("idle"), "{err}");
        let ok = StreamSettings::new(Duration::from_secs(2), Duration::from_secs(1)).unwrap();
        assert_eq!(
            ok.limits(Duration::from_secs(9)).first_byte,
            Duration::from_secs(2)
        );
    }

    #[tokio::test]
    async fn ready_turn_yields_one_delta_then_the_turn() {
        let response = ModelResponse {
            text: Some("hi".into()),
            tool_calls: vec![],
            finish: FinishReason::Stop,
            stop_sequence: None,
            usage: TokenUsage::default(),
        };
        let items: Vec<_> = ready_turn(response.clone()).collect().await;
        assert_eq!(items.len(), 2);
        assert_eq!(
            collect_turn("p", ready_turn(response.clone()))
                .await
                .unwrap(),
            response
        );
    }
}
