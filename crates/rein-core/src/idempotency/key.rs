use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::canonical::Normalizer;
use crate::ids::{IntentId, TenantId};
use crate::tool::ToolClass;

/// The domain prefix of layout version 1.
///
/// NOTE: pinned by `key_layout_v1_is_pinned`; see the module docs.
const DOMAIN_V1: &[u8] = b"rein-idempotency-v1\0";

/// The longest key accepted from outside, in characters.
pub const MAX_KEY_LEN: usize = 255;

/// A key that was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key was empty.
    #[error("idempotency key must not be empty")]
    Empty,
    /// The key was too long.
    #[error("idempotency key must be at most {MAX_KEY_LEN} characters, but it is {len}")]
    TooLong {
        /// Its length in characters.
        len: usize,
    },
    /// The key held a character that cannot travel in an HTTP header.
    #[error("idempotency key must be visible ASCII (0x21..=0x7e), but it holds {found:?}")]
    InvalidCharacter {
        /// The first refused character.
        found: char,
    },
}

/// The key under which the target deduplicates one intent's side effect.
///
/// Derived keys are 64 lowercase hex characters; keys from outside (an
/// `Idempotency-Key` header) are any visible ASCII up to [`MAX_KEY_LEN`].
/// Two keys are equal when their text is, whichever way they came.
#[derive(Clone, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IdempotencyKey(Repr);

/// How a key is held.
///
/// # Why two forms
///
/// A key is derived in front of every tool call; held inline, deriving one
/// allocates nothing, which keeps the guarded call's decision path free of
/// allocation (`tests/guarded_call_alloc.rs`).
#[derive(Clone)]
enum Repr {
    /// Derived: 64 lowercase hex characters.
    Derived([u8; DERIVED_LEN]),
    /// From outside.
    Given(Box<str>),
}

/// The length of a derived key: a SHA-256 digest in hex.
const DERIVED_LEN: usize = 64;

impl IdempotencyKey {
    /// Derives the key of a call, or `None` for an irreversible tool, which is
    /// never retried and so has nothing to deduplicate.
    ///
    /// The same (tenant, intent, tool, normalized arguments) gives the same
    /// key in every process and release; see the module docs for the layout.
    pub fn derive(
        class: ToolClass,
        tenant: &TenantId,
        intent: &IntentId,
        tool: &str,
        args: &Value,
        normalizer: &Normalizer,
    ) -> Option<IdempotencyKey> {
        if class == ToolClass::Irreversible {
            return None;
        }
        let mut hasher = Sha256::new();
        hasher.update(DOMAIN_V1);
        for part in [tenant.as_str(), intent.as_str(), tool] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
        normalizer.write(args, false, &mut hasher);
        let digest = hasher.finalize();
        let mut hex = [0u8; DERIVED_LEN];
        for (pair, byte) in hex.chunks_exact_mut(2).zip(digest) {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            pair[0] = HEX[usize::from(byte >> 4)];
            pair[1] = HEX[usize::from(byte & 0xf)];
        }
        Some(IdempotencyKey(Repr::Derived(hex)))
    }

    /// Accepts a key that arrived from outside.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when the key is empty, longer than [`MAX_KEY_LEN`] or
    /// holds anything but visible ASCII.
    pub fn parse(value: &str) -> Result<IdempotencyKey, KeyError> {
        if value.is_empty() {
            return Err(KeyError::Empty);
        }
        if let Some(found) = value.chars().find(|c| !matches!(c, '\x21'..='\x7e')) {
            return Err(KeyError::InvalidCharacter { found });
        }
        if value.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong { len: value.len() });
        }
        Ok(IdempotencyKey(Repr::Given(value.into())))
    }

    /// The key as text, as it travels in a header.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Hex digits are ASCII: the conversion cannot fail.
            Repr::Derived(hex) => std::str::from_utf8(hex).unwrap_or_default(),
            Repr::Given(text) => text,
        }
    }
}

impl PartialEq for IdempotencyKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for IdempotencyKey {}

impl PartialOrd for IdempotencyKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for IdempotencyKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for IdempotencyKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("IdempotencyKey")
            .field(&self.as_str())
            .finish()
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = KeyError;

    fn try_from(value: String) -> Result<Self, KeyError> {
        IdempotencyKey::parse(&value)
    }
}

