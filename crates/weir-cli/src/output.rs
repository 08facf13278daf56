//! Human-readable figures and aligned tables for the terminal.

/// Milliseconds as `850 ms`, `12.3 s`, `4.5 min` or `2.1 h`.
pub fn duration_ms(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1e3),
        60_000..=3_599_999 => format!("{:.1} min", ms as f64 / 6e4),
        _ => format!("{:.1} h", ms as f64 / 3.6e6),
    }
}

/// Milliseconds since the Unix epoch as an ISO 8601 time in UTC, to the millisecond
/// (`2026-12-08T00:30:25.123Z`).
pub fn iso_time(unix_millis: u64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(unix_millis);
    humantime::format_rfc3339_millis(time).to_string()
}

/// Bytes as `512 B`, `3.2 KiB`, `1.5 MiB` or `2.00 GiB`.
pub fn bytes(n: u64) -> String {
    match n {
        0..=1023 => format!("{n} B"),
        1024..=1_048_575 => format!("{:.1} KiB", n as f64 / 1024.0),
        1_048_576..=1_073_741_823 => format!("{:.1} MiB", n as f64 / 1_048_576.0),
        _ => format!("{:.2} GiB", n as f64 / 1_073_741_824.0),
    }
}

/// A rate as `950/s`, `12.5k/s` or `3.1M/s`.
pub fn rate(per_second: f64) -> String {
    if per_second >= 1e6 {
        format!("{:.1}M/s", per_second / 1e6)
    } else if per_second >= 1e4 {
        format!("{:.1}k/s", per_second / 1e3)
    } else {
        format!("{per_second:.0}/s")
    }
}

/// A table with a header row, columns padded to their widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = widths.get(i).copied().unwrap_or(0)))
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.clone()));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_iso_8601_in_utc() {
        assert_eq!(iso_time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_time(1_796_689_825_123), "2026-12-08T00:30:25.123Z");
    }

    #[test]
    fn figures_read_well() {
        assert_eq!(duration_ms(850), "850 ms");
        assert_eq!(duration_ms(12_300), "12.3 s");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(rate(12_500.0), "12.5k/s");
        assert_eq!(
            table(&["A", "BB"], &[vec!["long".into(), "x".into()]]),
            "A     BB\nlong  x\n"
        );
    }
}
