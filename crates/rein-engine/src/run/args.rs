//! Reading the model's tool arguments: valid JSON, salvaged truncated JSON,
//! or a clear refusal — never a panic.

use serde_json::Value;

/// How the arguments were read.
#[derive(Debug, Clone, PartialEq)]
pub enum ParsedArgs {
    /// The text was a complete JSON value.
    Complete(Value),
    /// The text was cut off; the complete top-level fields before the cut
    /// were kept and the rest dropped.
    Salvaged {
        /// The complete fields.
        value: Value,
        /// How many bytes at the end could not be used.
        dropped_bytes: usize,
    },
    /// Nothing usable: the model must be asked again.
    Invalid {
        /// A short reason, safe to show the model.
        reason: String,
    },
}

/// Reads a tool call's argument text.
///
/// An empty text means no arguments (`{}`). Text that fails to parse as a
/// whole is salvaged when it is a JSON object cut off mid-way (the model hit
/// its output limit or the stream dropped): every top-level member that was
/// complete is kept. Anything else is invalid.
pub fn parse_args(text: &str) -> ParsedArgs {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return ParsedArgs::Complete(Value::Object(Default::default()));
    }
    match serde_json::from_str::<Value>(trimmed) {
        Ok(value) => ParsedArgs::Complete(value),
        Err(e) if e.is_eof() => salvage(trimmed).unwrap_or_else(|| ParsedArgs::Invalid {
            reason: "the arguments were cut off before any complete field".to_owned(),
        }),
        Err(e) => ParsedArgs::Invalid {
            reason: format!(
                "the arguments are not valid JSON (line {}, column {})",
                e.line(),
                e.column()
            ),
        },
    }
}

/// Keeps the longest prefix of a truncated object that ends after a
/// complete top-level member.
fn salvage(text: &str) -> Option<ParsedArgs> {
    if !text.starts_with('{') {
        return None;
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    // Byte offsets just after complete top-level members (before a comma).
    let mut cuts = Vec::new();
    for (i, b) in text.bytes().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 1 => cuts.push(i),
            _ => {}
        }
    }
    // The last member may itself be complete (cut right after its value),
    // but only if that value cannot be the prefix of a longer one: a
    // closed string, object or array, or a literal. A number at the cut
    // (`-1` of `-1000`) may have lost digits, so it is dropped.
    let mut candidates: Vec<usize> = cuts;
    let tail = text.trim_end();
    if tail.ends_with(['"', '}', ']'])
        || tail.ends_with("true")
        || tail.ends_with("false")
        || tail.ends_with("null")
    {
        candidates.push(text.len());
    }
    for &cut in candidates.iter().rev() {
        let mut attempt = String::with_capacity(cut + 1);
        attempt.push_str(&text[..cut]);
        attempt.push('}');
        if let Ok(value @ Value::Object(_)) = serde_json::from_str::<Value>(&attempt)
            && value.as_object().is_some_and(|m| !m.is_empty())
        {
            return Some(ParsedArgs::Salvaged {
                value,
                dropped_bytes: text.len() - cut,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn complete_json_is_read_as_is() {
        assert_eq!(
            parse_args(r#"{"a": 1}"#),
            ParsedArgs::Complete(json!({"a": 1}))
        );
        assert_eq!(parse_args("  "), ParsedArgs::Complete(json!({})));
    }

    #[test]
    fn truncated_object_keeps_its_complete_members() {
        let ParsedArgs::Salvaged {
            value,
            dropped_bytes,
        } = parse_args(r#"{"order_id": "A-1", "note": "a, b", "date": "2026-"#)
        else {
            panic!("expected salvage");
        };
        assert_eq!(value, json!({"order_id": "A-1", "note": "a, b"}));
        assert_eq!(dropped_bytes, r#", "date": "2026-"#.len());
        let ParsedArgs::Salvaged { value, .. } = parse_args(r#"{"a": {"b": [1, 2]}, "c": 3"#)
        else {
            panic!("expected salvage");
        };
        // `3` at the cut may be the start of `30`: dropped.
        assert_eq!(value, json!({"a": {"b": [1, 2]}}));
    }

    #[test]
    fn a_number_at_the_cut_is_dropped_because_it_may_have_lost_digits() {
        let ParsedArgs::Salvaged { value, .. } = parse_args(r#"{"a": 1, "b": -100"#) else {
            panic!("expected salvage");
        };
        assert_eq!(value, json!({"a": 1}));
    }

    #[test]
    fn garbage_is_invalid_with_a_position() {
        let ParsedArgs::Invalid { reason } = parse_args(r#"{"a": 1,, }"#) else {
            panic!("expected invalid");
        };
        assert!(reason.contains("line 1"), "{reason}");
        assert!(matches!(parse_args(r#"{"a"#), ParsedArgs::Invalid { .. }));
        assert!(matches!(parse_args(r#"[1, 2"#), ParsedArgs::Invalid { .. }));
    }

    #[test]
    fn never_panics_on_odd_text() {
        for text in [
            "{",
            "}",
            "\"",
            "{\"\\",
            "{\"a\":\"\\u12",
            "{{{{",
            "ü{\"é\":1,",
            "\u{0}",
        ] {
            let _ = parse_args(text);
        }
    }
}
