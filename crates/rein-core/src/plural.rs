//! Counts in sentences: `1 record`, `3 records`.
//!
//! Reports, failure reasons and the CLI say how many of a thing there are
//! in sentences people read; `record(s)` reads as a form to fill in.

use std::fmt;

/// `n` and `noun`, in the singular for one: `1 record`, `0 records`,
/// `2 branches`.
pub fn count<N: fmt::Display + PartialEq + From<u8>>(n: N, noun: &str) -> String {
    if n == N::from(1) {
        format!("1 {noun}")
    } else if noun.ends_with("ch") || noun.ends_with('s') || noun.ends_with('x') {
        format!("{n} {noun}es")
    } else {
        format!("{n} {noun}s")
    }
}

/// The form that agrees with `n`: `one` for one, `many` otherwise
/// (`awaits`, `await`).
pub fn agree<N: PartialEq + From<u8>>(n: N, one: &'static str, many: &'static str) -> &'static str {
    if n == N::from(1) { one } else { many }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1u32, "record"), "1 record");
        assert_eq!(count(0usize, "record"), "0 records");
        assert_eq!(count(3u64, "branch"), "3 branches");
        assert_eq!(agree(1usize, "awaits", "await"), "awaits");
        assert_eq!(agree(2usize, "awaits", "await"), "await");
    }
}
