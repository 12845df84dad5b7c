use std::fmt;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::split::split;
use super::wire::{self, AnyDuration};
use super::{Deadline, DeadlineExceeded};
use crate::clock::Instant;
use crate::config::{ConfigError, Ratio, Weight, positive_duration};

/// The default wall-clock budget of a run: five minutes.
pub const DEFAULT_WALL_CLOCK: Duration = Duration::from_secs(300);
/// The default step ceiling of a run.
pub const DEFAULT_MAX_STEPS: u32 = 40;
/// The default token ceiling of a run (input plus output).
pub const DEFAULT_MAX_TOKENS: u64 = 200_000;

/// Money, in millionths of a US dollar.
///
/// # Why integers
///
/// Costs are summed over thousands of calls and compared against a ceiling;
/// floats would drift and make "exactly at the limit" depend on the order of
/// additions. A micro-dollar is far below any per-call price.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Cost(u64);

impl Cost {
    /// Nothing.
    pub const ZERO: Cost = Cost(0);

    /// A cost of `micros` millionths of a dollar.
    pub const fn from_micros(micros: u64) -> Cost {
        Cost(micros)
    }

    /// A cost in dollars, for the setting `field`, rounded to the nearest
    /// micro-dollar.
    ///
    /// # Errors
    ///
    /// [`ConfigError::OutOfRange`] for NaN, infinite, negative or
    /// unrepresentably large values.
    pub fn from_usd(field: &'static str, usd: f64) -> Result<Cost, ConfigError> {
        let micros = usd * 1_000_000.0;
        if usd.is_finite() && usd >= 0.0 && micros < u64::MAX as f64 {
            Ok(Cost(micros.round() as u64))
        } else {
            Err(ConfigError::OutOfRange {
                field,
                expected: "a finite, non-negative number of dollars",
                found: usd.to_string(),
            })
        }
    }

    /// The cost in millionths of a dollar.
    pub const fn micros(self) -> u64 {
        self.0
    }

    /// The cost in dollars (for display).
    pub fn usd(self) -> f64 {
        self.0 as f64 / 1_000_000.0
    }

    /// `self + other`, saturating.
    pub fn saturating_add(self, other: Cost) -> Cost {
        Cost(self.0.saturating_add(other.0))
    }

    /// `self - other`, or zero.
    pub fn saturating_sub(self, other: Cost) -> Cost {
        Cost(self.0.saturating_sub(other.0))
    }
}

impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${}.{:06}", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

/// A run's budget as written in config.
///
/// | setting | default | meaning |
/// | --- | --- | --- |
/// | `wall_clock` | `300s` | time from start to deadline |
/// | `max_steps` | `40` | model turns (unset = unlimited) |
/// | `max_tokens` | `200000` | input + output tokens (unset = unlimited) |
/// | `max_cost_usd` | unset | money (unset = unlimited) |
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct BudgetConfig {
    /// Time from the run's start to its deadline.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "crate::config::duration::Text")]
    pub wall_clock: Duration,
    /// The step ceiling; `None` for none.
    pub max_steps: Option<u32>,
    /// The token ceiling; `None` for none.
    pub max_tokens: Option<u64>,
    /// The cost ceiling in dollars; `None` for none.
    pub max_cost_usd: Option<f64>,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            wall_clock: DEFAULT_WALL_CLOCK,
            max_steps: Some(DEFAULT_MAX_STEPS),
            max_tokens: Some(DEFAULT_MAX_TOKENS),
            max_cost_usd: None,
        }
    }
}

/// The validated ceilings of a budget: wall clock, and optionally steps,
/// tokens and cost — the triple budget (time, work, money).
///
/// Written as `{"wall_clock": "5m", "steps": 40, "tokens": null,
/// "cost_usd": 0.5}` (event schema 2; schema 1's forms still read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BudgetLimits {
    #[serde(serialize_with = "wire::serialize_duration")]
    wall_clock: Duration,
    steps: Option<u32>,
    tokens: Option<u64>,
    #[serde(rename = "cost_usd", serialize_with = "wire::usd::option::serialize")]
    cost: Option<Cost>,
}

/// [`BudgetLimits`] as written by either event schema, validated again when
/// read back (a stored `run_started` event carries the limits its run began
/// with).
#[derive(Deserialize)]
struct RawBudgetLimits {
    wall_clock: AnyDuration,
    steps: Option<u32>,
    tokens: Option<u64>,
    #[serde(default)]
    cost: Option<Cost>,
    #[serde(default)]
    cost_usd: Option<f64>,
}

