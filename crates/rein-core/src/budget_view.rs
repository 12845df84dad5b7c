//! What the planner is told of its budget each turn, and when the budget
//! is too short for another tool round trip (issue 16, item 5).
//!
//! # Why the model sees its budget
//!
//! A planner that sees what is left plans "three steps because three steps
//! fit" rather than thirty that are cut off midway, leaving side effects
//! that took effect but were never completed (seed 000, "Coupling the
//! Budget to Model Inference"). [`BudgetView::note`] is that view as the
//! model reads it: one short, deterministic line in human units, built
//! only here.
//!
//! # Why a last minimal-output turn
//!
//! Once what is left cannot cover one more tool round trip *and* the
//! inference that reads its result, offering tools is waste: any call the
//! model proposes is either refused or leaves a result no turn will read.
//! Ending the run bare throws away what the tools already learned. So rein
//! makes one last turn with no tools offered, asking for the final answer
//! from what is known, with `max_tokens` limited to what is left; the run
//! then ends `budget_exhausted` with that answer attached.
//!
//! # "Short", precisely
//!
//! [`shortfall`] is told the next turn's needs ([`TurnNeeds`]) and what
//! is left ([`Remaining`]). The budget is short when any of these holds,
//! checked in this order:
//!
//! | dimension | short when what is left is below |
//! | --- | --- |
//! | wall clock | the turn's model median + the fastest tool's median + the model median again (the turn, its call, the turn reading the result) |
//! | tokens | two calls of the next prompt (tools offered), each with [`MIN_ANSWER_TOKENS`] of output |
//! | cost | the same two calls at the model's price |
//!
//! An agent without tools is never short this way: its every turn is
//! already a final one.

use std::fmt::Write as _;
use std::time::Duration;

use crate::deadline::{Cost, Dimension, Exhausted, Remaining};
use crate::registry::Price;

/// The least output a turn must have room for to be worth sending; the
/// engine's own threshold for sending a model call (`MIN_OUTPUT_TOKENS`
/// there: the two change together).
pub const MIN_ANSWER_TOKENS: u64 = 64;

/// The instruction of the last minimal-output turn, as the model reads it.
pub const FINAL_TURN_INSTRUCTION: &str = "The run's budget is nearly spent: no tools are available now. Give your final answer from what you already know, as briefly as you can, and say what remains undone.";

/// What is left of a run's budget, as the planner is told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetView {
    /// What is left of each dimension.
    pub remaining: Remaining,
}

impl BudgetView {
    /// The view of `remaining`.
    pub fn new(remaining: Remaining) -> BudgetView {
        BudgetView { remaining }
    }

    /// The one line the model is given: what is left, in human units, and
    /// what to do with it. Deterministic: the same remainder gives the
    /// same text.
    pub fn note(&self) -> String {
        let r = &self.remaining;
        let mut s = String::from("Budget left for this run: ");
        if let Some(steps) = r.steps {
            let _ = write!(s, "{steps} step{}, ", if steps == 1 { "" } else { "s" });
        }
        s.push_str(&human_duration(r.time));
        if let Some(tokens) = r.tokens {
            let _ = write!(s, ", {} tokens", thousands(tokens));
        }
        if let Some(cost) = r.cost {
            let _ = write!(s, ", {}", human_cost(cost));
        }
        s.push_str(". Plan only the calls that fit; if it runs short, answer from what you know.");
        s
    }
}

/// What the next turn needs, for [`shortfall`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TurnNeeds {
    /// The median of one model call.
    pub model_p50: Duration,
    /// The median of the fastest tool the agent is offered; `None` when it
    /// is offered none.
    pub fastest_tool_p50: Option<Duration>,
    /// An upper bound of the next prompt's tokens, tools offered.
    pub prompt_tokens: u64,
    /// The price of the model that answers first, if known.
    pub price: Option<Price>,
}

