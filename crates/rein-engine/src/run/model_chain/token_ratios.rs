//! The bytes per token each model's provider counted, learned from every
//! answered call of the process ([`rein_core::token_ratio`]): what bounds
//! the prompt of a model's next call.
//!
//! # Why here
//!
//! The prompt bound is taken before every model call (the reservation,
//! the provider's token bucket, the planner's last-turn decision), and the
//! provider's count arrives after it; one book per engine lets every run of
//! the process plan with what any of them learned. A model is known by its
//! provider and name (`provider/model`): the same name behind two providers
//! may be two tokenizers.
//!
//! # Shared through the store
//!
//! What a process learns is added to the store's ratio of each model
//! ([`Store::merge_token_ratios`]: samples summed, the least ratio kept)
//! at every run's end, and the stored ratios are read once, before the
//! engine's first bound: a second `rein run` starts where the first left
//! off, not at one token per byte. A store that cannot be read or written
//! only costs tightness: the bound stays one token per byte, which always
//! holds.
//!
//! [`Store::merge_token_ratios`]: rein_store::HealthStore::merge_token_ratios

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rein_core::Timestamp;
use rein_core::token_ratio::TokenRatio;
use rein_store::Store;
use serde_json::Value;
use tokio::sync::OnceCell;

use super::ceiling::{PromptMeter, prompt_estimate};
use super::tokenizer::Encoding;
use crate::provider::Message;

/// Every model's learned ratio, by `provider/model`.
#[derive(Debug, Default)]
pub(crate) struct TokenRatios {
    ratios: Mutex<Book>,
    loaded: OnceCell<()>,
    flush_lock: tokio::sync::Mutex<()>,
}

/// The ratios as this process knows them, and what it learned since its
/// last flush.
#[derive(Debug, Default)]
struct Book {
    /// Stored sums (as last read or written) with this process's samples.
    total: HashMap<String, TokenRatio>,
    /// This process's samples not yet added to the store.
    delta: HashMap<String, TokenRatio>,
    /// Models whose provider counted a prompt above their encoding's
    /// bound: bounded by their learned ratio instead.
    distrusted: HashSet<String>,
}

/// `provider/model`.
fn key(provider: &str, model: &str) -> String {
    format!("{provider}/{model}")
}

/// The JSON bytes of `messages` and `tools`, as the prompt bound counts
/// them.
pub(crate) fn request_bytes(messages: &[Message], tools: &[Value]) -> u64 {
    let messages: usize = messages
        .iter()
        .map(|m| serde_json::to_vec(m).map_or(0, |v| v.len()))
        .sum();
    let tools = if tools.is_empty() {
        0
    } else {
        serde_json::to_vec(tools).map_or(0, |v| v.len())
    };
    u64::try_from(messages.saturating_add(tools)).unwrap_or(u64::MAX)
}

impl TokenRatios {
    fn lock(&self) -> MutexGuard<'_, Book> {
        self.ratios.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the stored ratios, once per engine (later calls return at
    /// once). A store that cannot answer leaves the ratios as they are.
    pub(crate) async fn load(&self, store: &dyn Store) {
        self.loaded
            .get_or_init(|| async {
                match store.token_ratios().await {
                    Ok(rows) => {
                        let mut book = self.lock();
                        for row in rows {
                            book.total
                                .entry(row.model)
                                .or_default()
                                .merge(&row.stored.ratio);
                        }
                    }
                    Err(e) => tracing::warn!(
                        "cannot read the learned token ratios; bounding prompts at one token per byte until learned again: {e}"
                    ),
                }
            })
            .await;
    }

    /// Adds what this process learned since its last flush to the store,
    /// and takes the sums back (with anything learned meanwhile). On
    /// failure the samples are kept for the next flush.
    pub(crate) async fn flush_now(&self, store: &dyn Store, now_ms: Timestamp) {
        // The stored ratios are read before any is written back: reading
        // them after would count this process's samples twice.
        self.load(store).await;
        let _serial = self.flush_lock.lock().await;
        let deltas: Vec<(String, TokenRatio)> = self.lock().delta.drain().collect();
        if deltas.is_empty() {
            return;
        }
        match store.merge_token_ratios(&deltas, now_ms).await {
            Ok(rows) => {
                let mut book = self.lock();
                for row in rows {
                    let mut total = row.stored.ratio;
                    if let Some(since) = book.delta.get(&row.model) {
                        total.merge(since);
                    }
                    book.total.insert(row.model, total);
                }
            }
            Err(e) => {
                tracing::warn!(
                    "cannot add the learned token ratios to the store; keeping them for the next flush: {e}"
                );
                let mut book = self.lock();
                for (model, delta) in deltas {
                    book.delta.entry(model).or_default().merge(&delta);
                }
            }
        }
    }

    /// Reads the encodings of `models` that have one and are trusted, on
    /// a blocking thread, and waits for them, so that
    /// [`TokenRatios::meter_of`] counts with them (once per process; later
    /// calls return at once). For a caller with no deadline to spend it
    /// from (a token count); a run's call uses [`TokenRatios::request`].
    pub(crate) async fn prepare<'m>(&self, models: impl IntoIterator<Item = &'m str>) {
        let wanted: Vec<Encoding> = models
            .into_iter()
            .filter_map(Encoding::of_model)
            .filter(|e| !e.is_loaded())
            .collect();
        if wanted.is_empty() {
            return;
        }
        let read = tokio::task::spawn_blocking(move || {
            for e in wanted {
                e.load();
            }
        });
        if let Err(e) = read.await {
            tracing::warn!(
                "reading a tokenizer's encoding failed; bounding by the learned ratio: {e}"
            );
        }
    }