impl<'de> Deserialize<'de> for BudgetLimits {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let raw = RawBudgetLimits::deserialize(deserializer)?;
        let cost = wire::either_cost(raw.cost_usd, raw.cost)?;
        let mut limits =
            BudgetLimits::new(raw.wall_clock.into_duration()?).map_err(D::Error::custom)?;
        if let Some(steps) = raw.steps {
            limits = limits.with_steps(steps).map_err(D::Error::custom)?;
        }
        if let Some(tokens) = raw.tokens {
            limits = limits.with_tokens(tokens).map_err(D::Error::custom)?;
        }
        if let Some(cost) = cost {
            limits = limits.with_cost(cost).map_err(D::Error::custom)?;
        }
        Ok(limits)
    }
}

impl BudgetLimits {
    /// Ceilings with only a wall clock.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Zero`] for a zero `wall_clock`.
    pub fn new(wall_clock: Duration) -> Result<Self, ConfigError> {
        Ok(BudgetLimits {
            wall_clock: positive_duration("budget.wall_clock", wall_clock)?,
            steps: None,
            tokens: None,
            cost: None,
        })
    }

    /// Adds a step ceiling.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Zero`] for zero.
    pub fn with_steps(mut self, steps: u32) -> Result<Self, ConfigError> {
        if steps == 0 {
            return Err(ConfigError::Zero {
                field: "budget.max_steps",
            });
        }
        self.steps = Some(steps);
        Ok(self)
    }

    /// Adds a token ceiling.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Zero`] for zero.
    pub fn with_tokens(mut self, tokens: u64) -> Result<Self, ConfigError> {
        if tokens == 0 {
            return Err(ConfigError::Zero {
                field: "budget.max_tokens",
            });
        }
        self.tokens = Some(tokens);
        Ok(self)
    }

    /// Adds a cost ceiling.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Zero`] for zero.
    pub fn with_cost(mut self, cost: Cost) -> Result<Self, ConfigError> {
        if cost == Cost::ZERO {
            return Err(ConfigError::Zero {
                field: "budget.max_cost_usd",
            });
        }
        self.cost = Some(cost);
        Ok(self)
    }

    /// The same ceilings with another wall-clock allowance (e.g. the forward
    /// path's share when part of the time is reserved for compensation).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Zero`] for a zero `wall_clock`.
    pub fn with_wall_clock(mut self, wall_clock: Duration) -> Result<Self, ConfigError> {
        self.wall_clock = positive_duration("budget.wall_clock", wall_clock)?;
        Ok(self)
    }

    /// The wall-clock allowance.
    pub fn wall_clock(&self) -> Duration {
        self.wall_clock
    }

    /// The step ceiling, if any.
    pub fn steps(&self) -> Option<u32> {
        self.steps
    }

    /// The token ceiling, if any.
    pub fn tokens(&self) -> Option<u64> {
        self.tokens
    }

    /// The cost ceiling, if any.
    pub fn cost(&self) -> Option<Cost> {
        self.cost
    }
}

impl TryFrom<BudgetConfig> for BudgetLimits {
    type Error = ConfigError;

    fn try_from(config: BudgetConfig) -> Result<Self, ConfigError> {
        let mut limits = BudgetLimits::new(config.wall_clock)?;
        if let Some(steps) = config.max_steps {
            limits = limits.with_steps(steps)?;
        }
        if let Some(tokens) = config.max_tokens {
            limits = limits.with_tokens(tokens)?;
        }
        if let Some(usd) = config.max_cost_usd {
            limits = limits.with_cost(Cost::from_usd("budget.max_cost_usd", usd)?)?;
        }
        Ok(limits)
    }
}

/// What some work consumed (or is granted): steps, tokens, cost.
///
/// Written as `{"steps": 2, "tokens": 2000, "cost_usd": 0.002}`
/// (event schema 2; schema 1's `cost` in micro-dollars still reads).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawUsage")]
pub struct Usage {
    /// Model turns.
    pub steps: u32,
    /// Input plus output tokens.
    pub tokens: u64,
    /// Money.
    #[serde(rename = "cost_usd", serialize_with = "wire::usd::serialize")]
    pub cost: Cost,
}

/// [`Usage`] as written by either event schema.
#[derive(Deserialize)]
struct RawUsage {
    steps: u32,
    tokens: u64,
    #[serde(default)]
    cost: Option<Cost>,
    #[serde(default)]
    cost_usd: Option<f64>,
}

impl TryFrom<RawUsage> for Usage {
    type Error = serde_json::Error;

    fn try_from(raw: RawUsage) -> Result<Self, Self::Error> {
        Ok(Usage {
            steps: raw.steps,
            tokens: raw.tokens,
            cost: wire::either_cost(raw.cost_usd, raw.cost)?.unwrap_or(Cost::ZERO),
        })
    }
}

