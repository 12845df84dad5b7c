use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::constants::{
    DEFAULT_MAX_REPEATS, DEFAULT_NO_PROGRESS_WINDOW, DEFAULT_REPEAT_FAILURE_THRESHOLD,
    DEFAULT_SELF_HEAL_ALLOWANCE,
};
use crate::config::{ConfigError, positive_count};

/// The loop guard's settings, as written in config (section `loop_guard`).
///
/// Validated by [`LoopGuard::new`](super::LoopGuard::new); this type itself
/// accepts any numbers so that a loader can report every refused field with
/// its dotted path rather than a serde position.
///
/// | setting | default | range | meaning |
/// | --- | --- | --- | --- |
/// | `max_repeats` | 3 | ≥ 1 | an action fingerprint seen more than this many times trips |
/// | `no_progress_window` | 4 | ≥ 1 | this many consecutive observations of one state digest trip |
/// | `repeat_failure_threshold` | 2 | ≥ 1 | a failure signature seen more than this many times trips |
/// | `self_heal_allowance` | 2 | ≥ 0 | failures of one tool tolerated before it is disabled for the run |
/// | `self_heal_overrides` | `{}` | tool → ≥ 0 | per-tool `self_heal_allowance` |
///
/// An allowance of 0 is allowed and means "no self-healing": the tool's first
/// failure disables it (a sensible choice for irreversible tools).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct LoopGuardConfig {
    /// An action fingerprint (tool, normalized arguments, state digest) seen
    /// more than this many times trips [`Trip::RepeatedAction`](super::Trip::RepeatedAction).
    pub max_repeats: u32,
    /// This many consecutive observations of the same state digest trip
    /// [`Trip::NoProgress`](super::Trip::NoProgress).
    pub no_progress_window: u32,
    /// A failure signature (tool, normalized error) seen more than this many
    /// times trips [`Trip::RepeatFailure`](super::Trip::RepeatFailure).
    pub repeat_failure_threshold: u32,
    /// Failures of one tool the model may try to fix itself; the next one
    /// makes the tool unavailable for the rest of the run.
    pub self_heal_allowance: u32,
    /// Per-tool allowances that replace `self_heal_allowance`, by tool name.
    pub self_heal_overrides: BTreeMap<String, u32>,
}

impl Default for LoopGuardConfig {
    fn default() -> Self {
        LoopGuardConfig {
            max_repeats: DEFAULT_MAX_REPEATS,
            no_progress_window: DEFAULT_NO_PROGRESS_WINDOW,
            repeat_failure_threshold: DEFAULT_REPEAT_FAILURE_THRESHOLD,
            self_heal_allowance: DEFAULT_SELF_HEAL_ALLOWANCE,
            self_heal_overrides: BTreeMap::new(),
        }
    }
}

impl LoopGuardConfig {
    /// Sets `max_repeats`.
    pub fn with_max_repeats(mut self, max_repeats: u32) -> Self {
        self.max_repeats = max_repeats;
        self
    }

    /// Sets `no_progress_window`.
    pub fn with_no_progress_window(mut self, window: u32) -> Self {
        self.no_progress_window = window;
        self
    }

    /// Sets `repeat_failure_threshold`.
    pub fn with_repeat_failure_threshold(mut self, threshold: u32) -> Self {
        self.repeat_failure_threshold = threshold;
        self
    }

    /// Sets `self_heal_allowance`.
    pub fn with_self_heal_allowance(mut self, allowance: u32) -> Self {
        self.self_heal_allowance = allowance;
        self
    }

    /// Adds a per-tool allowance that replaces `self_heal_allowance` for
    /// `tool`.
    pub fn with_self_heal_override(mut self, tool: impl Into<String>, allowance: u32) -> Self {
        self.self_heal_overrides.insert(tool.into(), allowance);
        self
    }

    /// The allowance that applies to `tool`.
    pub(super) fn allowance_for(&self, tool: &str) -> u32 {
        self.self_heal_overrides
            .get(tool)
            .copied()
            .unwrap_or(self.self_heal_allowance)
    }

    /// Refuses zero thresholds and windows and unnamed overrides.
    ///
    /// Zero is refused rather than read as "off": a zero `max_repeats` or
    /// `repeat_failure_threshold` would trip on the first step or failure, and
    /// a zero window would trip before any step, so a zero is always a
    /// mistake in the file, never a policy.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive_count("loop_guard.max_repeats", self.max_repeats)?;
        positive_count("loop_guard.no_progress_window", self.no_progress_window)?;
        positive_count(
            "loop_guard.repeat_failure_threshold",
            self.repeat_failure_threshold,
        )?;
        if self
            .self_heal_overrides
            .keys()
            .any(|tool| tool.trim().is_empty())
        {
            return Err(ConfigError::Inconsistent {
                field: "loop_guard.self_heal_overrides",
                reason: "must be keyed by tool names, but one key is empty".to_owned(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_holds_the_named_defaults_and_is_valid() {
        let c = LoopGuardConfig::default();
        assert_eq!(c.max_repeats, DEFAULT_MAX_REPEATS);
        assert_eq!(c.no_progress_window, DEFAULT_NO_PROGRESS_WINDOW);
        assert_eq!(c.repeat_failure_threshold, DEFAULT_REPEAT_FAILURE_THRESHOLD);
        assert_eq!(c.self_heal_allowance, DEFAULT_SELF_HEAL_ALLOWANCE);
        assert!(c.self_heal_overrides.is_empty());
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn validate_zero_thresholds_and_window_refused_with_field_name() {
        let cases = [
            (
                LoopGuardConfig::default().with_max_repeats(0),
                "loop_guard.max_repeats",
            ),
            (
                LoopGuardConfig::default().with_no_progress_window(0),
                "loop_guard.no_progress_window",
            ),
            (
                LoopGuardConfig::default().with_repeat_failure_threshold(0),
                "loop_guard.repeat_failure_threshold",
            ),
        ];
        for (config, field) in cases {
            let err = config.validate().unwrap_err();
            assert_eq!(err, ConfigError::Zero { field });
            assert_eq!(
                err.to_string(),
                format!("{field} must be greater than zero")
            );
        }
    }

    #[test]
    fn validate_zero_allowance_accepted_as_no_self_healing() {
        let c = LoopGuardConfig::default()
            .with_self_heal_allowance(0)
            .with_self_heal_override("send_email", 0);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn validate_empty_override_tool_name_refused() {
        let err = LoopGuardConfig::default()
            .with_self_heal_override(" ", 1)
            .validate()
            .unwrap_err();
        assert_eq!(err.field(), "loop_guard.self_heal_overrides");
        assert!(err.to_string().contains("one key is empty"), "{err}");
    }

    #[test]
    fn allowance_for_prefers_the_override() {
        let c = LoopGuardConfig::default()
            .with_self_heal_allowance(2)
            .with_self_heal_override("run_sql", 5);
        assert_eq!(c.allowance_for("run_sql"), 5);
        assert_eq!(c.allowance_for("search"), 2);
    }

    #[test]
    fn config_reads_partial_json_and_refuses_unknown_fields() {
        let c: LoopGuardConfig =
            serde_json::from_str(r#"{"max_repeats": 5, "self_heal_overrides": {"send_email": 0}}"#)
                .unwrap();
        assert_eq!(c.max_repeats, 5);
        assert_eq!(c.no_progress_window, DEFAULT_NO_PROGRESS_WINDOW);
        assert_eq!(c.self_heal_overrides.get("send_email"), Some(&0));
        let err = serde_json::from_str::<LoopGuardConfig>(r#"{"max_repeat": 5}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }
}
