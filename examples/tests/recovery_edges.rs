//! The edges of recovery, with the census job as a real process: damaged and deleted
//! checkpoints after a crash, a resume with nothing to resume from, stop-with-savepoint, and
//! two processes on one job. Each test reproduces one way an earlier Weir committed output
//! twice or lost it (see issue 12), for both exactly-once file sinks.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use common::{describe, small_data, Census};
use weir::checkpoint::job_record::{JobRecord, RecordedCheckpoint};
use weir_testkit::crash_points::{self, absolute};
use weir_testkit::{seeds, wait_bounded, wait_with_stderr, Rng};

const SINKS: [&str; 2] = ["2pc", "wal"];

fn setup(dir: &Path, sink: &'static str) -> Census {
    let root = absolute(dir);
    Census {
        work: root.join("work"),
        data: small_data(&root, 1500),
        sink,
        rate: 3000,
        interval_ms: 100,
    }
}

/// The job record as the job left it.
fn record(census: &Census) -> JobRecord {
    let file = weir_testkit::job_record_file(&census.job_dir()).expect("a job record");
    JobRecord::decode(&std::fs::read(file).expect("job record")).expect("readable job record")
}

/// The newest restore point, its location made a full path (the record names it relative to
/// the job's directory).
fn newest(census: &Census) -> RecordedCheckpoint {
    let mut newest = record(census)
        .completed
        .last()
        .cloned()
        .expect("a restore point");
    newest.location = census
        .job_dir()
        .join(&newest.location)
        .display()
        .to_string();
    newest
}

/// Runs the job fresh and kills it (SIGKILL) once at least `checkpoints` checkpoints are
/// recorded (so that sinks have committed output), before it ends.
fn crash_midway(census: &Census, extra: &[&str], checkpoints: usize) {
    // The end of the input waits for a file never created: the job cannot finish before
    // the kill, however slow the machine.
    let never = census.work.join("never-released");
    let never = never.to_string_lossy();
    let mut args = extra.to_vec();
    args.extend(["--hold-end-until", &never]);
    let mut child = census.command(false, 2, &args).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let recorded = weir_testkit::job_record_file(&census.job_dir())
            .and_then(|file| std::fs::read(file).ok())
            .and_then(|b| JobRecord::decode(&b).ok())
            .map_or(0, |r| r.notified_through);
        if recorded >= checkpoints as u64 {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the job ended before it could be killed"
        );
        assert!(Instant::now() < deadline, "no checkpoint completed");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    /// A byte flipped in each keyed state file.
    FlipStateBytes,
    /// `_metadata` deleted.
    DeleteMetadata,
    /// The whole checkpoint directory deleted.
    DeleteDirectory,
}

/// Damages checkpoint directory `dir`; returns the path a refusal must name.
fn damage(dir: &Path, how: Damage) -> String {
    match how {
        Damage::FlipStateBytes => {
            let mut named = String::new();
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "keyed") {
                    let mut bytes = std::fs::read(&path).unwrap();
                    let middle = bytes.len() / 2;
                    bytes[middle] ^= 0x40;
                    std::fs::write(&path, bytes).unwrap();
                    named = format!("{}/", dir.display());
                }
            }
            assert!(!named.is_empty(), "no state file in {}", dir.display());
            // Every state file is damaged; the refusal names the first one it read.
            named
        }
        Damage::DeleteMetadata => {
            std::fs::remove_file(dir.join("_metadata")).unwrap();
            format!("{}/_metadata", dir.display())
        }
        Damage::DeleteDirectory => {
            std::fs::remove_dir_all(dir).unwrap();
            format!("{}/_metadata", dir.display())
        }
    }
}

const DAMAGES: [Damage; 3] = [
    Damage::FlipStateBytes,
    Damage::DeleteMetadata,
    Damage::DeleteDirectory,
];

#[test]
fn a_damaged_newest_checkpoint_is_restored_from_its_local_copy() {
    for sink in SINKS {
        for how in DAMAGES {
            let dir = tempfile::tempdir().unwrap();
            let census = setup(dir.path(), sink);
            crash_midway(&census, &[], 3);
            let newest = newest(&census);
            damage(Path::new(&newest.location), how);
            let output = census.command(true, 2, &[]).output().unwrap();
            assert!(
                output.status.success(),
                "{sink}, {how:?}: {}",
                describe(&output)
            );
            census
                .verify_exact()
                .unwrap_or_else(|e| panic!("{sink}, {how:?}: {e}"));
        }
    }
}

