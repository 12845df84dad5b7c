//! What the planner is told of its budget, and the last minimal-output
//! turn (`[agents.NAME.planner]`; the mechanism is
//! [`budget_view`](crate::budget_view)).
//!
//! | setting | default |
//! | --- | --- |
//! | `[agents.NAME.planner] show_budget` | `true`: each turn ends with a line of what is left |
//! | `[agents.NAME.planner] final_turn` | `true`: a budget too short for another tool round trip gets one last turn without tools |
//! | `[agents.NAME] value_of_success_usd` | none: retries are decided as before, without their expected value |

use schemars::JsonSchema;
use serde::Deserialize;

use crate::deadline::Cost;

/// `[agents.NAME.planner]` as written in config.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct PlannerConfig {
    /// Whether each turn tells the model the steps, time, tokens and cost
    /// left; default `true`.
    pub show_budget: Option<bool>,
    /// Whether a budget too short for another tool round trip gets one
    /// last turn without tools, whose answer the run ends with
    /// (`budget_exhausted`, answer attached); default `true`. Off: the run
    /// goes on offering tools until a ceiling ends it bare.
    pub final_turn: Option<bool>,
}

/// An agent's planner settings, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlannerSettings {
    /// Each turn tells the model what is left of its budget.
    pub show_budget: bool,
    /// A short budget gets one last turn without tools.
    pub final_turn: bool,
    /// What one successful run is worth: a retry whose expected value
    /// (its measured success rate × this) is below its expected cost is
    /// not made. `None`: retries are decided without it.
    pub value_of_success: Option<Cost>,
}

impl Default for PlannerSettings {
    fn default() -> Self {
        PlannerSettings {
            show_budget: true,
            final_turn: true,
            value_of_success: None,
        }
    }
}

impl PlannerSettings {
    /// These settings with the budget shown to the model or not.
    #[must_use]
    pub fn with_show_budget(mut self, on: bool) -> Self {
        self.show_budget = on;
        self
    }

    /// These settings with the last minimal-output turn on or off.
    #[must_use]
    pub fn with_final_turn(mut self, on: bool) -> Self {
        self.final_turn = on;
        self
    }

    /// These settings with a run's success worth `value` (`None`: retries
    /// are decided without their value).
    #[must_use]
    pub fn with_value_of_success(mut self, value: Option<Cost>) -> Self {
        self.value_of_success = value;
        self
    }
}

/// The planner settings of `config` and `value_of_success_usd`, or the
/// field (relative to the agent) and why it is refused.
pub(super) fn check_planner(
    config: &PlannerConfig,
    value_of_success_usd: Option<f64>,
) -> Result<PlannerSettings, (String, String)> {
    let value_of_success = match value_of_success_usd {
        None => None,
        Some(v) if v.is_finite() && v > 0.0 => Some(
            Cost::from_usd("value_of_success_usd", v)
                .map_err(|e| ("value_of_success_usd".to_owned(), e.to_string()))?,
        ),
        Some(v) => {
            return Err((
                "value_of_success_usd".to_owned(),
                format!("must be a positive number of dollars, but it is {v}"),
            ));
        }
    };
    Ok(PlannerSettings {
        show_budget: config.show_budget.unwrap_or(true),
        final_turn: config.final_turn.unwrap_or(true),
        value_of_success,
    })
}
