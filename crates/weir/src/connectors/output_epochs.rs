//! The epoch in the names of what file sinks write, and clearing what older epochs wrote.
//!
//! Every file and directory a file sink creates in its output directory carries the epoch of
//! the process that wrote it — `part-0-e4x…-0.csv`, `.part-0-e4x…-1.pending`,
//! `batch-1-e4-00000000000000000007.csv`, `.staging-batch-e4-s1` — as one `-`-separated segment
//! `e<digits>` (optionally followed by `x…`). A reset removes what epochs below its own wrote
//! *by name*: a process that took the job after the reset has a higher epoch, so nothing it
//! writes can be removed by a reset that wakes up late. (Moving the output directory by its
//! path could not tell the old output from a successor's.) A sink's prefix therefore holds no
//! `-e<digits>` segment of its own, and an output directory belongs to one job: a reset
//! removes what every earlier epoch wrote there.

use std::path::{Path, PathBuf};

/// The epoch an output name carries, if it carries one: its first `-`-separated segment that
/// is `e<digits>`, or `e<digits>x…` (a two-phase-commit transaction token).
pub fn epoch_of_output_name(name: &str) -> Option<u64> {
    name.split('-').find_map(|segment| {
        let digits = segment.strip_prefix('e')?;
        let end = digits
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(digits.len());
        let (number, rest) = digits.split_at(end);
        if number.is_empty() || !(rest.is_empty() || rest.starts_with('x')) {
            return None;
        }
        number.parse().ok()
    })
}

/// Removes the entries of output directory `dir` whose names carry an epoch below `epoch`
/// (files, and directories with what they hold); returns them. Entries without an epoch in
/// their name are left alone. A missing directory holds nothing.
pub fn remove_older_output(dir: &Path, epoch: u64) -> std::io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    // Until a pass finds nothing: a stale process may rename a pending part it listed into
    // its committed name while a pass runs.
    loop {
        let found = remove_older_once(dir, epoch)?;
        if found.is_empty() {
            break;
        }
        removed.extend(found);
    }
    if !removed.is_empty() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    removed.sort();
    Ok(removed)
}

/// One pass of [`remove_older_output`].
fn remove_older_once(dir: &Path, epoch: u64) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut removed = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().to_string();
        if epoch_of_output_name(&name).is_none_or(|e| e >= epoch) {
            continue;
        }
        let path = entry.path();
        let result = if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match result {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_is_read_from_every_name_a_file_sink_writes() {
        for (name, epoch) in [
            ("part-0-e4x18c2f3a91b2c0001-0.csv", Some(4)),
            (".part-1-e12x18c2f3a91b2c0001-3.pending", Some(12)),
            (".part-1-e12x18c2f3a91b2c0001-3.inprogress", Some(12)),
            ("batch-1-e7-00000000000000000009.csv", Some(7)),
            ("batch-0-e7-final", Some(7)),
            (".staging-batch-e3-s0", Some(3)),
            ("part-0-x18c2f3a91b2c0001-0.csv", None),
            ("batch-0-00000000000000000001", None),
            ("readme-eleven.txt", None),
            ("_SUCCESS", None),
        ] {
            assert_eq!(epoch_of_output_name(name), epoch, "{name}");
        }
    }

    #[test]
    fn only_what_older_epochs_wrote_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "part-0-e1x1-0.csv",
            ".part-0-e2x1-1.pending",
            "part-0-e3x1-0.csv",
            "batch-0-e4-00000000000000000001",
            "notes.txt",
        ] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        std::fs::create_dir(dir.path().join(".staging-e2-s0")).unwrap();
        std::fs::write(dir.path().join(".staging-e2-s0/.batch.tmp"), b"x").unwrap();
        let removed = remove_older_output(dir.path(), 3).unwrap();
        let names: Vec<String> = removed
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
            .collect();
        assert_eq!(
            names,
            [
                ".part-0-e2x1-1.pending",
                ".staging-e2-s0",
                "part-0-e1x1-0.csv"
            ]
        );
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "batch-0-e4-00000000000000000001",
                "notes.txt",
                "part-0-e3x1-0.csv"
            ]
        );
        assert!(remove_older_output(&dir.path().join("missing"), 3)
            .unwrap()
            .is_empty());
    }
}
