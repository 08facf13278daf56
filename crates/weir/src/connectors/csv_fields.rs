//! Fast decoding of a CSV row into a serde type: numbers are parsed from the field's bytes
//! without a UTF-8 check (digits are ASCII), and no per-field conversions are made that the
//! target type does not ask for. Anything it does not handle, and every error, is left to
//! the csv crate's own deserializer, so results and error messages are the csv crate's.

use csv::ByteRecord;
use serde::de::value::Error as PlainError;
use serde::de::{
    DeserializeOwned, DeserializeSeed, Deserializer, Error as _, IntoDeserializer, MapAccess,
    SeqAccess, Visitor,
};

/// Decodes `record` into `T` (by header name when `headers` is given, else by position),
/// as `csv::ByteRecord::deserialize` does, faster for rows of numbers.
pub fn decode_record<T: DeserializeOwned>(
    record: &ByteRecord,
    headers: Option<&ByteRecord>,
) -> Result<T, csv::Error> {
    let fast = T::deserialize(&mut RecordDeserializer {
        record,
        headers,
        next: 0,
    });
    match fast {
        Ok(value) => Ok(value),
        // The csv crate decides, and words the error.
        Err(_) => record.deserialize(headers),
    }
}

/// Says why the csv crate could not decode `record`, once, with the column's name: the
/// csv crate's own message repeats the record's position (its record number, line and byte),
/// which the source already reports, and names the column only by index.
pub fn decode_error(
    error: &csv::Error,
    record: &ByteRecord,
    headers: Option<&ByteRecord>,
) -> crate::connectors::malformed::DecodeError {
    use crate::connectors::malformed::DecodeError;
    use csv::DeserializeErrorKind as Kind;
    let csv::ErrorKind::Deserialize { err, .. } = error.kind() else {
        return DecodeError::new(error.to_string());
    };
    let field = err.field().and_then(|f| usize::try_from(f).ok());
    let value = field
        .and_then(|f| record.get(f))
        .map(|v| String::from_utf8_lossy(v).into_owned());
    let reason = match (err.kind(), &value) {
        (Kind::ParseInt(e), Some(v)) => format!("{e} {v:?}"),
        (Kind::ParseFloat(e), Some(v)) => format!("{e} {v:?}"),
        (Kind::ParseBool(e), Some(v)) => format!("{e}: {v:?}"),
        (Kind::UnexpectedEndOfRow, _) => "the row has fewer fields than expected".to_string(),
        (kind, _) => kind.to_string(),
    };
    let column = field.map(|f| {
        headers
            .and_then(|h| h.get(f))
            .map(|name| String::from_utf8_lossy(name).into_owned())
            .unwrap_or_else(|| format!("#{}", f + 1))
    });
    match column {
        Some(column) => DecodeError::in_column(column, reason),
        None => DecodeError::new(reason),
    }
}

/// Why the fast path gave up (never shown: the csv crate then decodes the row).
fn give_up() -> PlainError {
    PlainError::custom("left to the csv crate")
}

/// The whole row: a sequence of fields, or a map from header names to fields.
struct RecordDeserializer<'r> {
    record: &'r ByteRecord,
    headers: Option<&'r ByteRecord>,
    next: usize,
}

impl<'r> RecordDeserializer<'r> {
    fn next_field(&mut self) -> Result<&'r [u8], PlainError> {
        let field = self.record.get(self.next).ok_or_else(give_up)?;
        self.next += 1;
        Ok(field)
    }
}

