//! Runs a workload in Apache Flink: `bench/flink/flink_job.py` under the PyFlink virtual
//! environment that `bench/flink/install.sh` makes, and reads back the figures it prints.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

use crate::error::BenchError;
use crate::report::{Engine, RunFigures};
use crate::workload::Workload;

/// What `flink_job.py` prints after `RESULT `.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FlinkResult {
    /// The workload's name.
    pub workload: String,
    /// Parallelism.
    pub parallelism: u32,
    /// Input records.
    pub records: u64,
    /// From submitting the INSERT to its end (planning and deployment included).
    pub job_wall_seconds: f64,
    /// From the execution graph's RUNNING to FINISHED, from Flink's log.
    pub running_seconds: Option<f64>,
    /// CPU seconds of the JVM while the job ran (from RUNNING to the end).
    pub cpu_seconds: f64,
    /// CPU seconds of the JVM from submitting the statement: SQL planning, code
    /// generation and deployment included.
    #[serde(default)]
    pub cpu_seconds_with_planning: Option<f64>,
    /// Whether `cpu_seconds` starts at RUNNING (else it includes planning).
    #[serde(default)]
    pub cpu_from_running: bool,
    /// Peak RSS of the JVM, MiB.
    pub peak_rss_mib: Option<f64>,
    /// Checkpoints completed, from Flink's log.
    pub checkpoints_completed: u64,
    /// Their mean `checkpointDuration`, ms.
    pub checkpoint_mean_ms: Option<f64>,
}

/// Finds the `RESULT {json}` line in the script's output.
pub fn parse_result(stdout: &str) -> Result<FlinkResult, BenchError> {
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("RESULT "))
        .ok_or_else(|| BenchError::Run("the Flink job printed no RESULT line".into()))?;
    serde_json::from_str(line)
        .map_err(|e| BenchError::Run(format!("the Flink job's RESULT line `{line}`: {e}")))
}

impl FlinkResult {
    /// As the suite's figures: job time is the running time when the log gave it.
    pub fn into_figures(self, workload: Workload) -> RunFigures {
        // Both fall-backs count setup against Flink: say so rather than skew quietly.
        if self.running_seconds.is_none() {
            eprintln!("warning: Flink {workload}: no running time in its log; records/s include planning and deployment");
        }
        if !self.cpu_from_running {
            eprintln!("warning: Flink {workload}: RUNNING not seen in time; its CPU seconds include planning");
        }
        RunFigures {
            workload,
            engine: Engine::Flink,
            parallelism: self.parallelism,
            records: self.records,
            records_out: None,
            seconds: self.running_seconds.unwrap_or(self.job_wall_seconds),
            cpu_seconds: self.cpu_seconds,
            cpu_seconds_with_setup: self.cpu_seconds_with_planning,
            peak_rss_mib: self.peak_rss_mib.unwrap_or(f64::NAN),
            checkpoints: self.checkpoints_completed,
            checkpoint_mean_ms: self.checkpoint_mean_ms,
            machine_busy_before: None,
        }
    }
}

/// What a Flink job reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlinkInput {
    /// The part files of a directory.
    Files(PathBuf),
    /// The Nexmark events made in memory by the SQL statements (a JSON list) in this file,
    /// from [`flink_generator_sql`](crate::nexmark::generator::flink_generator_sql).
    Generator(PathBuf),
}

impl FlinkInput {
    fn args(&self) -> [&std::ffi::OsStr; 2] {
        match self {
            FlinkInput::Files(dir) => ["--input".as_ref(), dir.as_os_str()],
            FlinkInput::Generator(sql) => ["--generator-sql".as_ref(), sql.as_os_str()],
        }
    }
}

