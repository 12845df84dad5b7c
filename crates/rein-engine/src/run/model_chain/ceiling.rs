//! The output ceiling of one model call, and what it reserves.
//!
//! # Why before the call
//!
//! Usage is known only after a call, and a breach cannot be undone then.
//! So before every attempt rein sets aside the prompt (estimated from
//! above) plus the most output the call may produce, at the price of the
//! model that will answer this attempt, and asks for no more output than
//! that: `max_tokens` = min(the model's output cap, what the token budget
//! leaves after the prompt, what the cost budget leaves at the model's
//! output price). A call without room for [`MIN_OUTPUT_TOKENS`] is not
//! sent. The reservation is settled with the actual usage afterwards, so
//! consumption never exceeds a ceiling as long as the provider counts the
//! prompt at most as the estimate does and writes at most `max_tokens`.
//!
//! # The prompt estimate
//!
//! Byte-level BPE tokenizers (OpenAI's, Anthropic's) never make more
//! tokens of a text than it has bytes, so a message's JSON length, plus a
//! per-message allowance for the chat template, bounds its tokens — about
//! four times what English or JSON costs. So the bytes are divided by the
//! bytes per token the model's provider was seen to count
//! ([`TokenRatio`], learned per model from every answered call, the least
//! seen less a margin that shrinks as samples grow; 1 until a first
//! count). The first call of a run is bounded so, with an allowance for
//! the tool-use instructions a provider adds when tools are offered. Later
//! calls are bounded tighter by what the provider counted for the previous
//! prompt plus the bound of what was added since (the previous answer and
//! the results after it); the smaller bound is used.
//!
//! A model whose tokenizer rein ships (OpenAI's chat families, see
//! [`Encoding`]) is bounded by its tokens instead: each message's texts
//! counted with the encoding, plus the same allowances ([`PromptMeter`]).

use rein_core::Instant;
use rein_core::deadline::{Budget, Cost, Dimension, Exhausted, Grant, Usage};
use rein_core::event::{BudgetExhausted, BudgetScope};
use rein_core::registry::Price;
use rein_core::token_ratio::TokenRatio;
use serde_json::Value;

use super::chain::LinkEnd;
use super::tokenizer::Encoding;
use super::{LinkRef, TurnHost};
use crate::provider::{Message, ModelRequest, Part};
use crate::run::emitter::Correlation;
use crate::run::report::End;
use crate::run::{Engine, MIN_OUTPUT_TOKENS};

/// Template tokens a chat format may add around one message.
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 16;
/// Tokens a provider may add to a request that offers tools (its own
/// tool-use instructions), on top of the definitions themselves.
pub const TOOLS_OVERHEAD_TOKENS: u64 = 512;

/// How the prompt of a turn is bounded: at the learned bytes per token of
/// the chain's models without a tokenizer, and with the encoding of each
/// model that has one; the largest of these bounds every link.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptMeter {
    /// The most cautious learned ratio of the models without an encoding;
    /// `None` when every model has one.
    ratio: Option<TokenRatio>,
    /// The encodings of the others (loaded: see [`Encoding::load`]).
    encodings: Vec<Encoding>,
}

impl Default for PromptMeter {
    /// A token per byte: the bound that always holds.
    fn default() -> PromptMeter {
        PromptMeter::from(TokenRatio::new())
    }
}

impl From<TokenRatio> for PromptMeter {
    fn from(ratio: TokenRatio) -> PromptMeter {
        PromptMeter {
            ratio: Some(ratio),
            encodings: Vec::new(),
        }
    }
}

impl PromptMeter {
    /// Bounds with `encoding` alone (every model of the chain has it).
    pub fn encoding(encoding: Encoding) -> PromptMeter {
        PromptMeter {
            ratio: None,
            encodings: vec![encoding],
        }
    }

    /// Also bounds with `encoding`.
    pub(crate) fn with_encoding(mut self, encoding: Encoding) -> PromptMeter {
        if !self.encodings.contains(&encoding) {
            self.encodings.push(encoding);
        }
        self
    }

    /// Also bounds at `ratio` (the most cautious of those given).
    pub(crate) fn with_ratio(mut self, ratio: TokenRatio) -> PromptMeter {
        self.ratio = Some(match self.ratio {
            Some(r) if r.bytes_per_token() <= ratio.bytes_per_token() => r,
            _ => ratio,
        });
        self
    }

