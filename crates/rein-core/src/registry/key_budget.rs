//! What one API key may spend on models through the gateway, per UTC day
//! and per calendar month (`[server.api_keys.budget]`).
//!
//! # Why per key
//!
//! A shared gateway is handed out as keys — one per team, service or
//! agent — and the first thing its operator asks is how much each may
//! spend (seed: budgets per key, team and session, as LiteLLM's virtual
//! keys and Bifrost's per-customer budgets do). A run's own budget bounds
//! one run; a key's bounds everything sent with it, across runs, clients
//! and every process on the store.
//!
//! # How it is charged
//!
//! Only what the provider reported (or, for an attempt that failed after
//! spending, what was received) is charged, to the key, the model that
//! answered and the UTC day the call ended on. The check is made before a
//! call: a key whose spend of the day (or month) reached a limit is refused
//! with 429 and a `Retry-After` until the period's end. Calls already in
//! flight when the limit is reached finish, so a key may pass its limit by
//! what they spend — never by a call started after.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::deadline::Cost;

/// `[server.api_keys.budget]` as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct KeyBudgetConfig {
    /// Input plus output tokens per UTC day.
    pub tokens_per_day: Option<u64>,
    /// Input plus output tokens per calendar month (UTC).
    pub tokens_per_month: Option<u64>,
    /// Dollars per UTC day, at the configured model prices.
    pub cost_usd_per_day: Option<f64>,
    /// Dollars per calendar month (UTC).
    pub cost_usd_per_month: Option<f64>,
}

/// A key's validated limits; every one optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyBudget {
    /// Tokens per UTC day.
    pub tokens_per_day: Option<u64>,
    /// Tokens per calendar month.
    pub tokens_per_month: Option<u64>,
    /// Money per UTC day.
    pub cost_per_day: Option<Cost>,
    /// Money per calendar month.
    pub cost_per_month: Option<Cost>,
}

impl KeyBudgetConfig {
    /// The limits of the table at `p` (`server.api_keys[0].budget`),
    /// laid over `inherited`: each limit given replaces the inherited one.
    ///
    /// # Errors
    ///
    /// `(field, problem)` for each limit refused: zero tokens, or money
    /// that is negative, not finite or below a micro-dollar.
    pub fn validate(
        &self,
        p: &str,
        inherited: KeyBudget,
    ) -> Result<KeyBudget, Vec<(String, String)>> {
        let mut refused = Vec::new();
        let mut budget = inherited;
        for (name, value, slot) in [
            (
                "tokens_per_day",
                self.tokens_per_day,
                &mut budget.tokens_per_day,
            ),
            (
                "tokens_per_month",
                self.tokens_per_month,
                &mut budget.tokens_per_month,
            ),
        ] {
            match value {
                Some(0) => refused.push((
                    format!("{p}.{name}"),
                    "must be at least 1 (leave it out for no limit)".to_owned(),
                )),
                Some(n) => *slot = Some(n),
                None => {}
            }
        }
        for (name, value, slot) in [
            (
                "cost_usd_per_day",
                self.cost_usd_per_day,
                &mut budget.cost_per_day,
            ),
            (
                "cost_usd_per_month",
                self.cost_usd_per_month,
                &mut budget.cost_per_month,
            ),
        ] {
            let Some(usd) = value else { continue };
            match Cost::from_usd(name, usd) {
                Ok(cost) if cost != Cost::ZERO => *slot = Some(cost),
                Ok(_) => refused.push((
                    format!("{p}.{name}"),
                    format!(
                        "must be at least $0.000001 (leave it out for no limit), but it is {usd}"
                    ),
                )),
                Err(e) => refused.push((format!("{p}.{name}"), e.to_string())),
            }
        }
        if refused.is_empty() {
            Ok(budget)
        } else {
            Err(refused)
        }
    }
}

/// A period a limit is counted over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    /// The UTC day.
    Day,
    /// The calendar month, in UTC.
    Month,
}

impl Period {
    /// `day` or `month`, as problems and metrics name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }
}

/// What a key spent in the current day and month.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    /// Tokens today.
    pub day_tokens: u64,
    /// Money today.
    pub day_cost: Cost,
    /// Tokens this month.
    pub month_tokens: u64,
    /// Money this month.
    pub month_cost: Cost,
}

/// A limit a key has reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reached {
    /// Over which period.
    pub period: Period,
    /// `tokens` or `cost`.
    pub dimension: &'static str,
    /// The limit, as a human reads it (`50000 tokens`, `$5.000000`).
    pub limit: String,
    /// What was spent, the same way.
    pub spent: String,
    /// The first day (days since the Unix epoch, UTC) of the next period:
    /// when the key may spend again.
    pub resets_on: u32,
}

