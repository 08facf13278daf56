//! The `key,value` input of the stateless and keyed workloads: headerless CSV part files,
//! keys uniform over `0..keys`, values uniform over `0..1000`, the same bytes for the same
//! seed; with string keys, the same rows with each key written `k<key>`. Several part files, because both engines read one file per split: a single file
//! would leave every subtask but one idle.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::error::BenchError;

/// What a `key,value` input holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvInputSpec {
    /// Rows in all files together.
    pub rows: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Seed of the pseudo-random keys and values.
    pub seed: u64,
    /// Part files.
    pub files: u32,
    /// Keys written as strings, `k<key>`.
    #[serde(default)]
    pub string_keys: bool,
}

/// Rows of part `file` of `files`: contiguous, the remainder spread over the first parts.
pub fn part_range(rows: u64, files: u32, file: u32) -> std::ops::Range<u64> {
    let files = u64::from(files.max(1));
    let file = u64::from(file);
    let (base, extra) = (rows / files, rows % files);
    let start = file * base + file.min(extra);
    start..start + base + u64::from(file < extra)
}

/// Writes `files` part files `part-N.{extension}` into `dir`, each by `write_part(path, N)`
/// on its own thread.
pub fn write_parts(
    dir: &Path,
    files: u32,
    extension: &str,
    write_part: impl Fn(&Path, u32) -> Result<(), BenchError> + Sync,
) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir).map_err(BenchError::io("creating", dir))?;
    let write_part = &write_part;
    std::thread::scope(|scope| {
        let writers: Vec<_> = (0..files)
            .map(|file| {
                let path = dir.join(format!("part-{file}.{extension}"));
                scope.spawn(move || write_part(&path, file))
            })
            .collect();
        writers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(BenchError::Run("a writer thread panicked".into())))
            })
            .collect::<Result<Vec<()>, _>>()
    })?;
    Ok(())
}

/// Writes `spec`'s part files `part-N.csv` into `dir`, one thread per file.
pub fn write_kv_input(dir: &Path, spec: &KvInputSpec) -> Result<(), BenchError> {
    write_parts(dir, spec.files, "csv", |path, file| {
        write_part(path, spec, file)
    })
}

fn write_part(path: &Path, spec: &KvInputSpec, file: u32) -> Result<(), BenchError> {
    let io = BenchError::io("writing", path);
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io)?);
    let mut rng = StdRng::seed_from_u64(spec.seed ^ (u64::from(file) << 32));
    for _ in part_range(spec.rows, spec.files, file) {
        let key = rng.random_range(0..spec.keys.max(1));
        let value = rng.random_range(0..1000u64);
        let prefix = if spec.string_keys { "k" } else { "" };
        writeln!(out, "{prefix}{key},{value}").map_err(BenchError::io("writing", path))?;
    }
    out.flush().map_err(BenchError::io("writing", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_every_row_once() {
        for (rows, files) in [(10, 3), (2, 4), (0, 2), (1_000_001, 4)] {
            let ranges: Vec<_> = (0..files).map(|f| part_range(rows, files, f)).collect();
            assert_eq!(ranges[0].start, 0);
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].end, pair[1].start);
            }
            assert_eq!(ranges.last().map(|r| r.end), Some(rows));
        }
    }

    #[test]
    fn same_seed_same_bytes_and_keys_in_range() {
        let spec = KvInputSpec {
            rows: 1000,
            keys: 7,
            seed: 3,
            files: 2,
            string_keys: false,
        };
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        write_kv_input(a.path(), &spec).unwrap();
        write_kv_input(b.path(), &spec).unwrap();
        let mut rows = 0;
        for part in ["part-0.csv", "part-1.csv"] {
            let text = std::fs::read_to_string(a.path().join(part)).unwrap();
            assert_eq!(text, std::fs::read_to_string(b.path().join(part)).unwrap());
            for line in text.lines() {
                let (k, v) = line.split_once(',').unwrap();
                assert!(k.parse::<u64>().unwrap() < 7);
                assert!(v.parse::<u64>().unwrap() < 1000);
                rows += 1;
            }
        }
        assert_eq!(rows, 1000);
    }
}
