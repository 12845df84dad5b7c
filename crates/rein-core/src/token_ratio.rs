//! How many bytes of a prompt make one token for a model, learned from the
//! counts its provider reports: the prompt bound of a model rein has no
//! tokenizer for.
//!
//! # Why
//!
//! A model call reserves its prompt before it is sent, bounded from above,
//! so that the token ceiling is never overshot. Byte-level tokenizers never
//! make more tokens of a text than it has bytes, so one token per byte is a
//! bound that always holds — and about four times what English or JSON
//! costs, so a run under `max_tokens = 3000` stops at a quarter of it. The
//! provider says what it counted after every call: from those counts rein
//! learns, per model, how many bytes made a token, and bounds the next
//! prompt with that.
//!
//! # How, and how it stays a bound
//!
//! Each answered call gives samples: the bytes of the whole request
//! against the tokens the provider counted for it, and, after a previous
//! count of the same transcript, the bytes added since against the tokens
//! they added. The ratio used is the **least** seen in any sample (the
//! densest text, the most tokens per byte), less a safety margin that
//! shrinks as samples grow (`MAX_MARGIN / √n`, never below
//! `MIN_MARGIN`), and never below 1 byte per token, so the bound is never
//! looser than the byte-level one. Without a sample it is 1: the
//! byte-level bound.
//! Text denser than anything seen so far could still be counted above the
//! bound by less than the margin's worth; the next sample lowers the ratio
//! at once.

use serde::{Deserialize, Serialize};

/// The margin taken off the least ratio seen, with one sample.
pub const MAX_MARGIN: f64 = 0.5;
/// The smallest margin, however many samples.
pub const MIN_MARGIN: f64 = 0.1;

/// One model's learned bytes per token (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct TokenRatio {
    samples: u64,
    /// The least bytes per token seen; meaningless while `samples` is 0.
    least: f64,
}

impl TokenRatio {
    /// No sample yet: the byte-level bound.
    pub fn new() -> TokenRatio {
        TokenRatio::default()
    }

    /// A ratio as stored: `samples` seen, the least `least` bytes per
    /// token among them. A stored value out of range (not finite, below 1)
    /// is read as 1 byte per token, the bound that always holds.
    pub fn from_parts(samples: u64, least: f64) -> TokenRatio {
        let least = if least.is_finite() && least >= 1.0 {
            least
        } else {
            1.0
        };
        TokenRatio { samples, least }
    }

    /// Samples seen.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The least bytes per token seen (1 with none).
    pub fn least(&self) -> f64 {
        if self.samples == 0 { 1.0 } else { self.least }
    }

    /// Learns that `bytes` of prompt were counted as `tokens`. A count of
    /// nothing (or of nothing sent) teaches nothing.
    pub fn observe(&mut self, bytes: u64, tokens: u64) {
        if bytes == 0 || tokens == 0 {
            return;
        }
        let ratio = (bytes as f64 / tokens as f64).max(1.0);
        self.least = if self.samples == 0 {
            ratio
        } else {
            self.least.min(ratio)
        };
        self.samples = self.samples.saturating_add(1);
    }

    /// Adds what `other` learned (another process's samples, read from
    /// the store).
    pub fn merge(&mut self, other: &TokenRatio) {
        if other.samples == 0 {
            return;
        }
        self.least = if self.samples == 0 {
            other.least
        } else {
            self.least.min(other.least)
        };
        self.samples = self.samples.saturating_add(other.samples);
    }

    /// The share taken off the least ratio seen: `MAX_MARGIN / √n`, at
    /// least `MIN_MARGIN`.
    pub fn margin(&self) -> f64 {
        if self.samples == 0 {
            return MAX_MARGIN;
        }
        (MAX_MARGIN / (self.samples as f64).sqrt()).max(MIN_MARGIN)
    }

    /// The bytes per token the bound uses: the least seen less the margin,
    /// never above it and never below 1.
    pub fn bytes_per_token(&self) -> f64 {
        if self.samples == 0 {
            return 1.0;
        }
        (self.least * (1.0 - self.margin())).max(1.0)
    }

    /// An upper bound of the tokens of `bytes` bytes of prompt.
    pub fn bound(&self, bytes: u64) -> u64 {
        let per = self.bytes_per_token();
        if per <= 1.0 {
            return bytes;
        }
        let tokens = (bytes as f64 / per).ceil();
        if tokens.is_finite() && tokens < u64::MAX as f64 {
            (tokens as u64).min(bytes)
        } else {
            bytes
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_sample_the_bound_is_one_token_per_byte() {
        let r = TokenRatio::new();
        assert_eq!(r.bound(1_000), 1_000);
        assert_eq!(r.bytes_per_token(), 1.0);
    }

    #[test]
    fn the_least_ratio_seen_less_a_shrinking_margin_bounds_the_prompt() {
        let mut r = TokenRatio::new();
        r.observe(4_000, 1_000);
        // One sample: half the margin off.
        assert_eq!(r.bytes_per_token(), 2.0);
        assert_eq!(r.bound(1_000), 500);
        r.observe(5_000, 1_000);
        assert_eq!(r.least(), 4.0, "the densest text seen rules");
        for _ in 0..98 {
            r.observe(4_000, 1_000);
        }
        assert_eq!(r.margin(), MIN_MARGIN);
        assert!((r.bytes_per_token() - 3.6).abs() < 1e-9);
        // Never below what the least ratio itself gives.
        assert!(r.bound(4_000) >= 1_000);
    }

    #[test]
    fn a_count_of_nothing_teaches_nothing_and_merges_add_up() {
        let mut r = TokenRatio::new();
        r.observe(0, 10);
        r.observe(10, 0);
        assert_eq!(r.samples(), 0);
        let mut other = TokenRatio::new();
        other.observe(300, 100);
        r.merge(&other);
        r.merge(&TokenRatio::new());
        assert_eq!((r.samples(), r.least()), (1, 3.0));
        assert_eq!(TokenRatio::from_parts(3, f64::NAN).least(), 1.0);
    }

    #[test]
    fn more_tokens_than_bytes_is_read_as_one_per_byte() {
        let mut r = TokenRatio::new();
        r.observe(10, 40);
        assert_eq!(r.bound(100), 100);
    }
}
