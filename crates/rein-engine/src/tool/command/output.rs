//! What a program printed: captured up to a limit, shaped into a result,
//! and stderr's end for an operator.

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::HUMAN_STDERR_CHARS;

/// What was read from one output stream.
#[derive(Debug, Default)]
pub(super) struct Captured {
    pub(super) kept: Vec<u8>,
    pub(super) total: u64,
}

impl Captured {
    pub(super) fn truncated(&self) -> bool {
        self.total > self.kept.len() as u64
    }
}

/// Reads `reader` to its end, keeping the first `max` bytes and counting
/// the rest. A read error ends the stream (what was read is kept).
pub(super) async fn read_capped<R: AsyncRead + Unpin>(reader: Option<R>, max: usize) -> Captured {
    let mut captured = Captured::default();
    let Some(mut reader) = reader else {
        return captured;
    };
    let mut buf = vec![0u8; 8 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = max.saturating_sub(captured.kept.len());
                captured.kept.extend_from_slice(&buf[..n.min(room)]);
                captured.total = captured.total.saturating_add(n as u64);
            }
        }
    }
    captured
}

/// `bytes` as text, never longer than `bytes` (a cut multi-byte character
/// becomes U+FFFD).
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The result of a successful run from its stdout.
pub(super) fn shape_stdout(out: &Captured, max: usize) -> (Value, bool) {
    if out.truncated() {
        let result = json!({
            "text": text(&out.kept),
            "_truncated": {
                "stream": "stdout",
                "original_bytes": out.total,
                "limit_bytes": max,
                "note": "output truncated to the size limit; the rest was discarded",
            },
        });
        return (result, true);
    }
    if out.kept.iter().all(u8::is_ascii_whitespace) {
        return (Value::Null, false);
    }
    let value = serde_json::from_slice::<Value>(&out.kept)
        .unwrap_or_else(|_| json!({ "text": text(&out.kept) }));
    (value, false)
}

/// The end of stderr for an operator, saying when it was cut.
///
/// Redacted before it is cut, both where the capture limit cut it (a
/// fragment of a secret at that edge goes too) and where only its last
/// [`HUMAN_STDERR_CHARS`] are kept: a secret across either cut never
/// leaves a part in clear.
pub(super) fn stderr_note(err: &Captured) -> String {
    let all = rein_core::redact::cut(&text(&err.kept), false, err.truncated());
    let trimmed = all.trim_end();
    let count = trimmed.chars().count();
    let tail: String = if count > HUMAN_STDERR_CHARS {
        format!("…{}", rein_core::redact::tail(trimmed, HUMAN_STDERR_CHARS))
    } else {
        trimmed.to_owned()
    };
    let mut note = if tail.is_empty() {
        "stderr empty".to_owned()
    } else {
        format!("stderr: {tail}")
    };
    if err.truncated() {
        note.push_str(&format!(
            " (stderr truncated: {} of {} bytes kept)",
            err.kept.len(),
            err.total
        ));
    }
    note
}

/// A capture of `total` bytes of which `bytes` were kept.
#[cfg(test)]
pub(super) fn captured(bytes: &[u8], total: u64) -> Captured {
    Captured {
        kept: bytes.to_vec(),
        total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdout_json_passes_through_and_text_is_wrapped() {
        let out = captured(br#"{"rows": 3}"#, 11);
        assert_eq!(shape_stdout(&out, 100), (json!({"rows": 3}), false));
        let out = captured(b"plain words\n", 12);
        assert_eq!(
            shape_stdout(&out, 100),
            (json!({"text": "plain words\n"}), false)
        );
        assert_eq!(
            shape_stdout(&captured(b" \n", 2), 100),
            (Value::Null, false)
        );
    }

    #[test]
    fn truncated_stdout_says_so_and_survives_cut_characters() {
        // "é" is two bytes; the cut falls inside it.
        let out = captured(&"aé".as_bytes()[..2], 1_000);
        let (v, truncated) = shape_stdout(&out, 2);
        assert!(truncated);
        assert_eq!(v["_truncated"]["original_bytes"], 1_000);
        assert_eq!(v["_truncated"]["limit_bytes"], 2);
        assert!(v["text"].as_str().unwrap().starts_with('a'));
    }

    #[test]
    fn stderr_note_keeps_the_end_and_says_when_cut() {
        let long = "x".repeat(HUMAN_STDERR_CHARS + 10) + "END";
        let note = stderr_note(&captured(long.as_bytes(), 1_000_000));
        assert!(note.ends_with("kept)"), "{note}");
        assert!(note.contains("END"));
        assert!(note.contains("stderr truncated"));
    }

    /// Issue 12 (review): the last 2000 characters were cut before they
    /// were redacted, so a secret across the cut left its end in clear.
    #[test]
    fn stderr_note_redacts_before_cutting_at_either_edge() {
        const CANARY: &str = "stderr-canary-0c9d1e";
        let mut secrets = rein_core::redact::Secrets::new();
        secrets.insert(CANARY).unwrap();
        rein_core::redact::register(&secrets);
        // The secret straddles the 2000-character cut of the tail.
        let cut = format!("{CANARY}{}", "y".repeat(HUMAN_STDERR_CHARS - 5));
        let note = stderr_note(&captured(cut.as_bytes(), cut.len() as u64));
        assert!(!note.contains("0c9d1e"), "{note}");
        assert!(!note.contains("1e"), "{}", &note[..40]);
        // The capture limit cut the secret: its start is dropped too.
        let head = format!("key {}", &CANARY[..10]);
        let note = stderr_note(&captured(head.as_bytes(), 1_000));
        assert!(!note.contains("stderr-can"), "{note}");
    }
}
