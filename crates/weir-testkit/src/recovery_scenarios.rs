//! Recovery scenarios that every exactly-once pipeline must pass, run against its reference
//! job as a real process (the connectors' tests implement [`ReferenceJob`] for theirs): a
//! crash while a finished job cleans up, a deleted newest checkpoint, a stalled process that
//! keeps its job, and a process that lost its job while it stalled.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use crate::crash_points::{self, inject, Fault};
use crate::{kill_after_checkpoint, run_until_success, seeds, wait_bounded, wait_with_stderr};

/// A reference job as the scenarios drive it.
pub trait ReferenceJob {
    /// Its command, resuming or fresh, with `extra` arguments; standard error piped.
    fn command(&self, resume: bool, extra: &[&str]) -> Command;
    /// Its work directory: everything it writes on disk is under it (absolute).
    fn work(&self) -> &Path;
    /// Its directory in checkpoint storage (`<checkpoints>/<job name>`).
    fn job_dir(&self) -> PathBuf;
    /// Where the newest restore point its job record names is.
    fn newest_restore_point(&self) -> PathBuf;
    /// Its committed output is exactly an uninterrupted run's, and nothing is left pending.
    fn verify_exact(&self) -> Result<(), String>;
    /// Nothing in its committed output is there twice.
    fn verify_no_duplicates(&self) -> Result<(), String>;
}

/// Resumes `job` until a run succeeds (three at most).
fn recover(job: &impl ReferenceJob) -> Result<(), String> {
    run_until_success(3, || job.command(true, &[]))
}

/// Kills the final phase of a bounded run — from its final checkpoint through the clean-up —
/// at `samples` of its file operations (counted on `probe`, an undisturbed run), each in a
/// fresh job from `fresh`; every one must resume to exactly the uninterrupted output and
/// never run the job again.
pub fn crash_while_cleaning_up<J: ReferenceJob>(
    probe: &J,
    mut fresh: impl FnMut() -> J,
    samples: usize,
) {
    let log = probe.work().with_file_name("ops.log");
    let ops = crash_points::count_operations(probe.command(false, &[]), probe.work(), &log);
    probe.verify_exact().expect("the undisturbed run");
    let chk = format!("{}/chk-", probe.job_dir().display());
    let from = ops
        .iter()
        .rev()
        .find(|o| o.op == "mkdir" && o.path.starts_with(&chk))
        .map_or(1, |o| o.n);
    let seed = seeds(1)[0];
    for point in crash_points::points(from..=ops.len() as u64, samples, seed) {
        let job = fresh();
        let mut run = job.command(false, &[]);
        inject(&mut run, job.work(), Fault::KillAt(point), None);
        run.output().expect("cannot start the job");
        let problem = recover(&job).and_then(|()| job.verify_exact());
        if let Err(e) = problem {
            panic!(
                "crash point {point} (replay with WEIR_CRASH_POINT={point} WEIR_SEED={seed}): {e}"
            );
        }
    }
}

