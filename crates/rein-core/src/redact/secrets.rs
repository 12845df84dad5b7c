//! [`Secrets`]: the values a process holds, as written.

use super::MIN_SECRET_CHARS;

/// A value too short to redact without ruining every text it appears in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "is {chars} characters long; values shorter than {MIN_SECRET_CHARS} are not redacted \
     from errors, reports and logs"
)]
pub struct SecretTooShort {
    /// The value's length in characters.
    pub chars: usize,
}

/// The secret values a process holds, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    values: Vec<String>,
}

impl Secrets {
    /// No secrets.
    pub fn new() -> Secrets {
        Secrets::default()
    }

    /// Adds `value`. An empty value is ignored (it holds nothing).
    ///
    /// # Errors
    ///
    /// [`SecretTooShort`] for a value of fewer than [`MIN_SECRET_CHARS`]
    /// characters; it is not added.
    pub fn insert(&mut self, value: &str) -> Result<(), SecretTooShort> {
        let chars = value.chars().count();
        if chars == 0 {
            return Ok(());
        }
        if chars < MIN_SECRET_CHARS {
            return Err(SecretTooShort { chars });
        }
        if !self.contains(value) {
            self.values.push(value.to_owned());
        }
        Ok(())
    }

    /// Adds every secret of `other`.
    pub fn extend(&mut self, other: &Secrets) {
        for value in &other.values {
            if !self.contains(value) {
                self.values.push(value.clone());
            }
        }
    }

    /// Whether `value` is one of them.
    pub fn contains(&self, value: &str) -> bool {
        self.values.iter().any(|v| v == value)
    }

    /// Whether every secret of `other` is one of them.
    pub fn covers(&self, other: &Secrets) -> bool {
        other.values.iter().all(|v| self.contains(v))
    }

    /// How many values there are.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The values.
    pub(super) fn values(&self) -> impl Iterator<Item = &str> {
        self.values.iter().map(String::as_str)
    }
}
