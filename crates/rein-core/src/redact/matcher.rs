//! [`Redactor`]: finds known secrets in text, in whatever encoding they
//! took on the way, and replaces them.
//!
//! # Encodings matched
//!
//! A secret reaches a text as written, or encoded by whatever carried it:
//! percent-encoded in a URL (wholly or partly — `/` and `+` are often kept
//! — with upper- or lower-case hex), `+` for a space in a form, escaped in
//! a JSON string or a Rust `Debug` string (`\"`, `\\`, `\/`, `\n`,
//! `\u0022`, `\u{22}`), at any depth of escaping (a JSON body quoted in a
//! JSON log line). Rather than listing every combination as a needle (their
//! number grows exponentially with the secret's length), the matcher
//! compares byte by byte and accepts, for each byte of the secret, any of
//! its encodings at that point of the text. Base64 (Basic auth built from
//! `user:pass`) is not an encoding of the text but a different value; the
//! classification registers it as a secret of its own
//! ([`super::classify`]).

use std::borrow::Cow;

use serde_json::Value;

use super::{REDACTED, Secrets, scrub_urls};

/// The shortest fragment of a secret, at the edge of a text cut before it
/// reached rein, that is still redacted (see [`Redactor::redact_cut`]).
const MIN_EDGE_FRAGMENT: usize = 4;

/// Replaces known secrets, and (in [`redact`](Redactor::redact)) URL
/// queries and userinfo, in text.
///
/// ```
/// # use rein_core::redact::{Redactor, Secrets};
/// let mut secrets = Secrets::new();
/// secrets.insert("sk-canary/0001")?;
/// let redactor = Redactor::new(&secrets);
/// assert_eq!(
///     redactor.redact("bad key sk-canary%2f0001 for https://u:p@api.example/v1?key=1 (x)"),
///     "bad key [redacted] for https://[redacted]@api.example/v1?[redacted] (x)"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct Redactor {
    /// The secrets' bytes, longest first so that a secret containing
    /// another is replaced whole.
    needles: Vec<Vec<u8>>,
    /// Which bytes may start a match of some needle.
    starts: Starts,
}

/// Which bytes may start a match: a needle's first byte, or the first byte
/// of one of its encodings (`%`, `\`, `+`).
#[derive(Clone)]
struct Starts([bool; 256]);

impl Default for Starts {
    fn default() -> Self {
        Starts([false; 256])
    }
}

impl std::fmt::Debug for Redactor {
    // The needles are the secrets: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.needles.len())
            .finish()
    }
}

impl Redactor {
    /// A redactor for `secrets` (and, always, URL queries and userinfo).
    pub fn new(secrets: &Secrets) -> Redactor {
        let mut needles: Vec<Vec<u8>> = secrets.values().map(|v| v.as_bytes().to_vec()).collect();
        needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
        let mut starts = Starts::default();
        for needle in &needles {
            if let Some(&first) = needle.first() {
                starts.0[usize::from(first)] = true;
                if first == b' ' {
                    starts.0[usize::from(b'+')] = true;
                }
            }
            starts.0[usize::from(b'%')] = true;
            starts.0[usize::from(b'\\')] = true;
        }
        Redactor { needles, starts }
    }

    /// Whether any secret is known: without one, only URLs are redacted
    /// and a number never is.
    pub fn knows_secrets(&self) -> bool {
        !self.needles.is_empty()
    }