/// Kills a run after `checkpoints` checkpoints completed and deletes the newest one's
/// metadata: with a local copy (the default) the resumed job ends exact; without
/// (`no_copy_flag` on both runs) it refuses, naming the file and the option, and nothing is
/// committed twice.
pub fn deleted_newest_metadata<J: ReferenceJob>(
    mut fresh: impl FnMut() -> J,
    checkpoints: u64,
    no_copy_flag: &str,
) {
    for copy in [true, false] {
        let job = fresh();
        let extra: &[&str] = if copy { &[] } else { &[no_copy_flag] };
        // The first run cannot finish (its input's end waits for a file never created), so
        // it is killed running, once a checkpoint committed output, however slow the machine.
        let never = job.work().join("never-released");
        let never = never.to_string_lossy();
        let mut first = extra.to_vec();
        first.extend(["--hold-end-until", &never]);
        let mut child = job
            .command(false, &first)
            .spawn()
            .expect("cannot start the job");
        let job_dir = job.job_dir();
        let (Some(storage), Some(name)) = (job_dir.parent(), job_dir.file_name()) else {
            panic!("no job directory in {}", job_dir.display());
        };
        let killed = kill_after_checkpoint(
            &mut child,
            storage,
            &name.to_string_lossy(),
            checkpoints,
            Duration::ZERO,
            Duration::from_secs(300),
        );
        assert!(killed, "the job ended, though its input's end was held");
        std::fs::remove_file(job.newest_restore_point().join("_metadata"))
            .expect("the newest checkpoint has metadata");
        let output = job
            .command(true, extra)
            .output()
            .expect("cannot start the job");
        let stderr = String::from_utf8_lossy(&output.stderr);
        if copy {
            assert!(output.status.success(), "{stderr}");
            job.verify_exact().unwrap();
        } else {
            assert!(!output.status.success(), "resumed past committed output");
            assert!(
                stderr.contains("cannot restore checkpoint")
                    && stderr.contains("_metadata")
                    && stderr.contains("recovery.fallback-on-corrupt-checkpoint"),
                "{stderr}"
            );
            job.verify_no_duplicates().unwrap();
        }
    }
}

/// Starts `job` and stops it (SIGSTOP) right after its third job-record write (its second
/// checkpoint recorded), before any sink commits that checkpoint; the operation is found in
/// an undisturbed run of `probe`.
fn stall_after_a_checkpoint<J: ReferenceJob>(job: &J, probe: &J) -> Child {
    let log = probe.work().with_file_name("stall.log");
    let record = probe.job_dir().join("_job_record").display().to_string();
    let point = crash_points::count_operations(probe.command(false, &[]), probe.work(), &log)
        .iter()
        // A version of the record is written by linking it to its name.
        .filter(|o| o.op == "link" && o.path.contains(&format!(" -> {record}/")))
        .nth(2)
        .map(|o| o.n + 1)
        .expect("the run recorded checkpoints");
    crash_points::stall_at(job.command(false, &[]), job.work(), point)
}

/// A stalled process keeps its job: a second one is refused, naming it; once it continues
/// it finishes exactly.
pub fn stalled_process_keeps_its_job<J: ReferenceJob>(probe: &J, job: &J) {
    let mut stalled = stall_after_a_checkpoint(job, probe);
    let second = job
        .command(true, &[])
        .output()
        .expect("cannot start the job");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "a second process ran");
    assert!(
        stderr.contains("locked by another process")
            && stderr.contains(&format!("pid {}", stalled.id())),
        "{stderr}"
    );
    crash_points::resume(&stalled);
    let status = wait_bounded(&mut stalled, Duration::from_secs(120), "stalled job");
    assert!(status.success(), "the stalled job did not finish");
    job.verify_exact().unwrap();
}

/// A stalled process whose lock is lost (its file removed, as a lease that expired) while
/// another process takes the job over and finishes it: once it continues it stops, saying
/// it lost the job, and the output stays exact.
pub fn process_that_lost_its_job_commits_nothing<J: ReferenceJob>(
    probe: &J,
    job: &J,
    also_accepted: &[&str],
) {
    let mut stalled = stall_after_a_checkpoint(job, probe);
    std::fs::remove_file(job.job_dir().join("_lock")).expect("the lock file exists");
    recover(job).unwrap();
    job.verify_exact().unwrap();
    crash_points::resume(&stalled);
    let (status, stderr) = wait_with_stderr(&mut stalled, Duration::from_secs(120), "stalled job");
    assert!(
        !status.success() && status.signal().is_none(),
        "the old process went on: {status:?}"
    );
    assert!(
        stderr.contains("lost the job") || also_accepted.iter().any(|a| stderr.contains(a)),
        "{stderr}"
    );
    job.verify_exact()
        .unwrap_or_else(|e| panic!("after the old process woke up: {e}"));
}
