//! The tokenizers rein ships for well-known model families: a prompt to
//! one of them is bounded by its tokens rather than by a learned
//! bytes-per-token ratio.
//!
//! # Why a tokenizer, and only for these
//!
//! A learned ratio is the least bytes per token a model was seen to count,
//! less a margin: tight for text like what it learned from, loose for the
//! rest, and only a bound for text no denser than what it saw. OpenAI
//! publishes the byte-pair encodings of its chat models (`o200k_base` for
//! gpt-4o, gpt-4.1, gpt-4.5, gpt-5 and the o-series; `cl100k_base` for
//! gpt-4 and gpt-3.5), so for those the count of every text is known
//! before the call, whatever the text. Anthropic and most other providers
//! publish none: their models keep the learned ratio.
//!
//! # Why a count and not a guess
//!
//! The provider wraps every message in a chat template and renders tool
//! definitions its own way. The bound counts each message's texts (role,
//! content, tool-call ids, names and arguments) with the encoding and adds
//! the same per-message allowance the ratio's bound does, which is several
//! times the template's few tokens; tool definitions are counted as their
//! JSON, longer than any rendering of them, plus the tool-use allowance.
//! A server that names its model like OpenAI's but counts otherwise (a
//! local model behind an OpenAI-compatible API) is caught by its first
//! answer: a count above the encoding's bound makes rein stop trusting the
//! encoding for that model (see `TokenRatios::learn`).
//!
//! # Cost
//!
//! An encoding is read from the crate's embedded files the first time a
//! model of its family is bounded, once per process, on a blocking thread
//! ([`Encoding::load`]); counting a transcript of a few kilobytes takes
//! tens of microseconds (`cargo bench -p rein-engine --bench
//! prompt_bound`).

#[cfg(feature = "tokenizer")]
use std::sync::OnceLock;

/// A byte-pair encoding rein ships.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `o200k_base`: gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1, o3, o4-mini.
    O200kBase,
    /// `cl100k_base`: gpt-4, gpt-3.5-turbo.
    Cl100kBase,
}

#[cfg(feature = "tokenizer")]
type Bpe = tiktoken_rs::CoreBPE;

impl Encoding {
    /// The encoding of `model`, when it is an OpenAI chat model rein has
    /// the encoding of (dated snapshots and Azure's deployment names
    /// included); `None` otherwise, or when rein was built without the
    /// `tokenizer` feature.
    pub fn of_model(model: &str) -> Option<Encoding> {
        #[cfg(feature = "tokenizer")]
        {
            use tiktoken_rs::tokenizer::{Tokenizer, get_tokenizer};
            match get_tokenizer(model)? {
                Tokenizer::O200kBase => Some(Encoding::O200kBase),
                Tokenizer::Cl100kBase => Some(Encoding::Cl100kBase),
                _ => None,
            }
        }
        #[cfg(not(feature = "tokenizer"))]
        {
            let _ = model;
            None
        }
    }

