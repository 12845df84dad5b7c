use std::collections::{BTreeSet, HashMap};

use super::action::{Action, fingerprint};
use super::config::LoopGuardConfig;
use super::digest::{FailureSignature, StateDigest, failure_signature};
use super::normalize::normalize_error;
use super::trip::{FailureVerdict, Trip, Verdict};
use crate::clock::Instant;
use crate::config::ConfigError;
use crate::deadline::Budget;
use crate::idempotency::Normalizer;

/// The loop guard of one run: detects an agent loop that does not converge
/// and says why, and keeps each tool's self-heal allowance.
///
/// One guard per run; it is not shared between runs (cross-run health is the
/// breakers' job). The engine calls, per step:
///
/// ```text
///  before the call:  is_available(tool)?  ── no ──▶ refuse: "unavailable, do not retry"
///  after a failure:  on_failure(tool, error_text) ─▶ Allowed | ToolDisabled | AlreadyDisabled | Trip
///  after every step: observe(action, state)       ─▶ Continue | Trip
///  before every step: check_budget(budget, now)    ─▶ Continue | Trip(Budget)
/// ```
///
/// Successes are never reported to [`on_failure`](LoopGuard::on_failure), so
/// a tool that legitimately runs many times never counts toward a repeat
/// failure (seed 002: key on `action | error`, not on the action).
///
/// See the [module docs](super) for the rules and their defaults.
#[derive(Debug, Clone)]
pub struct LoopGuard {
    config: LoopGuardConfig,
    normalizer: Normalizer,
    /// Sightings per action fingerprint (tool, normalized args, state).
    repeats: HashMap<[u8; 16], u32>,
    /// The last observed state and how many consecutive observations it has
    /// had: "the last W digests are equal" is "the streak is at least W",
    /// without keeping a ring of W digests.
    last_state: Option<(StateDigest, u32)>,
    /// Sightings per failure signature.
    signatures: HashMap<FailureSignature, u32>,
    /// Failures per tool, for the self-heal allowance.
    failures: HashMap<String, u32>,
    disabled: BTreeSet<String>,
}

impl LoopGuard {
    /// A guard for a new run, fingerprinting arguments with the default
    /// [`Normalizer`].
    ///
    /// # Errors
    ///
    /// [`ConfigError::Zero`] when `max_repeats`, `no_progress_window` or
    /// `repeat_failure_threshold` is zero, and
    /// [`ConfigError::Inconsistent`] when `self_heal_overrides` has an empty
    /// tool name.
    pub fn new(config: LoopGuardConfig) -> Result<LoopGuard, ConfigError> {
        config.validate()?;
        Ok(LoopGuard {
            config,
            normalizer: Normalizer::default(),
            repeats: HashMap::new(),
            last_state: None,
            signatures: HashMap::new(),
            failures: HashMap::new(),
            disabled: BTreeSet::new(),
        })
    }

    /// Uses `normalizer` for action arguments, so that the guard's idea of
    /// "the same arguments" matches the idempotency key's.
    pub fn with_normalizer(mut self, normalizer: Normalizer) -> Self {
        self.normalizer = normalizer;
        self
    }

    /// The settings the guard was built with.
    pub fn config(&self) -> &LoopGuardConfig {
        &self.config
    }

    /// Trips when the run's triple budget has nothing left: the deadline has
    /// passed, or no step, token or micro-dollar remains. Called before each
    /// step, so a run at its ceiling ends with an explicit
    /// `budget_exhausted` outcome instead of starting work it cannot finish.
    pub fn check_budget(&self, budget: &Budget, now: Instant) -> Verdict {
        match budget.exhausted(now) {
            Some(exhausted) => Verdict::Trip(Trip::Budget(exhausted)),
            None => Verdict::Continue,
        }
    }

