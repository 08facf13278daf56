//! The bytes a key is hashed from: exactly postcard's encoding (so key groups never change),
//! written by a serializer small enough to inline into the hot path. Postcard's own entry
//! point goes through its generic "flavor" machinery and, as the code around it changed, the
//! compiler stopped inlining it (about 75 instructions per key, twice per keyed record).

use serde::ser::{self, Serialize};

/// Why a key could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum KeyBytesError {
    /// A sequence or map without a known length (postcard needs it up front).
    #[error("a key's sequence or map has no known length")]
    UnknownLength,
    /// Anything a key's `Serialize` implementation reported.
    #[error("{0}")]
    Custom(String),
}

impl ser::Error for KeyBytesError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        KeyBytesError::Custom(msg.to_string())
    }
}

/// Appends `key`'s postcard encoding to `out`.
#[inline]
pub fn encode_key<K: Serialize + ?Sized>(key: &K, out: &mut Vec<u8>) -> Result<(), KeyBytesError> {
    key.serialize(&mut KeySerializer { out })
}

struct KeySerializer<'a> {
    out: &'a mut Vec<u8>,
}

impl KeySerializer<'_> {
    #[inline]
    fn varint(&mut self, mut value: u128) {
        while value >= 0x80 {
            self.out.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.out.push(value as u8);
    }

    #[inline]
    fn varint_u64(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.out.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.out.push(value as u8);
    }

    #[inline]
    fn zigzag(&mut self, value: i64) {
        self.varint_u64(((value << 1) ^ (value >> 63)) as u64);
    }
}

impl<'a> ser::Serializer for &mut KeySerializer<'a> {
    type Ok = ();
    type Error = KeyBytesError;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    #[inline]
    fn serialize_bool(self, v: bool) -> Result<(), KeyBytesError> {
        self.out.push(u8::from(v));
        Ok(())
    }
    #[inline]
    fn serialize_i8(self, v: i8) -> Result<(), KeyBytesError> {
        self.out.push(v as u8);
        Ok(())
    }
    #[inline]
    fn serialize_i16(self, v: i16) -> Result<(), KeyBytesError> {
        self.zigzag(i64::from(v));
        Ok(())
    }
    #[inline]
    fn serialize_i32(self, v: i32) -> Result<(), KeyBytesError> {
        self.zigzag(i64::from(v));
        Ok(())
    }
    #[inline]
    fn serialize_i64(self, v: i64) -> Result<(), KeyBytesError> {
        self.zigzag(v);
        Ok(())
    }
    #[inline]
    fn serialize_i128(self, v: i128) -> Result<(), KeyBytesError> {
        self.varint(((v << 1) ^ (v >> 127)) as u128);
        Ok(())
    }
    #[inline]
    fn serialize_u8(self, v: u8) -> Result<(), KeyBytesError> {
        self.out.push(v);
        Ok(())
    }
    #[inline]
    fn serialize_u16(self, v: u16) -> Result<(), KeyBytesError> {
        self.varint_u64(u64::from(v));
        Ok(())
    }
    #[inline]
    fn serialize_u32(self, v: u32) -> Result<(), KeyBytesError> {
        self.varint_u64(u64::from(v));
        Ok(())
    }
    #[inline]
    fn serialize_u64(self, v: u64) -> Result<(), KeyBytesError> {
        self.varint_u64(v);
        Ok(())
    }
    #[inline]
    fn serialize_u128(self, v: u128) -> Result<(), KeyBytesError> {
        self.varint(v);
        Ok(())
    }
    #[inline]
    fn serialize_f32(self, v: f32) -> Result<(), KeyBytesError> {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    #[inline]
    fn serialize_f64(self, v: f64) -> Result<(), KeyBytesError> {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    #[inline]
    fn serialize_char(self, v: char) -> Result<(), KeyBytesError> {
        let mut buf = [0u8; 4];
        self.serialize_str(v.encode_utf8(&mut buf))
    }
    #[inline]
    fn serialize_str(self, v: &str) -> Result<(), KeyBytesError> {
        self.serialize_bytes(v.as_bytes())
    }
    #[inline]
    fn serialize_bytes(self, v: &[u8]) -> Result<(), KeyBytesError> {
        self.varint_u64(v.len() as u64);
        self.out.extend_from_slice(v);
        Ok(())
    }
    #[inline]
    fn serialize_none(self) -> Result<(), KeyBytesError> {
        self.out.push(0);
        Ok(())
    }
    #[inline]
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), KeyBytesError> {
        self.out.push(1);
        value.serialize(self)
    }
    #[inline]
    fn serialize_unit(self) -> Result<(), KeyBytesError> {
        Ok(())
    }
    #[inline]
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), KeyBytesError> {
        Ok(())
    }
    #[inline]
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
    ) -> Result<(), KeyBytesError> {
        self.varint_u64(u64::from(index));
        Ok(())
    }
    #[inline]
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), KeyBytesError> {
        value.serialize(self)
    }
    #[inline]
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        value: &T,
    ) -> Result<(), KeyBytesError> {
        self.varint_u64(u64::from(index));
        value.serialize(self)
    }
    #[inline]
    fn serialize_seq(self, len: Option<usize>) -> Result<Self, KeyBytesError> {
        let len = len.ok_or(KeyBytesError::UnknownLength)?;
        self.varint_u64(len as u64);
        Ok(self)
    }
    #[inline]
    fn serialize_tuple(self, _len: usize) -> Result<Self, KeyBytesError> {
        Ok(self)
    }
    #[inline]
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self, KeyBytesError> {
        Ok(self)
    }
    #[inline]
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self, KeyBytesError> {
        self.varint_u64(u64::from(index));
        Ok(self)
    }
    #[inline]
    fn serialize_map(self, len: Option<usize>) -> Result<Self, KeyBytesError> {
        let len = len.ok_or(KeyBytesError::UnknownLength)?;
        self.varint_u64(len as u64);
        Ok(self)
    }
    #[inline]
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self, KeyBytesError> {
        Ok(self)
    }
    #[inline]
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self, KeyBytesError> {
        self.varint_u64(u64::from(index));
        Ok(self)
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

macro_rules! compound {
    ($trait:ident, $method:ident) => {
        impl ser::$trait for &mut KeySerializer<'_> {
            type Ok = ();
            type Error = KeyBytesError;
            #[inline]
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), KeyBytesError> {
                value.serialize(&mut **self)
            }
            #[inline]
            fn end(self) -> Result<(), KeyBytesError> {
                Ok(())
            }
        }
    };
}

