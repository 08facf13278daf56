//! Durations as Flink writes them: `10 s`, `500ms`, `1 min`, `2h`, or a bare number of
//! milliseconds.

use std::time::Duration;

/// Parses `text` as a duration; `None` if it is not one.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let millis = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        _ => return None,
    };
    number.checked_mul(millis).map(Duration::from_millis)
}

/// The way durations are written, for error messages.
pub const DURATION_FORMS: &str =
    "a duration such as `500 ms`, `10 s`, `1 min`, `2 h` or a number of milliseconds";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flinks_duration_forms() {
        assert_eq!(parse_duration("10 s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1 min"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("2 hours"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1500"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("ten s"), None);
        assert_eq!(parse_duration("10 parsecs"), None);
        assert_eq!(parse_duration("-1 s"), None);
        assert_eq!(parse_duration("99999999999999999999 d"), None);
    }
}
