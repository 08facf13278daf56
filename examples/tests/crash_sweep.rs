//! Crash-point sweeps of the census job: a run is killed (SIGKILL) right before its N-th
//! durable file operation — every create, rename, unlink, mkdir, rmdir and fsync under its
//! work directory counts — then recovered with `--resume` until it finishes, and the
//! committed output must be exactly what an uninterrupted run gives. Random kills miss
//! windows that last a microsecond; this hits every one of them.
//!
//! Scenarios, each for the two-phase-commit file sink and the write-ahead-log sink:
//! - `fresh`: crash points anywhere in a fresh run;
//! - `resumed`: anywhere in a run that resumes an earlier crashed one;
//! - `rescaled`: anywhere in a fresh run at parallelism 2, recovered at parallelism 3;
//! - `stop_with_savepoint`: from the stop-with-savepoint's first operation to the end of the
//!   run, after which `--resume` continues from the savepoint;
//! - `bounded_end`: from the final checkpoint of a bounded run through its clean-up;
//! - `second_kill`: anywhere in a fresh run, and the recovery is killed once more;
//! - `unaligned`: anywhere in a fresh run (and one whose recovery is killed again) with
//!   unaligned checkpoints under backpressure, whose checkpoints store records in flight.
//!
//! CI runs a sample of each window. `WEIR_CRASH_SWEEP=full` tries every point (see
//! `scripts/crash-sweep.sh`), `WEIR_CRASH_SWEEP=n` n of them, and `WEIR_CRASH_POINT=n`
//! replays one. Each test prints `sweep <name>: …` with its figures.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use common::{describe, small_data, Census};
use weir_testkit::crash_points::{self, absolute, inject, read_log, Fault, FileOperation};
use weir_testkit::Rng;

/// Rows taken from each shipped census file: small enough for thousands of runs, large
/// enough for a dozen checkpoints per run.
const ROWS_PER_FILE: usize = 500;
const RATE: u32 = 5000;
const CHECKPOINT_INTERVAL_MS: u32 = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Fresh,
    Resumed,
    Rescaled,
    StopWithSavepoint,
    BoundedEnd,
    SecondKill,
}

fn input_rows() -> u64 {
    4 * ROWS_PER_FILE as u64
}

struct Sweep {
    name: String,
    sink: &'static str,
    kind: Kind,
    data: PathBuf,
    /// Options of every run (unaligned checkpoints under backpressure, say).
    extra: &'static [&'static str],
}

/// A census command on `work` over `data`.
fn census(
    work: &Path,
    data: &Path,
    sink: &'static str,
    resume: bool,
    parallelism: u32,
    extra: &[&str],
) -> Command {
    Census {
        work: work.to_path_buf(),
        data: data.to_path_buf(),
        sink,
        rate: RATE,
        interval_ms: CHECKPOINT_INTERVAL_MS,
    }
    .command(resume, parallelism, extra)
}

impl Sweep {
    /// The swept run of a trial in `work`.
    fn swept_run(&self, work: &Path) -> Command {
        let resume = self.kind == Kind::Resumed;
        let mut command = census(work, &self.data, self.sink, resume, 2, self.extra);
        if self.kind == Kind::StopWithSavepoint {
            command.args(["--stop-after-rows", &(input_rows() / 2).to_string()]);
        }
        command
    }

    /// What precedes the swept run: for `resumed`, a run killed halfway through its file
    /// operations.
    fn prepare(&self, work: &Path, total: u64) -> Result<(), String> {
        if self.kind != Kind::Resumed {
            return Ok(());
        }
        let mut first = census(work, &self.data, self.sink, false, 2, self.extra);
        inject(&mut first, work, Fault::KillAt(total / 2), None);
        first.output().map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The operations of an undisturbed swept run.
    fn count(&self) -> Vec<FileOperation> {
        let dir = tempfile::tempdir().unwrap();
        let work = absolute(dir.path()).join("work");
        std::fs::create_dir_all(&work).unwrap();
        let log = absolute(dir.path()).join("ops.log");
        if self.kind == Kind::Resumed {
            let probe = tempfile::tempdir().unwrap();
            let probe_work = absolute(probe.path()).join("work");
            std::fs::create_dir_all(&probe_work).unwrap();
            let probe_log = absolute(probe.path()).join("ops.log");
            let mut fresh = census(&probe_work, &self.data, self.sink, false, 2, self.extra);
            inject(&mut fresh, &probe_work, Fault::None, Some(&probe_log));
            fresh.output().unwrap();
            self.prepare(&work, read_log(&probe_log).len() as u64)
                .unwrap();
        }
        let mut run = self.swept_run(&work);
        inject(&mut run, &work, Fault::None, Some(&log));
        let output = run.output().unwrap();
        assert!(
            output.status.success(),
            "{}: the undisturbed run failed: {}",
            self.name,
            describe(&output)
        );
        read_log(&log)
    }

    /// The crash points worth trying, given an undisturbed run's operations.
    fn window(&self, ops: &[FileOperation]) -> std::ops::RangeInclusive<u64> {
        let last = ops.len() as u64;
        let from = match self.kind {
            Kind::StopWithSavepoint => ops
                .iter()
                .find(|o| o.path.contains("/savepoint-"))
                .map_or(1, |o| o.n),
            Kind::BoundedEnd => ops
                .iter()
                .rev()
                .find(|o| o.op == "mkdir" && o.path.contains("/checkpoints/census/chk-"))
                .map_or(1, |o| o.n),
            _ => 1,
        };
        from..=last
    }

    /// One trial: crash at `point`, recover, check.
    fn trial(&self, point: u64, total: u64, seed: u64) -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let work = absolute(dir.path()).join("work");
        std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
        self.prepare(&work, total)?;
        let mut swept = self.swept_run(&work);
        inject(&mut swept, &work, Fault::KillAt(point), None);
        swept.output().map_err(|e| e.to_string())?;
        let recovery_parallelism = if self.kind == Kind::Rescaled { 3 } else { 2 };
        if self.kind == Kind::SecondKill {
            let mut rng = Rng(seed ^ point);
            let mut recovery = census(&work, &self.data, self.sink, true, 2, self.extra);
            let again = 1 + rng.below(total.max(2) / 2);
            inject(&mut recovery, &work, Fault::KillAt(again), None);
            recovery.output().map_err(|e| e.to_string())?;
        }
        let mut last = None;
        for _ in 0..3 {
            let output = census(
                &work,
                &self.data,
                self.sink,
                true,
                recovery_parallelism,
                self.extra,
            )
            .output()
            .map_err(|e| e.to_string())?;
            if output.status.success() {
                last = None;
                break;
            }
            last = Some(describe(&output));
        }
        if let Some(failure) = last {
            return Err(format!("recovery never finished: {failure}"));
        }
        Census {
            work: work.clone(),
            data: self.data.clone(),
            sink: self.sink,
            rate: RATE,
            interval_ms: CHECKPOINT_INTERVAL_MS,
        }
        .verify_exact()
    }