    /// Records a step — the action taken and the state digest after it — and
    /// decides whether the run may go on.
    ///
    /// Call once per step, after the step, whether it succeeded or failed.
    /// Repeated action is checked before no progress; both are checked on
    /// every call, so a tripped guard keeps tripping.
    pub fn observe(&mut self, action: Action<'_>, state: StateDigest) -> Verdict {
        let count = self
            .repeats
            .entry(fingerprint(action, state, &self.normalizer))
            .or_insert(0);
        *count = count.saturating_add(1);
        let count = *count;

        let streak = match self.last_state {
            Some((last, streak)) if last == state => streak.saturating_add(1),
            _ => 1,
        };
        self.last_state = Some((state, streak));

        if count > self.config.max_repeats {
            return Verdict::Trip(Trip::RepeatedAction {
                tool: action.tool.to_owned(),
                digest: state,
                count,
                max: self.config.max_repeats,
            });
        }
        if streak >= self.config.no_progress_window {
            return Verdict::Trip(Trip::NoProgress {
                window: self.config.no_progress_window,
                digest: state,
            });
        }
        Verdict::Continue
    }

    /// Records a failed call of `tool` and decides what the model may do next.
    ///
    /// `error_text` is [normalized](normalize_error) and signed with the
    /// tool; the signature counts toward the repeat-failure rule, and the
    /// failure counts toward the tool's self-heal allowance. When both rules
    /// fire on one failure the trip is returned (ending the run is the
    /// stronger outcome), and the tool is disabled all the same.
    ///
    /// Call only for failures — a validation refusal, a tool error, a call to
    /// a disabled tool — never for successes.
    pub fn on_failure(&mut self, tool: &str, error_text: &str) -> FailureVerdict {
        let error = normalize_error(error_text);
        let signature = failure_signature(tool, &error);
        let count = self.signatures.entry(signature).or_insert(0);
        *count = count.saturating_add(1);
        let count = *count;

        let failures = match self.failures.get_mut(tool) {
            Some(failures) => {
                *failures = failures.saturating_add(1);
                *failures
            }
            None => {
                self.failures.insert(tool.to_owned(), 1);
                1
            }
        };
        let allowance = self.config.allowance_for(tool);
        let was_disabled = self.disabled.contains(tool);
        if failures > allowance && !was_disabled {
            self.disabled.insert(tool.to_owned());
        }

        let threshold = self.config.repeat_failure_threshold;
        if count > threshold {
            FailureVerdict::Trip(Trip::RepeatFailure {
                tool: tool.to_owned(),
                signature,
                error,
                count,
                threshold,
            })
        } else if was_disabled {
            FailureVerdict::AlreadyDisabled { failures }
        } else if failures > allowance {
            FailureVerdict::ToolDisabled {
                tool: tool.to_owned(),
                failures,
                allowance,
            }
        } else {
            FailureVerdict::Allowed {
                remaining: allowance - failures,
            }
        }
    }

    /// Whether `tool` may still be called in this run: false once its
    /// failures exceeded its self-heal allowance.
    pub fn is_available(&self, tool: &str) -> bool {
        !self.disabled.contains(tool)
    }

    /// The tools disabled in this run, in name order.
    pub fn disabled_tools(&self) -> impl Iterator<Item = &str> + '_ {
        self.disabled.iter().map(String::as_str)
    }

    /// The failures of `tool` recorded in this run.
    pub fn failures(&self, tool: &str) -> u32 {
        self.failures.get(tool).copied().unwrap_or(0)
    }

    /// The self-heal allowance that applies to `tool`.
    pub fn allowance(&self, tool: &str) -> u32 {
        self.config.allowance_for(tool)
    }
}

impl TryFrom<LoopGuardConfig> for LoopGuard {
    type Error = ConfigError;

