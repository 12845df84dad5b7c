//! Malformed model output never panics: any argument text is read as
//! complete, salvaged or invalid, and a salvaged value is always a
//! non-empty object made of complete members of the original text.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use rein_engine::run::{ParsedArgs, parse_args};
use serde_json::Value;

fn object() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        "[a-z]{1,6}",
        prop_oneof![
            any::<i64>().prop_map(Value::from),
            "[a-z ,:{}\\[\\]\"]{0,12}".prop_map(Value::from),
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
        ],
        1..6,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()))
}

proptest! {
    #[test]
    fn any_text_is_read_without_panicking(text in ".{0,200}") {
        let _ = parse_args(&text);
    }

    /// A valid object cut anywhere is either invalid or salvaged into a
    /// subset of its members, with their original values.
    #[test]
    fn a_cut_object_salvages_only_complete_members(value in object(), cut in 0usize..400) {
        let text = value.to_string();
        let cut = text.char_indices().map(|(i, _)| i).take_while(|&i| i <= cut).last().unwrap_or(0);
        match parse_args(&text[..cut]) {
            ParsedArgs::Complete(v) => prop_assert!(cut == 0 && v == Value::Object(Default::default()) || v == value),
            ParsedArgs::Salvaged { value: salvaged, .. } => {
                let original = value.as_object().unwrap();
                for (k, v) in salvaged.as_object().unwrap() {
                    prop_assert_eq!(original.get(k), Some(v));
                }
            }
            ParsedArgs::Invalid { reason } => prop_assert!(!reason.is_empty()),
        }
    }
}
