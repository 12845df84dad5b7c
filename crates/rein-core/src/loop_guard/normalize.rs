//! `normalize_error`: error text reduced to a stable template.
//!
//! # Why a hand-written scanner and not regexes
//!
//! The seed does this with four regexes. rein-core stays small (no regex
//! crate), and the decision path must not compile regexes per call (DESIGN.md,
//! performance notes); the patterns are simple enough that a one-pass scanner
//! over bytes is shorter than the code to cache compiled ones. Every pattern
//! is ASCII, so scanning bytes of valid UTF-8 never splits a character: a
//! match starts and ends at ASCII bytes, and anything else is copied whole.

/// Reduces error text to a stable template, so that failures differing only
/// in ids, times and counts share one [signature](super::FailureSignature).
///
/// Applied in one pass over the lowercased text:
///
/// | input | becomes |
/// | --- | --- |
/// | a UUID (`8-4-4-4-12` hex digits, any case) | `<uuid>` |
/// | an ISO-8601-like date or timestamp: `2026-11-29`, `2026-11-29T16:51:55Z`, `2026-11-29 16:51:55.123+02:00` | `<ts>` |
/// | 16 or more hex digits, optionally after `0x` (hashes, trace ids, long numbers) | `<hex>` |
/// | any other run of ASCII digits, also inside a word (`row 4471`, `e404`) | `<n>` |
/// | letters | lowercase |
/// | whitespace | trimmed, runs collapsed to one space |
///
/// UUIDs, timestamps and hex runs must stand alone (no ASCII letter or digit
/// right before them; UUIDs and hex runs also none right after), and UUIDs
/// and hex runs must hold at least one decimal digit, so that ordinary words
/// are never taken for ids.
///
/// # Why `<n>` and not the seed's `N`
///
/// The result is a fixed point: `normalize_error(normalize_error(x)) ==
/// normalize_error(x)`, so a normalized text stored in an event normalizes to
/// the same signature. An uppercase `N` would be lowercased by a second pass;
/// every placeholder is therefore lowercase, and the result holds no ASCII
/// digit, which is what every pattern needs in order to match again.
///
/// Never panics, whatever the input (property-tested with arbitrary UTF-8).
///
/// ```
/// use rein_core::loop_guard::normalize_error;
///
/// assert_eq!(normalize_error("Lock timeout on row 4471"), "lock timeout on row <n>");
/// assert_eq!(
///     normalize_error("  job 550E8400-E29B-41D4-A716-446655440000 failed at 2026-11-29T16:51:55Z "),
///     "job <uuid> failed at <ts>"
/// );
/// ```
pub fn normalize_error(text: &str) -> String {
    let lower = text.to_lowercase();
    let bytes = lower.as_bytes();
    let mut out = Template::with_capacity(lower.len());
    let mut i = 0;
    while i < bytes.len() {
        let token = if starts_token(bytes, i) {
            match_uuid(bytes, i)
                .map(|end| (end, "<uuid>"))
                .or_else(|| match_timestamp(bytes, i).map(|end| (end, "<ts>")))
                .or_else(|| match_hex(bytes, i).map(|end| (end, "<hex>")))
        } else {
            None
        };
        if let Some((end, placeholder)) =
            token.or_else(|| match_digits(bytes, i).map(|end| (end, "<n>")))
        {
            out.push_str(placeholder);
            i = end;
            continue;
        }
        match lower.get(i..).and_then(|rest| rest.chars().next()) {
            Some(c) => {
                out.push_char(c);
                i += c.len_utf8();
            }
            // Unreachable: `i` always sits on a character boundary. Moving on
            // keeps the loop finite whatever happens.
            None => i += 1,
        }
    }
    out.text
}

/// The output, with whitespace collapsed as it is written.
struct Template {
    text: String,
    pending_space: bool,
}

impl Template {
    fn with_capacity(capacity: usize) -> Self {
        Template {
            text: String::with_capacity(capacity),
            pending_space: false,
        }
    }

    fn push_char(&mut self, c: char) {
        if c.is_whitespace() {
            self.pending_space = true;
        } else {
            self.separate();
            self.text.push(c);
        }
    }

    fn push_str(&mut self, s: &str) {
        self.separate();
        self.text.push_str(s);
    }

