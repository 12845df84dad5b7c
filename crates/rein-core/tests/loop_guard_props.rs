//! Property tests of the loop guard (public API only).
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use rein_core::loop_guard::{
    Action, FailureVerdict, LoopGuard, LoopGuardConfig, StateDigest, Trip, Verdict, normalize_error,
};
use serde_json::json;

/// Text rich in the pieces the scanner looks for: digits, hex letters,
/// separators of dates and UUIDs, zone letters, whitespace and a few
/// multi-byte characters.
fn error_like() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            4 => prop::sample::select(vec![
                "0", "1", "9", "a", "f", "F", "x", "0x", "-", ":", ".", ",", "+", "T", "t", "Z",
                "z", " ", "\t", "\n", "<", ">", "n", "_", "é", "İ", "ß", "超", "\u{0}",
                "\u{3000}",
            ])
            .prop_map(str::to_owned),
            1 => prop::sample::select(vec![
                "550e8400-e29b-41d4-a716-446655440000",
                "2026-11-29T16:51:55Z",
                "2026-11-29 16:51:55.123+02:00",
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "lock timeout on row ",
            ])
            .prop_map(str::to_owned),
        ],
        0..40,
    )
    .prop_map(|parts| parts.concat())
}

fn no_actions() -> [Action<'static>; 0] {
    []
}

proptest! {
    #[test]
    fn normalize_error_never_panics_and_is_idempotent_on_any_string(text in any::<String>()) {
        let once = normalize_error(&text);
        prop_assert_eq!(normalize_error(&once), once);
    }

    #[test]
    fn normalize_error_is_idempotent_on_error_like_text(text in error_like()) {
        let once = normalize_error(&text);
        prop_assert!(!once.bytes().any(|b| b.is_ascii_digit()), "{:?} -> {:?}", text, once);
        prop_assert!(!once.starts_with(' ') && !once.ends_with(' ') && !once.contains("  "));
        prop_assert_eq!(normalize_error(&once), once);
    }

    #[test]
    fn normalize_error_ignores_which_number_appears(prefix in "[a-z ]{0,20}", a in any::<u32>(), b in any::<u32>()) {
        prop_assert_eq!(
            normalize_error(&format!("{prefix} {a}")),
            normalize_error(&format!("{prefix} {b}"))
        );
    }

    #[test]
    fn state_digest_of_facts_is_invariant_under_permutation(
        (facts, shuffled) in prop::collection::vec(".{0,12}", 0..10)
            .prop_flat_map(|facts| (Just(facts.clone()), Just(facts).prop_shuffle())),
        todo in prop::collection::vec("[a-z]{0,6}", 0..4),
    ) {
        prop_assert_eq!(
            StateDigest::of(&facts, &todo, no_actions()),
            StateDigest::of(&shuffled, &todo, no_actions())
        );
    }

    #[test]
    fn state_digest_of_facts_ignores_duplicates(facts in prop::collection::vec("[a-z]{0,4}", 1..8)) {
        let doubled: Vec<&String> = facts.iter().chain(facts.iter()).collect();
        prop_assert_eq!(
            StateDigest::of(&facts, [""; 0], no_actions()),
            StateDigest::of(doubled, [""; 0], no_actions())
        );
    }

    #[test]
    fn no_progress_never_trips_before_window_observations(window in 1u32..12, steps in 0u32..12) {
        let config = LoopGuardConfig::default()
            .with_max_repeats(u32::MAX)
            .with_no_progress_window(window);
        let mut guard = LoopGuard::new(config).unwrap();
        let state = StateDigest::of(["same page"], ["find it"], no_actions());
        for step in 1..=steps {
            let args = json!({"attempt": step});
            let verdict = guard.observe(Action::new("search", &args), state);
            if step < window {
                prop_assert_eq!(verdict, Verdict::Continue);
            } else {
                prop_assert_eq!(verdict, Verdict::Trip(Trip::NoProgress { window, digest: state }));
            }
        }
    }

    /// The streak counter agrees with the seed's definition: the last W
    /// digests are all equal.
    #[test]
    fn no_progress_trips_exactly_when_the_last_window_digests_are_equal(
        window in 1u32..6,
        states in prop::collection::vec(0u8..3, 0..30),
    ) {
        let config = LoopGuardConfig::default()
            .with_max_repeats(u32::MAX)
            .with_no_progress_window(window);
        let mut guard = LoopGuard::new(config).unwrap();
        let w = window as usize;
        for (i, s) in states.iter().enumerate() {
            let args = json!({"i": i});
            let verdict = guard.observe(Action::new("t", &args), StateDigest::from_bytes([*s; 16]));
            let seen = &states[..=i];
            let expected = seen.len() >= w && seen[seen.len() - w..].iter().all(|x| x == s);
            prop_assert_eq!(verdict.is_trip(), expected, "step {}", i);
        }
    }

    /// The repeat-failure rule agrees with counting normalized (tool, error)
    /// pairs, whatever successes are observed in between.
    #[test]
    fn repeat_failure_trips_exactly_when_a_normalized_pair_exceeds_the_threshold(
        threshold in 1u32..4,
        events in prop::collection::vec((0usize..2, prop::option::of(0usize..3), any::<u16>()), 0..30),
    ) {
        let tools = ["run_sql", "search"];
        let errors = ["lock timeout on row", "not found: id", "Deadlock at"];
        let config = LoopGuardConfig::default()
            .with_max_repeats(u32::MAX)
            .with_no_progress_window(u32::MAX)
            .with_repeat_failure_threshold(threshold);
        let mut guard = LoopGuard::new(config).unwrap();
        let mut counts = std::collections::HashMap::new();
        for (i, (tool, error, number)) in events.into_iter().enumerate() {
            let tool = tools[tool];
            match error {
                None => {
                    let args = json!({"i": i});
                    let state = StateDigest::from_bytes([(i % 251) as u8; 16]);
                    prop_assert_eq!(guard.observe(Action::new(tool, &args), state), Verdict::Continue);
                }
                Some(error) => {
                    let count = counts.entry((tool, error)).or_insert(0u32);
                    *count += 1;
                    let verdict = guard.on_failure(tool, &format!("{} {number}", errors[error]));
                    prop_assert_eq!(verdict.is_trip(), *count > threshold);
                    if let FailureVerdict::Trip(Trip::RepeatFailure { count: reported, .. }) = verdict {
                        prop_assert_eq!(reported, *count);
                    }
                }
            }
        }
    }
}