impl Usage {
    /// One step and nothing else.
    pub const ONE_STEP: Usage = Usage {
        steps: 1,
        tokens: 0,
        cost: Cost::ZERO,
    };

    fn saturating_add(self, other: Usage) -> Usage {
        Usage {
            steps: self.steps.saturating_add(other.steps),
            tokens: self.tokens.saturating_add(other.tokens),
            cost: self.cost.saturating_add(other.cost),
        }
    }

    fn saturating_sub(self, other: Usage) -> Usage {
        Usage {
            steps: self.steps.saturating_sub(other.steps),
            tokens: self.tokens.saturating_sub(other.tokens),
            cost: self.cost.saturating_sub(other.cost),
        }
    }
}

/// What a piece of work needs before it may start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Need {
    /// Wall-clock time (e.g. a tool's p99 × factor).
    pub time: Duration,
    /// Steps.
    pub steps: u32,
    /// Tokens (e.g. the prompt plus the expected completion).
    pub tokens: u64,
    /// Money.
    pub cost: Cost,
}

impl Need {
    /// Work that needs only `time`.
    pub fn time(time: Duration) -> Need {
        Need {
            time,
            ..Need::default()
        }
    }
}

/// What is left of each dimension; `None` for an unlimited one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawRemaining")]
pub struct Remaining {
    /// Time to the deadline.
    #[serde(with = "humantime_serde")]
    pub time: Duration,
    /// Steps left.
    pub steps: Option<u32>,
    /// Tokens left.
    pub tokens: Option<u64>,
    /// Money left.
    #[serde(rename = "cost_usd", serialize_with = "wire::usd::option::serialize")]
    pub cost: Option<Cost>,
}

/// [`Remaining`] as written by either event schema.
#[derive(Deserialize)]
struct RawRemaining {
    #[serde(with = "humantime_serde")]
    time: Duration,
    steps: Option<u32>,
    tokens: Option<u64>,
    #[serde(default)]
    cost: Option<Cost>,
    #[serde(default)]
    cost_usd: Option<f64>,
}

impl TryFrom<RawRemaining> for Remaining {
    type Error = serde_json::Error;

    fn try_from(raw: RawRemaining) -> Result<Self, Self::Error> {
        Ok(Remaining {
            time: raw.time,
            steps: raw.steps,
            tokens: raw.tokens,
            cost: wire::either_cost(raw.cost_usd, raw.cost)?,
        })
    }
}

/// A dimension of the triple budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    /// The deadline.
    WallClock,
    /// The step ceiling.
    Steps,
    /// The token ceiling.
    Tokens,
    /// The cost ceiling.
    Cost,
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dimension::WallClock => "wall_clock",
            Dimension::Steps => "steps",
            Dimension::Tokens => "tokens",
            Dimension::Cost => "cost",
        })
    }
}

/// A budget dimension that cannot cover the work, or was overrun by work
/// already done. The engine turns it into the explicit `budget_exhausted`
/// outcome — never a silent truncation.
///
/// Amounts are in the dimension's unit: milliseconds, steps, tokens or
/// micro-dollars; on the wire, as a human reads them: `"500ms"`,
/// `needed_usd`/`remaining_usd` dollars, counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "{dimension} budget exhausted: needs {}, {} remain",
    amount(*.dimension, *.needed),
    amount(*.dimension, *.remaining)
)]
pub struct Exhausted {
    /// Which ceiling.
    pub dimension: Dimension,
    /// What the work needed (or, after the fact, what was used beyond the
    /// ceiling plus the ceiling).
    pub needed: u64,
    /// What was left.
    pub remaining: u64,
}

impl From<DeadlineExceeded> for Exhausted {
    fn from(e: DeadlineExceeded) -> Self {
        Exhausted {
            dimension: Dimension::WallClock,
            needed: millis(e.need),
            remaining: millis(e.remaining),
        }
    }
}