impl KeyBudget {
    /// Whether any limit is set.
    pub fn is_limited(&self) -> bool {
        *self != KeyBudget::default()
    }

    /// The first limit `spent` has reached on `today`, day limits first;
    /// `None` while every one has room.
    pub fn reached(&self, spent: &Spent, today: u32) -> Option<Reached> {
        let tokens = |limit: Option<u64>, used: u64, period| {
            limit.filter(|l| used >= *l).map(|l| Reached {
                period,
                dimension: "tokens",
                limit: format!("{l} tokens"),
                spent: format!("{used} tokens"),
                resets_on: next_period(period, today),
            })
        };
        let cost = |limit: Option<Cost>, used: Cost, period| {
            limit.filter(|l| used >= *l).map(|l| Reached {
                period,
                dimension: "cost",
                limit: l.to_string(),
                spent: used.to_string(),
                resets_on: next_period(period, today),
            })
        };
        tokens(self.tokens_per_day, spent.day_tokens, Period::Day)
            .or_else(|| cost(self.cost_per_day, spent.day_cost, Period::Day))
            .or_else(|| tokens(self.tokens_per_month, spent.month_tokens, Period::Month))
            .or_else(|| cost(self.cost_per_month, spent.month_cost, Period::Month))
    }
}

/// The day `period` after the one holding `today` starts on.
fn next_period(period: Period, today: u32) -> u32 {
    match period {
        Period::Day => today.saturating_add(1),
        Period::Month => next_month_start(today),
    }
}

/// The UTC day (days since the Unix epoch) of `unix_ms`.
pub fn day_of(unix_ms: u64) -> u32 {
    u32::try_from(unix_ms / 86_400_000).unwrap_or(u32::MAX)
}

/// The first day of the month holding `day`.
pub fn month_start(day: u32) -> u32 {
    let (y, m, _) = civil(day);
    days_from_civil(y, m, 1)
}

/// The first day of the month after the one holding `day`.
pub fn next_month_start(day: u32) -> u32 {
    let (y, m, _) = civil(day);
    if m == 12 {
        days_from_civil(y + 1, 1, 1)
    } else {
        days_from_civil(y, m + 1, 1)
    }
}

/// Year, month (1–12) and day (1–31) of a day since the Unix epoch: Howard
/// Hinnant's `civil_from_days`, for the proleptic Gregorian calendar.
fn civil(day: u32) -> (i64, u32, u32) {
    let z = i64::from(day) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    // In range by construction: 1 ≤ d ≤ 31, 1 ≤ m ≤ 12.
    (y, m as u32, d as u32)
}

/// Days since the Unix epoch of a date: `days_from_civil`.
fn days_from_civil(y: i64, m: u32, d: u32) -> u32 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    u32::try_from(era * 146_097 + doe - 719_468).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn months_start_on_the_first_across_years_and_leap_days() {
        // 2026-12-07 is day 20_794.
        let day = 20_794;
        assert_eq!(civil(day), (2026, 12, 7));
        assert_eq!(civil(month_start(day)), (2026, 12, 1));
        assert_eq!(civil(next_month_start(day)), (2027, 1, 1));
        assert_eq!(civil(0), (1970, 1, 1));
        let feb_2028 = days_from_civil(2028, 2, 29);
        assert_eq!(civil(feb_2028), (2028, 2, 29));
        assert_eq!(civil(next_month_start(feb_2028)), (2028, 3, 1));
        for d in 0..80_000 {
            let (y, m, dd) = civil(d);
            assert_eq!(days_from_civil(y, m, dd), d);
        }
        assert_eq!(day_of(1_796_601_600_000), 20_794);
    }

    #[test]
    fn the_first_limit_reached_is_named_day_before_month() {
        let budget = KeyBudget {
            tokens_per_day: Some(100),
            cost_per_month: Some(Cost::from_micros(5_000_000)),
            ..KeyBudget::default()
        };
        let today = 20_794;
        let room = Spent {
            day_tokens: 99,
            month_cost: Cost::from_micros(4_999_999),
            ..Spent::default()
        };
        assert_eq!(budget.reached(&room, today), None);
        let day = budget
            .reached(
                &Spent {
                    day_tokens: 100,
                    ..room
                },
                today,
            )
            .unwrap();
        assert_eq!((day.period, day.dimension), (Period::Day, "tokens"));
        assert_eq!(day.resets_on, today + 1);
        let month = budget
            .reached(
                &Spent {
                    month_cost: Cost::from_micros(5_000_000),
                    ..room
                },
                today,
            )
            .unwrap();
        assert_eq!((month.period, month.dimension), (Period::Month, "cost"));
        assert_eq!(month.limit, "$5.000000");
        assert_eq!(civil(month.resets_on), (2027, 1, 1));
        assert!(!KeyBudget::default().is_limited());
        assert!(budget.is_limited());
    }
}
