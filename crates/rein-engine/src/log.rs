//! Logs and panic messages without secrets, for any program that embeds
//! rein: [`RedactingWriter`] and [`install_panic_hook`].
//!
//! The engine writes its log lines through `tracing` and never formats a
//! secret into one, but a line also quotes errors (a reqwest error names
//! its URL) and any crate may log; so the last step before bytes leave the
//! process redacts them with the process's secrets ([`rein_core::redact`]).
//! The `rein` binary installs both; an embedder does the same:
//!
//! ```
//! use rein_engine::log::{RedactingWriter, install_panic_hook};
//! # fn fmt_subscriber() {}
//! // With tracing-subscriber:
//! //   tracing_subscriber::fmt()
//! //       .with_writer(|| RedactingWriter::new(std::io::stderr()))
//! //       .init();
//! //   (or `.json()` with `RedactingWriter::json_lines(std::io::stderr())`)
//! install_panic_hook();
//! let mut out = RedactingWriter::new(Vec::new());
//! std::io::Write::write_all(&mut out, b"GET /x?token=abc failed\n")?;
//! assert_eq!(out.into_inner(), b"GET /x?[redacted] failed\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io::{self, Write};

/// A writer that redacts each line before it reaches `W`.
///
/// Bytes are buffered until a newline (a log formatter writes one line
/// per event, possibly in several writes), so a secret is never split
/// across two writes and missed; the rest is written when the writer is
/// dropped. In [`json_lines`](RedactingWriter::json_lines) mode each line
/// is parsed and redacted field by field, so it stays valid JSON (a secret
/// that was a JSON number becomes a string); a line that does not parse
/// is redacted as text.
pub struct RedactingWriter<W: Write> {
    inner: Option<W>,
    line: Vec<u8>,
    json: bool,
}

impl<W: Write> RedactingWriter<W> {
    /// Redacts text lines written to `inner`.
    pub fn new(inner: W) -> Self {
        RedactingWriter {
            inner: Some(inner),
            line: Vec::with_capacity(256),
            json: false,
        }
    }

    /// Redacts JSON lines written to `inner`, keeping them JSON.
    pub fn json_lines(inner: W) -> Self {
        let mut writer = RedactingWriter::new(inner);
        writer.json = true;
        writer
    }

    /// Writes what is buffered and returns the inner writer.
    pub fn into_inner(mut self) -> W {
        let _ = self.emit_rest();
        match self.inner.take() {
            Some(inner) => inner,
            None => unreachable!("the inner writer is only taken here"),
        }
    }

    /// Writes every complete line buffered.
    fn emit_lines(&mut self) -> io::Result<()> {
        while let Some(end) = self.line.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.line.drain(..=end).collect();
            self.emit(&line)?;
        }
        Ok(())
    }

    fn emit_rest(&mut self) -> io::Result<()> {
        self.emit_lines()?;
        if !self.line.is_empty() {
            let rest = std::mem::take(&mut self.line);
            self.emit(&rest)?;
        }
        if let Some(inner) = &mut self.inner {
            inner.flush()?;
        }
        Ok(())
    }

    fn emit(&mut self, line: &[u8]) -> io::Result<()> {
        let Some(inner) = &mut self.inner else {
            return Ok(());
        };
        let text = String::from_utf8_lossy(line);
        let clean = redact_line(&text, self.json);
        inner.write_all(clean.as_bytes())
    }
}

/// One line (with its newline, if any) redacted.
fn redact_line(text: &str, json: bool) -> String {
    let (body, newline) = match text.strip_suffix('\n') {
        Some(body) => (body, "\n"),
        None => (text, ""),
    };
    if json && let Ok(mut doc) = serde_json::from_str::<serde_json::Value>(body) {
        rein_core::redact::json(&mut doc);
        return format!("{doc}{newline}");
    }
    format!("{}{newline}", rein_core::redact::text(body))
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.line.extend_from_slice(buf);
        self.emit_lines()?;
        Ok(buf.len())
    }

    /// Flushes the lines written so far; an incomplete line waits for its
    /// end (or the drop), so it is redacted whole.
    fn flush(&mut self) -> io::Result<()> {
        self.emit_lines()?;
        match &mut self.inner {
            Some(inner) => inner.flush(),
            None => Ok(()),
        }
    }
}

impl<W: Write> Drop for RedactingWriter<W> {
    fn drop(&mut self) {
        let _ = self.emit_rest();
    }
}

/// Replaces the panic hook with one that reports a panic redacted: the
/// thread, the location and the message (which may quote anything the
/// panicking code held), through `tracing` at `error` (target
/// `rein::panic`) when a subscriber is installed, else on stderr.
///
/// # Why
///
/// A run's panics are caught at its boundary and end it `failed`
/// (`internal`), but the standard hook has already printed the message on
/// stderr in clear by then.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(a non-text payload)".to_owned());
        let location = info
            .location()
            .map_or_else(String::new, |l| format!(" at {}:{}", l.file(), l.line()));
        let thread = std::thread::current()
            .name()
            .unwrap_or("<unnamed>")
            .to_owned();
        let text =
            rein_core::redact::text(&format!("thread '{thread}' panicked{location}: {message}"))
                .into_owned();
        if tracing::dispatcher::has_been_set() {
            tracing::error!(target: "rein::panic", "{text}");
        } else {
            let mut stderr = RedactingWriter::new(io::stderr());
            let _ = writeln!(stderr, "{text}");
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(value: &str) {
        let mut secrets = rein_core::redact::Secrets::new();
        secrets.insert(value).unwrap();
        rein_core::redact::register(&secrets);
    }

    #[test]
    fn a_line_written_in_pieces_is_redacted_whole() {
        secret("log-canary-5a5a5a");
        let mut out = RedactingWriter::new(Vec::new());
        out.write_all(b"key log-can").unwrap();
        out.write_all(b"ary-5a5a5a refused\nnext ").unwrap();
        out.write_all(b"line").unwrap();
        assert_eq!(out.into_inner(), b"key [redacted] refused\nnext line");
    }

    #[test]
    fn json_lines_stay_json_when_a_secret_is_a_number() {
        secret("9876543210123");
        let mut out = RedactingWriter::json_lines(Vec::new());
        out.write_all(b"{\"fields\":{\"pin\":9876543210123,\"message\":\"pin 9876543210123\"}}\n")
            .unwrap();
        let text = String::from_utf8(out.into_inner()).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["fields"]["pin"], "[redacted]");
        assert_eq!(doc["fields"]["message"], "pin [redacted]");
    }

    const PANIC_CANARY: &str = "panic-canary-77c3b2";
    const CHILD: &str = "REIN_LOG_TEST_PANIC_CHILD";

    /// In the child process only: panics with a registered secret in its
    /// message under the redacting hook.
    #[test]
    fn panic_child() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        secret(PANIC_CANARY);
        install_panic_hook();
        panic!("cannot reach http://h/x?token=t with key {PANIC_CANARY}");
    }

    /// Issue 12 (review): panic messages went to stderr in clear.
    #[test]
    fn a_panic_is_reported_redacted() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "log::tests::panic_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "the child panicked: {stderr}");
        assert!(
            stderr.contains("panicked at ") && stderr.contains("with key [redacted]"),
            "{stderr}"
        );
        assert!(!stderr.contains(PANIC_CANARY), "{stderr}");
        assert!(!stderr.contains("token=t"), "{stderr}");
    }
}