/// An amount of `dimension` as a human reads it: `1s 500ms`, `$0.002000`,
/// `3` (steps or tokens).
fn amount(dimension: Dimension, n: u64) -> String {
    match dimension {
        Dimension::WallClock => wire::duration_text(Duration::from_millis(n)),
        Dimension::Cost => Cost::from_micros(n).to_string(),
        Dimension::Steps | Dimension::Tokens => n.to_string(),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Absolute caps on a child's share, on top of its ratio or weight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChildCaps {
    /// At most this much time.
    pub wall_clock: Option<Duration>,
    /// At most this many steps.
    pub steps: Option<u32>,
    /// At most this many tokens.
    pub tokens: Option<u64>,
    /// At most this much money.
    pub cost: Option<Cost>,
}

/// A share of a parent's budget held by a child until the child reports
/// what it used.
///
/// Not `Clone`: settling consumes it, so a share cannot be returned twice.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a grant must be settled with Budget::settle, or the parent keeps the share reserved"]
pub struct Grant {
    reserved: Usage,
}

impl Grant {
    /// What the parent set aside for the child.
    pub fn reserved(&self) -> Usage {
        self.reserved
    }
}

/// One run's (or one child's) deadline and triple budget.
///
/// ```text
///   limits ──┬── used      (own work + settled children)
///            ├── reserved  (granted to live children)
///            └── remaining = limit − used − reserved
/// ```
///
/// `used` only grows and the deadline never moves: there is no reset. A
/// dimension without a limit is unlimited but still counted.
///
/// ```
/// # use std::time::Duration;
/// # use rein_core::deadline::{Budget, BudgetLimits, Need, Usage};
/// # use rein_core::{Clock, ManualClock, Ratio};
/// let clock = ManualClock::new();
/// let limits = BudgetLimits::new(Duration::from_secs(60))?.with_tokens(10_000)?;
/// let mut run = Budget::start(limits, clock.now());
///
/// // A child agent gets half of what is left, and the parent reserves it.
/// let (child, grant) = run.nested(clock.now(), Ratio::new("ratio", 0.5)?, Default::default());
/// assert_eq!(child.remaining(clock.now()).tokens, Some(5_000));
/// assert_eq!(run.remaining(clock.now()).tokens, Some(5_000));
///
/// // The child used 1 200 tokens; writing that back frees the rest.
/// clock.advance(Duration::from_secs(2));
/// run.settle(grant, Usage { tokens: 1_200, ..Usage::default() }, clock.now())?;
/// assert_eq!(run.remaining(clock.now()).tokens, Some(8_800));
/// assert!(run.check(&Need::time(Duration::from_secs(59)), clock.now()).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Budget {
    deadline: Deadline,
    started: Instant,
    limits: BudgetLimits,
    used: Usage,
    reserved: Usage,
}

impl Budget {
    /// A budget that starts at `now`; its deadline is `now + wall_clock`.
    pub fn start(limits: BudgetLimits, now: Instant) -> Budget {
        Budget {
            deadline: Deadline::after(now, limits.wall_clock),
            started: now,
            limits,
            used: Usage::default(),
            reserved: Usage::default(),
        }
    }

    /// A budget bounded by an adopted deadline (e.g. from
    /// `Rein-Deadline-Ms`) as well as by `limits`: whichever is sooner.
    pub fn within(deadline: Deadline, limits: BudgetLimits, now: Instant) -> Budget {
        let mut budget = Budget::start(limits, now);
        budget.deadline = budget.deadline.min(deadline);
        budget
    }

    /// The deadline every call of this run inherits; retries reuse it.
    pub fn deadline(&self) -> Deadline {
        self.deadline
    }

    /// When the budget started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The ceilings.
    pub fn limits(&self) -> &BudgetLimits {
        &self.limits
    }

    /// What own work and settled children have used.
    pub fn used(&self) -> Usage {
        self.used
    }

    /// What live children hold.
    pub fn reserved(&self) -> Usage {
        self.reserved
    }

    /// What is left of every dimension at `now`.
    pub fn remaining(&self, now: Instant) -> Remaining {
        let taken = self.used.saturating_add(self.reserved);
        Remaining {
            time: self.deadline.remaining(now),
            steps: self.limits.steps.map(|l| l.saturating_sub(taken.steps)),
            tokens: self.limits.tokens.map(|l| l.saturating_sub(taken.tokens)),
            cost: self.limits.cost.map(|l| l.saturating_sub(taken.cost)),
        }
    }

    /// Refuses work that cannot be covered: the deadline has passed or less
    /// time remains than `need.time`, or a ceiling has less left than the
    /// work needs. Checks time first, then steps, tokens and cost. A tool
    /// call inside a step needs no step; a new model turn needs one.
    ///
    /// # Errors
    ///
    /// [`Exhausted`] naming the first dimension that cannot cover `need`.
    pub fn check(&self, need: &Need, now: Instant) -> Result<(), Exhausted> {
        self.deadline.check(need.time, now)?;
        let left = self.remaining(now);
        let short = |dimension, left: Option<u64>, needed: u64| match left {
            Some(remaining) if remaining < needed => Err(Exhausted {
                dimension,
                needed,
                remaining,
            }),
            _ => Ok(()),
        };
        short(
            Dimension::Steps,
            left.steps.map(u64::from),
            u64::from(need.steps),
        )?;
        short(Dimension::Tokens, left.tokens, need.tokens)?;
        short(
            Dimension::Cost,
            left.cost.map(Cost::micros),
            need.cost.micros(),
        )?;
        Ok(())
    }

