//! The most output tokens a well-known model may produce in one answer.
//!
//! # Why
//!
//! rein sends every model call a `max_tokens`: what the run's token and
//! cost budgets leave, but never more than the model itself accepts. A
//! provider answers a `max_tokens` above the model's own cap with a 400
//! (gpt-4o-mini refuses 50,000), so a run whose budget is larger than the
//! cap would fail on its first call. The cap is a fact about the model, so
//! it lives in one table here; a model that is not in the table needs
//! `max_output_tokens` in its provider's config (`rein check` says so).
//!
//! # Matching
//!
//! A name matches an entry when it is the entry or starts with the entry
//! followed by `-` (a dated snapshot or `-latest`): `gpt-4o-mini-2024-07-18`
//! is `gpt-4o-mini`. The longest matching entry wins, so `gpt-4o-mini` is
//! not `gpt-4o`, and `gpt-4.1` is never `gpt-4`. Values are conservative:
//! where a model family's snapshots differ, the smaller cap is listed
//! under the family name and a larger one only under the snapshot names
//! that have it.

/// Known models and the most output tokens each accepts per answer.
pub const KNOWN_OUTPUT_CAPS: &[(&str, u32)] = &[
    // OpenAI
    ("gpt-3.5-turbo", 4_096),
    ("gpt-4", 8_192),
    ("gpt-4-turbo", 4_096),
    ("gpt-4o", 16_384),
    ("gpt-4o-2024-05-13", 4_096),
    ("gpt-4o-mini", 16_384),
    ("chatgpt-4o-latest", 16_384),
    ("gpt-4.1", 32_768),
    ("gpt-4.1-mini", 32_768),
    ("gpt-4.1-nano", 32_768),
    ("gpt-5", 128_000),
    ("gpt-5-mini", 128_000),
    ("gpt-5-nano", 128_000),
    ("o1", 100_000),
    ("o1-mini", 65_536),
    ("o1-preview", 32_768),
    ("o3", 100_000),
    ("o3-mini", 100_000),
    ("o4-mini", 100_000),
    // Anthropic
    ("claude-3-haiku", 4_096),
    ("claude-3-sonnet", 4_096),
    ("claude-3-opus", 4_096),
    ("claude-3-5-haiku", 8_192),
    ("claude-3-5-sonnet", 8_192),
    ("claude-3-7-sonnet", 64_000),
    ("claude-sonnet-4", 64_000),
    ("claude-sonnet-4-5", 64_000),
    ("claude-opus-4", 32_000),
    ("claude-opus-4-1", 32_000),
    ("claude-opus-4-5", 64_000),
    ("claude-haiku-4-5", 64_000),
];

/// The output cap of `model` from [`KNOWN_OUTPUT_CAPS`], if it is a
/// well-known model.
pub fn known_output_cap(model: &str) -> Option<u32> {
    KNOWN_OUTPUT_CAPS
        .iter()
        .filter(|(name, _)| {
            model == *name
                || model
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('-'))
        })
        .max_by_key(|(name, _)| name.len())
        .map(|&(_, cap)| cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_dated_snapshots_match_their_longest_entry() {
        assert_eq!(known_output_cap("gpt-4o-mini"), Some(16_384));
        assert_eq!(known_output_cap("gpt-4o-mini-2024-07-18"), Some(16_384));
        assert_eq!(known_output_cap("gpt-4o-2024-05-13"), Some(4_096));
        assert_eq!(known_output_cap("gpt-4o-2024-08-06"), Some(16_384));
        assert_eq!(known_output_cap("gpt-4.1-mini-2025-04-14"), Some(32_768));
        assert_eq!(known_output_cap("gpt-4-0613"), Some(8_192));
        assert_eq!(known_output_cap("o1-mini"), Some(65_536));
        assert_eq!(known_output_cap("claude-3-5-sonnet-20241022"), Some(8_192));
        assert_eq!(known_output_cap("claude-opus-4-1-20250805"), Some(32_000));
        assert_eq!(known_output_cap("claude-sonnet-4-20250514"), Some(64_000));
    }

    #[test]
    fn a_name_that_only_shares_a_prefix_is_unknown() {
        assert_eq!(known_output_cap("gpt-4oz"), None);
        assert_eq!(known_output_cap("o1x"), None);
        assert_eq!(known_output_cap("llama-3-70b"), None);
        assert_eq!(known_output_cap(""), None);
    }

    #[test]
    fn the_table_names_each_model_once() {
        let mut names: Vec<&str> = KNOWN_OUTPUT_CAPS.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before);
        assert!(KNOWN_OUTPUT_CAPS.iter().all(|(_, cap)| *cap > 0));
    }
}