#[test]
fn without_a_copy_a_damaged_newest_checkpoint_is_refused_and_nothing_is_duplicated() {
    for sink in SINKS {
        for how in DAMAGES {
            let dir = tempfile::tempdir().unwrap();
            let census = setup(dir.path(), sink);
            crash_midway(&census, &["--no-local-recovery"], 3);
            let newest = newest(&census);
            let named = damage(Path::new(&newest.location), how);
            let output = census
                .command(true, 2, &["--no-local-recovery"])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(!output.status.success(), "{sink}, {how:?}: resumed anyway");
            assert!(
                stderr.contains(&format!(
                    "cannot restore checkpoint {} of job `census`",
                    newest.id
                )) && stderr.contains(&named)
                    && stderr.contains("recovery.fallback-on-corrupt-checkpoint"),
                "{sink}, {how:?}: {stderr}"
            );
            assert!(
                !stderr.contains("falling back to"),
                "{sink}, {how:?}: says it falls back, then refuses: {stderr}"
            );
            census
                .verify_no_duplicates()
                .unwrap_or_else(|e| panic!("{sink}, {how:?}: {e}"));

            // The override does what it says, and says what it replays.
            let output = census
                .command(true, 2, &["--no-local-recovery", "--allow-duplicates"])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                stderr.contains("committed a second time")
                    && stderr.contains(&format!("checkpoint {}", newest.id)),
                "{sink}, {how:?}: {stderr}"
            );
        }
    }
}

