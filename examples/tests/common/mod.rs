//! What the census process tests share: a small copy of the data, the census command, and
//! checks of the committed output.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The shipped census data, cut to `rows_per_file` rows per file, under `dir/data`.
pub fn small_data(dir: &Path, rows_per_file: usize) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/census");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    for entry in std::fs::read_dir(&source).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "csv") {
            continue;
        }
        let reader = BufReader::new(std::fs::File::open(&path).unwrap());
        let mut out = std::fs::File::create(data.join(path.file_name().unwrap())).unwrap();
        for line in reader.lines().take(rows_per_file + 1) {
            writeln!(out, "{}", line.unwrap()).unwrap();
        }
    }
    data
}

/// How a census process is run.
#[derive(Debug, Clone)]
pub struct Census {
    /// Its work directory (output, checkpoints, local copies).
    pub work: PathBuf,
    /// Its input.
    pub data: PathBuf,
    /// `2pc` or `wal`.
    pub sink: &'static str,
    /// Rows read per second.
    pub rate: u32,
    /// Checkpoint interval.
    pub interval_ms: u32,
}

impl Census {
    /// The census command: `--resume` or not, at `parallelism`, plus `extra` arguments.
    pub fn command(&self, resume: bool, parallelism: u32, extra: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_census"));
        command
            .arg("--data")
            .arg(&self.data)
            .arg("--work-dir")
            .arg(&self.work)
            .args(["--quiet", "--sink", self.sink, "--fail-after-rows", "0"])
            .args(["--rate", &self.rate.to_string()])
            .args(["--checkpoint-interval-ms", &self.interval_ms.to_string()])
            .args(["--parallelism", &parallelism.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("RUST_LOG", "weir=warn");
        if resume {
            command.arg("--resume");
        }
        command
    }

    /// The committed output directory.
    pub fn output(&self) -> PathBuf {
        self.work.join("output")
    }

    /// The job's checkpoint directory.
    pub fn checkpoints(&self) -> PathBuf {
        self.work.join("checkpoints")
    }

    /// The job's directory in checkpoint storage.
    pub fn job_dir(&self) -> PathBuf {
        self.checkpoints().join("census")
    }

    /// The output is exactly what an uninterrupted run gives, and nothing hidden is left.
    pub fn verify_exact(&self) -> Result<(), String> {
        weir_examples::census::verify(&self.output(), &self.data).map_err(|e| format!("{e:#}"))?;
        let hidden = hidden_files(&self.output());
        if !hidden.is_empty() {
            return Err(format!("left behind {hidden:?}"));
        }
        Ok(())
    }

    /// The committed output is exactly what an uninterrupted run gives (hidden, uncommitted
    /// files aside).
    pub fn verify_committed(&self) -> Result<(), String> {
        weir_examples::census::verify(&self.output(), &self.data)
            .map(|_| ())
            .map_err(|e| format!("{e:#}"))
    }

    /// No committed line appears twice (a refused recovery may leave the output incomplete,
    /// but never duplicated).
    pub fn verify_no_duplicates(&self) -> Result<u64, String> {
        let mut seen = std::collections::HashSet::new();
        let mut lines = 0;
        for file in weir::connectors::file_sink::committed_files(self.output())
            .map_err(|e| e.to_string())?
        {
            let text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
            for line in text.lines() {
                lines += 1;
                if !seen.insert(line.to_string()) {
                    return Err(format!("{line:?} committed twice"));
                }
            }
        }
        Ok(lines)
    }
}

/// Files of `dir` whose names start with a dot (uncommitted or partial).
pub fn hidden_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// A run's exit status and the last lines of its standard error.
pub fn describe(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let tail = &lines[lines.len().saturating_sub(12)..];
    format!("{}; stderr:\n{}", output.status, tail.join("\n"))
}