    /// Records what own work used. The work has happened, so it is always
    /// recorded; the result says whether a ceiling is now breached.
    ///
    /// # Errors
    ///
    /// [`Exhausted`] when usage went beyond a ceiling, or the deadline has
    /// passed.
    pub fn charge(&mut self, usage: Usage, now: Instant) -> Result<(), Exhausted> {
        self.used = self.used.saturating_add(usage);
        self.overrun(now)
    }

    /// Sets `usage` aside for work about to start (a model call's prompt
    /// and the most output it may produce), so that nothing else spends
    /// it; [`settle`](Self::settle) the grant with what the work actually
    /// used. Check first ([`check`](Self::check)): a reservation is always
    /// made, the ceiling having been decided by the caller.
    pub fn reserve(&mut self, usage: Usage) -> Grant {
        self.reserved = self.reserved.saturating_add(usage);
        Grant { reserved: usage }
    }

    /// Reserves the child's share and returns its budget.
    ///
    /// A dimension the parent does not limit is limited in the child only by
    /// its cap, if one is given.
    fn grant(
        &mut self,
        deadline: Deadline,
        share: Usage,
        caps: ChildCaps,
        now: Instant,
    ) -> (Budget, Grant) {
        let limits = BudgetLimits {
            wall_clock: deadline.remaining(now),
            steps: self.limits.steps.map(|_| share.steps).or(caps.steps),
            tokens: self.limits.tokens.map(|_| share.tokens).or(caps.tokens),
            cost: self.limits.cost.map(|_| share.cost).or(caps.cost),
        };
        self.reserved = self.reserved.saturating_add(share);
        let child = Budget {
            deadline,
            started: now,
            limits,
            used: Usage::default(),
            reserved: Usage::default(),
        };
        (child, Grant { reserved: share })
    }

    /// The budget of the next stage of a serial chain: everything left,
    /// rolled forward. Stages run one after another, so the share is
    /// returned by settling before the next stage takes its own.
    pub fn serial(&mut self, now: Instant) -> (Budget, Grant) {
        let left = self.remaining(now);
        let share = Usage {
            steps: left.steps.unwrap_or(0),
            tokens: left.tokens.unwrap_or(0),
            cost: left.cost.unwrap_or(Cost::ZERO),
        };
        self.grant(self.deadline.serial(), share, ChildCaps::default(), now)
    }

    /// Moves the deadline `by` later, never past `cap` and never earlier
    /// than it is.
    ///
    /// # Why
    ///
    /// A branch of a parallel turn whose call waited `by` for its turn at
    /// a governed resource group keeps its whole share of time from the
    /// moment it is sent: a call's timeout starts when it is sent, not when
    /// it starts waiting. `cap` is the turn's deadline less what the turn
    /// still has to do after the call (at or before this budget's parent's
    /// deadline), so the move never hands out time the parent does not
    /// have.
    pub fn postpone(&mut self, by: Duration, cap: Deadline) {
        let later = Deadline::at(self.deadline.instant() + by).min(cap);
        self.deadline = self.deadline.max(later);
    }

    /// The budgets of parallel branches: every dimension's remainder divided
    /// by `weights`, each share capped by `caps`. The shares of all branches
    /// together never exceed the remainder, in any dimension.
    pub fn parallel(
        &mut self,
        now: Instant,
        weights: &[Weight],
        caps: ChildCaps,
    ) -> Vec<(Budget, Grant)> {
        let left = self.remaining(now);
        let deadlines = self.deadline.parallel(now, weights, caps.wall_clock);
        let steps = split(
            u64::from(left.steps.unwrap_or(0)),
            weights,
            caps.steps.map(u64::from),
        );
        let tokens = split(left.tokens.unwrap_or(0), weights, caps.tokens);
        let cost = split(
            left.cost.unwrap_or(Cost::ZERO).micros(),
            weights,
            caps.cost.map(Cost::micros),
        );
        deadlines
            .into_iter()
            .enumerate()
            .map(|(i, deadline)| {
                let share = Usage {
                    steps: u32::try_from(steps[i]).unwrap_or(u32::MAX),
                    tokens: tokens[i],
                    cost: Cost::from_micros(cost[i]),
                };
                self.grant(deadline, share, caps, now)
            })
            .collect()
    }

