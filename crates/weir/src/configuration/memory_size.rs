//! Memory sizes as Flink writes them: `128mb`, `1 gb`, `512k`, `64 mebibytes`, or a bare
//! number of bytes. Units are powers of 1024, as Flink's `MemorySize` reads them.

/// Parses `text` as a number of bytes; `None` if it is not a memory size.
pub fn parse_memory_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" | "bytes" => 0,
        "k" | "kb" | "kib" | "kibibytes" => 10,
        "m" | "mb" | "mib" | "mebibytes" => 20,
        "g" | "gb" | "gib" | "gibibytes" => 30,
        "t" | "tb" | "tib" | "tebibytes" => 40,
        _ => return None,
    };
    number.checked_mul(1u64 << shift)
}

/// The way memory sizes are written, for error messages.
pub const MEMORY_SIZE_FORMS: &str =
    "a memory size such as `64 mb`, `512kb`, `1 gb` or a number of bytes";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_flink_reads_them() {
        assert_eq!(parse_memory_size("128mb"), Some(128 << 20));
        assert_eq!(parse_memory_size(" 1 GB "), Some(1 << 30));
        assert_eq!(parse_memory_size("512k"), Some(512 << 10));
        assert_eq!(parse_memory_size("4096"), Some(4096));
        assert_eq!(parse_memory_size("64 mebibytes"), Some(64 << 20));
        assert_eq!(parse_memory_size("1.5g"), None);
        assert_eq!(parse_memory_size("mb"), None);
        assert_eq!(parse_memory_size("12 parsecs"), None);
        assert_eq!(parse_memory_size("99999999999999tb"), None, "overflow");
    }
}
