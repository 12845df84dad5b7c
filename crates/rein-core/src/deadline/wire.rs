//! How budgets are written in events, reports and API answers: durations
//! as humans write them (`"30s"`), money in dollars (`cost_usd`).
//!
//! # Why a module of its own
//!
//! The budget types are read back from everything rein ever stored. Event
//! schema 1 wrote a duration as serde's `{"secs": 30, "nanos": 0}` and
//! money as a bare integer of micro-dollars under `cost`; schema 2 writes
//! `"30s"` and `"cost_usd": 0.0123`. Each reader here takes both forms, told
//! apart by the key (`cost` or `cost_usd`) or the JSON type (text or
//! object, text or number), so a file written by an older rein reads
//! without a migration and nothing has to know which version wrote it.
//!
//! Dollars are written as the shortest decimal of `micros / 10⁶` and read
//! back rounded to the micro-dollar: exact for any amount below about nine
//! billion dollars, where `f64` still holds every micro-dollar.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::budget::{Cost, Dimension, Exhausted};

/// A cost as a JSON number of dollars.
pub(crate) mod usd {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(cost: &Cost, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(cost.usd())
    }

    /// The same for an optional cost (`null` when unlimited or unknown).
    pub(crate) mod option {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(
            cost: &Option<Cost>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match cost {
                Some(cost) => serializer.serialize_f64(cost.usd()),
                None => serializer.serialize_none(),
            }
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<Cost>, D::Error> {
            Option::<f64>::deserialize(deserializer)?
                .map(from_usd)
                .transpose()
        }
    }
}

/// Dollars read back, refused when negative or not finite.
pub(crate) fn from_usd<E: serde::de::Error>(usd: f64) -> Result<Cost, E> {
    Cost::from_usd("cost_usd", usd).map_err(E::custom)
}

/// A cost as either schema wrote it: `cost_usd` (dollars) wins over `cost`
/// (micro-dollars, schema 1).
pub(super) fn either_cost<E: serde::de::Error>(
    cost_usd: Option<f64>,
    micros: Option<Cost>,
) -> Result<Option<Cost>, E> {
    match cost_usd {
        Some(usd) => from_usd(usd).map(Some),
        None => Ok(micros),
    }
}

/// A duration as either schema wrote it.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum AnyDuration {
    /// Schema 2: `"30s"`, `"1h 30m"`.
    Text(String),
    /// Schema 1: serde's own form.
    Parts { secs: u64, nanos: u32 },
}

impl AnyDuration {
    pub(super) fn into_duration<E: serde::de::Error>(self) -> Result<Duration, E> {
        match self {
            AnyDuration::Text(text) => humantime_serde::re::humantime::parse_duration(&text)
                .map_err(|e| E::custom(format!("{text:?} is not a duration: {e}"))),
            AnyDuration::Parts { secs, nanos } => {
                if nanos >= 1_000_000_000 {
                    return Err(E::custom(format!("{nanos} nanos is not below one second")));
                }
                Ok(Duration::new(secs, nanos))
            }
        }
    }
}

/// A duration as schema 2 writes it: as a config would (`"5m"`, `"366d"`).
pub(super) fn duration_text(d: Duration) -> String {
    crate::config::duration::text(d)
}

/// A duration as schema 2 writes it, for serde.
pub(super) fn serialize_duration<S: Serializer>(
    d: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&duration_text(*d))
}

/// [`Exhausted`] on the wire: the amounts in the dimension's own unit, as
/// a human reads them — `"needed": "500ms"` for the wall clock,
/// `"needed_usd": 0.002` for money, plain counts for steps and tokens.
/// Schema 1 wrote every amount as a bare integer (milliseconds,
/// micro-dollars); those still read.
#[derive(Serialize, Deserialize)]
struct WireExhausted {
    dimension: Dimension,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    needed: Option<Amount>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    remaining: Option<Amount>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    needed_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    remaining_usd: Option<f64>,
}

/// A count, or a duration's text.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Amount {
    Count(u64),
    Text(String),
}