    /// The budget of a nested agent: `ratio` of every dimension's remainder,
    /// capped by `caps`.
    pub fn nested(&mut self, now: Instant, ratio: Ratio, caps: ChildCaps) -> (Budget, Grant) {
        let left = self.remaining(now);
        let capped = |value: u64, cap: Option<u64>| {
            let share = ratio.of_u64(value);
            cap.map_or(share, |c| share.min(c))
        };
        let share = Usage {
            steps: u32::try_from(capped(
                u64::from(left.steps.unwrap_or(0)),
                caps.steps.map(u64::from),
            ))
            .unwrap_or(u32::MAX),
            tokens: capped(left.tokens.unwrap_or(0), caps.tokens),
            cost: Cost::from_micros(capped(
                left.cost.unwrap_or(Cost::ZERO).micros(),
                caps.cost.map(Cost::micros),
            )),
        };
        let deadline = self.deadline.nested(now, ratio, caps.wall_clock);
        self.grant(deadline, share, caps, now)
    }

    /// Writes a child's consumption back: releases its reservation and
    /// charges what it actually used (which may exceed the grant if the
    /// child overran; the overrun is charged, never dropped).
    ///
    /// # Errors
    ///
    /// [`Exhausted`] when the write-back breaches a ceiling of this budget,
    /// or the deadline has passed.
    pub fn settle(&mut self, grant: Grant, used: Usage, now: Instant) -> Result<(), Exhausted> {
        self.reserved = self.reserved.saturating_sub(grant.reserved);
        self.charge(used, now)
    }

    /// The first ceiling that usage has gone beyond, or an expired deadline.
    fn overrun(&self, now: Instant) -> Result<(), Exhausted> {
        if self.deadline.is_expired(now) {
            return Err(Exhausted {
                dimension: Dimension::WallClock,
                needed: 0,
                remaining: 0,
            });
        }
        let over = |dimension, used: u64, limit: Option<u64>| match limit {
            Some(limit) if used > limit => Err(Exhausted {
                dimension,
                needed: used,
                remaining: 0,
            }),
            _ => Ok(()),
        };
        // Shares held by live children count: own work may not spend them.
        let taken = self.used.saturating_add(self.reserved);
        over(
            Dimension::Steps,
            u64::from(taken.steps),
            self.limits.steps.map(u64::from),
        )?;
        over(Dimension::Tokens, taken.tokens, self.limits.tokens)?;
        over(
            Dimension::Cost,
            taken.cost.micros(),
            self.limits.cost.map(Cost::micros),
        )
    }

    /// Whether any dimension has nothing left at `now`: the deadline has
    /// passed, or a ceiling has no step, token or micro-dollar left, so the
    /// run cannot take another step.
    pub fn exhausted(&self, now: Instant) -> Option<Exhausted> {
        let next_step = Need {
            time: Duration::ZERO,
            steps: 1,
            tokens: 1,
            cost: Cost::from_micros(1),
        };
        self.check(&next_step, now).err()
    }

    /// Time elapsed since the budget started; reported with the write-back
    /// of a child that ran in another process.
    pub fn elapsed(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.started)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postpone_moves_the_deadline_later_within_its_cap_only() {
        let limits = BudgetLimits::new(Duration::from_millis(1_000)).unwrap();
        let start = Instant::from_origin(Duration::ZERO);
        let mut b = Budget::start(limits, start);
        let cap = Deadline::at(Instant::from_origin(Duration::from_millis(1_500)));
        b.postpone(Duration::from_millis(200), cap);
        assert_eq!(b.deadline().remaining(start), Duration::from_millis(1_200));
        b.postpone(Duration::from_millis(900), cap);
        assert_eq!(b.deadline().remaining(start), Duration::from_millis(1_500));
        let earlier = Deadline::at(Instant::from_origin(Duration::from_millis(100)));
        b.postpone(Duration::from_millis(900), earlier);
        assert_eq!(
            b.deadline().remaining(start),
            Duration::from_millis(1_500),
            "never earlier than it was"
        );
    }

