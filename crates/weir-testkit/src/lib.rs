//! Test support shared by Weir's crates: seeds that can be replayed, a small deterministic
//! random generator, the pieces of the process-kill tests (wait for a child process,
//! SIGKILL it after a delay or after a checkpoint completed), and deterministic crash points
//! ([`crash_points`]: kill or stop a process at its N-th durable file operation;
//! [`storage_stops`]: stop it at its N-th object-storage write), and a
//! cluster of real JobManager and TaskManager processes on 127.0.0.1 ([`local_cluster`]).

#![warn(missing_docs)]

pub mod cluster_zombies;
pub mod crash_points;
pub mod fault_proxy;
pub mod local_cluster;
pub mod recovery_scenarios;
pub mod storage_stops;

use std::path::Path;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Seeds to run: `WEIR_SEED=s` replays one, `WEIR_SEEDS=n` runs `1..=n`, otherwise
/// `1..=default`.
pub fn seeds(default: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("WEIR_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![seed];
    }
    let n = std::env::var("WEIR_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    (1..=n).collect()
}

/// A SplitMix64 stream: deterministic for a seed, well mixed.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// Waits for `child`; after `limit` it is killed and the test fails, naming `what`.
pub fn wait_bounded(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    wait_or_kill(child, limit)
        .unwrap_or_else(|| panic!("{what}: the job did not finish within {limit:?}"))
}

/// `child`'s status, or `None` once `limit` has passed and it was killed.
fn wait_or_kill(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` (see [`wait_bounded`]) and returns its status and what it wrote to its
/// piped standard error.
pub fn wait_with_stderr(child: &mut Child, limit: Duration, what: &str) -> (ExitStatus, String) {
    // Read on a thread, so that a chatty child never blocks on a full pipe.
    let reader = child.stderr.take().map(|mut pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut pipe, &mut text);
            text
        })
    });
    let status = wait_or_kill(child, limit);
    let stderr = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    match status {
        Some(status) => (status, stderr),
        // What a hung process last wrote is what tells why it hung.
        None => panic!(
            "{what}: the job did not finish within {limit:?}; its standard error ends with:\n{}",
            tail(&stderr, 4_000)
        ),
    }
}

/// The last `max` bytes of `text` (or all of it), cut at a character boundary.
fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Runs the command `make` gives until one run succeeds, at most `attempts` times; the last
/// run's standard error when none did.
pub fn run_until_success(
    attempts: usize,
    mut make: impl FnMut() -> std::process::Command,
) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..attempts {
        let output = make()
            .output()
            .map_err(|e| format!("cannot start the process: {e}"))?;
        if output.status.success() {
            return Ok(());
        }
        last = format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Err(format!("no run of {attempts} succeeded; the last: {last}"))
}

/// Kills `child` with SIGKILL after `delay`, unless it ends before; whether it was killed.
pub fn kill_after(child: &mut Child, delay: Duration) -> bool {
    let deadline = Instant::now() + delay;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // A child that ended by itself between the last look and the kill was not killed.
    let killed = matches!(child.try_wait(), Ok(None)) && child.kill().is_ok();
    let _ = child.wait();
    killed
}

/// The file of the newest version of the job record in job directory `job_dir`
/// (`<checkpoints>/<job>/_job_record/<version>`), if there is one: tests watch it to know what
/// a run recorded, and damage it.
pub fn job_record_file(job_dir: &Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(job_dir.join("_job_record"))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .max()
}

/// The highest completed checkpoint (`chk-N` with metadata) of `job` under `checkpoints`.
pub fn latest_checkpoint(checkpoints: &Path, job: &str) -> u64 {
    std::fs::read_dir(checkpoints.join(job))
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().join("_metadata").exists())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_prefix("chk-"))
                        .and_then(|id| id.parse().ok())
                })
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Whether a checkpoint newer than the latest complete one was started at or after `since`
/// and not completed in `checkpoints`: a process started at `since` and killed now died
/// while writing a snapshot. (A half-written checkpoint an earlier run left behind is older.)
pub fn snapshot_in_progress(checkpoints: &Path, job: &str, since: std::time::SystemTime) -> bool {
    let latest = latest_checkpoint(checkpoints, job);
    std::fs::read_dir(checkpoints.join(job))
        .map(|entries| {
            entries.flatten().any(|e| {
                let newer = e
                    .file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("chk-"))
                    .and_then(|id| id.parse::<u64>().ok())
                    .is_some_and(|id| id > latest);
                let recent = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t >= since);
                newer && recent && !e.path().join("_metadata").exists()
            })
        })
        .unwrap_or(false)
}

/// Reports a kill for the soak campaign (`scripts/soak.sh` counts these lines): the crash
/// window it was aimed at, whether it landed (the process may have ended first), and whether
/// the process (started at `since`) was writing a snapshot at that moment.
pub fn report_kill(
    checkpoints: &Path,
    job: &str,
    window: &str,
    killed: bool,
    since: std::time::SystemTime,
) {
    println!(
        "soak-kill: window={window} killed={killed} snapshot-in-progress={}",
        killed && snapshot_in_progress(checkpoints, job, since)
    );
}

/// Kills `child` with SIGKILL `delay` after a checkpoint beyond `after` completed, so that
/// the kill lands while committed output exists — or after `at_most` in any case, so that a
/// slow (loaded) machine does not let the job finish first. Whether it was killed: `false`
/// when the job ended by itself first.
pub fn kill_after_checkpoint(
    child: &mut Child,
    checkpoints: &Path,
    job: &str,
    after: u64,
    delay: Duration,
    at_most: Duration,
) -> bool {
    let deadline = Instant::now() + at_most;
    while latest_checkpoint(checkpoints, job) <= after && Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    kill_after(child, delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_deterministic_and_in_range() {
        let (mut a, mut b) = (Rng(7), Rng(7));
        for _ in 0..100 {
            let x = a.below(10);
            assert_eq!(x, b.below(10));
            assert!(x < 10);
        }
        assert_eq!(Rng(1).below(0), 0);
    }

    #[test]
    fn no_checkpoint_directory_means_checkpoint_zero() {
        let dir = std::env::temp_dir().join("weir-testkit-none");
        assert_eq!(latest_checkpoint(&dir, "job"), 0);
    }
}