compound!(SerializeSeq, serialize_element);
compound!(SerializeTuple, serialize_element);
compound!(SerializeTupleStruct, serialize_field);
compound!(SerializeTupleVariant, serialize_field);

impl ser::SerializeMap for &mut KeySerializer<'_> {
    type Ok = ();
    type Error = KeyBytesError;
    #[inline]
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), KeyBytesError> {
        key.serialize(&mut **self)
    }
    #[inline]
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), KeyBytesError> {
        value.serialize(&mut **self)
    }
    #[inline]
    fn end(self) -> Result<(), KeyBytesError> {
        Ok(())
    }
}

/// Named fields serialize as their values alone: the field names are fixed by the type, so
/// they add nothing to a key's identity.
macro_rules! named_compound {
    ($trait:ident) => {
        impl ser::$trait for &mut KeySerializer<'_> {
            type Ok = ();
            type Error = KeyBytesError;
            #[inline]
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                _key: &'static str,
                value: &T,
            ) -> Result<(), KeyBytesError> {
                value.serialize(&mut **self)
            }
            #[inline]
            fn end(self) -> Result<(), KeyBytesError> {
                Ok(())
            }
        }
    };
}

named_compound!(SerializeStruct);
named_compound!(SerializeStructVariant);

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde::Serialize;

    use super::*;

    fn same<K: Serialize>(key: &K) {
        let mut ours = Vec::new();
        encode_key(key, &mut ours).unwrap();
        let theirs = postcard::to_allocvec(key).unwrap();
        assert_eq!(ours, theirs);
    }

    #[derive(Serialize)]
    struct Composite {
        id: u64,
        name: String,
        tags: Vec<(char, i16)>,
        parent: Option<Box<Composite>>,
    }

    #[derive(Serialize)]
    enum Kind {
        Unit,
        New(i32),
        Tuple(u8, bool),
        Struct { a: f64, b: Option<u128> },
    }

    #[test]
    fn composite_keys_encode_as_postcard_does() {
        same(&Composite {
            id: 300,
            name: "ünïcode".into(),
            tags: vec![('x', -5), ('€', 1000)],
            parent: Some(Box::new(Composite {
                id: 0,
                name: String::new(),
                tags: vec![],
                parent: None,
            })),
        });
        same(&[Kind::Unit, Kind::New(-1), Kind::Tuple(255, true)]);
        same(&Kind::Struct {
            a: -0.5,
            b: Some(u128::MAX),
        });
        same(&BTreeMap::from([(1u8, "a"), (2, "b")]));
        same(&((), (i8::MIN, i64::MIN, i128::MIN), [0u32; 3]));
    }

    proptest! {
        #[test]
        fn primitives_encode_as_postcard_does(
            a in any::<i64>(), b in any::<u64>(), c in any::<i32>(), d in any::<u16>(),
            s in ".*", f in any::<f32>(), o in any::<Option<u32>>(), i in any::<i128>(),
        ) {
            same(&a);
            same(&b);
            same(&(c, d, &s, f, o, i));
        }
    }
}