/// Why the budget is short, as an [`Exhausted`] of the dimension that is:
/// what one more tool round trip needs and what is left (milliseconds,
/// tokens or micro-dollars); `None` when one more round trip fits.
pub fn shortfall(needs: &TurnNeeds, left: &Remaining) -> Option<Exhausted> {
    let tool = needs.fastest_tool_p50?;
    let time = needs
        .model_p50
        .saturating_add(tool)
        .saturating_add(needs.model_p50);
    if left.time < time {
        return Some(Exhausted {
            dimension: Dimension::WallClock,
            needed: millis(time),
            remaining: millis(left.time),
        });
    }
    let one_call = needs.prompt_tokens.saturating_add(MIN_ANSWER_TOKENS);
    let tokens = one_call.saturating_mul(2);
    if let Some(t) = left.tokens
        && t < tokens
    {
        return Some(Exhausted {
            dimension: Dimension::Tokens,
            needed: tokens,
            remaining: t,
        });
    }
    if let (Some(c), Some(price)) = (left.cost, needs.price) {
        let cost = price
            .cost(needs.prompt_tokens, MIN_ANSWER_TOKENS)
            .saturating_add(price.cost(needs.prompt_tokens, MIN_ANSWER_TOKENS));
        if c < cost {
            return Some(Exhausted {
                dimension: Dimension::Cost,
                needed: cost.micros(),
                remaining: c.micros(),
            });
        }
    }
    None
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A duration as a person says it: `850 ms`, `12.5 s`, `4 min 5 s`,
/// `2 h 10 min`.
///
/// # Why not `humantime`
///
/// `humantime` writes every unit down to nanoseconds (`12s 500ms 12us`),
/// too long for a line the model reads every turn, and its text is not
/// rounded.
pub fn human_duration(d: Duration) -> String {
    let ms = millis(d);
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        let tenths = ms / 100;
        if tenths % 10 == 0 {
            format!("{} s", tenths / 10)
        } else {
            format!("{}.{} s", tenths / 10, tenths % 10)
        }
    } else if ms < 3_600_000 {
        let s = ms / 1_000;
        match s % 60 {
            0 => format!("{} min", s / 60),
            rest => format!("{} min {rest} s", s / 60),
        }
    } else {
        let min = ms / 60_000;
        match min % 60 {
            0 => format!("{} h", min / 60),
            rest => format!("{} h {rest} min", min / 60),
        }
    }
}

/// Money as a person reads it: cents for amounts of a dollar or more
/// (`$12.34`), four decimals below (`$0.0123`).
fn human_cost(c: Cost) -> String {
    let micros = c.micros();
    if micros >= 1_000_000 {
        let cents = micros / 10_000;
        format!("${}.{:02}", cents / 100, cents % 100)
    } else {
        format!("$0.{:04}", micros / 100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn left(time_ms: u64, tokens: Option<u64>, cost: Option<u64>) -> Remaining {
        Remaining {
            time: Duration::from_millis(time_ms),
            steps: Some(3),
            tokens,
            cost: cost.map(Cost::from_micros),
        }
    }

    fn needs(prompt: u64) -> TurnNeeds {
        TurnNeeds {
            model_p50: Duration::from_millis(500),
            fastest_tool_p50: Some(Duration::from_millis(200)),
            prompt_tokens: prompt,
            price: Some(Price::new(
                Cost::from_micros(1_000_000),
                Cost::from_micros(4_000_000),
            )),
        }
    }

    #[test]
    fn note_says_every_limited_dimension_in_human_units() {
        let view = BudgetView::new(left(12_500, Some(4_210), Some(12_300)));
        assert_eq!(
            view.note(),
            "Budget left for this run: 3 steps, 12.5 s, 4,210 tokens, $0.0123. Plan only the calls that fit; if it runs short, answer from what you know."
        );
        let unlimited = BudgetView::new(Remaining {
            time: Duration::from_secs(125),
            steps: Some(1),
            tokens: None,
            cost: None,
        });
        assert!(
            unlimited
                .note()
                .starts_with("Budget left for this run: 1 step, 2 min 5 s.")
        );
    }

    #[test]
    fn human_units_round_to_what_a_person_says() {
        assert_eq!(human_duration(Duration::from_millis(850)), "850 ms");
        assert_eq!(human_duration(Duration::from_millis(3_000)), "3 s");
        assert_eq!(human_duration(Duration::from_secs(7_800)), "2 h 10 min");
        assert_eq!(human_cost(Cost::from_micros(12_345_678)), "$12.34");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }

    #[test]
    fn shortfall_when_time_cannot_cover_a_call_and_the_turn_reading_it() {
        // 500 + 200 + 500 = 1200 ms.
        let short = shortfall(&needs(100), &left(1_199, None, None)).unwrap();
        assert_eq!(
            (short.dimension, short.needed, short.remaining),
            (Dimension::WallClock, 1_200, 1_199)
        );
        assert_eq!(shortfall(&needs(100), &left(1_200, None, None)), None);
    }

    #[test]
    fn shortfall_when_tokens_or_cost_cannot_cover_two_calls_of_the_prompt() {
        // Two calls of 1000 + 64 tokens.
        let short = shortfall(&needs(1_000), &left(60_000, Some(2_127), None)).unwrap();
        assert_eq!((short.dimension, short.needed), (Dimension::Tokens, 2_128));
        assert_eq!(
            shortfall(&needs(1_000), &left(60_000, Some(2_128), None)),
            None
        );
        // One call: 1000 µ$ of prompt + 256 µ$ of output.
        let short = shortfall(&needs(1_000), &left(60_000, None, Some(2_511))).unwrap();
        assert_eq!((short.dimension, short.needed), (Dimension::Cost, 2_512));
        assert_eq!(
            shortfall(&needs(1_000), &left(60_000, None, Some(2_512))),
            None
        );
    }

    #[test]
    fn an_agent_without_tools_is_never_short_of_a_round_trip() {
        let none = TurnNeeds {
            fastest_tool_p50: None,
            ..needs(1_000)
        };
        assert_eq!(shortfall(&none, &left(1, Some(1), Some(1))), None);
    }
}