/// The last lines of a child's stderr, for an error message.
fn tail(stderr: &[u8], lines: usize) -> String {
    let stderr = String::from_utf8_lossy(stderr);
    let tail: Vec<_> = stderr.lines().rev().take(lines).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// Runs Flink jobs with a given Python (the venv's) and script.
#[derive(Debug, Clone)]
pub struct FlinkRunner {
    /// The PyFlink virtual environment's python.
    pub python: PathBuf,
    /// `bench/flink/flink_job.py`.
    pub script: PathBuf,
}

impl FlinkRunner {
    /// Installs Flink if missing (`bench/flink/install.sh`, idempotent) and returns a runner.
    pub fn install(bench_dir: &Path, venv: &Path) -> Result<Self, BenchError> {
        let installer = bench_dir.join("flink/install.sh");
        // Its progress (a first install takes a minute) goes straight to our stderr.
        let output = Command::new(&installer)
            .arg(venv)
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(BenchError::io("running", &installer))?;
        if !output.status.success() {
            return Err(BenchError::Run(format!(
                "{} failed ({}); its messages are above",
                installer.display(),
                output.status,
            )));
        }
        let python = String::from_utf8_lossy(&output.stdout).trim().to_string();
        Ok(Self {
            python: PathBuf::from(python),
            script: bench_dir.join("flink/flink_job.py"),
        })
    }

    /// Counts, in a Flink batch job, the records `workload` emits over `input` (for keyed,
    /// the updates: one per input row), to check that Flink computes what Weir does.
    pub fn count_output(&self, workload: Workload, input: &FlinkInput) -> Result<u64, BenchError> {
        let output = Command::new(&self.python)
            .arg(&self.script)
            .args(["--workload", workload.name(), "--verify", "--records", "0"])
            .args(input.args())
            .arg("--checkpoint-dir")
            .arg(std::env::temp_dir().join("weir-vs-flink-verify"))
            .output()
            .map_err(BenchError::io("running", &self.python))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let line = stdout.lines().find_map(|l| l.strip_prefix("VERIFY "));
        let parsed = line.and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok());
        parsed
            .as_ref()
            .and_then(|v| v["records_out"].as_u64())
            .ok_or_else(|| {
                BenchError::Run(format!(
                    "the Flink verification of {workload} ({}) printed no VERIFY count: {}",
                    output.status,
                    tail(&output.stderr, 10)
                ))
            })
    }

    /// Writes, in a Flink batch job at `parallelism`, the rows `workload` computes over
    /// `input` as JSON lines into `out_dir` (for q12, each bidder's total; see
    /// `flink_job.py`'s `VERIFY_QUERIES`), to compare them with Weir's.
    pub fn write_output(
        &self,
        workload: Workload,
        input: &FlinkInput,
        parallelism: u32,
        out_dir: &Path,
    ) -> Result<(), BenchError> {
        let output = Command::new(&self.python)
            .arg(&self.script)
            .args(["--workload", workload.name(), "--verify", "--records", "0"])
            .args(["--parallelism", &parallelism.to_string()])
            .args(input.args())
            .arg("--output")
            .arg(out_dir)
            .arg("--checkpoint-dir")
            .arg(std::env::temp_dir().join("weir-vs-flink-verify"))
            .output()
            .map_err(BenchError::io("running", &self.python))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() || !stdout.lines().any(|l| l.starts_with("VERIFY ")) {
            return Err(BenchError::Run(format!(
                "the Flink batch job writing {workload}'s rows failed ({}): {}",
                output.status,
                tail(&output.stderr, 15)
            )));
        }
        Ok(())
    }

    /// Runs `workload` over `input` (holding `records` records) at `parallelism`, with its
    /// checkpoints and log under `work_dir`.
    pub fn run(
        &self,
        workload: Workload,
        input: &FlinkInput,
        records: u64,
        parallelism: u32,
        work_dir: &Path,
    ) -> Result<RunFigures, BenchError> {
        let log_dir = work_dir.join("log");
        std::fs::create_dir_all(&log_dir).map_err(BenchError::io("creating", &log_dir))?;
        let output = Command::new(&self.python)
            .arg(&self.script)
            .args(["--workload", workload.name()])
            .args(input.args())
            .args(["--records", &records.to_string()])
            .args(["--parallelism", &parallelism.to_string()])
            .arg("--checkpoint-dir")
            .arg(work_dir.join("checkpoints"))
            .env("FLINK_LOG_DIR", &log_dir)
            .output()
            .map_err(BenchError::io("running", &self.python))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(BenchError::Run(format!(
                "Flink job {workload} p{parallelism} failed ({}); its log is under {}:\n{}",
                output.status,
                log_dir.display(),
                tail(&output.stderr, 15)
            )));
        }
        Ok(parse_result(&stdout)?.into_figures(workload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_line_is_found_among_other_output() {
        let stdout = "Picked up JAVA_TOOL_OPTIONS\nRESULT {\"workload\": \"keyed\", \"parallelism\": 2, \"records\": 100, \"job_wall_seconds\": 3.5, \"running_seconds\": 2.0, \"cpu_seconds\": 7.0, \"cpu_from_running\": true, \"peak_rss_mib\": 4000.5, \"checkpoints_completed\": 2, \"checkpoint_mean_ms\": 150.0, \"flink_log\": \"/x\"}\n";
        let figures = parse_result(stdout).unwrap().into_figures(Workload::Keyed);
        assert_eq!(figures.seconds, 2.0);
        assert_eq!(figures.records_per_second(), 50.0);
        assert_eq!((figures.checkpoints, figures.peak_rss_mib), (2, 4000.5));
    }

    #[test]
    fn missing_or_broken_result_is_an_error_naming_it() {
        assert!(parse_result("Traceback ...\n")
            .unwrap_err()
            .to_string()
            .contains("no RESULT line"));
        let err = parse_result("RESULT {\"workload\": 1}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("RESULT line"), "{err}");
    }
}