#[test]
fn deleting_every_checkpoint_is_refused() {
    for sink in SINKS {
        let dir = tempfile::tempdir().unwrap();
        let census = setup(dir.path(), sink);
        crash_midway(&census, &["--no-local-recovery"], 3);
        let newest = newest(&census);
        for entry in std::fs::read_dir(census.job_dir()).unwrap() {
            let path = entry.unwrap().path();
            if path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("chk-")
            {
                std::fs::remove_dir_all(path).unwrap();
            }
        }
        let output = census
            .command(true, 2, &["--no-local-recovery"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{sink}: started over its output");
        assert!(
            stderr.contains(&format!("cannot restore checkpoint {}", newest.id)),
            "{sink}: {stderr}"
        );
        census
            .verify_no_duplicates()
            .unwrap_or_else(|e| panic!("{sink}: {e}"));
    }
}

#[test]
fn without_checkpoints_or_record_the_sinks_refuse_to_start_over_their_output() {
    for sink in SINKS {
        let dir = tempfile::tempdir().unwrap();
        let census = setup(dir.path(), sink);
        crash_midway(&census, &[], 3);
        std::fs::remove_dir_all(census.checkpoints()).unwrap();
        std::fs::remove_dir_all(census.work.join("local-recovery")).unwrap();
        let output = census.command(true, 2, &[]).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{sink}: started over its output");
        assert!(
            stderr.contains("committed output of this sink exists already"),
            "{sink}: {stderr}"
        );
        census
            .verify_no_duplicates()
            .unwrap_or_else(|e| panic!("{sink}: {e}"));
    }
}

#[test]
fn stop_with_savepoint_then_resume_continues_from_the_savepoint() {
    for sink in SINKS {
        let dir = tempfile::tempdir().unwrap();
        let census = setup(dir.path(), sink);
        let output = census
            .command(false, 2, &["--stop-after-rows", "2500"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("Stopped with savepoint"),
            "{sink}: {stdout} {}",
            describe(&output)
        );
        let stopped = newest(&census);
        assert!(stopped.location.contains("savepoint-"), "{stopped:?}");
        let output = census.command(true, 3, &[]).output().unwrap();
        assert!(output.status.success(), "{sink}: {}", describe(&output));
        census
            .verify_exact()
            .unwrap_or_else(|e| panic!("{sink}: {e}"));
    }
}

/// Of an undisturbed fresh run: the operation at which the run (after the reset that
/// precedes it) takes the job's lock, and the first at which a sink commits — for the file
/// sink the rename of a pending part file to its final name, for the write-ahead log the
/// creation of a batch file, both right after a checkpoint completed, before its output is
/// visible.
fn first_commit_operation(census: &Census) -> (u64, u64) {
    let probe = Census {
        work: census.work.with_file_name("probe"),
        ..census.clone()
    };
    std::fs::create_dir_all(&probe.work).unwrap();
    let log = probe.work.with_file_name("probe.log");
    let ops = crash_points::count_operations(probe.command(false, 2, &[]), &probe.work, &log);
    let locked = ops
        .iter()
        .filter(|o| o.op == "create" && o.path.ends_with("/_lock"))
        .nth(1)
        .map(|o| o.n)
        .expect("the run took the job's lock");
    let commit = ops
        .iter()
        .find(|o| {
            (o.op == "rename" && o.path.contains(".pending -> ") && o.path.contains("/output/"))
                || (o.op == "create"
                    && o.path.contains("/output/.staging-")
                    && o.path.contains("/.batch-"))
        })
        .map(|o| o.n)
        .expect("the run committed something");
    (locked, commit)
}

/// Starts the job and stops it (SIGSTOP) right before its `point`-th file operation.
fn stall_at(census: &Census, resume: bool, point: u64) -> Child {
    std::fs::create_dir_all(&census.work).unwrap();
    crash_points::stall_at(census.command(resume, 2, &[]), &census.work, point)
}

#[test]
fn a_stalled_process_keeps_its_job_and_a_second_one_is_refused() {
    for sink in SINKS {
        for seed in seeds(2) {
            let dir = tempfile::tempdir().unwrap();
            let census = setup(dir.path(), sink);
            // Stalled right between a checkpoint's completion and its commit, or anywhere
            // once the run holds the job (a fresh census resets the job first, under the
            // job's lock as well, and lets go of it before the run takes it).
            let (locked, commit) = first_commit_operation(&census);
            let point = if seed == 1 {
                commit
            } else {
                locked + 1 + Rng(seed).below(commit * 3 - locked)
            };
            println!("{sink}, seed {seed}: stalled at operation {point}");
            let mut stalled = stall_at(&census, false, point);
            let second = census.command(true, 2, &[]).output().unwrap();
            let stderr = String::from_utf8_lossy(&second.stderr);
            assert!(!second.status.success(), "{sink}: a second process ran");
            assert!(
                stderr.contains("locked by another process")
                    && stderr.contains(&format!("pid {}", stalled.id())),
                "{sink}: the refusal names the holder: {stderr}"
            );
            crash_points::resume(&stalled);
            let status = wait_bounded(&mut stalled, Duration::from_secs(120), "stalled job");
            assert!(status.success(), "{sink}: the stalled job did not finish");
            census
                .verify_exact()
                .unwrap_or_else(|e| panic!("{sink}, seed {seed}: {e}"));
            let after = census.command(true, 2, &[]).output().unwrap();
            assert!(after.status.success(), "{sink}: {}", describe(&after));
            census
                .verify_exact()
                .unwrap_or_else(|e| panic!("{sink}, seed {seed}: {e}"));
        }
    }
}

#[test]
fn two_resumes_at_once_run_one_job() {
    for sink in SINKS {
        let dir = tempfile::tempdir().unwrap();
        let census = setup(dir.path(), sink);
        crash_midway(&census, &[], 2);
        let first = census.command(true, 2, &[]).spawn().unwrap();
        let second = census.command(true, 2, &[]).spawn().unwrap();
        let outputs = [
            first.wait_with_output().unwrap(),
            second.wait_with_output().unwrap(),
        ];
        assert!(
            outputs.iter().any(|o| o.status.success()),
            "{sink}: neither finished"
        );
        for output in &outputs {
            if !output.status.success() {
                assert!(
                    String::from_utf8_lossy(&output.stderr).contains("locked by another process"),
                    "{sink}: {}",
                    describe(output)
                );
            }
        }
        census
            .verify_exact()
            .unwrap_or_else(|e| panic!("{sink}: {e}"));
    }
}

#[test]
fn a_process_that_lost_its_job_commits_nothing_more() {
    for sink in SINKS {
        let dir = tempfile::tempdir().unwrap();
        let census = setup(dir.path(), sink);
        let (_, commit) = first_commit_operation(&census);
        // Stalled right before a commit; meanwhile its lock is lost (the file removed, as a
        // lease that expired), and another process takes the job and finishes it.
        let mut stalled = stall_at(&census, false, commit);
        std::fs::remove_file(census.job_dir().join("_lock")).unwrap();
        let replacement = census.command(true, 2, &[]).output().unwrap();
        assert!(
            replacement.status.success(),
            "{sink}: {}",
            describe(&replacement)
        );
        weir_examples::census::verify(&census.output(), &census.data)
            .unwrap_or_else(|e| panic!("{sink}: {e:#}"));
        crash_points::resume(&stalled);
        let output = wait_with_stderr(&mut stalled, Duration::from_secs(120), "stalled job");
        assert!(
            !output.0.success() && output.0.signal().is_none(),
            "{sink}: the old process went on: {:?}",
            output.0
        );
        assert!(output.1.contains("lost the job"), "{sink}: {}", output.1);
        // What it committed before it stopped is exactly what the new holder committed too.
        weir_examples::census::verify(&census.output(), &census.data)
            .unwrap_or_else(|e| panic!("{sink}: after the old process woke up: {e:#}"));
    }
}

/// A work directory moved elsewhere after a crash (another mount, a renamed folder) is
/// resumed from its new place: the job record names its restore points relative to the
/// job's directory, and the output comes out exact.
#[test]
fn a_moved_work_directory_resumes_exactly() {
    for sink in SINKS {
        let dir = tempfile::tempdir().unwrap();
        let census = setup(dir.path(), sink);
        crash_midway(&census, &[], 2);
        let moved = Census {
            work: absolute(dir.path()).join("moved"),
            data: census.data.clone(),
            ..setup(dir.path(), sink)
        };
        std::fs::rename(&census.work, &moved.work).unwrap();
        let newest = newest(&moved);
        assert!(
            newest
                .location
                .starts_with(&*moved.job_dir().to_string_lossy()),
            "{sink}: the restore point is not found in the moved directory: {newest:?}"
        );
        let output = moved.command(true, 2, &[]).output().unwrap();
        assert!(output.status.success(), "{sink}: {}", describe(&output));
        moved
            .verify_exact()
            .unwrap_or_else(|e| panic!("{sink}: {e}"));
    }
}