    fn t(ms: u64) -> Instant {
        Instant::from_origin(Duration::from_millis(ms))
    }
    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }
    fn limits() -> BudgetLimits {
        BudgetLimits::new(ms(10_000))
            .unwrap()
            .with_steps(10)
            .unwrap()
            .with_tokens(1_000)
            .unwrap()
            .with_cost(Cost::from_micros(1_000_000))
            .unwrap()
    }

    #[test]
    fn config_defaults_are_documented_values() {
        let l = BudgetLimits::try_from(BudgetConfig::default()).unwrap();
        assert_eq!(l.wall_clock(), DEFAULT_WALL_CLOCK);
        assert_eq!(l.steps(), Some(DEFAULT_MAX_STEPS));
        assert_eq!(l.tokens(), Some(DEFAULT_MAX_TOKENS));
        assert_eq!(l.cost(), None);
    }

    #[test]
    fn config_refuses_zero_and_invalid_ceilings() {
        let cases = [
            (
                BudgetConfig {
                    wall_clock: Duration::ZERO,
                    ..BudgetConfig::default()
                },
                "budget.wall_clock",
            ),
            (
                BudgetConfig {
                    max_steps: Some(0),
                    ..BudgetConfig::default()
                },
                "budget.max_steps",
            ),
            (
                BudgetConfig {
                    max_tokens: Some(0),
                    ..BudgetConfig::default()
                },
                "budget.max_tokens",
            ),
            (
                BudgetConfig {
                    max_cost_usd: Some(0.0),
                    ..BudgetConfig::default()
                },
                "budget.max_cost_usd",
            ),
            (
                BudgetConfig {
                    max_cost_usd: Some(-1.0),
                    ..BudgetConfig::default()
                },
                "budget.max_cost_usd",
            ),
            (
                BudgetConfig {
                    max_cost_usd: Some(f64::NAN),
                    ..BudgetConfig::default()
                },
                "budget.max_cost_usd",
            ),
        ];
        for (config, field) in cases {
            assert_eq!(BudgetLimits::try_from(config).unwrap_err().field(), field);
        }
    }

    #[test]
    fn config_reads_humantime_durations() {
        let c: BudgetConfig =
            serde_json::from_str(r#"{"wall_clock": "90s", "max_cost_usd": 0.5}"#).unwrap();
        let l = BudgetLimits::try_from(c).unwrap();
        assert_eq!(l.wall_clock(), Duration::from_secs(90));
        assert_eq!(l.cost(), Some(Cost::from_micros(500_000)));
        assert!(serde_json::from_str::<BudgetConfig>(r#"{"wall_clock": "-5s"}"#).is_err());
        assert!(serde_json::from_str::<BudgetConfig>(r#"{"wallclock": "5s"}"#).is_err());
    }

    #[test]
    fn check_names_the_first_dimension_that_cannot_cover_the_work() {
        let b = Budget::start(limits(), t(0));
        assert!(
            b.check(
                &Need {
                    time: ms(500),
                    tokens: 900,
                    ..Need::default()
                },
                t(0)
            )
            .is_ok()
        );
        let e = b
            .check(
                &Need {
                    tokens: 1_001,
                    ..Need::default()
                },
                t(0),
            )
            .unwrap_err();
        assert_eq!(e.dimension, Dimension::Tokens);
        let e = b.check(&Need::time(ms(10_001)), t(0)).unwrap_err();
        assert_eq!(e.dimension, Dimension::WallClock);
        let e = b
            .check(
                &Need {
                    cost: Cost::from_micros(2_000_000),
                    ..Need::default()
                },
                t(0),
            )
            .unwrap_err();
        assert_eq!(e.dimension, Dimension::Cost);
    }

    #[test]
    fn charge_records_usage_and_reports_an_overrun() {
        let mut b = Budget::start(limits(), t(0));
        assert!(
            b.charge(
                Usage {
                    steps: 1,
                    tokens: 600,
                    ..Usage::default()
                },
                t(10)
            )
            .is_ok()
        );
        let e = b
            .charge(
                Usage {
                    tokens: 600,
                    ..Usage::default()
                },
                t(20),
            )
            .unwrap_err();
        assert_eq!(e.dimension, Dimension::Tokens);
        assert_eq!(
            b.used().tokens,
            1_200,
            "the overrun is recorded, never dropped"
        );
        assert_eq!(b.remaining(t(20)).tokens, Some(0));
    }

    #[test]
    fn step_ceiling_refuses_the_step_after_the_last() {
        let mut b = Budget::start(
            BudgetLimits::new(ms(1000)).unwrap().with_steps(2).unwrap(),
            t(0),
        );
        b.charge(Usage::ONE_STEP, t(0)).unwrap();
        assert!(b.exhausted(t(0)).is_none());
        b.charge(Usage::ONE_STEP, t(0)).unwrap();
        assert_eq!(b.exhausted(t(0)).unwrap().dimension, Dimension::Steps);
    }

    #[test]
    fn expired_deadline_exhausts_the_budget() {
        let b = Budget::start(limits(), t(0));
        assert_eq!(
            b.exhausted(t(10_000)).unwrap().dimension,
            Dimension::WallClock
        );
    }

    #[test]
    fn serial_stage_gets_everything_left_and_settles_back() {
        let mut b = Budget::start(limits(), t(0));
        b.charge(
            Usage {
                tokens: 100,
                ..Usage::default()
            },
            t(0),
        )
        .unwrap();
        let (stage, grant) = b.serial(t(1_000));
        assert_eq!(stage.remaining(t(1_000)).tokens, Some(900));
        assert_eq!(stage.deadline(), b.deadline());
        assert_eq!(
            b.remaining(t(1_000)).tokens,
            Some(0),
            "reserved while the stage runs"
        );
        b.settle(
            grant,
            Usage {
                tokens: 50,
                ..Usage::default()
            },
            t(2_000),
        )
        .unwrap();
        assert_eq!(b.remaining(t(2_000)).tokens, Some(850));
    }

    #[test]
    fn parallel_branches_never_exceed_the_remainder() {
        let mut b = Budget::start(limits(), t(0));
        let w = [
            Weight::new("w", 1.0).unwrap(),
            Weight::new("w", 2.0).unwrap(),
        ];
        let kids = b.parallel(t(1_000), &w, ChildCaps::default());
        let tokens: u64 = kids
            .iter()
            .map(|(k, _)| k.remaining(t(1_000)).tokens.unwrap())
            .sum();
        let time: Duration = kids.iter().map(|(k, _)| k.remaining(t(1_000)).time).sum();
        assert!(tokens <= 1_000);
        assert!(time <= ms(9_000));
        assert_eq!(kids[1].0.remaining(t(1_000)).tokens, Some(666));
    }

    #[test]
    fn nested_child_gets_ratio_with_cap_and_writes_back_overrun() {
        let mut b = Budget::start(limits(), t(0));
        let caps = ChildCaps {
            tokens: Some(100),
            ..ChildCaps::default()
        };
        let (child, grant) = b.nested(t(0), Ratio::new("r", 0.5).unwrap(), caps);
        assert_eq!(child.remaining(t(0)).tokens, Some(100));
        assert_eq!(child.remaining(t(0)).time, ms(5_000));
        assert_eq!(child.remaining(t(0)).steps, Some(5));
        assert_eq!(grant.reserved().tokens, 100);
        // The child overran its grant by 20 tokens: the parent is charged 120.
        b.settle(
            grant,
            Usage {
                tokens: 120,
                ..Usage::default()
            },
            t(10),
        )
        .unwrap();
        assert_eq!(b.used().tokens, 120);
        assert_eq!(b.reserved(), Usage::default());
    }

    #[test]
    fn child_caps_apply_when_the_parent_is_unlimited() {
        let mut b = Budget::start(BudgetLimits::new(ms(1000)).unwrap(), t(0));
        let caps = ChildCaps {
            tokens: Some(100),
            steps: Some(3),
            ..ChildCaps::default()
        };
        let (child, grant) = b.nested(t(0), Ratio::ONE, caps);
        assert_eq!(child.remaining(t(0)).tokens, Some(100));
        assert_eq!(child.remaining(t(0)).steps, Some(3));
        assert_eq!(
            grant.reserved(),
            Usage::default(),
            "nothing to reserve in an unlimited parent"
        );
        let kids = b.parallel(t(0), &[Weight::default(), Weight::default()], caps);
        assert_eq!(kids[1].0.remaining(t(0)).tokens, Some(100));
    }

    #[test]
    fn own_work_cannot_spend_a_childs_reservation() {
        let mut b = Budget::start(limits(), t(0));
        let (_child, grant) = b.nested(t(0), Ratio::new("r", 0.5).unwrap(), ChildCaps::default());
        assert_eq!(grant.reserved().tokens, 500);
        let e = b
            .charge(
                Usage {
                    tokens: 900,
                    ..Usage::default()
                },
                t(1),
            )
            .unwrap_err();
        assert_eq!(e.dimension, Dimension::Tokens);
    }

    #[test]
    fn unlimited_dimensions_stay_unlimited_in_children() {
        let mut b = Budget::start(BudgetLimits::new(ms(1000)).unwrap(), t(0));
        let (child, _grant) = b.nested(t(0), Ratio::ONE, ChildCaps::default());
        assert_eq!(child.remaining(t(0)).tokens, None);
        assert!(
            child
                .check(
                    &Need {
                        tokens: u64::MAX,
                        ..Need::default()
                    },
                    t(0)
                )
                .is_ok()
        );
    }

    #[test]
    fn adopted_deadline_bounds_the_budget() {
        let adopted = Deadline::after(t(0), ms(200));
        let b = Budget::within(adopted, limits(), t(0));
        assert_eq!(b.remaining(t(0)).time, ms(200));
    }

    #[test]
    fn cost_displays_in_dollars() {
        assert_eq!(Cost::from_micros(1_234_567).to_string(), "$1.234567");
        assert_eq!(
            Cost::from_usd("c", 0.0123).unwrap(),
            Cost::from_micros(12_300)
        );
    }
}
