use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Fields dropped from arguments by default before a key is derived: they
/// identify a request, not what it does.
pub const DEFAULT_VOLATILE_FIELDS: [&str; 2] = ["trace_id", "request_id"];

/// How arguments are normalized before they are digested, as written in
/// config.
///
/// | setting | default |
/// | --- | --- |
/// | `volatile_fields` | `["trace_id", "request_id"]` |
/// | `case_insensitive_fields` | `[]` |
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct NormalizerConfig {
    /// Field names dropped at every depth (besides any name beginning with
    /// `_`).
    pub volatile_fields: Vec<String>,
    /// Field names whose string values are compared without case (e.g. an
    /// email address).
    pub case_insensitive_fields: Vec<String>,
}

impl Default for NormalizerConfig {
    fn default() -> Self {
        NormalizerConfig {
            volatile_fields: DEFAULT_VOLATILE_FIELDS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            case_insensitive_fields: Vec::new(),
        }
    }
}

/// Turns a tool's arguments into canonical bytes: the part of an idempotency
/// key, and of a loop-guard fingerprint, that stands for "the same call".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalizer {
    volatile: BTreeSet<String>,
    case_insensitive: BTreeSet<String>,
}

impl Default for Normalizer {
    fn default() -> Self {
        Normalizer::new(NormalizerConfig::default())
    }
}

impl From<NormalizerConfig> for Normalizer {
    fn from(config: NormalizerConfig) -> Self {
        Normalizer::new(config)
    }
}

/// Where canonical bytes go: a buffer, or straight into a hasher so that a
/// key costs no intermediate allocation.
pub(crate) trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Sink for sha2::Sha256 {
    fn put(&mut self, bytes: &[u8]) {
        sha2::Digest::update(self, bytes);
    }
}

/// Integers up to this magnitude are exact in an f64.
const MAX_EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

impl Normalizer {
    /// A normalizer with the given rules. Every configuration is valid.
    pub fn new(config: NormalizerConfig) -> Self {
        Normalizer {
            volatile: config.volatile_fields.into_iter().collect(),
            case_insensitive: config.case_insensitive_fields.into_iter().collect(),
        }
    }

    /// The canonical JSON of `args`, as specified in the module docs.
    pub fn canonical_json(&self, args: &Value) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        self.write(args, false, &mut out);
        out
    }

    /// Writes the canonical form of `value` into `sink`; `fold` says the
    /// value sits under a case-insensitive field.
    pub(crate) fn write(&self, value: &Value, fold: bool, sink: &mut impl Sink) {
        match value {
            Value::Null => sink.put(b"null"),
            Value::Bool(true) => sink.put(b"true"),
            Value::Bool(false) => sink.put(b"false"),
            Value::Number(n) => write_number(n, sink),
            Value::String(s) => write_string(s.trim(), fold, sink),
            Value::Array(items) => {
                sink.put(b"[");
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        sink.put(b",");
                    }
                    self.write(item, fold, sink);
                }
                sink.put(b"]");
            }
            Value::Object(map) => {
                sink.put(b"{");
                let mut first = true;
                // serde_json's map is sorted by key unless some crate in the
                // build enables `preserve_order`; sort only when needed, so
                // the common case allocates nothing.
                let sorted = map.keys().zip(map.keys().skip(1)).all(|(a, b)| a <= b);
                if sorted {
                    for (key, value) in map {
                        self.write_member(key, value, &mut first, sink);
                    }
                } else {
                    let mut entries: Vec<_> = map.iter().collect();
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                    for (key, value) in entries {
                        self.write_member(key, value, &mut first, sink);
                    }
                }
                sink.put(b"}");
            }
        }
    }

    fn write_member(&self, key: &str, value: &Value, first: &mut bool, sink: &mut impl Sink) {
        if key.starts_with('_') || self.volatile.contains(key) {
            return;
        }
        if !*first {
            sink.put(b",");
        }
        *first = false;
        write_string(key, false, sink);
        sink.put(b":");
        self.write(value, self.case_insensitive.contains(key), sink);
    }
}

