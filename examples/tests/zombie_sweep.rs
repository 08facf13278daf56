//! Zombie sweeps of the census job: a process is stopped (SIGSTOP) right before its N-th
//! durable file operation — every create, rename, link, unlink, mkdir, rmdir and fsync under
//! its work directory counts — its lock file is removed (as a careless operator or a cleaning
//! script would), a replacement runs the job to its end, and then the stopped process
//! continues (SIGCONT). Whatever it does then, the committed output must be exactly what one
//! uninterrupted run gives, and a later `--resume` must still work: a process that checked
//! that it holds the job and stalled before it acted must not act on that check. (Hidden,
//! uncommitted files a fenced zombie leaves are counted, not failed: no reader sees them.)
//!
//! Scenarios, each for the two-phase-commit file sink and the write-ahead-log sink:
//! - `resumed`: the replacement resumes the job (`--resume`) from what the zombie left;
//! - `started_over`: the replacement starts the job over (census without `--resume` resets
//!   it), while the zombie is anywhere in a run of its own;
//! - `on_s3`: `resumed` with the checkpoints and the job record on the S3-compatible server
//!   (`scripts/s3-server.sh`), which has no lock: the stop points are the output's file
//!   operations, and only the record's compare-and-swap tells the zombie it lost the job;
//! - `on_s3_requests`: the same, stopped right before the N-th request that writes object
//!   storage instead — the request is held and reaches storage only after the zombie
//!   continues ([`StorageStops`]).
//!
//! CI runs a sample of points; `WEIR_CRASH_SWEEP=full` tries every one
//! (`scripts/crash-sweep.sh`), `WEIR_CRASH_SWEEP=n` n of them, and `WEIR_CRASH_POINT=n`
//! replays one. Each test prints `zombie sweep <name>: …` with its figures; the committed
//! files are read back with plain file reads and checked against counts computed from the
//! input, not by the sink's code.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{describe, small_data, Census};
use weir_testkit::crash_points::{self, absolute, inject, wait_stopped, Fault, FileOperation};
use weir_testkit::storage_stops::StorageStops;

const ROWS_PER_FILE: usize = 400;
const RATE: u32 = 5000;
const CHECKPOINT_INTERVAL_MS: u32 = 40;
/// How long a stopped or finishing process may take before the trial is called hung.
const HANG: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replacement {
    /// `--resume`.
    Resume,
    /// A fresh start (a reset, then a run from empty state).
    StartOver,
}

struct Sweep {
    name: String,
    sink: &'static str,
    replacement: Replacement,
    data: PathBuf,
    /// Checkpoints on object storage under this URL (a fresh prefix per run), if set.
    s3: Option<String>,
    /// What the stop points count.
    stops: Stops,
}

/// What a sweep's stop points count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stops {
    /// Durable file operations under the work directory.
    FileOperations,
    /// Requests that write object storage.
    StorageWrites,
}

/// One durable operation of a counting run: its number and what it touched.
struct Operation {
    n: u64,
    /// Whether it is the first operation of a job record write.
    starts_record_write: bool,
}

/// What one trial saw.
#[derive(Debug, Default)]
struct Outcome {
    /// The zombie ended before it reached the point (nothing to sweep there).
    finished_first: bool,
    /// The zombie, woken, ended with an error (fenced, or refused).
    zombie_failed: bool,
    /// Uncommitted (hidden) files the fenced zombie left in the output directory.
    litter: usize,
    /// The replacement was refused, saying why (the zombie held the job, or a reset it
    /// recorded had not yet removed the old output).
    replacement_refused: bool,
}

/// Refusals a replacement may meet while the zombie is stopped: each names what is in the
/// way and changes nothing.
const CLEAN_REFUSALS: &[&str] = &[
    "locked by another process",
    "committed output of this sink exists already",
];

impl Sweep {
    fn census(&self, work: &Path) -> Census {
        Census {
            work: work.to_path_buf(),
            data: self.data.clone(),
            sink: self.sink,
            rate: RATE,
            interval_ms: CHECKPOINT_INTERVAL_MS,
        }
    }

