//! The generated inputs under the data directory, each with a manifest of what it holds, so
//! that a suite run reuses them when they match and regenerates them when they do not.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::BenchError;
use crate::kv_input::{write_kv_input, KvInputSpec};
use crate::nexmark::generator::{write_nexmark_input, NexmarkInputSpec};

/// `dir/name/` holds the input made from `spec`; `dir/name.manifest.json` says so.
/// Returns the input directory, generating it with `write` first unless the manifest
/// matches `spec`.
fn ensure<S: Serialize + DeserializeOwned + PartialEq>(
    dir: &Path,
    name: &str,
    spec: &S,
    write: impl FnOnce(&Path, &S) -> Result<(), BenchError>,
) -> Result<PathBuf, BenchError> {
    let input = dir.join(name);
    let manifest = dir.join(format!("{name}.manifest.json"));
    let current = std::fs::read(&manifest)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<S>(&bytes).ok());
    if current.as_ref() == Some(spec) && input.is_dir() {
        return Ok(input);
    }
    // The manifest goes first and last: an interrupted generation never looks complete.
    let _ = std::fs::remove_file(&manifest);
    if input.exists() {
        std::fs::remove_dir_all(&input).map_err(BenchError::io("removing", &input))?;
    }
    write(&input, spec)?;
    let json = serde_json::to_vec_pretty(spec).map_err(|e| BenchError::Run(e.to_string()))?;
    std::fs::write(&manifest, json).map_err(BenchError::io("writing", &manifest))?;
    Ok(input)
}

/// The `key,value` input of `spec` under `dir`, generated if missing or different.
pub fn key_value_input(dir: &Path, spec: &KvInputSpec) -> Result<PathBuf, BenchError> {
    ensure(dir, "kv", spec, write_kv_input)
}

/// The `key,value` input of `spec` with string keys (`k<key>`) under `dir`.
pub fn string_key_value_input(dir: &Path, spec: &KvInputSpec) -> Result<PathBuf, BenchError> {
    let spec = KvInputSpec {
        string_keys: true,
        ..spec.clone()
    };
    ensure(dir, "kvs", &spec, write_kv_input)
}

/// The Nexmark input of `spec` under `dir`, generated if missing or different.
pub fn nexmark_input(dir: &Path, spec: &NexmarkInputSpec) -> Result<PathBuf, BenchError> {
    ensure(dir, "nexmark", spec, write_nexmark_input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reused_when_the_manifest_matches_and_regenerated_when_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = KvInputSpec {
            rows: 10,
            keys: 3,
            seed: 1,
            files: 2,
            string_keys: false,
        };
        let input = key_value_input(dir.path(), &spec).unwrap();
        let marker = input.join("part-0.csv");
        std::fs::write(&marker, "edited\n").unwrap();
        key_value_input(dir.path(), &spec).unwrap();
        assert_eq!(std::fs::read_to_string(&marker).unwrap(), "edited\n");
        spec.rows = 12;
        key_value_input(dir.path(), &spec).unwrap();
        let rows: usize = ["part-0.csv", "part-1.csv"]
            .iter()
            .map(|p| {
                std::fs::read_to_string(input.join(p))
                    .unwrap()
                    .lines()
                    .count()
            })
            .sum();
        assert_eq!(rows, 12);
    }
}
