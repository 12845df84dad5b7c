//! Whether redacting a typed value's JSON form would change it, found
//! without building that form ([`would_change`]).
//!
//! # Why
//!
//! Every event is redacted before it leaves the engine, and nearly none
//! holds anything to redact. Building its `serde_json::Value` to walk it
//! allocated a key and a value for every member of every event, a tenth
//! of what a gateway call cost. The probe is a [`serde::Serializer`] that
//! visits exactly what `serde_json::to_value` would produce (object keys,
//! strings, numbers in serde_json's text) and asks the redactor what
//! [`Redactor::redact_json`] would ask, stopping at the first hit; only a
//! value with a hit is built and walked.

use std::borrow::Cow;
use std::fmt;

use serde::Serialize;
use serde::ser::{
    SerializeMap, SerializeSeq, SerializeStruct, SerializeStructVariant, SerializeTuple,
    SerializeTupleStruct, SerializeTupleVariant,
};

use super::Redactor;

/// Whether [`Redactor::redact_json`] would change `value`'s JSON form. A
/// value that cannot be serialized answers `true`, so its caller takes
/// the path that builds the form and decides there.
pub fn would_change(redactor: &Redactor, value: &impl Serialize) -> bool {
    value
        .serialize(Probe {
            redactor,
            key: false,
        })
        .is_err()
}

/// Why the probe stopped: it found something, or the value would not
/// serialize. Either way the caller builds the JSON form.
#[derive(Debug)]
pub struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the redactor would change this value")
    }
}

impl std::error::Error for Stop {}

impl serde::ser::Error for Stop {
    fn custom<T: fmt::Display>(_msg: T) -> Self {
        Stop
    }
}

/// The serializer: see the module docs.
#[derive(Clone, Copy)]
struct Probe<'r> {
    redactor: &'r Redactor,
    /// Whether this is an object key: serde_json writes a float key in
    /// another text than a float value.
    key: bool,
}

impl Probe<'_> {
    /// A string or an object key, as [`Redactor::redact_json`] cleans it.
    fn text(self, text: &str) -> Result<(), Stop> {
        match self.redactor.redact(text) {
            Cow::Borrowed(_) => Ok(()),
            Cow::Owned(_) => Err(Stop),
        }
    }

    /// A number in serde_json's text, as [`Redactor::redact_json`] checks
    /// it: only a known secret can hide in one.
    fn number(self, number: impl fmt::Display) -> Result<(), Stop> {
        if !self.redactor.knows_secrets() {
            return Ok(());
        }
        match self.redactor.redact_known(&number.to_string()) {
            Cow::Borrowed(_) => Ok(()),
            Cow::Owned(_) => Err(Stop),
        }
    }

    /// A float as serde_json writes it (`null` when not finite). A float
    /// key (none of rein's payloads has one) is not probed: the caller
    /// builds the form and decides.
    fn float(self, value: serde_json::Value) -> Result<(), Stop> {
        if self.key {
            return Err(Stop);
        }
        match value {
            serde_json::Value::Number(n) => self.number(n),
            _ => Ok(()),
        }
    }
}

/// An integer is written by serde_json in its decimal digits, which is
/// what `Display` gives.
macro_rules! integers {
    ($($method:ident: $ty:ty),* $(,)?) => {$(
        fn $method(self, v: $ty) -> Result<(), Stop> {
            self.number(v)
        }
    )*};
}

impl<'r> serde::Serializer for Probe<'r> {
    type Ok = ();
    type Error = Stop;
    type SerializeSeq = Probe<'r>;
    type SerializeTuple = Probe<'r>;
    type SerializeTupleStruct = Probe<'r>;
    type SerializeTupleVariant = Probe<'r>;
    type SerializeMap = Probe<'r>;
    type SerializeStruct = Probe<'r>;
    type SerializeStructVariant = Probe<'r>;