impl Serialize for Exhausted {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (needed, remaining, needed_usd, remaining_usd) = match self.dimension {
            Dimension::WallClock => (
                Some(Amount::Text(duration_text(Duration::from_millis(
                    self.needed,
                )))),
                Some(Amount::Text(duration_text(Duration::from_millis(
                    self.remaining,
                )))),
                None,
                None,
            ),
            Dimension::Cost => (
                None,
                None,
                Some(Cost::from_micros(self.needed).usd()),
                Some(Cost::from_micros(self.remaining).usd()),
            ),
            Dimension::Steps | Dimension::Tokens => (
                Some(Amount::Count(self.needed)),
                Some(Amount::Count(self.remaining)),
                None,
                None,
            ),
        };
        WireExhausted {
            dimension: self.dimension,
            needed,
            remaining,
            needed_usd,
            remaining_usd,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Exhausted {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = WireExhausted::deserialize(deserializer)?;
        let dimension = wire.dimension;
        let amount = |name: &str, amount: Option<Amount>, usd: Option<f64>| {
            if let Some(usd) = usd {
                return from_usd::<D::Error>(usd).map(Cost::micros);
            }
            match amount {
                Some(Amount::Count(n)) => Ok(n),
                Some(Amount::Text(text)) if dimension == Dimension::WallClock => {
                    let d = AnyDuration::Text(text).into_duration::<D::Error>()?;
                    Ok(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                }
                Some(Amount::Text(text)) => Err(serde::de::Error::custom(format!(
                    "{name} of the {dimension} dimension is a count, not {text:?}"
                ))),
                None => Err(serde::de::Error::missing_field("needed")),
            }
        };
        Ok(Exhausted {
            dimension,
            needed: amount("needed", wire.needed, wire.needed_usd)?,
            remaining: amount("remaining", wire.remaining, wire.remaining_usd)?,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::deadline::{BudgetLimits, Remaining, Usage};

    #[test]
    fn schema_2_writes_durations_as_text_and_money_in_dollars() {
        let limits = BudgetLimits::new(Duration::from_secs(300))
            .unwrap()
            .with_cost(Cost::from_micros(12_300))
            .unwrap();
        assert_eq!(
            serde_json::to_value(limits).unwrap(),
            json!({"wall_clock": "5m", "steps": null, "tokens": null, "cost_usd": 0.0123})
        );
        let used = Usage {
            steps: 2,
            tokens: 2_000,
            cost: Cost::from_micros(2_000),
        };
        assert_eq!(
            serde_json::to_value(used).unwrap(),
            json!({"steps": 2, "tokens": 2000, "cost_usd": 0.002})
        );
    }

    #[test]
    fn schema_1_forms_still_read() {
        let limits: BudgetLimits = serde_json::from_value(json!({
            "wall_clock": {"secs": 30, "nanos": 0}, "steps": null, "tokens": 10, "cost": 500
        }))
        .unwrap();
        assert_eq!(limits.wall_clock(), Duration::from_secs(30));
        assert_eq!(limits.cost(), Some(Cost::from_micros(500)));
        let used: Usage =
            serde_json::from_value(json!({"steps": 1, "tokens": 0, "cost": 2000})).unwrap();
        assert_eq!(used.cost, Cost::from_micros(2_000));
        let left: Remaining = serde_json::from_value(
            json!({"time": "2s", "steps": null, "tokens": null, "cost": null}),
        )
        .unwrap();
        assert_eq!(left.cost, None);
        let short: Exhausted = serde_json::from_value(
            json!({"dimension": "wall_clock", "needed": 500, "remaining": 476}),
        )
        .unwrap();
        assert_eq!((short.needed, short.remaining), (500, 476));
    }

    #[test]
    fn every_amount_round_trips_in_its_dimensions_unit() {
        for (dimension, text) in [
            (
                Dimension::WallClock,
                json!({"dimension": "wall_clock", "needed": "1s 500ms", "remaining": "476ms"}),
            ),
            (
                Dimension::Cost,
                json!({"dimension": "cost", "needed_usd": 0.0015, "remaining_usd": 0.000476}),
            ),
            (
                Dimension::Tokens,
                json!({"dimension": "tokens", "needed": 1500, "remaining": 476}),
            ),
        ] {
            let short = Exhausted {
                dimension,
                needed: 1_500,
                remaining: 476,
            };
            assert_eq!(serde_json::to_value(short).unwrap(), text);
            assert_eq!(serde_json::from_value::<Exhausted>(text).unwrap(), short);
        }
    }

    #[test]
    fn money_reads_back_to_the_micro_dollar() {
        for micros in [0, 1, 7, 12_300, 999_999, 1_000_001, 123_456_789_012] {
            let cost = Cost::from_micros(micros);
            let text = serde_json::to_string(&Usage {
                cost,
                ..Usage::default()
            })
            .unwrap();
            let back: Usage = serde_json::from_str(&text).unwrap();
            assert_eq!(back.cost, cost, "{text}");
        }
    }

    #[test]
    fn a_negative_or_malformed_amount_is_an_error_not_a_panic() {
        assert!(
            serde_json::from_value::<Usage>(json!({"steps": 1, "tokens": 0, "cost_usd": -1.0}))
                .is_err()
        );
        assert!(serde_json::from_value::<BudgetLimits>(json!({"wall_clock": "soon"})).is_err());
        assert!(
            serde_json::from_value::<Exhausted>(
                json!({"dimension": "steps", "needed": "many", "remaining": 0})
            )
            .is_err()
        );
    }
}
