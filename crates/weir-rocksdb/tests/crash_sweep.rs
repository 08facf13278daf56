//! Crash-point sweeps of the large-state job with incremental RocksDB checkpoints: a run is
//! killed (SIGKILL) right before its N-th durable file operation under its work directory —
//! uploads of shared files, checkpoint metadata, the job record, deletions of released
//! shared files and of subsumed checkpoints — then resumed until it finishes. The job
//! checks its own committed output (one line per key, full count, intact payload), and
//! nothing of its checkpoints may be left once it finished.
//!
//! `WEIR_CRASH_SWEEP=full` tries every point, `WEIR_CRASH_SWEEP=n` a sample of n, and
//! `WEIR_CRASH_POINT=n` replays one; CI runs a sample.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use weir_testkit::crash_points::{self, absolute, inject, read_log, Fault, FileOperation};

const JOB: &str = "large-state";

/// The job on `work` (watched) with its databases under `local` (not watched: RocksDB's
/// own files are its business, not checkpoint storage's).
fn job(work: &Path, local: &Path, parallelism: u32, resume: bool) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir-large-state"));
    command
        .args(["--state-backend", "rocksdb", "--incremental"])
        .args(["--keys", "6000", "--rounds", "3", "--payload-bytes", "64"])
        .args(["--rate", "12000", "--checkpoint-interval-ms", "60"])
        .args(["--parallelism", &parallelism.to_string()])
        .arg("--work-dir")
        .arg(work)
        .arg("--local-dir")
        .arg(local)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if resume {
        command.arg("--resume");
    }
    command
}

fn leftovers(work: &Path) -> Vec<String> {
    let dir = work.join("checkpoints").join(JOB);
    let mut left = Vec::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "shared" {
            for file in std::fs::read_dir(entry.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                left.push(format!("shared/{}", file.file_name().to_string_lossy()));
            }
        } else if name.starts_with("chk-") {
            left.push(name);
        }
    }
    left
}

struct Sweep {
    name: &'static str,
    recovery_parallelism: u32,
}

impl Sweep {
    fn count(&self) -> Vec<FileOperation> {
        let dir = tempfile::tempdir().unwrap();
        let work = absolute(dir.path()).join("work");
        std::fs::create_dir_all(&work).unwrap();
        let log = absolute(dir.path()).join("ops.log");
        let mut run = job(&work, &dir.path().join("local"), 2, false);
        inject(&mut run, &work, Fault::None, Some(&log));
        let output = run.output().unwrap();
        assert!(
            output.status.success(),
            "{}: the undisturbed run failed: {}",
            self.name,
            String::from_utf8_lossy(&output.stderr)
        );
        read_log(&log)
    }

    fn trial(&self, point: u64) -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let work = absolute(dir.path()).join("work");
        let local = dir.path().join("local");
        std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
        let mut swept = job(&work, &local, 2, false);
        inject(&mut swept, &work, Fault::KillAt(point), None);
        swept.output().map_err(|e| e.to_string())?;
        let mut last = None;
        for _ in 0..3 {
            let output = job(&work, &local, self.recovery_parallelism, true)
                .output()
                .map_err(|e| e.to_string())?;
            if output.status.success() {
                last = None;
                break;
            }
            last = Some(String::from_utf8_lossy(&output.stderr).into_owned());
        }
        if let Some(failure) = last {
            return Err(format!("recovery never finished: {failure}"));
        }
        let left = leftovers(&work);
        if !left.is_empty() {
            return Err(format!("the finished job left {left:?}"));
        }
        Ok(())
    }

    fn run(&self, sample: usize) {
        let ops = self.count();
        let total = ops.len() as u64;
        let seed = weir_testkit::seeds(1)[0];
        let points = crash_points::points(1..=total, sample, seed);
        let next = AtomicUsize::new(0);
        let failures: Mutex<Vec<String>> = Mutex::default();
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&point) = points.get(i) else {
                        return;
                    };
                    if let Err(problem) = self.trial(point) {
                        let op = ops
                            .iter()
                            .find(|o| o.n == point)
                            .map_or(String::new(), |o| format!(" ({} {})", o.op, o.path));
                        failures.lock().unwrap_or_else(|p| p.into_inner()).push(format!(
                            "crash point {point}{op}: {problem}\n  replay: WEIR_CRASH_POINT={point} \
                             WEIR_SEED={seed} cargo nextest run -p weir-rocksdb --test crash_sweep {}",
                            self.name
                        ));
                    }
                });
            }
        });
        let failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
        let uploads = ops.iter().filter(|o| o.path.contains("/shared/")).count();
        println!(
            "sweep {}: {} trials over {} file operations ({} in the shared location), {} violations",
            self.name,
            points.len(),
            total,
            uploads,
            failures.len()
        );
        assert!(uploads > 0, "the run never uploaded a shared file");
        assert!(
            failures.is_empty(),
            "{}: {} of {} crash points broke exactly-once or left files:\n{}",
            self.name,
            failures.len(),
            points.len(),
            failures.join("\n")
        );
    }
}

#[test]
fn fresh() {
    Sweep {
        name: "fresh",
        recovery_parallelism: 2,
    }
    .run(8);
}

#[test]
fn rescaled() {
    Sweep {
        name: "rescaled",
        recovery_parallelism: 3,
    }
    .run(8);
}