    /// The encoding's name, as OpenAI publishes it.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
        }
    }

    #[cfg(feature = "tokenizer")]
    fn cell(self) -> &'static OnceLock<Option<Bpe>> {
        static O200K: OnceLock<Option<Bpe>> = OnceLock::new();
        static CL100K: OnceLock<Option<Bpe>> = OnceLock::new();
        match self {
            Encoding::O200kBase => &O200K,
            Encoding::Cl100kBase => &CL100K,
        }
    }

    /// Reads the encoding's embedded ranks, once per process; blocks for
    /// a few hundred milliseconds the first time (call it off the async
    /// threads). `false` when it cannot be read, and the model keeps the
    /// learned ratio.
    pub fn load(self) -> bool {
        #[cfg(feature = "tokenizer")]
        {
            self.cell()
                .get_or_init(|| {
                    let read = match self {
                        Encoding::O200kBase => tiktoken_rs::o200k_base(),
                        Encoding::Cl100kBase => tiktoken_rs::cl100k_base(),
                    };
                    read.map_err(|e| {
                        tracing::warn!(
                            "cannot read the {} encoding; its models are bounded by their learned ratio: {e}",
                            self.name()
                        );
                    })
                    .ok()
                })
                .is_some()
        }
        #[cfg(not(feature = "tokenizer"))]
        false
    }

    /// Starts [`Encoding::load`] on a blocking thread, once per process,
    /// and returns at once.
    ///
    /// # Why a model call never waits for it
    ///
    /// Reading an encoding takes a few hundred milliseconds (seconds in a
    /// debug build): awaited inside a call, it was spent from the run's
    /// own deadline, and a run with a short wall clock ended
    /// `budget_exhausted` for it. Until it is read, a prompt is bounded by
    /// the learned ratio, which always holds; the tokenizer only tightens
    /// the calls after.
    pub fn load_in_background(self) {
        #[cfg(feature = "tokenizer")]
        {
            use std::sync::atomic::{AtomicBool, Ordering};
            static O200K: AtomicBool = AtomicBool::new(false);
            static CL100K: AtomicBool = AtomicBool::new(false);
            let asked = match self {
                Encoding::O200kBase => &O200K,
                Encoding::Cl100kBase => &CL100K,
            };
            if self.is_loaded() {
                return;
            }
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            if !asked.swap(true, Ordering::AcqRel) {
                drop(runtime.spawn_blocking(move || self.load()));
            }
        }
    }

    /// Whether [`Encoding::load`] has read the encoding: counting never
    /// blocks on it.
    pub fn is_loaded(self) -> bool {
        #[cfg(feature = "tokenizer")]
        {
            matches!(self.cell().get(), Some(Some(_)))
        }
        #[cfg(not(feature = "tokenizer"))]
        false
    }

    /// The tokens of `text` (no special tokens: a message's text is
    /// ordinary text to the provider); `None` until loaded.
    pub fn count(self, text: &str) -> Option<u64> {
        #[cfg(feature = "tokenizer")]
        {
            let bpe = self.cell().get()?.as_ref()?;
            u64::try_from(bpe.encode_ordinary(text).len()).ok()
        }
        #[cfg(not(feature = "tokenizer"))]
        {
            let _ = text;
            None
        }
    }
}

#[cfg(all(test, feature = "tokenizer"))]
mod tests {
    use super::*;

    #[test]
    fn openai_chat_families_have_their_encoding_and_others_none() {
        for model in [
            "gpt-4o",
            "gpt-4o-mini",
            "gpt-4.1-2025-04-14",
            "o3-mini",
            "gpt-5",
        ] {
            assert_eq!(
                Encoding::of_model(model),
                Some(Encoding::O200kBase),
                "{model}"
            );
        }
        for model in ["gpt-4", "gpt-3.5-turbo", "gpt-35-turbo-16k"] {
            assert_eq!(
                Encoding::of_model(model),
                Some(Encoding::Cl100kBase),
                "{model}"
            );
        }
        for model in [
            "claude-sonnet-4",
            "mock-model",
            "llama-3.1-8b",
            "text-davinci-003",
        ] {
            assert_eq!(Encoding::of_model(model), None, "{model}");
        }
    }

    #[test]
    fn counts_are_the_published_encodings() {
        assert!(Encoding::O200kBase.load());
        assert!(Encoding::Cl100kBase.load());
        // Counts from OpenAI's tiktoken for these strings.
        assert_eq!(Encoding::O200kBase.count("hello world"), Some(2));
        assert_eq!(Encoding::Cl100kBase.count("hello world"), Some(2));
        assert_eq!(
            Encoding::O200kBase.count("tiktoken is great!"),
            Some(6),
            "o200k_base"
        );
        assert_eq!(
            Encoding::Cl100kBase.count("tiktoken is great!"),
            Some(6),
            "cl100k_base"
        );
        // Special-token text is ordinary text in a message.
        assert!(Encoding::O200kBase.count("<|endoftext|>").unwrap() > 1);
    }
}
