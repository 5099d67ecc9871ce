//! Serializes a value with one of its top-level struct fields left out, straight to the
//! output: the record column holds a task without its status log (which has its own table),
//! and going through a `serde_json::Value` to drop the key cost more than writing the text.
//!
//! Owns only that filtering; every other part of the value is passed through untouched. Must
//! not know any domain type.

use serde::ser::{Serialize, SerializeStruct, Serializer};

/// `value` as it serializes, minus the top-level struct field `skip`.
pub(crate) struct WithoutField<'a, T> {
    pub value: &'a T,
    pub skip: &'static str,
}

impl<T: Serialize> Serialize for WithoutField<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(Outer {
            inner: serializer,
            skip: self.skip,
        })
    }
}

/// The serializer the top-level value sees: a struct drops `skip`, anything else passes.
struct Outer<S> {
    inner: S,
    skip: &'static str,
}

/// A struct being written, minus `skip`.
struct Fields<S> {
    inner: S,
    skip: &'static str,
}

impl<S: SerializeStruct> SerializeStruct for Fields<S> {
    type Ok = S::Ok;
    type Error = S::Error;

    fn serialize_field<V: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &V,
    ) -> Result<(), Self::Error> {
        if key == self.skip {
            self.inner.skip_field(key)
        } else {
            self.inner.serialize_field(key, value)
        }
    }

    fn end(self) -> Result<Self::Ok, Self::Error> {
        self.inner.end()
    }
}

/// Forwards a `Serializer` method that has nothing to filter.
macro_rules! forward {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {
        $(fn $name(self, $($arg: $ty),*) -> Result<$out, Self::Error> {
            self.inner.$name($($arg),*)
        })*
    };
}

impl<S: Serializer> Serializer for Outer<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = S::SerializeSeq;
    type SerializeTuple = S::SerializeTuple;
    type SerializeTupleStruct = S::SerializeTupleStruct;
    type SerializeTupleVariant = S::SerializeTupleVariant;
    type SerializeMap = S::SerializeMap;
    type SerializeStruct = Fields<S::SerializeStruct>;
    type SerializeStructVariant = S::SerializeStructVariant;

    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, Self::Error> {
        Ok(Fields {
            inner: self.inner.serialize_struct(name, len)?,
            skip: self.skip,
        })
    }

    forward! {
        serialize_bool(v: bool) -> S::Ok;
        serialize_i8(v: i8) -> S::Ok;
        serialize_i16(v: i16) -> S::Ok;
        serialize_i32(v: i32) -> S::Ok;
        serialize_i64(v: i64) -> S::Ok;
        serialize_u8(v: u8) -> S::Ok;
        serialize_u16(v: u16) -> S::Ok;
        serialize_u32(v: u32) -> S::Ok;
        serialize_u64(v: u64) -> S::Ok;
        serialize_f32(v: f32) -> S::Ok;
        serialize_f64(v: f64) -> S::Ok;
        serialize_char(v: char) -> S::Ok;
        serialize_str(v: &str) -> S::Ok;
        serialize_bytes(v: &[u8]) -> S::Ok;
        serialize_none() -> S::Ok;
        serialize_unit() -> S::Ok;
        serialize_unit_struct(name: &'static str) -> S::Ok;
        serialize_unit_variant(name: &'static str, index: u32, variant: &'static str) -> S::Ok;
        serialize_seq(len: Option<usize>) -> Self::SerializeSeq;
        serialize_tuple(len: usize) -> Self::SerializeTuple;
        serialize_tuple_struct(name: &'static str, len: usize) -> Self::SerializeTupleStruct;
        serialize_tuple_variant(
            name: &'static str, index: u32, variant: &'static str, len: usize
        ) -> Self::SerializeTupleVariant;
        serialize_map(len: Option<usize>) -> Self::SerializeMap;
        serialize_struct_variant(
            name: &'static str, index: u32, variant: &'static str, len: usize
        ) -> Self::SerializeStructVariant;
    }

    fn serialize_some<V: ?Sized + Serialize>(self, value: &V) -> Result<S::Ok, S::Error> {
        self.inner.serialize_some(value)
    }

    fn serialize_newtype_struct<V: ?Sized + Serialize>(
        self,
        name: &'static str,
        value: &V,
    ) -> Result<S::Ok, S::Error> {
        self.inner.serialize_newtype_struct(name, value)
    }

    fn serialize_newtype_variant<V: ?Sized + Serialize>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &V,
    ) -> Result<S::Ok, S::Error> {
        self.inner
            .serialize_newtype_variant(name, index, variant, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Inner {
        log: u8,
    }

    #[derive(serde::Serialize)]
    struct Record {
        a: u8,
        log: Vec<u8>,
        inner: Inner,
        b: Option<&'static str>,
    }

    #[test]
    fn only_the_named_top_level_field_is_left_out() {
        let record = Record {
            a: 1,
            log: vec![1, 2],
            inner: Inner { log: 7 },
            b: Some("x"),
        };
        let text = serde_json::to_string(&WithoutField {
            value: &record,
            skip: "log",
        })
        .unwrap();
        assert_eq!(text, r#"{"a":1,"inner":{"log":7},"b":"x"}"#);
    }

    #[test]
    fn a_value_that_is_not_a_struct_passes_through_unchanged() {
        let text = serde_json::to_string(&WithoutField {
            value: &vec![("log", 1)],
            skip: "log",
        })
        .unwrap();
        assert_eq!(text, r#"[["log",1]]"#);
    }
}