    /// The encodings the bound counts with.
    pub fn encodings(&self) -> &[Encoding] {
        &self.encodings
    }

    /// The learned ratio the bound counts the other models at; `None`
    /// when every model has an encoding.
    pub fn ratio(&self) -> Option<TokenRatio> {
        self.ratio
    }

    /// An upper bound of the tokens of `texts`, JSON text as it is sent
    /// (`json`) and the texts themselves (`plain`): the JSON at the ratio,
    /// the texts with each encoding. An encoding that is not loaded counts
    /// a token per byte.
    fn bound(&self, json: &str, plain: &[&str]) -> u64 {
        let by_ratio = self
            .ratio
            .as_ref()
            .map_or(0, |r| bytes_bound(json.as_bytes(), r));
        self.encodings
            .iter()
            .map(|e| {
                plain
                    .iter()
                    .map(|t| {
                        e.count(t)
                            .unwrap_or_else(|| u64::try_from(t.len()).unwrap_or(u64::MAX))
                    })
                    .fold(0, u64::saturating_add)
            })
            .fold(by_ratio, u64::max)
    }
}

/// An upper bound of `message`'s tokens by `meter`.
///
/// Its media (images, audio) are bounded by what a provider may count for
/// them ([`Part::media_tokens_bound`]), not by their bytes: a base64 image
/// is hundreds of thousands of bytes and at most a few thousand tokens, so
/// its text is left out of the JSON the ratio divides.
fn message_bound(message: &Message, meter: &PromptMeter) -> u64 {
    let media: u64 = message
        .media()
        .map(Part::media_tokens_bound)
        .fold(0, u64::saturating_add);
    let json = match message {
        Message::User { content, parts } if !parts.is_empty() => {
            serde_json::to_string(&Message::user(content.as_str())).unwrap_or_default()
        }
        _ => serde_json::to_string(message).unwrap_or_default(),
    };
    let texts: Vec<&str> = if meter.encodings.is_empty() {
        Vec::new()
    } else {
        message_texts(message)
    };
    meter
        .bound(&json, &texts)
        .saturating_add(media)
        .saturating_add(MESSAGE_OVERHEAD_TOKENS)
}

/// The texts of `message` a tokenizer counts: its role, its content, and
/// each tool call's id, name and arguments (or the id it answers).
fn message_texts(message: &Message) -> Vec<&str> {
    match message {
        Message::System { content } => vec!["system", content],
        Message::User { content, .. } => vec!["user", content],
        Message::Assistant {
            content,
            tool_calls,
        } => std::iter::once("assistant")
            .chain(content.as_deref())
            .chain(
                tool_calls
                    .iter()
                    .flat_map(|t| [t.id.as_str(), t.name.as_str(), t.arguments.as_str()]),
            )
            .collect(),
        Message::Tool { call_id, content } => vec!["tool", call_id, content],
    }
}

/// An upper bound of the tokens of `bytes` of JSON: its ASCII bytes at the
/// learned `ratio`, every other byte as a token of its own.
///
/// # Why not every byte at the ratio
///
/// The ratio is learned from what the model was sent so far, mostly
/// ASCII; a tool result in another script (CJK, emoji) packs several
/// bytes into far fewer characters, and a tokenizer may spend a token on
/// each of its bytes. Counting those bytes one token each keeps the bound
/// above any count for them, whatever was learned from English.
fn bytes_bound(bytes: &[u8], ratio: &TokenRatio) -> u64 {
    let other = bytes.iter().filter(|b| !b.is_ascii()).count();
    let ascii = bytes.len() - other;
    ratio
        .bound(u64::try_from(ascii).unwrap_or(u64::MAX))
        .saturating_add(u64::try_from(other).unwrap_or(u64::MAX))
}