    /// One space for any run of whitespace, none at the start; a trailing run
    /// is never written.
    fn separate(&mut self) {
        if self.pending_space && !self.text.is_empty() {
            self.text.push(' ');
        }
        self.pending_space = false;
    }
}

fn is_word(byte: Option<u8>) -> bool {
    byte.is_some_and(|b| b.is_ascii_alphanumeric())
}

fn is_digit(byte: Option<u8>) -> bool {
    byte.is_some_and(|b| b.is_ascii_digit())
}

fn is_hex(byte: Option<u8>) -> bool {
    byte.is_some_and(|b| b.is_ascii_hexdigit())
}

fn at(bytes: &[u8], i: usize) -> Option<u8> {
    bytes.get(i).copied()
}

/// Whether a token may start at `i`: no letter or digit right before it.
fn starts_token(bytes: &[u8], i: usize) -> bool {
    !is_word(i.checked_sub(1).and_then(|j| at(bytes, j)))
}

/// The end of the run of ASCII digits at `i`, if one starts there.
fn match_digits(bytes: &[u8], i: usize) -> Option<usize> {
    if !is_digit(at(bytes, i)) {
        return None;
    }
    let mut j = i;
    while is_digit(at(bytes, j)) {
        j += 1;
    }
    Some(j)
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (hex, at least one decimal digit,
/// not followed by a letter or digit).
fn match_uuid(bytes: &[u8], i: usize) -> Option<usize> {
    let mut j = i;
    let mut has_digit = false;
    for (group, len) in [8, 4, 4, 4, 12].into_iter().enumerate() {
        if group > 0 {
            if at(bytes, j) != Some(b'-') {
                return None;
            }
            j += 1;
        }
        for _ in 0..len {
            let b = at(bytes, j);
            if !is_hex(b) {
                return None;
            }
            has_digit |= is_digit(b);
            j += 1;
        }
    }
    (has_digit && !is_word(at(bytes, j))).then_some(j)
}

/// `[0x]` then 16 or more hex digits, holding a decimal digit unless
/// prefixed, and not followed by a letter or digit.
fn match_hex(bytes: &[u8], i: usize) -> Option<usize> {
    const MIN_HEX_LEN: usize = 16;
    let prefixed = at(bytes, i) == Some(b'0') && at(bytes, i + 1) == Some(b'x');
    let start = if prefixed { i + 2 } else { i };
    let mut j = start;
    let mut has_digit = prefixed;
    while is_hex(at(bytes, j)) {
        has_digit |= is_digit(at(bytes, j));
        j += 1;
    }
    (j - start >= MIN_HEX_LEN && has_digit && !is_word(at(bytes, j))).then_some(j)
}

/// `yyyy-mm-dd`, optionally followed by `t` or a space and a time
/// `hh:mm[:ss][.fraction][z|±hhmm|±hh:mm|±hh]`.
fn match_timestamp(bytes: &[u8], i: usize) -> Option<usize> {
    let mut j = digits_exact(bytes, i, 4)?;
    for _ in 0..2 {
        if at(bytes, j) != Some(b'-') {
            return None;
        }
        j = digits_exact(bytes, j + 1, 2)?;
    }
    if matches!(at(bytes, j), Some(b't' | b' ')) {
        if let Some(end) = match_time(bytes, j + 1) {
            j = end;
        }
    }
    Some(j)
}

fn match_time(bytes: &[u8], i: usize) -> Option<usize> {
    let mut j = digits_exact(bytes, i, 2)?;
    if at(bytes, j) != Some(b':') {
        return None;
    }
    j = digits_exact(bytes, j + 1, 2)?;
    if at(bytes, j) == Some(b':') {
        if let Some(end) = digits_exact(bytes, j + 1, 2) {
            j = end;
        }
    }
    if matches!(at(bytes, j), Some(b'.' | b',')) && is_digit(at(bytes, j + 1)) {
        j += 1;
        while is_digit(at(bytes, j)) {
            j += 1;
        }
    }
    match at(bytes, j) {
        Some(b'z') if !is_word(at(bytes, j + 1)) => j += 1,
        Some(b'+' | b'-') => {
            if let Some(end) = digits_exact(bytes, j + 1, 4) {
                j = end;
            } else if let Some(hours) = digits_exact(bytes, j + 1, 2) {
                j = hours;
                if at(bytes, j) == Some(b':') {
                    if let Some(minutes) = digits_exact(bytes, j + 1, 2) {
                        j = minutes;
                    }
                }
            }
        }
        _ => {}
    }
    Some(j)
}

/// Exactly `n` ASCII digits at `i`, not followed by another digit.
fn digits_exact(bytes: &[u8], i: usize, n: usize) -> Option<usize> {
    let end = i + n;
    ((i..end).all(|j| is_digit(at(bytes, j))) && !is_digit(at(bytes, end))).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_numbers_collapse_to_one_template() {
        assert_eq!(
            normalize_error("lock timeout on row 4471"),
            normalize_error("lock timeout on row 4472")
        );
        assert_eq!(
            normalize_error("lock timeout on row 4471"),
            "lock timeout on row <n>"
        );
    }

    #[test]
    fn uuids_collapse_in_any_case() {
        assert_eq!(
            normalize_error("order 550e8400-e29b-41d4-a716-446655440000 not found"),
            "order <uuid> not found"
        );
        assert_eq!(
            normalize_error("order 6BA7B810-9DAD-11D1-80B4-00C04FD430C8 not found"),
            "order <uuid> not found"
        );
        assert_eq!(
            normalize_error("id=550e8400-e29b-41d4-a716-446655440000;"),
            "id=<uuid>;"
        );
    }

    #[test]
    fn timestamps_collapse_with_any_separator_fraction_and_offset() {
        for ts in [
            "2026-11-29T16:51:55Z",
            "2026-11-29 16:51:55.123",
            "2026-11-29t16:51:55,5+02:00",
            "2026-11-29T16:51:55-0500",
            "2026-11-29T16:51+01",
            "2026-11-29T16:51",
            "2026-11-29",
        ] {
            assert_eq!(
                normalize_error(&format!("at {ts}: deadlock")),
                "at <ts>: deadlock",
                "{ts}"
            );
        }
    }

    #[test]
    fn long_hex_collapses_but_short_hex_and_words_do_not() {
        assert_eq!(
            normalize_error("trace 4bf92f3577b34da6a3ce929d0e0e4736"),
            "trace <hex>"
        );
        assert_eq!(normalize_error("sha 0xDEADBEEFCAFEBABE1"), "sha <hex>");
        assert_eq!(normalize_error("req_4bf92f3577b34da6a3ce"), "req_<hex>");
        assert_eq!(normalize_error("code ab12"), "code ab<n>");
        assert_eq!(
            normalize_error("deadbeefdeadbeefdeadbeef"),
            "deadbeefdeadbeefdeadbeef"
        );
        assert_eq!(normalize_error("12345678901234567890 rows"), "<hex> rows");
    }

    #[test]
    fn digits_inside_words_collapse() {
        assert_eq!(
            normalize_error("HTTP/2 E404 after 350ms"),
            "http/<n> e<n> after <n>ms"
        );
    }

    #[test]
    fn whitespace_is_trimmed_and_collapsed_and_case_folded() {
        assert_eq!(
            normalize_error("  Connection\t\tRESET \n by  peer  "),
            "connection reset by peer"
        );
        assert_eq!(normalize_error(""), "");
        assert_eq!(normalize_error(" \n\t "), "");
    }

    #[test]
    fn tokens_glued_to_words_are_not_ids() {
        // A letter right before: not a timestamp or UUID, only digit runs.
        assert_eq!(normalize_error("x2026-11-29"), "x<n>-<n>-<n>");
        assert_eq!(
            normalize_error("g550e8400-e29b-41d4-a716-446655440000"),
            "g<n>e<n>-e<n>b-<n>d<n>-a<n>-<n>"
        );
    }

    #[test]
    fn multibyte_text_passes_through() {
        assert_eq!(normalize_error("超时 行 4471 ÉCHEC"), "超时 行 <n> échec");
        assert_eq!(normalize_error("é1é"), "é<n>é");
    }

    #[test]
    fn normalized_text_is_a_fixed_point() {
        for text in [
            "ffffffffffffffff9z",
            "2026-11-29T16:51:55Z7",
            "0x0x1234567890abcdef0",
            "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaa1 x",
            "Lock timeout on row 4471",
        ] {
            let once = normalize_error(text);
            assert_eq!(normalize_error(&once), once, "{text}");
            assert!(!once.bytes().any(|b| b.is_ascii_digit()), "{once}");
        }
    }
}