impl From<IdempotencyKey> for String {
    fn from(key: IdempotencyKey) -> String {
        match key.0 {
            Repr::Given(text) => text.into(),
            Repr::Derived(_) => key.as_str().to_owned(),
        }
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(tenant: &str, intent: &str, tool: &str, args: Value) -> IdempotencyKey {
        IdempotencyKey::derive(
            ToolClass::IdempotentWrite,
            &TenantId::new(tenant).unwrap(),
            &IntentId::new(intent).unwrap(),
            tool,
            &args,
            &Normalizer::default(),
        )
        .unwrap()
    }

    /// The byte layout of version 1, pinned: if this test fails, keys written
    /// by an earlier release no longer deduplicate. Do not update the
    /// expected values; add a new layout version instead.
    #[test]
    fn key_layout_v1_is_pinned() {
        let k = key(
            "acme",
            "intent-7",
            "refund_order",
            json!({"order_id": "A-1001", "amount": 25.0, "trace_id": "t-1"}),
        );
        // Independently: sha256(b"rein-idempotency-v1\0" + be64(4) + b"acme"
        //   + be64(8) + b"intent-7" + be64(12) + b"refund_order"
        //   + b'{"amount":25,"order_id":"A-1001"}')
        let mut manual = Vec::new();
        manual.extend_from_slice(b"rein-idempotency-v1\0");
        for part in ["acme", "intent-7", "refund_order"] {
            manual.extend_from_slice(&(part.len() as u64).to_be_bytes());
            manual.extend_from_slice(part.as_bytes());
        }
        manual.extend_from_slice(br#"{"amount":25,"order_id":"A-1001"}"#);
        let expected: String = Sha256::digest(&manual)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(k.as_str(), expected);
        assert_eq!(k.as_str(), GOLDEN_V1);
    }

    #[test]
    fn a_derived_key_equals_the_same_text_given_from_outside() {
        let derived = key("acme", "i", "t", json!({}));
        let given = IdempotencyKey::parse(derived.as_str()).unwrap();
        assert_eq!(derived, given);
        use std::hash::BuildHasher;
        let state = std::hash::RandomState::new();
        assert_eq!(state.hash_one(&derived), state.hash_one(&given));
        assert_eq!(String::from(derived.clone()), derived.as_str());
        assert_eq!(
            format!("{derived:?}"),
            format!("IdempotencyKey({:?})", derived.as_str())
        );
        assert_eq!(
            serde_json::to_string(&derived).unwrap(),
            format!("\"{derived}\"")
        );
    }

    const GOLDEN_V1: &str = "484238a6a5d40e2fda10429b85386f675e039b947dec6dee56d80f5104bf4e86";

    #[test]
    fn irreversible_tools_get_no_key() {
        let k = IdempotencyKey::derive(
            ToolClass::Irreversible,
            &TenantId::new("t").unwrap(),
            &IntentId::new("i").unwrap(),
            "send_email",
            &json!({}),
            &Normalizer::default(),
        );
        assert_eq!(k, None);
    }

    #[test]
    fn reads_get_a_key_too() {
        let k = IdempotencyKey::derive(
            ToolClass::Read,
            &TenantId::new("t").unwrap(),
            &IntentId::new("i").unwrap(),
            "search",
            &json!({"q": "x"}),
            &Normalizer::default(),
        );
        assert!(k.is_some());
    }

    #[test]
    fn key_ignores_key_order_whitespace_and_volatile_fields() {
        let a = key("t", "i", "tool", json!({"q": "weather", "n": 1}));
        let b = key(
            "t",
            "i",
            "tool",
            json!({"n": 1.0, "q": " weather ", "request_id": "r9", "_x": 1}),
        );
        assert_eq!(a, b);
    }

    #[test]
    fn key_differs_across_tenants_intents_tools_and_args() {
        let base = key("t", "i", "tool", json!({"q": 1}));
        assert_ne!(base, key("u", "i", "tool", json!({"q": 1})));
        assert_ne!(base, key("t", "j", "tool", json!({"q": 1})));
        assert_ne!(base, key("t", "i", "tool2", json!({"q": 1})));
        assert_ne!(base, key("t", "i", "tool", json!({"q": 2})));
    }

    #[test]
    fn key_layout_is_unambiguous_across_field_boundaries() {
        assert_ne!(
            key("a|b", "c", "t", json!({})),
            key("a", "b|c", "t", json!({}))
        );
        assert_ne!(
            key("ab", "c", "t", json!({})),
            key("a", "bc", "t", json!({}))
        );
    }

    #[test]
    fn parse_refuses_empty_long_and_non_ascii_keys() {
        assert_eq!(IdempotencyKey::parse(""), Err(KeyError::Empty));
        assert_eq!(
            IdempotencyKey::parse(&"k".repeat(256)),
            Err(KeyError::TooLong { len: 256 })
        );
        assert_eq!(
            IdempotencyKey::parse("a b"),
            Err(KeyError::InvalidCharacter { found: ' ' })
        );
        assert_eq!(
            IdempotencyKey::parse("ключ"),
            Err(KeyError::InvalidCharacter { found: 'к' })
        );
        assert_eq!(
            IdempotencyKey::parse("order-1:retry").unwrap().as_str(),
            "order-1:retry"
        );
    }
}
