use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

use super::action::{Action, write_action};
use crate::idempotency::Normalizer;

// NOTE: the domain prefixes below keep the three parts of a state digest, the
// action fingerprint and the failure signature apart; changing one changes
// every digest (they are compared within a run, never across releases, but
// appear in events).
const STATE_DOMAIN: &[u8] = b"rein-state-v1\0";
const FACT_DOMAIN: &[u8] = b"rein-state-fact-v1\0";
const TODO_DOMAIN: &[u8] = b"rein-state-todo-v1\0";
const ACTION_DOMAIN: &[u8] = b"rein-state-action-v1\0";

/// Defines a 128-bit digest newtype shown and serialized as 32 lowercase hex
/// characters.
macro_rules! digest128 {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name([u8; 16]);

        impl $name {
            /// The digest with these bytes.
            pub const fn from_bytes(bytes: [u8; 16]) -> Self {
                $name(bytes)
            }

            /// The digest's bytes.
            pub const fn as_bytes(&self) -> &[u8; 16] {
                &self.0
            }

            /// Parses the 32 hex characters written by `Display`; `None` for
            /// anything else.
            pub fn parse_hex(text: &str) -> Option<Self> {
                parse_hex(text).map($name)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write_hex(&self.0, f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                $name::parse_hex(&text).ok_or_else(|| {
                    serde::de::Error::custom(format_args!(
                        concat!(
                            stringify!($name),
                            " must be 32 hex characters, but it is {:?}"
                        ),
                        text
                    ))
                })
            }
        }
    };
}

digest128! {
    /// A digest of what a run knows and intends: the facts it obtained, its
    /// todo list and the actions it attempted — never its transcript.
    ///
    /// # Why not the transcript
    ///
    /// The loop guard's "no progress" rule asks whether the outside world
    /// told the run anything new. A transcript changes on every step even
    /// when the model queries the same page a third way and learns nothing,
    /// so a digest of it would never stand still. The digest covers the
    /// run's real basis for progress instead (seed 000, "Shape Two"):
    ///
    /// - **facts** obtained from outside (a file's contents, a tool result's
    ///   digest): a set, so order and duplicates do not matter;
    /// - the **todo list**: a sequence, so reordering the plan is a change;
    /// - the **actions attempted**: a set of (tool, normalized arguments).
    ///
    /// The three parts are domain-separated, so moving an item from facts to
    /// the todo list changes the digest. It is SHA-256 truncated to 128 bits:
    /// collisions would need an adversary inside the run.
    ///
    /// Build one with [`StateDigestBuilder`] or [`StateDigest::of`].
    StateDigest
}

digest128! {
    /// The signature of a failure: a digest of the tool and its
    /// [normalized](super::normalize_error) error text.
    ///
    /// Two failures with the same signature are "the same failure" for the
    /// repeat-failure rule: `lock timeout on row 4471` and `lock timeout on
    /// row 4472` of one tool share one.
    FailureSignature
}

impl StateDigest {
    /// A builder with the default argument [`Normalizer`].
    pub fn builder() -> StateDigestBuilder {
        StateDigestBuilder::new()
    }

    /// The digest of `facts` (a set), `todo` (a sequence) and `actions` (a
    /// set), with the default argument [`Normalizer`].
    ///
    /// ```
    /// use rein_core::loop_guard::{Action, StateDigest};
    /// use serde_json::json;
    ///
    /// let args = json!({"q": "price of A-1001"});
    /// let a = StateDigest::of(["page 1", "page 2"], ["compare"], [Action::new("search", &args)]);
    /// let b = StateDigest::of(["page 2", "page 1"], ["compare"], [Action::new("search", &args)]);
    /// assert_eq!(a, b);
    /// ```
    pub fn of<'a, F, T, A>(facts: F, todo: T, actions: A) -> StateDigest
    where
        F: IntoIterator,
        F::Item: AsRef<[u8]>,
        T: IntoIterator,
        T::Item: AsRef<[u8]>,
        A: IntoIterator<Item = Action<'a>>,
    {
        let mut builder = StateDigestBuilder::new();
        for fact in facts {
            builder.fact(fact);
        }
        for item in todo {
            builder.todo(item);
        }
        for action in actions {
            builder.action(action);
        }
        builder.finish()
    }
}

/// Builds a [`StateDigest`] from a run's facts, todo list and attempted
/// actions, in any interleaving.
///
/// Each item is hashed as it arrives (with its part's domain prefix), so the
/// builder holds 32 bytes per distinct item, not the items themselves.
///
/// # Layout
///
/// ```text
/// fact hash   = sha256(b"rein-state-fact-v1\0"   ‖ fact bytes)
/// todo hash   = sha256(b"rein-state-todo-v1\0"   ‖ item bytes)
/// action hash = sha256(b"rein-state-action-v1\0" ‖ u64be len(tool) ‖ tool ‖ canonical args)
/// digest      = sha256(b"rein-state-v1\0"
///                      ‖ b"facts\0"   ‖ u64be n ‖ fact hashes, sorted, deduplicated
///                      ‖ b"todo\0"    ‖ u64be n ‖ todo hashes, in order
///                      ‖ b"actions\0" ‖ u64be n ‖ action hashes, sorted, deduplicated)[..16]
/// ```
///
/// # Why sorted hashes
///
/// Sorting per-item hashes makes a set order-insensitive without the
/// weaknesses of combining them arithmetically: with XOR two equal facts
/// cancel out, and with a sum an adversarial or merely unlucky set of items
/// can be balanced by another.
#[derive(Debug, Clone, Default)]
pub struct StateDigestBuilder {
    facts: Vec<[u8; 32]>,
    todo: Vec<[u8; 32]>,
    actions: Vec<[u8; 32]>,
    normalizer: Normalizer,
}