/// Parses an optionally signed decimal integer of ASCII digits, as `str::parse` does.
fn parse_integer<T>(bytes: &[u8]) -> Option<T>
where
    T: TryFrom<i128>,
{
    let (negative, digits) = match bytes.first()? {
        b'-' => (true, &bytes[1..]),
        b'+' => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 39 {
        return None;
    }
    let mut value: i128 = 0;
    for &d in digits {
        let digit = d.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(i128::from(digit))?;
    }
    T::try_from(if negative { -value } else { value }).ok()
}

/// Parses a field as a small unsigned or signed integer on the fast path, without i128
/// arithmetic when it fits in 18 digits.
fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes.first()? {
        b'-' => (true, &bytes[1..]),
        b'+' => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 18 {
        return parse_integer(bytes);
    }
    let mut value: i64 = 0;
    for &d in digits {
        let digit = d.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value * 10 + i64::from(digit);
    }
    Some(if negative { -value } else { value })
}

macro_rules! integer {
    ($method:ident, $visit:ident, $ty:ty, $signed:expr) => {
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PlainError> {
            // `str::parse` refuses a minus sign on unsigned types, even on zero.
            if !$signed && self.0.first() == Some(&b'-') {
                return Err(give_up());
            }
            let parsed = parse_i64(self.0)
                .and_then(|n| <$ty>::try_from(n).ok())
                .or_else(|| parse_integer::<$ty>(self.0));
            visitor.$visit(parsed.ok_or_else(give_up)?)
        }
    };
}

macro_rules! parsed {
    ($method:ident, $visit:ident, $ty:ty) => {
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PlainError> {
            visitor.$visit(self.text()?.parse::<$ty>().map_err(|_| give_up())?)
        }
    };
}

/// One field.
struct FieldDeserializer<'r>(&'r [u8]);

impl<'r> FieldDeserializer<'r> {
    fn text(&self) -> Result<&'r str, PlainError> {
        std::str::from_utf8(self.0).map_err(|_| give_up())
    }
}

impl<'de, 'r> Deserializer<'de> for FieldDeserializer<'r> {
    type Error = PlainError;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, PlainError> {
        // Type inference is the csv crate's business.
        Err(give_up())
    }