fn write_number(n: &serde_json::Number, sink: &mut impl Sink) {
    let mut buf = [0u8; 32];
    if let Some(i) = n.as_i64() {
        sink.put(format_into(&mut buf, format_args!("{i}")));
    } else if let Some(u) = n.as_u64() {
        sink.put(format_into(&mut buf, format_args!("{u}")));
    } else if let Some(f) = n.as_f64() {
        if f.fract() == 0.0 && f.abs() < MAX_EXACT_INTEGER {
            sink.put(format_into(&mut buf, format_args!("{}", f as i64)));
        } else {
            // Rust's Display for f64 is the shortest form that round-trips,
            // stable across platforms; longer than 32 bytes needs a String.
            let text = f.to_string();
            sink.put(text.as_bytes());
        }
    }
}

/// Formats into a stack buffer, falling back to nothing when it does not fit
/// (integers always fit in 32 bytes).
fn format_into<'a>(buf: &'a mut [u8; 32], args: std::fmt::Arguments<'_>) -> &'a [u8] {
    use std::io::Write as _;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    let _ = cursor.write_fmt(args);
    let len = usize::try_from(cursor.position()).unwrap_or(0);
    &buf[..len]
}

fn write_string(s: &str, fold: bool, sink: &mut impl Sink) {
    sink.put(b"\"");
    let mut utf8 = [0u8; 4];
    for c in s.chars() {
        if fold && c.is_uppercase() {
            for lower in c.to_lowercase() {
                write_char(lower, &mut utf8, sink);
            }
        } else {
            write_char(c, &mut utf8, sink);
        }
    }
    sink.put(b"\"");
}

fn write_char(c: char, utf8: &mut [u8; 4], sink: &mut impl Sink) {
    match c {
        '"' => sink.put(b"\\\""),
        '\\' => sink.put(b"\\\\"),
        c if (c as u32) < 0x20 => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let code = c as u32 as usize;
            sink.put(&[b'\\', b'u', b'0', b'0', HEX[code >> 4], HEX[code & 0xf]]);
        }
        c => sink.put(c.encode_utf8(utf8).as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canon(value: Value) -> String {
        String::from_utf8(Normalizer::default().canonical_json(&value)).unwrap()
    }

    #[test]
    fn canonical_json_sorts_keys_and_drops_whitespace() {
        assert_eq!(
            canon(json!({"b": 1, "a": [true, null]})),
            r#"{"a":[true,null],"b":1}"#
        );
    }

    #[test]
    fn canonical_json_trims_strings_but_not_inner_whitespace() {
        assert_eq!(
            canon(json!({"q": "  new  york \n"})),
            r#"{"q":"new  york"}"#
        );
    }

    #[test]
    fn canonical_json_drops_underscore_and_volatile_fields_at_every_depth() {
        assert_eq!(
            canon(json!({"_ts": 1, "trace_id": "x", "o": {"request_id": 2, "_n": 3, "k": 4}})),
            r#"{"o":{"k":4}}"#
        );
    }

    #[test]
    fn canonical_json_writes_integral_floats_as_integers() {
        assert_eq!(canon(json!({"n": 5.0, "m": 5, "f": 0.1, "big": 1e300})), {
            let big = 1e300f64.to_string();
            format!(r#"{{"big":{big},"f":0.1,"m":5,"n":5}}"#)
        });
        assert_eq!(canon(json!(-0.0)), "0");
        assert_eq!(canon(json!(u64::MAX)), u64::MAX.to_string());
    }

    #[test]
    fn canonical_json_escapes_quotes_backslashes_and_control_characters() {
        assert_eq!(canon(json!("a\"b\\c\u{1}")), r#""a\"b\\c\u0001""#);
        assert_eq!(canon(json!("日本")), "\"日本\"");
    }

    #[test]
    fn case_insensitive_fields_fold_strings_at_any_depth() {
        let n = Normalizer::new(NormalizerConfig {
            case_insensitive_fields: vec!["email".into()],
            ..NormalizerConfig::default()
        });
        let a = n.canonical_json(&json!({"to": {"email": ["Ann@X.org"]}, "name": "Ann"}));
        assert_eq!(
            String::from_utf8(a).unwrap(),
            r#"{"name":"Ann","to":{"email":["ann@x.org"]}}"#
        );
    }

    #[test]
    fn normalizer_config_reads_from_json_and_refuses_unknown_fields() {
        let c: NormalizerConfig =
            serde_json::from_str(r#"{"volatile_fields": ["nonce"]}"#).unwrap();
        assert_eq!(c.volatile_fields, vec!["nonce".to_owned()]);
        assert!(serde_json::from_str::<NormalizerConfig>(r#"{"volatile": []}"#).is_err());
    }
}