impl StateDigestBuilder {
    /// An empty builder with the default argument [`Normalizer`].
    pub fn new() -> Self {
        StateDigestBuilder::default()
    }

    /// An empty builder that normalizes action arguments with `normalizer`.
    pub fn with_normalizer(normalizer: Normalizer) -> Self {
        StateDigestBuilder {
            normalizer,
            ..StateDigestBuilder::default()
        }
    }

    /// Adds an external fact the run obtained (a file read, a tool result's
    /// digest). Facts form a set: order and repetition do not matter.
    pub fn fact(&mut self, fact: impl AsRef<[u8]>) -> &mut Self {
        let hash = item_hash(FACT_DOMAIN, fact.as_ref());
        insert_sorted(&mut self.facts, hash);
        self
    }

    /// Appends an item of the todo list. The list is a sequence: order and
    /// repetition matter.
    pub fn todo(&mut self, item: impl AsRef<[u8]>) -> &mut Self {
        self.todo.push(item_hash(TODO_DOMAIN, item.as_ref()));
        self
    }

    /// Adds an action the run attempted. Actions form a set keyed by tool
    /// and normalized arguments: order and repetition do not matter.
    pub fn action(&mut self, action: Action<'_>) -> &mut Self {
        let mut hasher = Sha256::new();
        hasher.update(ACTION_DOMAIN);
        write_action(&mut hasher, action, &self.normalizer);
        insert_sorted(&mut self.actions, hasher.finalize().into());
        self
    }

    /// The digest of everything added so far.
    pub fn finish(&self) -> StateDigest {
        let mut hasher = Sha256::new();
        hasher.update(STATE_DOMAIN);
        for (label, part) in [
            (&b"facts\0"[..], &self.facts),
            (&b"todo\0"[..], &self.todo),
            (&b"actions\0"[..], &self.actions),
        ] {
            hasher.update(label);
            hasher.update((part.len() as u64).to_be_bytes());
            for hash in part {
                hasher.update(hash);
            }
        }
        StateDigest(truncate(hasher))
    }
}

fn item_hash(domain: &[u8], bytes: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(domain);
    hasher.update(bytes);
    hasher.finalize().into()
}

/// Inserts `hash` into the sorted, duplicate-free `set`.
fn insert_sorted(set: &mut Vec<[u8; 32]>, hash: [u8; 32]) {
    if let Err(at) = set.binary_search(&hash) {
        set.insert(at, hash);
    }
}

/// The first 128 bits of the hasher's SHA-256.
pub(super) fn truncate(hasher: Sha256) -> [u8; 16] {
    let full = hasher.finalize();
    let mut out = [0u8; 16];
    for (o, b) in out.iter_mut().zip(full.iter()) {
        *o = *b;
    }
    out
}