/// An upper bound of the prompt tokens of a request of `messages` and
/// `tools` to the models `meter` bounds (a [`TokenRatio::new`] meter: one
/// token per byte); `last_input` is what the provider counted for the
/// previous answered prompt of the same transcript (0 when none), which
/// was every message before the last assistant message.
pub fn prompt_estimate(
    messages: &[Message],
    tools: &[Value],
    last_input: u64,
    meter: &PromptMeter,
) -> u64 {
    let tools_bound = if tools.is_empty() {
        0
    } else {
        // The definitions' JSON, for a tokenizer too: longer than any
        // rendering a provider makes of them.
        let json = serde_json::to_string(tools).unwrap_or_default();
        meter
            .bound(&json, &[&json])
            .saturating_add(TOOLS_OVERHEAD_TOKENS)
    };
    // One pass: each message is bounded once (a tokenizer's count is the
    // cost here), summed into the whole transcript and, from the last
    // answer on, into what is new since the provider last counted.
    let last_answer = messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }))
        .filter(|_| last_input > 0);
    let (mut whole, mut added) = (tools_bound, last_input);
    for (n, message) in messages.iter().enumerate() {
        let bound = message_bound(message, meter);
        whole = whole.saturating_add(bound);
        if last_answer.is_some_and(|first| n >= first) {
            added = added.saturating_add(bound);
        }
    }
    if last_answer.is_some() {
        whole.min(added)
    } else {
        whole
    }
}

/// What one attempt may produce and what it sets aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceiling {
    /// The `max_tokens` to send; `None` when nothing limits the output.
    pub max_tokens: Option<u64>,
    /// The budget dimension that set `max_tokens` below the model's cap
    /// (an answer cut there ran out of that budget); `None` when the cap
    /// or the caller did.
    pub limited_by: Option<Dimension>,
    /// What to reserve: the prompt and the largest output, at the price.
    pub reserve: Usage,
}

/// What an answered attempt reserved: settled with its usage by the host.
#[derive(Debug)]
pub(crate) struct Reservation {
    /// The reserved share of the budget.
    pub(crate) grant: Grant,
    /// [`Ceiling::limited_by`] of the attempt.
    pub(crate) limited_by: Option<Dimension>,
    /// [`Ceiling::max_tokens`] of the attempt: the ceiling sent.
    pub(crate) max_tokens: Option<u64>,
    /// The bound of the prompt's tokens it reserved for.
    pub(crate) prompt: u64,
}

/// The largest output whose cost, after a prompt costing `prompt_cost`,
/// fits `left` at `price`; `None` when output is free.
fn output_for_cost(left: Cost, prompt_cost: Cost, price: &Price) -> Option<u64> {
    let per_mtok = price.output_per_mtok.micros();
    if per_mtok == 0 {
        return None;
    }
    let room = left.saturating_sub(prompt_cost).micros();
    // `Price::cost` rounds each part up: `out × per / 1e6` rounded up fits
    // `room` exactly when `out × per ≤ room × 1e6`.
    let out = u128::from(room) * 1_000_000 / u128::from(per_mtok);
    Some(u64::try_from(out).unwrap_or(u64::MAX))
}

/// The ceiling of an attempt at a model with output cap `cap` and `price`,
/// for a prompt of at most `prompt` tokens, under what `budget` leaves at
/// `now`; `requested` is a caller's own `max_tokens`, if any.
///
/// # Errors
///
/// [`Exhausted`] naming the dimension (tokens or cost) that leaves less
/// than the prompt and [`MIN_OUTPUT_TOKENS`] of output: the call must not
/// be sent.
pub fn ceiling(
    budget: &Budget,
    now: Instant,
    prompt: u64,
    cap: Option<u32>,
    price: Option<Price>,
    requested: Option<u64>,
) -> Result<Ceiling, Exhausted> {
    let left = budget.remaining(now);
    // The least output worth a call: a cap or a caller asking for less is
    // obeyed, never raised.
    let least = [cap.map(u64::from), requested]
        .into_iter()
        .flatten()
        .fold(MIN_OUTPUT_TOKENS, u64::min)
        .max(1);
    let by_tokens = left.tokens.map(|t| t.saturating_sub(prompt));
    if let (Some(room), Some(t)) = (by_tokens, left.tokens)
        && room < least
    {
        return Err(Exhausted {
            dimension: Dimension::Tokens,
            needed: prompt.saturating_add(least),
            remaining: t,
        });
    }
    let priced = left.cost.zip(price);
    let prompt_cost = price.map_or(Cost::ZERO, |p| p.cost(prompt, 0));
    let by_cost = priced.and_then(|(c, p)| output_for_cost(c, prompt_cost, &p));
    if let Some((c, p)) = priced
        && (c < prompt_cost || by_cost.is_some_and(|room| room < least))
    {
        return Err(Exhausted {
            dimension: Dimension::Cost,
            needed: p.cost(prompt, least).micros(),
            remaining: c.micros(),
        });
    }
    let max_tokens = [cap.map(u64::from), requested, by_tokens, by_cost]
        .into_iter()
        .flatten()
        .min();
    let others = [cap.map(u64::from), requested].into_iter().flatten().min();
    let below = |room: Option<u64>| room.is_some_and(|r| others.is_none_or(|o| r < o));
    let limited_by = if below(by_tokens) && by_tokens <= by_cost.or(by_tokens) {
        Some(Dimension::Tokens)
    } else if below(by_cost) {
        Some(Dimension::Cost)
    } else {
        None
    };
    let output = max_tokens.unwrap_or(0);
    Ok(Ceiling {
        max_tokens,
        limited_by,
        reserve: Usage {
            steps: 0,
            tokens: prompt.saturating_add(output),
            cost: price.map_or(Cost::ZERO, |p| p.cost(prompt, output)),
        },
    })
}

