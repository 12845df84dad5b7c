//! Identifiers of the vocabulary: [`TenantId`], [`RunId`], [`IntentId`],
//! [`AttemptId`].
//!
//! # Why newtypes
//!
//! A tenant and an intent are both strings, and an idempotency key built with
//! the two swapped would silently collide with another intent's key. Distinct
//! types make such a swap a compile error. Each is validated once: non-empty,
//! at most [`MAX_ID_LEN`] bytes, no control characters (they travel in HTTP
//! headers and log lines).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The longest identifier accepted, in bytes.
pub const MAX_ID_LEN: usize = 255;

/// An identifier that was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The identifier was empty.
    #[error("{kind} must not be empty")]
    Empty {
        /// Which identifier (`tenant id`, `intent id`, ...).
        kind: &'static str,
    },
    /// The identifier was longer than [`MAX_ID_LEN`] bytes.
    #[error("{kind} must be at most {MAX_ID_LEN} bytes, but it is {len} bytes")]
    TooLong {
        /// Which identifier.
        kind: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// The identifier held a control character.
    #[error("{kind} must not contain control characters, but {value:?} does")]
    ControlCharacter {
        /// Which identifier.
        kind: &'static str,
        /// The refused value.
        value: String,
    },
}

fn validate(kind: &'static str, value: &str) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if value.len() > MAX_ID_LEN {
        return Err(IdError::TooLong {
            kind,
            len: value.len(),
        });
    }
    if value.chars().any(char::is_control) {
        return Err(IdError::ControlCharacter {
            kind,
            value: value.to_owned(),
        });
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps `value`.
            ///
            /// # Errors
            ///
            /// [`IdError`] when the value is empty, longer than
            /// [`MAX_ID_LEN`] bytes or holds a control character.
            pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
                let value = value.into();
                validate($kind, &value)?;
                Ok($name(value))
            }

            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;

            fn try_from(value: String) -> Result<Self, IdError> {
                $name::new(value)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

id_type!(
    /// The tenant a run belongs to; it scopes idempotency keys, quotas and
    /// fairness.
    TenantId,
    "tenant id"
);
id_type!(
    /// One run of an agent.
    RunId,
    "run id"
);
id_type!(
    /// One planned action. Assigned when the call is planned, persisted, and
    /// reused by every retry and every resume — the idempotency key binds to
    /// it, never to an attempt.
    IntentId,
    "intent id"
);
id_type!(
    /// One try of an intent; correlates retries, breaker counts and
    /// deduplication of the same intent.
    AttemptId,
    "attempt id"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_refuses_empty_long_and_control_characters() {
        assert_eq!(
            TenantId::new("").unwrap_err(),
            IdError::Empty { kind: "tenant id" }
        );
        assert!(matches!(
            IntentId::new("x".repeat(256)).unwrap_err(),
            IdError::TooLong { len: 256, .. }
        ));
        let err = RunId::new("run\n1").unwrap_err();
        assert!(err.to_string().contains("control characters"), "{err}");
        assert_eq!(AttemptId::new("a-1").unwrap().as_str(), "a-1");
    }

    #[test]
    fn id_deserialization_validates() {
        assert!(serde_json::from_str::<TenantId>("\"\"").is_err());
        let id: TenantId = serde_json::from_str("\"acme\"").unwrap();
        assert_eq!(id.to_string(), "acme");
    }
}
