//! Idempotency keys bound to intent: `digest(tenant | intent | tool |
//! normalized args)`.
//!
//! # Why
//!
//! A retry is a guess at a side effect whose outcome is unknown; the key is
//! what makes a wrong guess harmless. It binds to the *intent* — assigned when
//! the call is planned and persisted — never to the attempt: a fresh key per
//! retry lets the server accept every duplicate. Arguments are normalized
//! first, because a model that sends `{"q": "weather"}` and then
//! `{"q": "weather "}` means the same call, and a key that differs between
//! them silently disables deduplication. Irreversible tools get no key: they
//! are never retried, only compensated.
//!
//! # Byte layout (version 1)
//!
//! The key is the lowercase hex SHA-256 (64 characters) of:
//!
//! ```text
//! b"rein-idempotency-v1\0"
//! u64 big-endian byte length of tenant   ‖ tenant (UTF-8)
//! u64 big-endian byte length of intent   ‖ intent (UTF-8)
//! u64 big-endian byte length of tool     ‖ tool name (UTF-8)
//! canonical JSON of the normalized arguments (UTF-8, to the end)
//! ```
//!
//! Length prefixes make the layout unambiguous whatever characters the
//! identifiers hold (a `|`-joined layout lets `a|b` + `c` collide with `a` +
//! `b|c`). The arguments come last and need no prefix.
//!
//! Canonical JSON: objects with keys in byte order and no whitespace; keys
//! beginning with `_` and volatile fields dropped at every depth; strings
//! trimmed of leading and trailing whitespace, and lowercased under
//! case-insensitive fields; numbers with an integral value below 2^53 written
//! as integers (`5.0` → `5`), other floats in Rust's shortest round-trip
//! form; only `"`, `\` and control characters escaped (as `\"`, `\\` and
//! `\u00XX`).
//!
//! NOTE: this layout is pinned by the golden test `key_layout_v1_is_pinned`.
//! Keys must be identical across processes and releases; a change to any rule
//! above is a new version with a new domain prefix, never an edit.

mod canonical;
mod key;

pub use canonical::{DEFAULT_VOLATILE_FIELDS, Normalizer, NormalizerConfig};
pub use key::{IdempotencyKey, KeyError, MAX_KEY_LEN};

pub(crate) use canonical::Sink;