    /// The checkpoint-storage flags of one run (`trial`: a fresh prefix for it).
    fn storage_args(&self, trial: &str) -> Vec<String> {
        let Some(base) = &self.s3 else {
            return Vec::new();
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        vec![
            "--checkpoint-storage".into(),
            format!(
                "{base}/{}-{trial}-{}-{nanos}",
                self.name,
                std::process::id()
            ),
            "--no-local-recovery".into(),
        ]
    }

    /// The durable operations of an undisturbed fresh run.
    fn count(&self) -> Vec<Operation> {
        let dir = tempfile::tempdir().unwrap();
        let work = absolute(dir.path()).join("work");
        std::fs::create_dir_all(&work).unwrap();
        let extra = self.storage_args("count");
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let mut command = self.census(&work).command(false, 2, &extra);
        if self.stops == Stops::StorageWrites {
            let stops = StorageStops::to_test_server(None);
            stops.route(&mut command);
            let output = command.output().expect("cannot start the counting run");
            assert!(
                output.status.success(),
                "the counting run failed: {}",
                describe(&output)
            );
            return stops
                .requests()
                .into_iter()
                .map(|r| Operation {
                    n: r.n,
                    starts_record_write: r.method == "PUT" && r.target.contains("/_job_record"),
                })
                .collect();
        }
        let log = absolute(dir.path()).join("ops.log");
        crash_points::count_operations(command, &work, &log)
            .into_iter()
            .map(|o: FileOperation| Operation {
                n: o.n,
                starts_record_write: o.op == "create" && o.path.contains("/_job_record/."),
            })
            .collect()
    }

    /// One trial: the zombie stopped at `point`, its lock removed, the replacement run to
    /// its end, the zombie continued, a last `--resume`, the output checked.
    fn trial(&self, point: u64) -> Result<Outcome, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let work = absolute(dir.path()).join("work");
        std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
        let census = self.census(&work);
        let extra = self.storage_args(&point.to_string());
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let mut zombie = census.command(false, 2, &extra);
        let storage_stops = match self.stops {
            Stops::FileOperations => {
                inject(&mut zombie, &work, Fault::StopAt(point), None);
                None
            }
            Stops::StorageWrites => {
                let stops = StorageStops::to_test_server(Some(point));
                stops.route(&mut zombie);
                Some(stops)
            }
        };
        let mut zombie = zombie.spawn().map_err(|e| e.to_string())?;
        let mut outcome = Outcome::default();
        let stopped = match &storage_stops {
            None => wait_stopped(&mut zombie, HANG),
            Some(stops) => {
                stops.watch(zombie.id());
                stops.wait_stopped(HANG, || matches!(zombie.try_wait(), Ok(Some(_))))
            }
        };
        if !stopped {
            let output = zombie.wait_with_output().map_err(|e| e.to_string())?;
            if !output.status.success() {
                return Err(format!(
                    "the run failed before point {point}: {}",
                    describe(&output)
                ));
            }
            outcome.finished_first = true;
            return census.verify_committed().map(|()| outcome);
        }
        // The stalled process loses its lock file; the replacement takes the job.
        let lock = census.job_dir().join("_lock");
        let _ = std::fs::remove_file(&lock);
        let replacement = census
            .command(self.replacement == Replacement::Resume, 2, &extra)
            .output()
            .map_err(|e| e.to_string())?;
        let replaced = replacement.status.success();
        if let Some(stops) = &storage_stops {
            stops.release();
        }
        crash_points::resume(&zombie);
        let (status, stderr) = weir_testkit::wait_with_stderr(&mut zombie, HANG, "the zombie");
        outcome.zombie_failed = !status.success();
        if !replaced {
            let said = String::from_utf8_lossy(&replacement.stderr);
            if !CLEAN_REFUSALS.iter().any(|r| said.contains(r)) {
                return Err(format!(
                    "the replacement failed: {}",
                    describe(&replacement)
                ));
            }
            outcome.replacement_refused = true;
        }
        // Whatever the zombie did, the job is not stranded: a resume works.
        let last = census
            .command(true, 2, &extra)
            .output()
            .map_err(|e| e.to_string())?;
        if !last.status.success() {
            return Err(format!(
                "a resume after the zombie failed: {}\nthe zombie ({status}) said:\n{}",
                describe(&last),
                tail(&stderr)
            ));
        }
        census.verify_committed().map_err(|problem| {
            format!("{problem}\nthe zombie ({status}) said:\n{}", tail(&stderr))
        })?;
        outcome.litter = common::hidden_files(&census.output()).len();
        Ok(outcome)
    }