/// The pre-reservation ceiling, kept for the chaos suite's self-test
/// (sabotage switch `charge_after_call`): the token budget only, against
/// the last prompt's count, nothing reserved and no cost checked: usage is
/// charged after the call, so a growing prompt or a cost ceiling is
/// overrun.
#[cfg(feature = "sabotage")]
fn after_the_call(
    budget: &Budget,
    now: Instant,
    last_input: u64,
    cap: Option<u32>,
    requested: Option<u64>,
) -> Result<Ceiling, Exhausted> {
    let left = budget.remaining(now).tokens;
    if let Some(t) = left
        && t < last_input.saturating_add(MIN_OUTPUT_TOKENS)
    {
        return Err(Exhausted {
            dimension: Dimension::Tokens,
            needed: last_input.saturating_add(MIN_OUTPUT_TOKENS),
            remaining: t,
        });
    }
    let by_tokens = left.map(|t| t - last_input);
    Ok(Ceiling {
        max_tokens: [cap.map(u64::from), requested, by_tokens]
            .into_iter()
            .flatten()
            .min(),
        limited_by: None,
        reserve: Usage::default(),
    })
}

impl Engine {
    /// Reserves one attempt at `link` of `request` (a prompt of at most
    /// `prompt` tokens) at `now`: the request to send, with its
    /// `max_tokens`, and the grant to settle with its usage. `Stop` with
    /// `budget_exhausted` when the call cannot fit.
    pub(super) fn reserve_attempt(
        &self,
        (host, c): (&dyn TurnHost, &Correlation),
        link: LinkRef<'_>,
        (request, prompt): (&ModelRequest, u64),
        budget: &mut Budget,
        now: Instant,
    ) -> Result<(ModelRequest, Reservation), LinkEnd> {
        let decided = ceiling(
            budget,
            now,
            prompt,
            link.max_output,
            link.price,
            request.max_tokens,
        );
        // Sabotage hook `charge_after_call`: no reservation, no cost check.
        #[cfg(feature = "sabotage")]
        let decided = if self.sabotage.charge_after_call {
            after_the_call(
                budget,
                now,
                host.last_input_tokens(),
                link.max_output,
                request.max_tokens,
            )
        } else {
            decided
        };
        // Sabotage hook `unreserved_final_turn`: a call offered no tools
        // (the last turn) reserves nothing and asks for the model's cap.
        #[cfg(feature = "sabotage")]
        let decided = if self.sabotage.unreserved_final_turn && request.tools.is_empty() {
            Ok(Ceiling {
                max_tokens: link.max_output.map(u64::from),
                limited_by: None,
                reserve: Usage::default(),
            })
        } else {
            decided
        };
        match decided {
            Ok(ceiling) => Ok((
                ModelRequest {
                    max_tokens: ceiling.max_tokens,
                    ..request.clone()
                },
                Reservation {
                    grant: budget.reserve(ceiling.reserve),
                    limited_by: ceiling.limited_by,
                    max_tokens: ceiling.max_tokens,
                    prompt,
                },
            )),
            Err(exhausted) => {
                host.emitter().emit(
                    c,
                    BudgetExhausted {
                        reason: Some(format!(
                            "the prompt (at most {prompt} tokens) and a minimal answer from {}/{} do not fit the {} left",
                            link.provider.name(),
                            link.model,
                            exhausted.dimension
                        )),
                        min_output_tokens: Some(MIN_OUTPUT_TOKENS),
                        used: Some(budget.used()),
                        ..BudgetExhausted::new(BudgetScope::ModelCall, exhausted)
                    },
                );
                Err(LinkEnd::Stop(End::Budget(exhausted)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rein_core::Instant;
    use rein_core::deadline::BudgetLimits;

    use super::*;
    use crate::provider::{AUDIO_BYTES_PER_TOKEN, IMAGE_TOKENS_BOUND};

    fn budget(tokens: Option<u64>, cost_micros: Option<u64>) -> Budget {
        let mut limits = BudgetLimits::new(Duration::from_secs(60)).unwrap();
        if let Some(t) = tokens {
            limits = limits.with_tokens(t).unwrap();
        }
        if let Some(c) = cost_micros {
            limits = limits.with_cost(Cost::from_micros(c)).unwrap();
        }
        Budget::start(limits, Instant::ORIGIN)
    }

    /// $1 per million input tokens, $4 per million output tokens.
    fn price() -> Price {
        Price::new(Cost::from_micros(1_000_000), Cost::from_micros(4_000_000))
    }

    #[test]
    fn bytes_of_another_script_count_a_token_each_whatever_the_ratio() {
        let learned = TokenRatio::from_parts(10_000, 4.0);
        // 400 ASCII bytes at the learned ratio, less its 10 % margin.
        let ascii = "a".repeat(400);
        assert_eq!(bytes_bound(ascii.as_bytes(), &learned), 112);
        // 100 CJK characters: 300 bytes, each a token.
        let cjk = "漢".repeat(100);
        assert_eq!(bytes_bound(cjk.as_bytes(), &learned), 300);
        let mixed = format!("{ascii}{cjk}");
        assert_eq!(bytes_bound(mixed.as_bytes(), &learned), 412);
        // Unlearned, every byte is a token.
        assert_eq!(bytes_bound(mixed.as_bytes(), &TokenRatio::new()), 700);
    }

    #[test]
    fn the_cap_bounds_a_large_token_budget() {
        let b = budget(Some(50_000), None);
        let c = ceiling(&b, Instant::ORIGIN, 1_000, Some(16_384), None, None).unwrap();
        assert_eq!(c.max_tokens, Some(16_384));
        assert_eq!(c.limited_by, None, "the cap, not the budget");
        assert_eq!(c.reserve.tokens, 17_384);
    }

    #[test]
    fn the_token_budget_leaves_room_after_the_prompt() {
        let b = budget(Some(5_000), None);
        let c = ceiling(&b, Instant::ORIGIN, 4_000, Some(16_384), None, None).unwrap();
        assert_eq!(c.max_tokens, Some(1_000));
        assert_eq!(c.limited_by, Some(Dimension::Tokens));
        assert_eq!(c.reserve.tokens, 5_000, "prompt and output fill the budget");
    }

    #[test]
    fn the_cost_budget_leaves_output_at_the_models_output_price() {
        // 10_000 µ$: the prompt costs 2_000 (2_000 tokens at $1/M), the
        // rest buys 8_000 µ$ / $4 per M = 2_000 output tokens.
        let b = budget(None, Some(10_000));
        let c = ceiling(
            &b,
            Instant::ORIGIN,
            2_000,
            Some(16_384),
            Some(price()),
            None,
        )
        .unwrap();
        assert_eq!(c.max_tokens, Some(2_000));
        assert_eq!(c.limited_by, Some(Dimension::Cost));
        assert_eq!(c.reserve.cost, Cost::from_micros(10_000));
        assert!(c.reserve.cost <= b.remaining(Instant::ORIGIN).cost.unwrap());
    }

    #[test]
    fn a_call_without_room_for_a_minimal_answer_names_the_dimension() {
        let b = budget(Some(1_050), None);
        let e = ceiling(&b, Instant::ORIGIN, 1_000, Some(16_384), None, None).unwrap_err();
        assert_eq!(e.dimension, Dimension::Tokens);
        assert_eq!((e.needed, e.remaining), (1_000 + MIN_OUTPUT_TOKENS, 1_050));

        // 1_100 µ$: the prompt takes 1_000, 100 µ$ buys 25 output tokens.
        let b = budget(None, Some(1_100));
        let e = ceiling(&b, Instant::ORIGIN, 1_000, None, Some(price()), None).unwrap_err();
        assert_eq!(e.dimension, Dimension::Cost);
        assert_eq!(e.remaining, 1_100);
    }

    #[test]
    fn a_caller_or_a_cap_asking_for_less_is_obeyed() {
        let b = budget(Some(100_000), None);
        let c = ceiling(&b, Instant::ORIGIN, 10, Some(16_384), None, Some(20)).unwrap();
        assert_eq!(c.max_tokens, Some(20));
        let c = ceiling(&b, Instant::ORIGIN, 10, None, None, None).unwrap();
        assert_eq!(c.max_tokens, Some(100_000 - 10));
        let unlimited = budget(None, None);
        let c = ceiling(&unlimited, Instant::ORIGIN, 10, None, None, None).unwrap();
        assert_eq!(c.max_tokens, None);
    }

    #[test]
    fn the_estimate_is_at_least_the_text_and_tightens_with_the_last_count() {
        let messages = vec![
            Message::System {
                content: "s".repeat(400),
            },
            Message::user("u".repeat(100)),
        ];
        let bytes = TokenRatio::new();
        let first = prompt_estimate(&messages, &[], 0, &bytes.into());
        assert!(first >= 500 + 2 * MESSAGE_OVERHEAD_TOKENS);
        let tools = vec![serde_json::json!({"type": "function"})];
        assert!(
            prompt_estimate(&messages, &tools, 0, &bytes.into()) > first + TOOLS_OVERHEAD_TOKENS
        );
        let mut grown = messages.clone();
        grown.push(Message::Assistant {
            content: Some("ok".into()),
            tool_calls: Vec::new(),
        });
        grown.push(Message::Tool {
            call_id: "c".into(),
            content: "r".repeat(50),
        });
        // The provider counted 150 for the first prompt: the bound is that
        // plus the two messages added.
        let tight = prompt_estimate(&grown, &[], 150, &bytes.into());
        assert!(tight < prompt_estimate(&grown, &[], 0, &bytes.into()));
        assert!(tight >= 150 + 52 + 2 * MESSAGE_OVERHEAD_TOKENS);
    }

    #[test]
    fn an_image_is_bounded_by_what_a_provider_counts_for_one_not_by_its_bytes() {
        // 300 kB of base64 image: a token per byte would refuse any call.
        let image = format!("data:image/png;base64,{}", "A".repeat(300_000));
        let question = "what is this?";
        let messages = vec![Message::user_parts(vec![
            Part::Text {
                text: question.into(),
            },
            Part::Image {
                url: image,
                detail: None,
            },
            Part::Audio {
                // 40,000 base64 characters: 30,000 bytes of audio.
                data: "A".repeat(40_000),
                format: "mp3".into(),
            },
        ])];
        let text_only = prompt_estimate(
            &[Message::user(question)],
            &[],
            0,
            &TokenRatio::new().into(),
        );
        let bound = prompt_estimate(&messages, &[], 0, &TokenRatio::new().into());
        assert_eq!(
            bound,
            text_only + IMAGE_TOKENS_BOUND + 30_000 / AUDIO_BYTES_PER_TOKEN
        );
        // A tokenizer counts the text; the media are bounded alike.
        if Encoding::O200kBase.load() {
            let meter = PromptMeter::encoding(Encoding::O200kBase);
            let texts = prompt_estimate(&[Message::user(question)], &[], 0, &meter);
            assert_eq!(
                prompt_estimate(&messages, &[], 0, &meter),
                texts + IMAGE_TOKENS_BOUND + 600
            );
        }
    }

    #[test]
    fn a_learned_ratio_divides_the_bytes_and_keeps_the_overheads() {
        let messages = vec![Message::user("u".repeat(4_000))];
        let bytes = prompt_estimate(&messages, &[], 0, &TokenRatio::new().into());
        let mut learned = TokenRatio::new();
        for _ in 0..100 {
            learned.observe(4_000, 1_000);
        }
        // 3.6 bytes per token (4 less the 10 % margin).
        let tight = prompt_estimate(&messages, &[], 0, &learned.into());
        assert!(tight * 3 < bytes, "{tight} against {bytes}");
        assert!(tight >= 4_000 * 10 / 36 + MESSAGE_OVERHEAD_TOKENS);
    }
}