    /// `text` without known secrets, URL queries or userinfo; borrowed
    /// when there was nothing to redact. For prose: errors, summaries,
    /// reasons, log lines.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.redact_known(text) {
            Cow::Borrowed(_) => scrub_urls(text),
            Cow::Owned(known) => match scrub_urls(&known) {
                Cow::Borrowed(_) => Cow::Owned(known),
                Cow::Owned(scrubbed) => Cow::Owned(scrubbed),
            },
        }
    }

    /// `text` without known secrets; URL queries and userinfo are left as
    /// they are. For data a program reads back: tool results (a presigned
    /// URL in a result must survive), a model's answer.
    pub fn redact_known<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.needles.is_empty() {
            return Cow::Borrowed(text);
        }
        let bytes = text.as_bytes();
        let mut out: Option<Vec<u8>> = None;
        let mut copied = 0;
        let mut i = 0;
        while i < bytes.len() {
            if self.starts.0[usize::from(bytes[i])]
                && let Some(end) = self.match_any(bytes, i)
            {
                let buf = out.get_or_insert_with(|| Vec::with_capacity(bytes.len()));
                buf.extend_from_slice(&bytes[copied..i]);
                buf.extend_from_slice(REDACTED.as_bytes());
                copied = end;
                i = end;
                continue;
            }
            i += 1;
        }
        match out {
            None => Cow::Borrowed(text),
            Some(mut buf) => {
                buf.extend_from_slice(&bytes[copied..]);
                // Matches start and end on character boundaries (a needle
                // is whole characters, its encodings ASCII), so this is
                // UTF-8; lossy only as a guard.
                Cow::Owned(
                    String::from_utf8(buf)
                        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
                )
            }
        }
    }

    /// The end of the longest needle matching at `at`, if any.
    fn match_any(&self, text: &[u8], at: usize) -> Option<usize> {
        self.needles
            .iter()
            .find_map(|needle| match_needle(text, at, needle))
    }

    /// `text`, which was cut before it reached rein (at its start and/or
    /// its end), redacted: besides whole secrets, a fragment of at least
    /// 4 bytes of a secret at a cut edge (the start of one where the text
    /// ends, the end of one where it starts) is replaced too.
    pub fn redact_cut(&self, text: &str, cut_start: bool, cut_end: bool) -> String {
        let mut out = self.redact(text).into_owned();
        if cut_end && let Some(at) = self.fragment_at_end(&out) {
            out.truncate(at);
            out.push_str(REDACTED);
        }
        if cut_start && let Some(len) = self.fragment_at_start(&out) {
            out.replace_range(..len, REDACTED);
        }
        out
    }

    fn fragment_at_end(&self, text: &str) -> Option<usize> {
        let bytes = text.as_bytes();
        self.needles.iter().find_map(|needle| {
            (MIN_EDGE_FRAGMENT..needle.len())
                .rev()
                .find(|&k| bytes.ends_with(&needle[..k]))
                .map(|k| bytes.len() - k)
                .filter(|&at| text.is_char_boundary(at))
        })
    }

    fn fragment_at_start(&self, text: &str) -> Option<usize> {
        let bytes = text.as_bytes();
        self.needles.iter().find_map(|needle| {
            (MIN_EDGE_FRAGMENT..needle.len())
                .rev()
                .find(|&k| bytes.starts_with(&needle[needle.len() - k..]))
                .filter(|&k| text.is_char_boundary(k))
        })
    }

    /// At most `max` characters of the start of `text`, redacted before
    /// it is cut (a secret across the cut is never left in part), and
    /// never cut inside a [`REDACTED`] marker.
    pub fn head(&self, text: &str, max: usize) -> String {
        let clean = self.redact(text);
        let Some((cut, _)) = clean.char_indices().nth(max) else {
            return clean.into_owned();
        };
        let cut = outside_marker(&clean, cut, false);
        clean[..cut].to_owned()
    }

    /// At most `max` characters of the end of `text`, redacted before it
    /// is cut; see [`head`](Redactor::head).
    pub fn tail(&self, text: &str, max: usize) -> String {
        let clean = self.redact(text);
        let count = clean.chars().count();
        if count <= max {
            return clean.into_owned();
        }
        let cut = clean
            .char_indices()
            .nth(count - max)
            .map_or(clean.len(), |(i, _)| i);
        let cut = outside_marker(&clean, cut, true);
        clean[cut..].to_owned()
    }

    /// Redacts every string, object key and number of `value` in place
    /// with [`redact`](Redactor::redact). A number holding a secret
    /// becomes the string [`REDACTED`]: the document stays valid JSON.
    /// Returns whether anything was redacted, so a caller holding a typed
    /// original can keep it when nothing was (an event's fast path).
    pub fn redact_json(&self, value: &mut Value) -> bool {
        self.walk(value, &|s| self.redact(s))
    }

    /// Redacts known secrets from every string, object key and number of
    /// `value` in place ([`redact_known`](Redactor::redact_known)): URL
    /// queries and userinfo stay. For tool results.
    pub fn redact_known_json(&self, value: &mut Value) {
        if self.needles.is_empty() {
            return;
        }
        self.walk(value, &|s| self.redact_known(s));
    }

    /// Redacts every string of `value` in place with
    /// [`redact`](Redactor::redact), leaving object keys and numbers: for
    /// a typed document whose keys and numbers are its own vocabulary and
    /// counts, which must keep their type to be read back (an event whose
    /// [`redact_json`](Redactor::redact_json) form no longer decodes).
    pub fn redact_json_strings(&self, value: &mut Value) {
        match value {
            Value::String(s) => {
                if let Cow::Owned(c) = self.redact(s) {
                    *s = c;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json_strings(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.redact_json_strings(v)),
            Value::Number(_) | Value::Null | Value::Bool(_) => {}
        }
    }

    /// Cleans `value` in place; whether anything changed.
    fn walk(&self, value: &mut Value, clean: &dyn Fn(&str) -> Cow<'_, str>) -> bool {
        match value {
            Value::String(s) => {
                if let Cow::Owned(c) = clean(s) {
                    *s = c;
                    return true;
                }
                false
            }
            Value::Number(n) => {
                // Only a known secret can hide in a number; without any,
                // the number is not even formatted.
                if !self.needles.is_empty()
                    && matches!(self.redact_known(&n.to_string()), Cow::Owned(_))
                {
                    *value = Value::String(REDACTED.to_owned());
                    return true;
                }
                false
            }
            Value::Array(items) => {
                // Every item is walked: no short circuit.
                let mut changed = false;
                for v in items {
                    changed |= self.walk(v, clean);
                }
                changed
            }
            Value::Object(map) => {
                let dirty: Vec<(String, String)> = map
                    .keys()
                    .filter_map(|k| match clean(k) {
                        Cow::Owned(c) => Some((k.clone(), c)),
                        Cow::Borrowed(_) => None,
                    })
                    .collect();
                let renamed = !dirty.is_empty();
                for (key, new_key) in dirty {
                    if let Some(v) = map.remove(&key) {
                        map.insert(new_key, v);
                    }
                }
                let mut changed = renamed;
                for v in map.values_mut() {
                    changed |= self.walk(v, clean);
                }
                changed
            }
            Value::Null | Value::Bool(_) => false,
        }
    }
}

/// `cut` moved off any [`REDACTED`] marker it falls inside: to the
/// marker's start (`after == false`, keeping a head) or its end (keeping a
/// tail).
fn outside_marker(text: &str, cut: usize, after: bool) -> usize {
    let mut from = 0;
    while let Some(found) = text[from..].find(REDACTED) {
        let start = from + found;
        let end = start + REDACTED.len();
        if start < cut && cut < end {
            return if after { end } else { start };
        }
        if start >= cut {
            break;
        }
        from = end;
    }
    cut
}

/// The end of a match of `needle` at `text[at..]`, each byte in any of its
/// encodings (see the module docs).
fn match_needle(text: &[u8], at: usize, needle: &[u8]) -> Option<usize> {
    let mut i = at;
    for &b in needle {
        i = match_byte(text, i, b)?;
    }
    Some(i)
}

/// The end of one encoding of byte `b` at `text[i..]`.
fn match_byte(text: &[u8], i: usize, b: u8) -> Option<usize> {
    let c = *text.get(i)?;
    if c == b {
        // A backslash, escaped at any depth, is a run of them.
        return Some(if b == b'\\' {
            skip_backslashes(text, i)
        } else {
            i + 1
        });
    }
    match c {
        b'%' => {
            let hi = hex(*text.get(i + 1)?)?;
            let lo = hex(*text.get(i + 2)?)?;
            (hi * 16 + lo == b).then_some(i + 3)
        }
        b'+' => (b == b' ').then_some(i + 1),
        b'\\' => {
            let j = skip_backslashes(text, i);
            let e = *text.get(j)?;
            match (e, b) {
                (b'"' | b'/' | b'\'', _) if e == b => Some(j + 1),
                (b'n', b'\n') | (b'r', b'\r') | (b't', b'\t') | (b'b', 0x08) | (b'f', 0x0c) => {
                    Some(j + 1)
                }
                (b'u', _) if b.is_ascii() => unicode_escape(text, j + 1, b),
                _ => None,
            }
        }
        _ => None,
    }
}

fn skip_backslashes(text: &[u8], mut i: usize) -> usize {
    while text.get(i) == Some(&b'\\') {
        i += 1;
    }
    i
}

/// The end of `XXXX` (JSON) or `{X..}` (Rust) at `text[i..]` when it
/// encodes ASCII byte `b`.
fn unicode_escape(text: &[u8], i: usize, b: u8) -> Option<usize> {
    if text.get(i) == Some(&b'{') {
        let mut value: u32 = 0;
        let mut j = i + 1;
        while let Some(&d) = text.get(j) {
            if d == b'}' {
                return (j > i + 1 && value == u32::from(b)).then_some(j + 1);
            }
            value = value.checked_mul(16)? + u32::from(hex(d)?);
            j += 1;
        }
        return None;
    }
    let digits = text.get(i..i + 4)?;
    let mut value: u32 = 0;
    for &d in digits {
        value = value * 16 + u32::from(hex(d)?);
    }
    (value == u32::from(b)).then_some(i + 4)
}

fn hex(d: u8) -> Option<u8> {
    match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        b'A'..=b'F' => Some(d - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor(values: &[&str]) -> Redactor {
        let mut secrets = Secrets::new();
        for v in values {
            secrets.insert(v).unwrap();
        }
        Redactor::new(&secrets)
    }

    #[test]
    fn known_secret_is_replaced_wherever_it_appears() {
        let r = redactor(&["sk-canary-1234"]);
        assert_eq!(
            r.redact("401: Incorrect API key provided: Bearer sk-canary-1234."),
            "401: Incorrect API key provided: Bearer [redacted]."
        );
        assert_eq!(
            r.redact("sk-canary-1234sk-canary-1234"),
            "[redacted][redacted]"
        );
    }

    #[test]
    fn text_without_secrets_is_borrowed_unchanged() {
        let r = redactor(&["sk-canary-1234"]);
        assert!(matches!(r.redact("all is well? yes"), Cow::Borrowed(_)));
        assert!(matches!(
            r.redact("mail me at ops@example.com, 100% \\ sure"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn longer_secret_containing_a_shorter_one_is_replaced_whole() {
        let r = redactor(&["canary-12", "canary-12-and-more"]);
        assert_eq!(r.redact("x canary-12-and-more y"), "x [redacted] y");
    }

    #[test]
    fn json_escaped_and_percent_encoded_forms_are_replaced() {
        let r = redactor(&["pa\"ss word/1"]);
        assert_eq!(
            r.redact(r#"{"k":"pa\"ss word/1"}"#),
            r#"{"k":"[redacted]"}"#
        );
        assert_eq!(r.redact("t=pa%22ss%20word%2F1&x"), "t=[redacted]&x");
    }

    #[test]
    fn partly_and_lower_case_percent_encoded_forms_are_replaced() {
        let r = redactor(&["tok/en+with space"]);
        for form in [
            "tok/en+with space",
            "tok%2fen%2bwith%20space",
            "tok/en%2Bwith+space",
            "tok%2Fen+with%20space",
        ] {
            assert_eq!(r.redact(&format!("<{form}>")), "<[redacted]>", "{form}");
        }
    }

    #[test]
    fn escaped_forms_at_any_depth_are_replaced() {
        let r = redactor(&["a\"b\\c/d-1234"]);
        for form in [
            r#"a\"b\\c/d-1234"#,
            r#"a\\\"b\\\\c\/d-1234"#,
            r#"a\u0022b\\c/d-1234"#,
            r#"a\u{22}b\\c/d-1234"#,
        ] {
            assert_eq!(r.redact(&format!("[{form}]")), "[[redacted]]", "{form}");
        }
    }

    #[test]
    fn redacting_twice_changes_nothing() {
        let r = redactor(&["sk-canary-1234"]);
        for text in [
            "a https://u:p@h/x?q=1 b sk-canary-1234",
            "GET /x?y=2",
            "http://h/?[redacted]",
        ] {
            let once = r.redact(text).into_owned();
            assert_eq!(r.redact(&once), once, "{text}");
        }
    }

    #[test]
    fn json_strings_keys_and_numbers_are_redacted_and_stay_json() {
        let r = redactor(&["sk-canary-1234", "12345678"]);
        let mut v = serde_json::json!({
            "error": {"message": "key sk-canary-1234"},
            "sk-canary-1234": 1,
            "pin": 12345678,
            "list": ["http://h/x?k=v", 3],
        });
        assert!(r.redact_json(&mut v), "it redacted");
        assert_eq!(
            v,
            serde_json::json!({
                "error": {"message": "key [redacted]"},
                "[redacted]": 1,
                "pin": "[redacted]",
                "list": ["http://h/x?[redacted]", 3],
            })
        );
    }

    /// Whether anything was redacted is what lets an event keep its typed
    /// form: each kind of change counts, wherever it sits, and a clean
    /// document reports none and is untouched.
    #[test]
    fn redact_json_says_whether_it_changed_anything() {
        let r = redactor(&["sk-canary-1234", "12345678"]);
        let clean = serde_json::json!({"a": [1, "two", {"b": null, "c": true}], "d": 7});
        let mut v = clean.clone();
        assert!(!r.redact_json(&mut v));
        assert_eq!(v, clean);
        for dirty in [
            serde_json::json!({"a": [1, "two", {"b": "sk-canary-1234"}]}),
            serde_json::json!({"a": [{"sk-canary-1234": 1}]}),
            serde_json::json!([0, 12345678]),
            serde_json::json!({"z": "see https://h/x?token=1", "a": 1}),
        ] {
            let mut v = dirty.clone();
            assert!(r.redact_json(&mut v), "{dirty}");
            assert_ne!(v, dirty);
        }
        // Without secrets only URLs are redacted; numbers are never touched.
        let none = redactor(&[]);
        let mut v = serde_json::json!({"n": 12345678, "s": "plain"});
        assert!(!none.redact_json(&mut v));
    }

    #[test]
    fn known_only_redaction_keeps_url_queries() {
        let r = redactor(&["sk-canary-1234"]);
        let mut v = serde_json::json!({
            "download": "https://bucket.example/f?X-Amz-Signature=abc",
            "echo": "Bearer sk-canary-1234",
        });
        r.redact_known_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({
                "download": "https://bucket.example/f?X-Amz-Signature=abc",
                "echo": "Bearer [redacted]",
            })
        );
    }

    #[test]
    fn a_secret_across_the_cut_is_redacted_before_it_is_cut() {
        let r = redactor(&["sk-canary-1234"]);
        let text = "error: bad key sk-canary-1234 given";
        // A cut at any point keeps no part of the secret.
        for max in 0..text.len() {
            let head = r.head(text, max);
            assert!(!head.contains("sk-c"), "{max}: {head}");
            assert!(!head.contains("[reda") || head.contains(REDACTED), "{head}");
            let tail = r.tail(text, max);
            assert!(!tail.contains("1234"), "{max}: {tail}");
            assert!(!tail.contains("cted]") || tail.contains(REDACTED), "{tail}");
        }
        assert_eq!(r.head(text, 25), "error: bad key [redacted]");
        assert_eq!(r.head(text, 20), "error: bad key ");
    }

    #[test]
    fn a_fragment_at_the_edge_of_a_text_cut_upstream_is_redacted() {
        let r = redactor(&["sk-canary-1234"]);
        assert_eq!(
            r.redact_cut("stderr: key sk-cana", false, true),
            "stderr: key [redacted]"
        );
        assert_eq!(
            r.redact_cut("y-1234 was refused", true, false),
            "[redacted] was refused"
        );
        assert_eq!(r.redact_cut("ends in sk-", false, true), "ends in sk-");
    }
}
