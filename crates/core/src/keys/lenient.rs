//! A serde deserializer over parsed YAML (as JSON values) that reads an unquoted number or
//! boolean as its text where a string is expected, as the original dispatcher did
//! (`cpu: 32`, `env: {NCCL_IB_DISABLE: 0}`, `labels: {v: 2}`, `DEBUG: true`).
//!
//! Only scalars meet strings: a list or a map where a string goes is still a type error, and
//! a number where a number goes stays a number. Integers and booleans keep their spelling; a
//! float is written in its shortest form (`0.50` reads as `0.5`, as the original's `str()` did),
//! so a value whose exact spelling matters is quoted.

use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{self, IntoDeserializer, Visitor};
use serde_json::{Error, Value};

/// A JSON value to deserialize leniently (see the module doc).
pub(crate) struct Lenient(pub(crate) Value);

impl<'de> IntoDeserializer<'de, Error> for Lenient {
    type Deserializer = Lenient;

    fn into_deserializer(self) -> Lenient {
        self
    }
}

/// The text of a number or boolean; `None` for other values.
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

impl<'de> de::Deserializer<'de> for Lenient {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(map) => {
                let mut access = MapDeserializer::new(map.into_iter().map(|(k, v)| (k, Lenient(v))));
                let out = visitor.visit_map(&mut access)?;
                access.end()?;
                Ok(out)
            }
            Value::Array(items) => {
                let mut access = SeqDeserializer::new(items.into_iter().map(Lenient));
                let out = visitor.visit_seq(&mut access)?;
                access.end()?;
                Ok(out)
            }
            other => de::Deserializer::deserialize_any(other, visitor),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match scalar_text(&self.0) {
            Some(text) => visitor.visit_string(text),
            None => self.deserialize_any(visitor),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_enum(self.0, name, variants, visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char bytes byte_buf unit unit_struct
        seq tuple tuple_struct map struct identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    #[test]
    fn scalars_become_text_only_where_a_string_goes() {
        let env: BTreeMap<String, String> =
            serde::Deserialize::deserialize(Lenient(json!({"A": 0, "B": true, "C": 0.5, "D": "x"}))).unwrap();
        assert_eq!(
            env,
            [("A", "0"), ("B", "true"), ("C", "0.5"), ("D", "x")].map(|(k, v)| (k.into(), v.into())).into()
        );
        let counts: BTreeMap<String, u32> = serde::Deserialize::deserialize(Lenient(json!({"h100": 8}))).unwrap();
        assert_eq!(counts["h100"], 8);
        let wrong = <BTreeMap<String, String> as serde::Deserialize>::deserialize(Lenient(json!({"A": [1]})));
        assert!(wrong.unwrap_err().to_string().contains("expected a string"));
        let no: Result<u32, _> = serde::Deserialize::deserialize(Lenient(json!("8")));
        assert!(no.is_err(), "text is not read as a number");
    }
}