pub(super) fn failure_signature(tool: &str, normalized_error: &str) -> FailureSignature {
    // NOTE: the layout mirrors the action fingerprint's: length-prefixed tool,
    // then the text to the end.
    let mut hasher = Sha256::new();
    hasher.update(b"rein-loop-failure-v1\0");
    hasher.update((tool.len() as u64).to_be_bytes());
    hasher.update(tool.as_bytes());
    hasher.update(normalized_error.as_bytes());
    FailureSignature(truncate(hasher))
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn write_hex(bytes: &[u8; 16], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    use fmt::Write as _;
    for byte in bytes {
        f.write_char(char::from(HEX[usize::from(byte >> 4)]))?;
        f.write_char(char::from(HEX[usize::from(byte & 0xf)]))?;
    }
    Ok(())
}

fn parse_hex(text: &str) -> Option<[u8; 16]> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    let text = text.as_bytes();
    if text.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        if let [hi, lo] = pair {
            *byte = (nibble(*hi)? << 4) | nibble(*lo)?;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::NormalizerConfig;
    use serde_json::json;

    const NO_ACTIONS: [Action<'static>; 0] = [];

    #[test]
    fn facts_in_any_order_give_the_same_digest() {
        let a = StateDigest::of(["a", "b", "c"], ["t"], NO_ACTIONS);
        let b = StateDigest::of(["c", "a", "b"], ["t"], NO_ACTIONS);
        assert_eq!(a, b);
    }

    #[test]
    fn repeated_facts_count_once() {
        let a = StateDigest::of(["a", "b"], ["t"], NO_ACTIONS);
        let b = StateDigest::of(["a", "b", "a", "b"], ["t"], NO_ACTIONS);
        assert_eq!(a, b);
    }

    #[test]
    fn a_new_fact_changes_the_digest() {
        let a = StateDigest::of(["a"], ["t"], NO_ACTIONS);
        let b = StateDigest::of(["a", "b"], ["t"], NO_ACTIONS);
        assert_ne!(a, b);
    }

    #[test]
    fn todo_order_changes_the_digest() {
        let a = StateDigest::of(["f"], ["first", "second"], NO_ACTIONS);
        let b = StateDigest::of(["f"], ["second", "first"], NO_ACTIONS);
        assert_ne!(a, b);
    }

    #[test]
    fn todo_repetition_changes_the_digest() {
        let a = StateDigest::of(["f"], ["x"], NO_ACTIONS);
        let b = StateDigest::of(["f"], ["x", "x"], NO_ACTIONS);
        assert_ne!(a, b);
    }

    #[test]
    fn actions_in_any_order_or_repeated_give_the_same_digest() {
        let (x, y) = (json!({"q": 1}), json!({"q": 2}));
        let a = StateDigest::of(
            ["f"],
            ["t"],
            [Action::new("search", &x), Action::new("search", &y)],
        );
        let b = StateDigest::of(
            ["f"],
            ["t"],
            [
                Action::new("search", &y),
                Action::new("search", &x),
                Action::new("search", &y),
            ],
        );
        assert_eq!(a, b);
    }

    #[test]
    fn action_arguments_are_normalized() {
        let a = StateDigest::of(["f"], ["t"], [Action::new("s", &json!({"q": "x", "n": 1}))]);
        let b = StateDigest::of(
            ["f"],
            ["t"],
            [Action::new(
                "s",
                &json!({"n": 1.0, "q": " x ", "trace_id": "t-9"}),
            )],
        );
        assert_eq!(a, b);
    }

    #[test]
    fn builder_uses_the_given_normalizer() {
        let n = Normalizer::new(NormalizerConfig {
            volatile_fields: vec!["nonce".into()],
            ..NormalizerConfig::default()
        });
        let digest = |normalizer: Normalizer, nonce: u32| {
            let args = json!({"q": 1, "nonce": nonce});
            let mut b = StateDigestBuilder::with_normalizer(normalizer);
            b.action(Action::new("s", &args));
            b.finish()
        };
        assert_eq!(digest(n.clone(), 1), digest(n, 2));
        assert_ne!(
            digest(Normalizer::default(), 1),
            digest(Normalizer::default(), 2)
        );
    }

    #[test]
    fn moving_an_item_between_parts_changes_the_digest() {
        let fact = StateDigest::of(["x"], ["t"], NO_ACTIONS);
        let todo = StateDigest::of(["t"], ["x"], NO_ACTIONS);
        let both_todo = StateDigest::of([""; 0], ["x", "t"], NO_ACTIONS);
        assert_ne!(fact, todo);
        assert_ne!(fact, both_todo);
        assert_ne!(todo, both_todo);
        let no_items: [&str; 0] = [];
        assert_ne!(
            StateDigest::of(["x"], no_items, NO_ACTIONS),
            StateDigest::of(no_items, ["x"], NO_ACTIONS)
        );
    }

    #[test]
    fn builder_interleaving_does_not_matter_between_parts() {
        let mut a = StateDigest::builder();
        a.fact("f1").todo("t1").fact("f2").todo("t2");
        let mut b = StateDigest::builder();
        b.todo("t1").todo("t2").fact("f2").fact("f1");
        assert_eq!(a.finish(), b.finish());
    }

    #[test]
    fn empty_state_has_a_stable_digest() {
        assert_eq!(
            StateDigest::builder().finish(),
            StateDigestBuilder::new().finish()
        );
    }

    #[test]
    fn digest_displays_and_serializes_as_hex() {
        let d = StateDigest::from_bytes([0xab; 16]);
        assert_eq!(d.to_string(), "ab".repeat(16));
        assert_eq!(
            format!("{d:?}"),
            format!("StateDigest({})", "ab".repeat(16))
        );
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, format!("\"{}\"", "ab".repeat(16)));
        assert_eq!(serde_json::from_str::<StateDigest>(&json).unwrap(), d);
    }

    #[test]
    fn digest_deserialization_refuses_bad_hex() {
        for bad in [
            "\"ab\"",
            &format!("\"{}\"", "AB".repeat(16)),
            &format!("\"{}\"", "zz".repeat(16)),
        ] {
            let err = serde_json::from_str::<StateDigest>(bad).unwrap_err();
            assert!(
                err.to_string().contains("must be 32 hex characters"),
                "{err}"
            );
        }
        assert_eq!(StateDigest::parse_hex("é".repeat(16).as_str()), None);
    }

    #[test]
    fn failure_signature_separates_tool_from_error() {
        assert_ne!(failure_signature("ab", "c"), failure_signature("a", "bc"));
        assert_eq!(failure_signature("a", "x"), failure_signature("a", "x"));
    }
}