    fn try_from(config: LoopGuardConfig) -> Result<Self, ConfigError> {
        LoopGuard::new(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deadline::{BudgetLimits, Dimension, Usage};
    use std::time::Duration;

    #[test]
    fn check_budget_at_the_step_ceiling_trips_with_the_dimension() {
        let guard = LoopGuard::new(LoopGuardConfig::default()).unwrap();
        let limits = BudgetLimits::new(Duration::from_secs(10))
            .unwrap()
            .with_steps(1)
            .unwrap();
        let mut budget = Budget::start(limits, Instant::ORIGIN);
        assert_eq!(
            guard.check_budget(&budget, Instant::ORIGIN),
            Verdict::Continue
        );
        let _ = budget.charge(Usage::ONE_STEP, Instant::ORIGIN);
        let Verdict::Trip(Trip::Budget(e)) = guard.check_budget(&budget, Instant::ORIGIN) else {
            panic!("expected a budget trip");
        };
        assert_eq!(e.dimension, Dimension::Steps);
        let late = Instant::ORIGIN + Duration::from_secs(10);
        let v = guard.check_budget(&Budget::start(limits, Instant::ORIGIN), late);
        assert!(matches!(v, Verdict::Trip(Trip::Budget(e)) if e.dimension == Dimension::WallClock));
        assert_eq!(
            serde_json::to_value(Trip::Budget(e)).unwrap()["reason"],
            Trip::Budget(e).as_str()
        );
    }

    use serde_json::{Value, json};

    fn guard(config: LoopGuardConfig) -> LoopGuard {
        LoopGuard::new(config).unwrap()
    }

    fn state(n: u8) -> StateDigest {
        StateDigest::from_bytes([n; 16])
    }

    /// A config where only the rule under test can trip.
    fn only(config: impl FnOnce(LoopGuardConfig) -> LoopGuardConfig) -> LoopGuardConfig {
        config(
            LoopGuardConfig::default()
                .with_max_repeats(u32::MAX)
                .with_no_progress_window(u32::MAX)
                .with_repeat_failure_threshold(u32::MAX)
                .with_self_heal_allowance(u32::MAX),
        )
    }

    fn step(g: &mut LoopGuard, tool: &str, args: &Value, s: StateDigest) -> Verdict {
        g.observe(Action::new(tool, args), s)
    }

    #[test]
    fn new_refuses_invalid_config() {
        let err =
            LoopGuard::new(LoopGuardConfig::default().with_no_progress_window(0)).unwrap_err();
        assert_eq!(
            err,
            ConfigError::Zero {
                field: "loop_guard.no_progress_window"
            }
        );
        assert!(LoopGuard::try_from(LoopGuardConfig::default()).is_ok());
    }

    #[test]
    fn observe_same_action_exactly_max_repeats_times_continues() {
        let mut g = guard(only(|c| c.with_max_repeats(3)));
        let args = json!({"q": "x"});
        for _ in 0..3 {
            assert_eq!(step(&mut g, "search", &args, state(1)), Verdict::Continue);
        }
    }

    #[test]
    fn observe_same_action_one_past_max_repeats_trips() {
        let mut g = guard(only(|c| c.with_max_repeats(3)));
        let args = json!({"q": "x"});
        for _ in 0..3 {
            assert_eq!(step(&mut g, "search", &args, state(1)), Verdict::Continue);
        }
        assert_eq!(
            step(&mut g, "search", &args, state(1)),
            Verdict::Trip(Trip::RepeatedAction {
                tool: "search".into(),
                digest: state(1),
                count: 4,
                max: 3,
            })
        );
    }

    #[test]
    fn observe_max_repeats_of_one_trips_on_second_sighting() {
        let mut g = guard(only(|c| c.with_max_repeats(1)));
        let args = json!({});
        assert_eq!(step(&mut g, "t", &args, state(1)), Verdict::Continue);
        assert!(step(&mut g, "t", &args, state(1)).is_trip());
    }

    #[test]
    fn observe_same_action_on_changed_state_starts_a_new_count() {
        let mut g = guard(only(|c| c.with_max_repeats(2)));
        let args = json!({"q": "x"});
        for s in [1, 1, 2, 2, 3, 3] {
            assert_eq!(
                step(&mut g, "search", &args, state(s)),
                Verdict::Continue,
                "state {s}"
            );
        }
    }

    #[test]
    fn observe_returning_to_an_earlier_state_resumes_its_count() {
        let mut g = guard(only(|c| c.with_max_repeats(2)));
        let args = json!({"q": "x"});
        for s in [1, 2, 1, 2] {
            assert_eq!(step(&mut g, "search", &args, state(s)), Verdict::Continue);
        }
        assert!(step(&mut g, "search", &args, state(1)).is_trip());
    }

    #[test]
    fn observe_normalized_equal_args_count_as_one_action() {
        let mut g = guard(only(|c| c.with_max_repeats(2)));
        for args in [json!({"q": "x", "n": 1}), json!({"n": 1.0, "q": " x "})] {
            assert_eq!(step(&mut g, "search", &args, state(1)), Verdict::Continue);
        }
        let args = json!({"q": "x", "n": 1, "request_id": "r-2"});
        assert!(step(&mut g, "search", &args, state(1)).is_trip());
    }

    #[test]
    fn observe_different_args_or_tools_are_different_actions() {
        let mut g = guard(only(|c| c.with_max_repeats(1)));
        assert_eq!(
            step(&mut g, "search", &json!({"q": 1}), state(1)),
            Verdict::Continue
        );
        assert_eq!(
            step(&mut g, "search", &json!({"q": 2}), state(1)),
            Verdict::Continue
        );
        assert_eq!(
            step(&mut g, "fetch", &json!({"q": 1}), state(1)),
            Verdict::Continue
        );
    }

    #[test]
    fn observe_guard_normalizer_decides_what_same_arguments_means() {
        use crate::idempotency::NormalizerConfig;
        let n = Normalizer::new(NormalizerConfig {
            volatile_fields: vec!["nonce".into()],
            ..NormalizerConfig::default()
        });
        let mut g = guard(only(|c| c.with_max_repeats(1))).with_normalizer(n);
        assert_eq!(
            step(&mut g, "t", &json!({"nonce": 1}), state(1)),
            Verdict::Continue
        );
        assert!(step(&mut g, "t", &json!({"nonce": 2}), state(1)).is_trip());
    }

    #[test]
    fn observe_unchanged_state_for_window_minus_one_steps_continues() {
        let mut g = guard(only(|c| c.with_no_progress_window(4)));
        for i in 0..3 {
            assert_eq!(
                step(&mut g, "search", &json!({"q": i}), state(1)),
                Verdict::Continue
            );
        }
    }

    #[test]
    fn observe_unchanged_state_for_window_steps_trips_even_with_new_actions() {
        let mut g = guard(only(|c| c.with_no_progress_window(4)));
        for i in 0..3 {
            assert_eq!(
                step(&mut g, "search", &json!({"q": i}), state(1)),
                Verdict::Continue
            );
        }
        assert_eq!(
            step(&mut g, "fetch", &json!({"url": "u"}), state(1)),
            Verdict::Trip(Trip::NoProgress {
                window: 4,
                digest: state(1)
            })
        );
    }

    #[test]
    fn observe_window_of_one_trips_on_first_observation() {
        let mut g = guard(only(|c| c.with_no_progress_window(1)));
        assert!(step(&mut g, "t", &json!({}), state(1)).is_trip());
    }

    #[test]
    fn observe_state_change_resets_no_progress_streak() {
        let mut g = guard(only(|c| c.with_no_progress_window(3)));
        for (i, s) in [1, 1, 2, 2, 1, 1].into_iter().enumerate() {
            assert_eq!(
                step(&mut g, "t", &json!({"i": i}), state(s)),
                Verdict::Continue
            );
        }
        assert!(step(&mut g, "t", &json!({"i": 99}), state(1)).is_trip());
    }

    #[test]
    fn observe_repeated_action_is_reported_before_no_progress() {
        let mut g = guard(LoopGuardConfig::default());
        let args = json!({"q": "x"});
        for _ in 0..3 {
            assert_eq!(step(&mut g, "search", &args, state(1)), Verdict::Continue);
        }
        let verdict = step(&mut g, "search", &args, state(1));
        assert!(
            matches!(
                verdict,
                Verdict::Trip(Trip::RepeatedAction {
                    count: 4,
                    max: 3,
                    ..
                })
            ),
            "{verdict:?}"
        );
    }

    #[test]
    fn on_failure_same_signature_exactly_threshold_times_is_not_a_trip() {
        let mut g = guard(only(|c| c.with_repeat_failure_threshold(2)));
        for _ in 0..2 {
            assert!(!g.on_failure("run_sql", "lock timeout").is_trip());
        }
    }

    #[test]
    fn on_failure_same_signature_one_past_threshold_trips() {
        let mut g = guard(only(|c| c.with_repeat_failure_threshold(2)));
        let _ = g.on_failure("run_sql", "lock timeout on row 4471");
        let _ = g.on_failure("run_sql", "lock timeout on row 4472");
        match g.on_failure("run_sql", "Lock timeout on row 9") {
            FailureVerdict::Trip(Trip::RepeatFailure {
                tool,
                error,
                count,
                threshold,
                signature,
            }) => {
                assert_eq!(tool, "run_sql");
                assert_eq!(error, "lock timeout on row <n>");
                assert_eq!((count, threshold), (3, 2));
                assert_eq!(
                    signature,
                    failure_signature("run_sql", "lock timeout on row <n>")
                );
            }
            other => panic!("expected a repeat-failure trip, got {other:?}"),
        }
    }

    #[test]
    fn on_failure_lock_timeouts_on_different_rows_share_a_signature() {
        assert_eq!(
            failure_signature("run_sql", &normalize_error("lock timeout on row 4471")),
            failure_signature("run_sql", &normalize_error("lock timeout on row 4472"))
        );
    }

    #[test]
    fn on_failure_uuids_and_timestamps_collapse_into_one_signature() {
        let mut g = guard(only(|c| c.with_repeat_failure_threshold(1)));
        let _ = g.on_failure(
            "refund",
            "order 550e8400-e29b-41d4-a716-446655440000 locked at 2026-11-29T16:51:55Z",
        );
        let verdict = g.on_failure(
            "refund",
            "order 6ba7b810-9dad-11d1-80b4-00c04fd430c8 locked at 2026-11-30 08:00:01.5+01:00",
        );
        assert!(verdict.is_trip(), "{verdict:?}");
    }

    #[test]
    fn on_failure_different_errors_or_tools_count_separately() {
        let mut g = guard(only(|c| c.with_repeat_failure_threshold(1)));
        assert!(!g.on_failure("run_sql", "lock timeout").is_trip());
        assert!(!g.on_failure("run_sql", "syntax error").is_trip());
        assert!(!g.on_failure("other_sql", "lock timeout").is_trip());
    }

    #[test]
    fn successes_never_count_toward_repeat_failure() {
        let mut g = guard(
            LoopGuardConfig::default()
                .with_max_repeats(100)
                .with_no_progress_window(100),
        );
        // run_sql succeeds many times on a changing state...
        for i in 0..10u8 {
            assert_eq!(
                step(&mut g, "run_sql", &json!({"q": "select 1"}), state(i)),
                Verdict::Continue
            );
        }
        // ...which counts for nothing: two failures are still within threshold.
        assert!(!g.on_failure("run_sql", "lock timeout").is_trip());
        assert!(!g.on_failure("run_sql", "lock timeout").is_trip());
        assert_eq!(g.failures("run_sql"), 2);
    }

    #[test]
    fn on_failure_within_allowance_is_allowed_with_remaining() {
        let mut g = guard(only(|c| c.with_self_heal_allowance(2)));
        assert_eq!(
            g.on_failure("search", "e1"),
            FailureVerdict::Allowed { remaining: 1 }
        );
        assert_eq!(
            g.on_failure("search", "e2"),
            FailureVerdict::Allowed { remaining: 0 }
        );
        assert!(g.is_available("search"));
        assert_eq!(g.allowance("search"), 2);
    }

    #[test]
    fn on_failure_one_past_allowance_disables_the_tool_once() {
        let mut g = guard(only(|c| c.with_self_heal_allowance(2)));
        let _ = g.on_failure("search", "e1");
        let _ = g.on_failure("search", "e2");
        assert_eq!(
            g.on_failure("search", "e3"),
            FailureVerdict::ToolDisabled {
                tool: "search".into(),
                failures: 3,
                allowance: 2,
            }
        );
        assert!(!g.is_available("search"));
        assert!(g.is_available("fetch"));
        assert_eq!(
            g.on_failure("search", "unavailable"),
            FailureVerdict::AlreadyDisabled { failures: 4 }
        );
        assert_eq!(g.disabled_tools().collect::<Vec<_>>(), ["search"]);
    }

    #[test]
    fn on_failure_per_tool_override_replaces_the_allowance() {
        let mut g = guard(only(|c| {
            c.with_self_heal_allowance(1)
                .with_self_heal_override("flaky", 3)
                .with_self_heal_override("send_email", 0)
        }));
        assert!(matches!(
            g.on_failure("send_email", "smtp down"),
            FailureVerdict::ToolDisabled { allowance: 0, .. }
        ));
        for remaining in [2, 1, 0] {
            assert_eq!(
                g.on_failure("flaky", "x"),
                FailureVerdict::Allowed { remaining }
            );
        }
        assert!(matches!(
            g.on_failure("flaky", "x"),
            FailureVerdict::ToolDisabled {
                failures: 4,
                allowance: 3,
                ..
            }
        ));
        assert_eq!(
            g.on_failure("other", "x"),
            FailureVerdict::Allowed { remaining: 0 }
        );
        assert!(matches!(
            g.on_failure("other", "x"),
            FailureVerdict::ToolDisabled { allowance: 1, .. }
        ));
        assert_eq!(
            g.disabled_tools().collect::<Vec<_>>(),
            ["flaky", "other", "send_email"]
        );
    }

    #[test]
    fn on_failure_trip_wins_over_disabling_but_the_tool_is_disabled_too() {
        let mut g = guard(LoopGuardConfig::default());
        let _ = g.on_failure("run_sql", "lock timeout on row 1");
        let _ = g.on_failure("run_sql", "lock timeout on row 2");
        assert!(g.on_failure("run_sql", "lock timeout on row 3").is_trip());
        assert!(!g.is_available("run_sql"));
    }

    #[test]
    fn on_failure_calls_to_a_disabled_tool_still_trip_on_repeat() {
        let mut g = guard(LoopGuardConfig::default().with_self_heal_allowance(0));
        assert!(matches!(
            g.on_failure("t", "boom"),
            FailureVerdict::ToolDisabled { .. }
        ));
        assert_eq!(
            g.on_failure("t", "tool t is unavailable"),
            FailureVerdict::AlreadyDisabled { failures: 2 }
        );
        assert_eq!(
            g.on_failure("t", "tool t is unavailable"),
            FailureVerdict::AlreadyDisabled { failures: 3 }
        );
        assert!(g.on_failure("t", "tool t is unavailable").is_trip());
    }

    #[test]
    fn trip_serializes_with_a_snake_case_reason_tag() {
        let trip = Trip::NoProgress {
            window: 4,
            digest: state(0xab),
        };
        let value = serde_json::to_value(&trip).unwrap();
        assert_eq!(
            value,
            json!({"reason": "no_progress", "window": 4, "digest": "ab".repeat(16)})
        );
        assert_eq!(serde_json::from_value::<Trip>(value).unwrap(), trip);

        let trip = Trip::RepeatedAction {
            tool: "search".into(),
            digest: state(1),
            count: 4,
            max: 3,
        };
        let value = serde_json::to_value(&trip).unwrap();
        assert_eq!(value["reason"], "repeated_action");
        assert_eq!(value["count"], 4);
        assert_eq!(trip.as_str(), "repeated_action");
    }

    #[test]
    fn trip_display_names_counts_and_settings() {
        let trip = Trip::RepeatFailure {
            tool: "run_sql".into(),
            signature: failure_signature("run_sql", "lock timeout on row <n>"),
            error: "lock timeout on row <n>".into(),
            count: 3,
            threshold: 2,
        };
        assert_eq!(
            trip.to_string(),
            "repeat failure: `run_sql` failed 3 times with the same error \
             \"lock timeout on row <n>\" (at most 2 allowed)"
        );
        let trip = Trip::NoProgress {
            window: 4,
            digest: state(0),
        };
        assert!(
            trip.to_string().contains("over 4 consecutive steps"),
            "{trip}"
        );
        let trip = Trip::RepeatedAction {
            tool: "s".into(),
            digest: state(0),
            count: 4,
            max: 3,
        };
        assert!(
            trip.to_string().contains("`s` was called 4 times"),
            "{trip}"
        );
    }
}