    integer!(deserialize_i8, visit_i8, i8, true);
    integer!(deserialize_i16, visit_i16, i16, true);
    integer!(deserialize_i32, visit_i32, i32, true);
    integer!(deserialize_i64, visit_i64, i64, true);
    integer!(deserialize_u8, visit_u8, u8, false);
    integer!(deserialize_u16, visit_u16, u16, false);
    integer!(deserialize_u32, visit_u32, u32, false);
    integer!(deserialize_u64, visit_u64, u64, false);
    parsed!(deserialize_f32, visit_f32, f32);
    parsed!(deserialize_f64, visit_f64, f64);
    parsed!(deserialize_bool, visit_bool, bool);

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PlainError> {
        visitor.visit_str(self.text()?)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PlainError> {
        visitor.visit_str(self.text()?)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PlainError> {
        visitor.visit_unit()
    }

    /// An empty field is `None`, as for the csv crate; rows with optional columns would
    /// otherwise be decoded twice (here, then by the csv crate).
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PlainError> {
        if self.0.is_empty() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, PlainError> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        i128 u128 char bytes byte_buf unit unit_struct seq tuple tuple_struct map struct enum
        identifier
    }
}

impl<'de, 'r> Deserializer<'de> for &mut RecordDeserializer<'r> {
    type Error = PlainError;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, PlainError> {
        Err(give_up())
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PlainError> {
        visitor.visit_seq(Fields(self))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, PlainError> {
        visitor.visit_seq(Fields(self))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, PlainError> {
        visitor.visit_seq(Fields(self))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, PlainError> {
        match self.headers {
            Some(_) => visitor.visit_map(NamedFields(self)),
            None => visitor.visit_seq(Fields(self)),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct map enum identifier ignored_any
    }
}

/// The row's fields in order.
struct Fields<'a, 'r>(&'a mut RecordDeserializer<'r>);

impl<'de> SeqAccess<'de> for Fields<'_, '_> {
    type Error = PlainError;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, PlainError> {
        if self.0.next >= self.0.record.len() {
            return Ok(None);
        }
        let field = self.0.next_field()?;
        seed.deserialize(FieldDeserializer(field)).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.record.len().saturating_sub(self.0.next))
    }
}

/// The row's fields by header name.
struct NamedFields<'a, 'r>(&'a mut RecordDeserializer<'r>);

impl<'de> MapAccess<'de> for NamedFields<'_, '_> {
    type Error = PlainError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, PlainError> {
        let Some(headers) = self.0.headers else {
            return Err(give_up());
        };
        if self.0.next >= self.0.record.len() {
            // A row shorter than the header is the csv crate's to judge (it reads a field
            // for every header, ignored ones too).
            return match self.0.next >= headers.len() {
                true => Ok(None),
                false => Err(give_up()),
            };
        }
        let name = headers.get(self.0.next).ok_or_else(give_up)?;
        let name = std::str::from_utf8(name).map_err(|_| give_up())?;
        let name: serde::de::value::StrDeserializer<'_, PlainError> = name.into_deserializer();
        seed.deserialize(name).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, PlainError> {
        let field = self.0.next_field()?;
        seed.deserialize(FieldDeserializer(field))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Deserialize)]
    struct NameAndAge {
        name: String,
        #[serde(default)]
        age: u32,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Person {
        name: String,
        age: u32,
        score: Option<f64>,
    }

    /// The fast path and the csv crate agree: same value, or both refuse.
    fn agree<T: DeserializeOwned + PartialEq + std::fmt::Debug>(
        record: &ByteRecord,
        headers: Option<&ByteRecord>,
    ) -> Result<(), TestCaseError> {
        let fast = decode_record::<T>(record, headers);
        let csv = record.deserialize::<T>(headers);
        match (fast, csv) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
            (a, b) => prop_assert!(false, "fast {a:?} but csv {b:?} for {record:?}"),
        }
        Ok(())
    }

    fn field() -> impl Strategy<Value = String> {
        prop_oneof![
            "-?[0-9]{0,3}",
            "[+-]?[0-9]{1,22}",
            "-0|\\+0|0x1|1e3|1\\.5|true|false| 7|7 |é|",
            "[a-z]{0,4}",
        ]
    }

    proptest! {
        #[test]
        fn fast_decoding_agrees_with_the_csv_crate(fields in proptest::collection::vec(field(), 0..5)) {
            let record = ByteRecord::from(fields.clone());
            agree::<(i64, i64)>(&record, None)?;
            agree::<(u8, i32, String)>(&record, None)?;
            agree::<(u64, i16, u32, i8)>(&record, None)?;
            agree::<(f64, bool)>(&record, None)?;
            agree::<Vec<i64>>(&record, None)?;
            agree::<Vec<String>>(&record, None)?;
            agree::<(Option<i64>, String)>(&record, None)?;
            let headers = ByteRecord::from(vec!["name", "age", "score"]);
            agree::<Person>(&record, Some(&headers))?;
            agree::<NameAndAge>(&record, Some(&headers))?;
            agree::<NameAndAge>(&record, Some(&ByteRecord::from(vec!["age", "name"])))?;
            agree::<(String, u32, Option<f64>)>(&record, Some(&headers))?;
        }
    }

    #[test]
    fn rows_of_numbers_take_the_fast_path() {
        let record = ByteRecord::from(vec!["12", "-345"]);
        let mut de = RecordDeserializer {
            record: &record,
            headers: None,
            next: 0,
        };
        assert_eq!(<(i64, i32)>::deserialize(&mut de).unwrap(), (12, -345));
        assert_eq!(parse_i64(b"+7"), Some(7));
        assert_eq!(parse_i64(b"99999999999999999999"), None);
        assert_eq!(
            parse_integer::<u64>(b"18446744073709551615"),
            Some(u64::MAX)
        );
        assert_eq!(
            parse_integer::<i64>(b"-9223372036854775808"),
            Some(i64::MIN)
        );
    }
}
