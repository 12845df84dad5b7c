use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::digest::{StateDigest, truncate};
use crate::idempotency::{Normalizer, Sink};

/// One step's action as the loop guard sees it: a tool and its arguments.
///
/// Arguments are normalized with the guard's [`Normalizer`] before they are
/// fingerprinted, so `{"q": "weather"}` and `{"q": "weather "}` are the same
/// action, exactly as they share an idempotency key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Action<'a> {
    /// The tool's registry name.
    pub tool: &'a str,
    /// The arguments the model proposed.
    pub args: &'a Value,
}

impl<'a> Action<'a> {
    /// The action of calling `tool` with `args`.
    pub fn new(tool: &'a str, args: &'a Value) -> Self {
        Action { tool, args }
    }
}

/// The fingerprint of an action taken on a state: what "the same action
/// again" means for the repeated-action rule.
///
/// ```text
/// sha256(b"rein-loop-action-v1\0" ‖ state digest (16 bytes)
///        ‖ u64be len(tool) ‖ tool ‖ canonical args)[..16]
/// ```
pub(super) fn fingerprint(
    action: Action<'_>,
    state: StateDigest,
    normalizer: &Normalizer,
) -> [u8; 16] {
    let mut hasher = Sha256::new();
    hasher.update(b"rein-loop-action-v1\0");
    hasher.update(state.as_bytes());
    write_action(&mut hasher, action, normalizer);
    truncate(hasher)
}

/// Writes the length-prefixed tool and then the canonical arguments, which
/// run to the end and so need no prefix. Generic over the sink so that the
/// hashers stream it and tests can read the bytes.
pub(super) fn write_action(sink: &mut impl Sink, action: Action<'_>, normalizer: &Normalizer) {
    sink.put(&(action.tool.len() as u64).to_be_bytes());
    sink.put(action.tool.as_bytes());
    // Streams straight into the sink: no canonical JSON buffer.
    normalizer.write(action.args, false, sink);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn action_layout_is_length_prefixed_tool_then_canonical_args() {
        let args = json!({"q": " x ", "trace_id": "t", "a": 1.0});
        let mut bytes = Vec::new();
        write_action(
            &mut bytes,
            Action::new("search", &args),
            &Normalizer::default(),
        );
        let mut expected = 6u64.to_be_bytes().to_vec();
        expected.extend_from_slice(b"search");
        expected.extend_from_slice(br#"{"a":1,"q":"x"}"#);
        assert_eq!(bytes, expected);
    }

    #[test]
    fn fingerprint_separates_tool_args_and_state() {
        let n = Normalizer::default();
        let (a, b) = (json!({"q": 1}), json!({"q": 2}));
        let s1 = StateDigest::from_bytes([1; 16]);
        let s2 = StateDigest::from_bytes([2; 16]);
        let base = fingerprint(Action::new("t", &a), s1, &n);
        assert_eq!(
            base,
            fingerprint(Action::new("t", &json!({"q": 1.0})), s1, &n)
        );
        assert_ne!(base, fingerprint(Action::new("u", &a), s1, &n));
        assert_ne!(base, fingerprint(Action::new("t", &b), s1, &n));
        assert_ne!(base, fingerprint(Action::new("t", &a), s2, &n));
    }
}
