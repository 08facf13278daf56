//! The floor: each workload as a hand-written single-pass program on one thread, with no
//! engine around it: read the part files in order, parse each line, filter, project or
//! aggregate in a hash map. What an engine costs on top is the distance to this.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use hashbrown::HashMap;
use serde::de::DeserializeOwned;

use crate::error::BenchError;
use crate::nexmark::queries::{q2_selects, AuctionPrice, BidEvent, BidRow};
use crate::process_usage;
use crate::report::{Engine, RunFigures};
use crate::workload::{InputKind, Workload};

/// The input's part files, sorted, hidden ones skipped (as both engines list them).
pub fn part_files(dir: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(BenchError::io("listing", dir))? {
        let entry = entry.map_err(BenchError::io("listing", dir))?;
        let hidden = entry.file_name().to_string_lossy().starts_with(['.', '_']);
        if !hidden && entry.path().is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// Calls `each` with every line (without its `\n`) of every part file, in place in a
/// 1 MiB read buffer: no copy per line.
fn for_each_line(
    dir: &Path,
    mut each: impl FnMut(&[u8]) -> Result<(), String>,
) -> Result<(), BenchError> {
    let mut buffer = vec![0u8; 1 << 20];
    for path in part_files(dir)? {
        let mut file = File::open(&path).map_err(BenchError::io("opening", &path))?;
        let (mut filled, mut number) = (0usize, 0u64);
        loop {
            if filled == buffer.len() {
                // A line longer than the buffer: grow it.
                buffer.resize(buffer.len() * 2, 0);
            }
            let n = file
                .read(&mut buffer[filled..])
                .map_err(BenchError::io("reading", &path))?;
            filled += n;
            let end = if n == 0 {
                filled
            } else {
                match memchr::memrchr(b'\n', &buffer[..filled]) {
                    Some(last) => last + 1,
                    None => continue,
                }
            };
            let mut start = 0;
            while start < end {
                let stop = memchr::memchr(b'\n', &buffer[start..end]).map_or(end, |i| start + i);
                number += 1;
                each(&buffer[start..stop]).map_err(|reason| BenchError::Malformed {
                    file: path.display().to_string(),
                    line: number,
                    reason,
                })?;
                start = stop + 1;
            }
            if n == 0 {
                break;
            }
            buffer.copy_within(end..filled, 0);
            filled -= end;
        }
    }
    Ok(())
}

/// Parses an unsigned decimal integer.
fn parse_i64(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    digits.iter().try_fold(0i64, |n, d| {
        d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0'))
    })
}

/// Parses a `key,value` row.
pub fn parse_key_value(line: &[u8]) -> Result<(i64, i64), String> {
    let comma = line.iter().position(|b| *b == b',');
    comma
        .and_then(|at| Some((parse_i64(&line[..at])?, parse_i64(&line[at + 1..])?)))
        .ok_or_else(|| format!("`{}` is not a key,value row", String::from_utf8_lossy(line)))
}

/// A `k123,456` row: the key as text (checked to be UTF-8), the value parsed.
pub fn parse_string_key_value(line: &[u8]) -> Result<(&str, i64), String> {
    let comma = line.iter().position(|b| *b == b',');
    comma
        .and_then(|at| {
            let key = std::str::from_utf8(&line[..at]).ok()?;
            Some((key, parse_i64(&line[at + 1..])?))
        })
        .ok_or_else(|| format!("`{}` is not a key,value row", String::from_utf8_lossy(line)))
}

/// The same decoding as the Weir pipelines': the line's UTF-8 checked once, then parsed.
fn json<T: DeserializeOwned>(line: &[u8]) -> Result<T, String> {
    let text = std::str::from_utf8(line).map_err(|e| e.to_string())?;
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// Mixes an emitted record into a checksum, so that the compiler cannot drop the work.
fn mix(checksum: u64, value: i64) -> u64 {
    (checksum ^ value as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// What a floor pass produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FloorOutput {
    /// Input records.
    pub records: u64,
    /// Records emitted.
    pub records_out: u64,
    /// A checksum of what was emitted.
    pub checksum: u64,
}

/// Runs `workload` over the part files of `dir` in one pass.
pub fn compute(workload: Workload, dir: &Path) -> Result<FloorOutput, BenchError> {
    let mut out = FloorOutput::default();
    let emit = |out: &mut FloorOutput, value: i64| {
        out.records_out += 1;
        out.checksum = mix(out.checksum, value);
    };
    match workload {
        Workload::Stateless => for_each_line(dir, |line| {
            let (key, value) = parse_key_value(line)?;
            out.records += 1;
            if value % 2 == 0 {
                emit(&mut out, key ^ (value * 10));
            }
            Ok(())
        })?,
        Workload::Keyed => {
            let mut totals: HashMap<i64, (i64, i64)> = HashMap::new();
            for_each_line(dir, |line| {
                let (key, value) = parse_key_value(line)?;
                out.records += 1;
                let total = totals.entry(key).or_insert((0, 0));
                total.0 += value;
                total.1 += 1;
                emit(&mut out, key ^ total.0 ^ (total.1 << 40));
                Ok(())
            })?
        }
        Workload::KeyedStrings => {
            let mut totals: HashMap<String, (i64, i64)> = HashMap::new();
            for_each_line(dir, |line| {
                let (key, value) = parse_string_key_value(line)?;
                out.records += 1;
                // A key is copied only the first time it is seen, as a hash map allows.
                let total = match totals.get_mut(key) {
                    Some(total) => total,
                    None => totals.entry(key.to_string()).or_insert((0, 0)),
                };
                total.0 += value;
                total.1 += 1;
                emit(&mut out, key.len() as i64 ^ total.0 ^ (total.1 << 40));
                Ok(())
            })?
        }
        Workload::Q0 | Workload::Q1 => for_each_line(dir, |line| {
            out.records += 1;
            if let Some(bid) = json::<BidEvent<BidRow>>(line)?.into_bid() {
                // q1's conversion, as `EuroBidRow::from` makes it, without moving the bid.
                let price = if workload == Workload::Q1 {
                    bid.price * 908
                } else {
                    bid.price
                };
                emit(
                    &mut out,
                    bid.auction ^ price ^ bid.date_time.0 ^ bid.extra.len() as i64,
                );
            }
            Ok(())
        })?,
        Workload::Q3
        | Workload::Q4
        | Workload::Q5
        | Workload::Q6
        | Workload::Q7
        | Workload::Q8
        | Workload::Q11
        | Workload::Q12 => {
            return Err(BenchError::Run(format!(
                "the floor has no {workload}: it is written for the stateless and keyed workloads"
            )))
        }
        Workload::Q2 => for_each_line(dir, |line| {
            out.records += 1;
            if let Some(bid) = json::<BidEvent<AuctionPrice>>(line)?.into_bid() {
                if q2_selects(bid.auction) {
                    emit(&mut out, bid.auction ^ bid.price);
                }
            }
            Ok(())
        })?,
    }
    Ok(out)
}

/// Runs and measures the floor of `workload` over `dir`, in this process.
pub fn run(workload: Workload, dir: &Path) -> Result<RunFigures, BenchError> {
    debug_assert!(matches!(
        workload.input(),
        InputKind::KeyValue | InputKind::StringKeyValue | InputKind::Nexmark
    ));
    let before = process_usage::current();
    let started = Instant::now();
    let output = compute(workload, dir)?;
    let seconds = started.elapsed().as_secs_f64();
    std::hint::black_box(output.checksum);
    let after = process_usage::current();
    Ok(RunFigures {
        workload,
        engine: Engine::Floor,
        parallelism: 1,
        records: output.records,
        records_out: Some(output.records_out),
        seconds,
        cpu_seconds: after.cpu_seconds - before.cpu_seconds,
        cpu_seconds_with_setup: None,
        peak_rss_mib: after.peak_rss_mib,
        checkpoints: 0,
        checkpoint_mean_ms: None,
        machine_busy_before: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_rows_parse_and_bad_rows_are_named() {
        assert_eq!(parse_key_value(b"12,345"), Ok((12, 345)));
        for bad in [
            &b"12"[..],
            b"12,",
            b",3",
            b"a,1",
            b"1,2,3",
            b"99999999999999999999,1",
        ] {
            assert!(
                parse_key_value(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("part-0.csv"), "1,2\n3,x\n").unwrap();
        let err = compute(Workload::Keyed, dir.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("part-0.csv:2") && err.contains("3,x"), "{err}");
    }

    #[test]
    fn hidden_files_are_not_input() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("part-1.csv"), "1,2\n").unwrap();
        std::fs::write(dir.path().join("part-0.csv"), "1,4\n2,3\n").unwrap();
        std::fs::write(dir.path().join(".manifest"), "junk").unwrap();
        std::fs::write(dir.path().join("_SUCCESS"), "junk").unwrap();
        let out = compute(Workload::Stateless, dir.path()).unwrap();
        assert_eq!((out.records, out.records_out), (3, 2));
    }
}