    /// Starts reading the encodings of `models` that have one, without
    /// waiting (see [`Encoding::load_in_background`]): a run's call is
    /// bounded by the learned ratio until they are read.
    pub(crate) fn request<'m>(&self, models: impl IntoIterator<Item = &'m str>) {
        for encoding in models.into_iter().filter_map(Encoding::of_model) {
            encoding.load_in_background();
        }
    }

    /// How to bound a prompt that goes unchanged to every one of `models`
    /// (`(provider, model)`): with the encoding of each model that has a
    /// loaded and trusted one, and at the most cautious learned ratio (the
    /// fewest bytes per token) of the others.
    pub(crate) fn meter_of<'m>(
        &self,
        models: impl IntoIterator<Item = (&'m str, &'m str)>,
    ) -> PromptMeter {
        let book = self.lock();
        let mut meter: Option<PromptMeter> = None;
        for (p, m) in models {
            let key = key(p, m);
            let encoding =
                Encoding::of_model(m).filter(|e| e.is_loaded() && !book.distrusted.contains(&key));
            meter = Some(match (meter, encoding) {
                (None, Some(e)) => PromptMeter::encoding(e),
                (Some(meter), Some(e)) => meter.with_encoding(e),
                (meter, None) => {
                    let ratio = book.total.get(&key).copied().unwrap_or_default();
                    meter.map_or_else(|| ratio.into(), |meter| meter.with_ratio(ratio))
                }
            });
        }
        meter.unwrap_or_default()
    }

    /// Learns from an answered request of `messages` and `tools` that
    /// `provider` counted `input` prompt tokens for: the whole request, and
    /// — when the provider had counted `last_input` for the transcript
    /// before the last assistant message — what was added since.
    pub(crate) fn learn(
        &self,
        (provider, model): (&str, &str),
        messages: &[Message],
        tools: &[Value],
        (input, last_input): (u64, u64),
    ) {
        // A prompt with media teaches nothing of text's bytes per token:
        // an image's tokens do not follow its bytes.
        if input == 0 || messages.iter().any(|m| m.media().next().is_some()) {
            return;
        }
        let whole = request_bytes(messages, tools);
        let added = messages
            .iter()
            .rposition(|m| matches!(m, Message::Assistant { .. }))
            .filter(|_| last_input > 0 && input > last_input)
            .map(|i| (request_bytes(&messages[i..], &[]), input - last_input));
        let mut book = self.lock();
        let book = &mut *book;
        let key = key(provider, model);
        // A count above the encoding's bound: the model is not what its
        // name says (or the bound is wrong); the learned ratio bounds it
        // from now on.
        if let Some(encoding) = Encoding::of_model(model).filter(|e| e.is_loaded())
            && !book.distrusted.contains(&key)
        {
            let bound = prompt_estimate(messages, tools, 0, &PromptMeter::encoding(encoding));
            if input > bound {
                tracing::warn!(
                    "{key} counted {input} prompt tokens where its {} encoding bounds {bound}: its prompts are bounded by the learned bytes per token from now on",
                    encoding.name()
                );
                book.distrusted.insert(key.clone());
            }
        }
        for ratio in [
            book.total.entry(key.clone()).or_default(),
            book.delta.entry(key.clone()).or_default(),
        ] {
            ratio.observe(whole, input);
            if let Some((bytes, tokens)) = added {
                ratio.observe(bytes, tokens);
            }
        }
    }
}