    fn serialize_bool(self, _v: bool) -> Result<(), Stop> {
        Ok(())
    }
    integers!(
        serialize_i8: i8,
        serialize_i16: i16,
        serialize_i32: i32,
        serialize_i64: i64,
        serialize_i128: i128,
        serialize_u8: u8,
        serialize_u16: u16,
        serialize_u32: u32,
        serialize_u64: u64,
        serialize_u128: u128,
    );
    fn serialize_f32(self, v: f32) -> Result<(), Stop> {
        self.float(serde_json::Value::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), Stop> {
        self.float(serde_json::Value::from(v))
    }
    fn serialize_char(self, v: char) -> Result<(), Stop> {
        self.text(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), Stop> {
        self.text(v)
    }
    /// serde_json writes bytes as an array of numbers.
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Stop> {
        v.iter().try_for_each(|b| self.number(b))
    }
    fn serialize_none(self) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Stop> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Stop> {
        self.text(variant)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        self.text(variant)?;
        value.serialize(self)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _name: &'static str, _len: usize) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self, Stop> {
        self.text(variant)?;
        Ok(self)
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self, Stop> {
        self.text(variant)?;
        Ok(self)
    }
}

/// The compound parts of a value: each element or field is probed in turn
/// (a field's name first: it is an object key of the JSON form).
macro_rules! compound {
    ($($part:ident :: $element:ident),* $(,)?) => {$(
        impl $part for Probe<'_> {
            type Ok = ();
            type Error = Stop;
            fn $element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Stop> {
                value.serialize(*self)
            }
            fn end(self) -> Result<(), Stop> {
                Ok(())
            }
        }
    )*};
}

compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

macro_rules! named_fields {
    ($($part:ident),* $(,)?) => {$(
        impl $part for Probe<'_> {
            type Ok = ();
            type Error = Stop;
            fn serialize_field<T: ?Sized + Serialize>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), Stop> {
                self.text(key)?;
                value.serialize(*self)
            }
            fn end(self) -> Result<(), Stop> {
                Ok(())
            }
        }
    )*};
}

named_fields!(SerializeStruct, SerializeStructVariant);

impl SerializeMap for Probe<'_> {
    type Ok = ();
    type Error = Stop;
    /// A key serde_json turns into a string (a number's digits, a bool's
    /// word) holds what the probe checks in that value.
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Stop> {
        key.serialize(Probe { key: true, ..*self })
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Stop> {
        value.serialize(*self)
    }
    fn end(self) -> Result<(), Stop> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use serde::Serialize;

    use super::*;
    use crate::redact::Secrets;

    fn redactor(values: &[&str]) -> Redactor {
        let mut secrets = Secrets::new();
        for v in values {
            secrets.insert(v).unwrap();
        }
        Redactor::new(&secrets)
    }

    #[derive(Serialize)]
    enum Kind {
        Plain,
        Tagged(String),
        Pair(u64, String),
        Shaped { note: String },
    }

    #[derive(Serialize)]
    struct Doc {
        name: String,
        count: u64,
        ratio: f64,
        flag: bool,
        maybe: Option<String>,
        list: Vec<Kind>,
        by_number: BTreeMap<u64, String>,
        bytes: Vec<u8>,
        letter: char,
    }

    fn doc() -> Doc {
        Doc {
            name: "plain".into(),
            count: 7,
            ratio: 0.5,
            flag: true,
            maybe: None,
            list: vec![
                Kind::Plain,
                Kind::Tagged("t".into()),
                Kind::Pair(1, "p".into()),
                Kind::Shaped { note: "n".into() },
            ],
            by_number: BTreeMap::from([(3, "three".into())]),
            bytes: vec![1, 2],
            letter: 'x',
        }
    }

    /// The probe answers what building the JSON form and redacting it
    /// says, for each place a secret or a URL can sit.
    #[test]
    fn the_probe_agrees_with_redacting_the_json_form() {
        let r = redactor(&["sk-canary-1234", "12345678"]);
        let agree = |d: &Doc| {
            let mut value = serde_json::to_value(d).unwrap();
            let changed = r.redact_json(&mut value);
            assert_eq!(
                would_change(&r, d),
                changed,
                "{}",
                serde_json::to_string(d).unwrap()
            );
            changed
        };
        assert!(!agree(&doc()));
        let cases: [fn(&mut Doc); 9] = [
            |d| d.name = "key sk-canary-1234".into(),
            |d| d.name = "see https://h/x?token=1".into(),
            |d| d.count = 12_345_678,
            |d| d.maybe = Some("sk-canary-1234".into()),
            |d| d.list.push(Kind::Tagged("sk-canary-1234".into())),
            |d| d.list.push(Kind::Pair(12_345_678, "p".into())),
            |d| {
                d.list.push(Kind::Shaped {
                    note: "https://u:p@h/".into(),
                })
            },
            |d| {
                d.by_number.insert(12_345_678, "k".into());
            },
            |d| d.ratio = 12_345_678.0,
        ];
        for (i, change) in cases.iter().enumerate() {
            let mut d = doc();
            change(&mut d);
            assert!(agree(&d), "case {i} changes something");
        }
        // A float key is written by serde_json in another text than a float
        // value; the probe does not guess it and sends the value on.
        struct FloatKey;
        impl Serialize for FloatKey {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap as _;
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry(&1.5f32, "v")?;
                map.end()
            }
        }
        assert!(would_change(&r, &FloatKey));
        // Without known secrets numbers are never touched; URLs still are.
        let none = redactor(&[]);
        let mut d = doc();
        d.count = 12_345_678;
        assert!(!would_change(&none, &d));
        d.name = "https://h/x?token=1".into();
        assert!(would_change(&none, &d));
    }
}
