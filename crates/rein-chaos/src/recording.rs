//! A provider wrapper that records what the model received.
//!
//! # Why
//!
//! "The model never receives raw error text" is a claim about the model's
//! input, so it is checked on exactly that input — every request as the
//! provider got it — rather than on rein's transcript, which a bug could
//! make disagree with what was sent.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rein_core::Failure;
use rein_engine::provider::{Message, ModelProvider, ModelRequest, ModelResponse};

/// Records the messages of every model call, then delegates.
pub struct RecordingProvider {
    inner: Arc<dyn ModelProvider>,
    inputs: Mutex<Vec<Vec<Message>>>,
    /// Also appended here, one JSON line per call, so a process that is
    /// killed mid-run leaves what its model received behind.
    journal: Option<PathBuf>,
}

impl RecordingProvider {
    /// Wraps `inner`; with `journal`, every call is also appended to that
    /// file and flushed before the call is made.
    pub fn new(inner: Arc<dyn ModelProvider>, journal: Option<PathBuf>) -> RecordingProvider {
        RecordingProvider {
            inner,
            inputs: Mutex::new(Vec::new()),
            journal,
        }
    }

    /// The messages of every call so far.
    pub fn inputs(&self) -> Vec<Vec<Message>> {
        match self.inputs.lock() {
            Ok(v) => v.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Reads a journal written by another process (lines that do not parse,
    /// such as a line cut by the crash, are skipped).
    pub fn read_journal(path: &std::path::Path) -> Vec<Vec<Message>> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

#[async_trait]
impl ModelProvider for RecordingProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn complete(
        &self,
        request: &ModelRequest,
        allowance: Duration,
    ) -> Result<ModelResponse, Failure> {
        let messages = request.messages.clone();
        if let Some(path) = &self.journal
            && let Ok(line) = serde_json::to_string(&messages)
        {
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| writeln!(f, "{line}").and_then(|()| f.sync_data()));
            if let Err(e) = written {
                tracing::warn!(
                    "cannot journal the model's input to {}: {e}",
                    path.display()
                );
            }
        }
        match self.inputs.lock() {
            Ok(mut v) => v.push(messages),
            Err(p) => p.into_inner().push(messages),
        }
        self.inner.complete(request, allowance).await
    }

    fn resume_at(&self, calls: usize) {
        self.inner.resume_at(calls);
    }

    fn stream_settings(&self) -> Option<rein_engine::provider::StreamSettings> {
        self.inner.stream_settings()
    }
}