    fn run(&self, sample: usize) {
        let ops = self.count();
        let total = ops.len() as u64;
        let seed = weir_testkit::seeds(1)[0];
        let mut points = crash_points::points(1..=total, sample, seed);
        // A process that checked its token stalls best right before it writes the job
        // record: the first operation of every record write (its temporary file) is tried
        // too, a sample of them unless the whole sweep is asked for.
        if std::env::var("WEIR_CRASH_POINT").is_err() {
            let record_writes: Vec<u64> = ops
                .iter()
                .filter(|o| o.starts_record_write)
                .map(|o| o.n)
                .collect();
            let step = (record_writes.len() / sample.max(1)).max(1);
            let full = std::env::var("WEIR_CRASH_SWEEP").as_deref() == Ok("full");
            points.extend(record_writes.iter().step_by(if full { 1 } else { step }));
            points.sort_unstable();
            points.dedup();
        }
        let (outcomes, failures) = crash_points::run_trials(
            &points,
            |point| self.trial(point),
            |point| {
                format!(
                    "stop point {point} (replay: WEIR_CRASH_POINT={point} cargo nextest run -p weir-examples --test zombie_sweep {})",
                    self.name
                )
            },
        );
        println!(
            "zombie sweep {}: {} trials over stop points 1..={total}, record writes included ({} \
             ended before their point, \
             {} replacements refused cleanly, {} zombies failed when woken, {} left uncommitted \
             files behind), {} violations",
            self.name,
            points.len(),
            outcomes.iter().filter(|o| o.finished_first).count(),
            outcomes.iter().filter(|o| o.replacement_refused).count(),
            outcomes.iter().filter(|o| o.zombie_failed).count(),
            outcomes.iter().filter(|o| o.litter > 0).count(),
            failures.len()
        );
        crash_points::assert_no_violations(&self.name, points.len(), &failures);
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

fn sweep(name: &str, sink: &'static str, replacement: Replacement, sample: usize) {
    sweep_on(name, sink, replacement, sample, None, Stops::FileOperations);
}

fn sweep_on(
    name: &str,
    sink: &'static str,
    replacement: Replacement,
    sample: usize,
    s3: Option<String>,
    stops: Stops,
) {
    let dir = tempfile::tempdir().unwrap();
    Sweep {
        name: name.to_string(),
        sink,
        replacement,
        data: small_data(&absolute(dir.path()), ROWS_PER_FILE),
        s3,
        stops,
    }
    .run(sample);
}

/// The test bucket of the S3-compatible server.
fn s3_bucket() -> String {
    std::env::var("WEIR_S3_URL").unwrap_or_else(|_| {
        panic!("WEIR_S3_URL is not set: run through scripts/test.sh, or `eval $(scripts/s3-server.sh start)`")
    })
}

#[test]
fn resumed_2pc() {
    sweep("resumed_2pc", "2pc", Replacement::Resume, 8);
}

#[test]
fn resumed_wal() {
    sweep("resumed_wal", "wal", Replacement::Resume, 8);
}

#[test]
fn started_over_2pc() {
    sweep("started_over_2pc", "2pc", Replacement::StartOver, 6);
}

#[test]
fn started_over_wal() {
    sweep("started_over_wal", "wal", Replacement::StartOver, 6);
}

#[test]
fn resumed_2pc_on_s3() {
    sweep_on(
        "resumed_2pc_on_s3",
        "2pc",
        Replacement::Resume,
        6,
        Some(s3_bucket()),
        Stops::FileOperations,
    );
}

#[test]
fn resumed_wal_on_s3() {
    sweep_on(
        "resumed_wal_on_s3",
        "wal",
        Replacement::Resume,
        6,
        Some(s3_bucket()),
        Stops::FileOperations,
    );
}

#[test]
fn resumed_2pc_on_s3_requests() {
    sweep_on(
        "resumed_2pc_on_s3_requests",
        "2pc",
        Replacement::Resume,
        4,
        Some(s3_bucket()),
        Stops::StorageWrites,
    );
}

#[test]
fn resumed_wal_on_s3_requests() {
    sweep_on(
        "resumed_wal_on_s3_requests",
        "wal",
        Replacement::Resume,
        4,
        Some(s3_bucket()),
        Stops::StorageWrites,
    );
}
