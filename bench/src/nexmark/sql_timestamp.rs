//! SQL `TIMESTAMP(3)` text, `yyyy-MM-dd HH:mm:ss.SSS` (UTC), as Flink's JSON format writes
//! and reads it by default, converted to and from milliseconds since the Unix epoch.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Milliseconds since 1970-01-01 00:00:00 UTC, serialized as SQL timestamp text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SqlTimestamp(pub i64);

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

impl SqlTimestamp {
    /// The timestamp at a UTC date and time.
    pub fn from_parts(year: i64, month: i64, day: i64, h: i64, m: i64, s: i64, ms: i64) -> Self {
        Self(((days_from_civil(year, month, day) * 24 + h) * 60 + m) * 60_000 + s * 1000 + ms)
    }

    /// Parses `yyyy-MM-dd HH:mm:ss` with an optional fraction of 1 to 3 digits. Fixed
    /// positions, checked once: this runs for every bid.
    pub fn parse(text: &str) -> Result<Self, String> {
        const DIGITS: [usize; 14] = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18];
        let bad = || format!("`{text}` is not a timestamp of the form yyyy-MM-dd HH:mm:ss.SSS");
        let b = text.as_bytes();
        let separators_ok = b.len() >= 19
            && b[4] == b'-'
            && b[7] == b'-'
            && b[10] == b' '
            && b[13] == b':'
            && b[16] == b':';
        if !separators_ok || DIGITS.iter().any(|&i| !b[i].is_ascii_digit()) {
            return Err(bad());
        }
        let digit = |i: usize| i64::from(b[i] - b'0');
        let two = |i: usize| digit(i) * 10 + digit(i + 1);
        let year = two(0) * 100 + two(2);
        let (month, day, h, m, s) = (two(5), two(8), two(11), two(14), two(17));
        let ms = match b.len() {
            19 => 0,
            21..=23 if b[19] == b'.' && b[20..].iter().all(u8::is_ascii_digit) => {
                let fraction = b[20..].iter().fold(0, |n, d| n * 10 + i64::from(d - b'0'));
                fraction * [100, 10, 1][b.len() - 21]
            }
            _ => return Err(bad()),
        };
        if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
            return Err(bad());
        }
        Ok(Self::from_parts(year, month, day, h, m, s, ms))
    }
}

impl fmt::Display for SqlTimestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (days, ms_of_day) = (self.0.div_euclid(86_400_000), self.0.rem_euclid(86_400_000));
        let (year, month, day) = civil_from_days(days);
        let (h, rest) = (ms_of_day / 3_600_000, ms_of_day % 3_600_000);
        let (m, rest) = (rest / 60_000, rest % 60_000);
        write!(
            f,
            "{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{:02}.{:03}",
            rest / 1000,
            rest % 1000
        )
    }
}

impl Serialize for SqlTimestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

struct SqlTimestampVisitor;

impl Visitor<'_> for SqlTimestampVisitor {
    type Value = SqlTimestamp;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a timestamp `yyyy-MM-dd HH:mm:ss.SSS`")
    }
    fn visit_str<E: de::Error>(self, text: &str) -> Result<SqlTimestamp, E> {
        SqlTimestamp::parse(text).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for SqlTimestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(SqlTimestampVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(
            SqlTimestamp::parse("1970-01-01 00:00:00.000"),
            Ok(SqlTimestamp(0))
        );
        // 2015-07-15T00:00:00Z, the Nexmark base time here.
        let base = SqlTimestamp::parse("2015-07-15 00:00:00").unwrap();
        assert_eq!(base, SqlTimestamp(1_436_918_400_000));
        assert_eq!(
            SqlTimestamp::parse("2000-02-29 23:59:59.5"),
            Ok(SqlTimestamp(951_868_799_500))
        );
        assert_eq!(
            SqlTimestamp(951_868_799_500).to_string(),
            "2000-02-29 23:59:59.500"
        );
        assert_eq!(SqlTimestamp(-1).to_string(), "1969-12-31 23:59:59.999");
    }

    #[test]
    fn round_trips_over_centuries() {
        let mut t = -5_000_000_000_000i64;
        while t < 10_000_000_000_000 {
            let ts = SqlTimestamp(t);
            assert_eq!(SqlTimestamp::parse(&ts.to_string()), Ok(ts), "{ts}");
            t += 7_777_777_777;
        }
    }

    #[test]
    fn malformed_text_is_refused() {
        for bad in [
            "",
            "2015-07-15",
            "2015-07-15T00:00:00.000",
            "2015-13-15 00:00:00.000",
            "2015-07-15 00:00:00.0000",
            "2015-07-15 0a:00:00.000",
            "2015-07-15 00:00:00.",
        ] {
            assert!(SqlTimestamp::parse(bad).is_err(), "{bad:?}");
        }
        let json: Result<SqlTimestamp, _> = serde_json::from_str("\"yesterday\"");
        assert!(json.unwrap_err().to_string().contains("yesterday"));
    }
}