    fn run(&self, sample: usize) {
        let ops = self.count();
        let total = ops.len() as u64;
        let window = self.window(&ops);
        let seed = weir_testkit::seeds(1)[0];
        let points = crash_points::points(window.clone(), sample, seed);
        let next = AtomicUsize::new(0);
        let failures: Mutex<Vec<String>> = Mutex::default();
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&point) = points.get(i) else {
                        return;
                    };
                    if let Err(problem) = self.trial(point, total, seed) {
                        let op = ops
                            .iter()
                            .find(|o| o.n == point)
                            .map_or(String::new(), |o| format!(" ({} {})", o.op, o.path));
                        failures.lock().unwrap().push(format!(
                            "crash point {point}{op}: {problem}\n  replay: WEIR_CRASH_POINT={point} WEIR_SEED={seed} cargo nextest run -p weir-examples --test crash_sweep {}",
                            self.name
                        ));
                    }
                });
            }
        });
        let failures = failures.into_inner().unwrap();
        println!(
            "sweep {}: {} trials over crash points {}..={} of {} file operations, {} violations",
            self.name,
            points.len(),
            window.start(),
            window.end(),
            total,
            failures.len()
        );
        assert!(
            failures.is_empty(),
            "{}: {} of {} crash points broke exactly-once:\n{}",
            self.name,
            failures.len(),
            points.len(),
            failures.join("\n")
        );
    }
}

fn sweep(name: &str, sink: &'static str, kind: Kind, sample: usize) {
    sweep_with(name, sink, kind, sample, &[]);
}

fn sweep_with(
    name: &str,
    sink: &'static str,
    kind: Kind,
    sample: usize,
    extra: &'static [&'static str],
) {
    let dir = tempfile::tempdir().unwrap();
    let sweep = Sweep {
        name: name.to_string(),
        sink,
        kind,
        data: small_data(&absolute(dir.path()), ROWS_PER_FILE),
        extra,
    };
    sweep.run(sample);
}

/// Unaligned checkpoints under backpressure: the aggregation pauses after each row, so
/// checkpoints store records in flight, which the recoveries replay.
const UNALIGNED: &[&str] = &["--unaligned", "--slow-aggregation-us", "1000"];

#[test]
fn fresh_2pc() {
    sweep("fresh_2pc", "2pc", Kind::Fresh, 10);
}

#[test]
fn fresh_wal() {
    sweep("fresh_wal", "wal", Kind::Fresh, 10);
}

#[test]
fn resumed_2pc() {
    sweep("resumed_2pc", "2pc", Kind::Resumed, 6);
}

#[test]
fn resumed_wal() {
    sweep("resumed_wal", "wal", Kind::Resumed, 6);
}

#[test]
fn rescaled_2pc() {
    sweep("rescaled_2pc", "2pc", Kind::Rescaled, 6);
}

#[test]
fn rescaled_wal() {
    sweep("rescaled_wal", "wal", Kind::Rescaled, 6);
}

#[test]
fn stop_with_savepoint_2pc() {
    sweep(
        "stop_with_savepoint_2pc",
        "2pc",
        Kind::StopWithSavepoint,
        10,
    );
}

#[test]
fn stop_with_savepoint_wal() {
    sweep(
        "stop_with_savepoint_wal",
        "wal",
        Kind::StopWithSavepoint,
        10,
    );
}

#[test]
fn bounded_end_2pc() {
    sweep("bounded_end_2pc", "2pc", Kind::BoundedEnd, 12);
}

#[test]
fn bounded_end_wal() {
    sweep("bounded_end_wal", "wal", Kind::BoundedEnd, 12);
}

#[test]
fn second_kill_2pc() {
    sweep("second_kill_2pc", "2pc", Kind::SecondKill, 6);
}

#[test]
fn second_kill_wal() {
    sweep("second_kill_wal", "wal", Kind::SecondKill, 6);
}

#[test]
fn unaligned_2pc() {
    sweep_with("unaligned_2pc", "2pc", Kind::Fresh, 8, UNALIGNED);
}

// Not rescaled: under backpressure one subtask's input often ends well before the other's,
// and a checkpoint taken in between cannot be restored at another parallelism (refused with
// a clear error); `unaligned_checkpoints.rs` rescales 2 -> 3 -> 1 with records in flight.
#[test]
fn unaligned_second_kill_wal() {
    sweep_with(
        "unaligned_second_kill_wal",
        "wal",
        Kind::SecondKill,
        6,
        UNALIGNED,
    );
}
