//! Deterministic crash points: a job runs as a child process with the crash injector
//! (`LD_PRELOAD`, built from `crash_injector.c`) that counts its durable file operations
//! under one directory — create, rename, link, unlink, mkdir, rmdir, fsync — and kills or stops it
//! right before the N-th. A counting run tells how many operations a run makes; a sweep
//! then tries every N (or a sample of them), recovers, and checks the committed output.
//!
//! `WEIR_CRASH_SWEEP=full` tries every point, `WEIR_CRASH_SWEEP=n` a sample of n, and
//! `WEIR_CRASH_POINT=n` replays one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::Rng;

/// The crash injector library.
pub fn injector() -> &'static Path {
    Path::new(env!("WEIR_CRASH_INJECTOR"))
}

/// What the injector does at the chosen operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Only count (and log).
    None,
    /// SIGKILL right before the n-th operation.
    KillAt(u64),
    /// SIGSTOP right before the n-th operation (continue it with [`resume`]).
    StopAt(u64),
}

/// Sets up `command` to run with the injector watching `dir` (an absolute path), logging
/// every counted operation to `log` if given.
pub fn inject(command: &mut Command, dir: &Path, fault: Fault, log: Option<&Path>) {
    command
        .env("LD_PRELOAD", injector())
        .env("WEIR_CRASH_DIR", dir)
        .env_remove("WEIR_CRASH_AT")
        .env_remove("WEIR_CRASH_STOP_AT")
        .env_remove("WEIR_CRASH_LOG");
    match fault {
        Fault::None => {}
        Fault::KillAt(n) => {
            command.env("WEIR_CRASH_AT", n.to_string());
        }
        Fault::StopAt(n) => {
            command.env("WEIR_CRASH_STOP_AT", n.to_string());
            // A process group of its own: signals meant for the test's group (a test
            // runner's job control) must not continue it.
            std::os::unix::process::CommandExt::process_group(command, 0);
        }
    }
    if let Some(log) = log {
        command.env("WEIR_CRASH_LOG", log);
    }
}

/// One counted operation, as the injector logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOperation {
    /// Its number in the run (1-based).
    pub n: u64,
    /// `create`, `rename`, `link`, `unlink`, `mkdir`, `rmdir`, `fsync` or `fdatasync`.
    pub op: String,
    /// The path (`from -> to` for a rename or a link).
    pub path: String,
}

/// The operations logged to `log`, in order.
pub fn read_log(log: &Path) -> Vec<FileOperation> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let n = parts.next()?.parse().ok()?;
            let op = parts.next()?.to_string();
            let path = parts.next().unwrap_or_default().to_string();
            Some(FileOperation { n, op, path })
        })
        .collect()
}

/// Which crash points in `window` (1-based, inclusive) to try: the one in `WEIR_CRASH_POINT`;
/// every one with `WEIR_CRASH_SWEEP=full`; else `WEIR_CRASH_SWEEP` or `sample` of them,
/// spread evenly with a seeded offset (`seed`), always with the first and the last.
pub fn points(window: std::ops::RangeInclusive<u64>, sample: usize, seed: u64) -> Vec<u64> {
    if let Some(point) = std::env::var("WEIR_CRASH_POINT")
        .ok()
        .and_then(|p| p.parse().ok())
    {
        return vec![point];
    }
    let (first, last) = (*window.start(), *window.end());
    if last < first {
        return Vec::new();
    }
    let wanted = match std::env::var("WEIR_CRASH_SWEEP").as_deref() {
        Ok("full") => usize::MAX,
        Ok(n) => n.parse().unwrap_or(sample),
        Err(_) => sample,
    };
    let total = last - first + 1;
    if wanted as u64 >= total {
        return window.collect();
    }
    let mut rng = Rng(seed);
    let mut chosen = BTreeSet::from([first, last]);
    let stride = total as f64 / wanted.max(1) as f64;
    let offset = rng.below(stride.max(1.0) as u64);
    let mut x = first as f64 + offset as f64;
    while chosen.len() < wanted && x <= last as f64 {
        chosen.insert(x as u64);
        x += stride;
    }
    chosen.into_iter().collect()
}

/// Runs `command` to its end with the injector counting its operations under `dir` into
/// `log` (panicking if it fails), and returns them: a counting run, to choose crash points.
pub fn count_operations(mut command: Command, dir: &Path, log: &Path) -> Vec<FileOperation> {
    inject(&mut command, dir, Fault::None, Some(log));
    let output = command.output().expect("cannot start the counting run");
    assert!(
        output.status.success(),
        "the counting run failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    read_log(log)
}

/// Starts `command` and stops it (SIGSTOP) right before its `point`-th operation under `dir`;
/// panics if it ends or does not get there within a minute.
pub fn stall_at(mut command: Command, dir: &Path, point: u64) -> Child {
    inject(&mut command, dir, Fault::StopAt(point), None);
    let mut child = command.spawn().expect("cannot start the process to stall");
    assert!(
        wait_stopped(&mut child, Duration::from_secs(60)),
        "the process did not reach operation {point}"
    );
    child
}

/// Whether `child` is stopped (SIGSTOP), per `/proc`.
pub fn is_stopped(child: &Child) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", child.id()))
        .ok()
        .and_then(|stat| {
            // The state follows the parenthesized command name.
            let after = stat.rsplit_once(')')?.1;
            after.split_whitespace().next().map(|s| s == "T")
        })
        .unwrap_or(false)
}

/// Waits until `child` is stopped or has exited; `true` if it stopped.
pub fn wait_stopped(child: &mut Child, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if is_stopped(child) {
            return true;
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

/// Sends `signal` to `child`.
fn signal(child: &Child, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// Stops `child` (SIGSTOP), as a long pause, a swapped-out or frozen machine would.
pub fn stop(child: &Child) {
    signal(child, libc::SIGSTOP);
}

/// Lets a stopped `child` continue (SIGCONT).
pub fn resume(child: &Child) {
    signal(child, libc::SIGCONT);
}

/// Runs `trial` at every one of `points` on two threads (the machines have two cores, and a
/// trial is mostly waiting for its processes): the outcomes of the trials that held, and the
/// problems of those that did not, each prefixed with `describe(point)`.
pub fn run_trials<P, O>(
    points: &[P],
    trial: impl Fn(P) -> Result<O, String> + Sync,
    describe: impl Fn(P) -> String + Sync,
) -> (Vec<O>, Vec<String>)
where
    P: Copy + Sync,
    O: Send,
{
    let next = std::sync::atomic::AtomicUsize::new(0);
    let outcomes = std::sync::Mutex::new(Vec::new());
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(&point) = points.get(i) else {
                    return;
                };
                // A trial that panics is a violation like any other, reported with its
                // point (and so its replay line), not a lost thread.
                let result =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| trial(point)))
                        .unwrap_or_else(|panic| Err(panic_message(panic.as_ref())));
                match result {
                    Ok(outcome) => outcomes
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(outcome),
                    Err(problem) => failures
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(format!("{}: {problem}", describe(point))),
                }
            });
        }
    });
    (
        outcomes
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        failures
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    )
}

/// The message of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("(a panic without a message)");
    format!("the trial panicked: {text}")
}

/// Why a process ended, from its messages: its last `error:` line, cut before the first path,
/// local address or process description, so that the same reason in different trials reads
/// the same.
pub fn ending_reason(said: &str) -> Option<String> {
    let line = said.lines().rev().find(|l| l.starts_with("error:"))?;
    let end = [line.find('/'), line.find(" (pid"), line.find("127.0.0.1")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(line.len())
        .min(140);
    Some(line.chars().take(end).collect())
}

/// Prints how many trials ended for each reason (`  3 zombies ended with: …`).
pub fn print_reasons<'a>(reasons: impl Iterator<Item = &'a str>) {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for reason in reasons {
        *counts.entry(reason).or_default() += 1;
    }
    for (reason, n) in counts {
        println!("  {n} zombies ended with: {reason}");
    }
}

/// Fails the sweep `name` with every violation found, if any, out of `tried` points.
pub fn assert_no_violations(name: &str, tried: usize, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{name}: {} of {tried} stop points broke exactly-once:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A scratch directory's absolute path (the injector matches absolute prefixes).
pub fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_cover_the_ends_and_spread_evenly() {
        let p = points(10..=109, 10, 3);
        assert_eq!(p.len(), 10);
        assert_eq!((p[0], *p.last().unwrap()), (10, 109));
        assert_eq!(points(5..=7, 10, 1), vec![5, 6, 7]);
        let (start, end) = (5, 4);
        assert!(points(start..=end, 10, 1).is_empty());
        assert_eq!(points(1..=1000, 10, 7), points(1..=1000, 10, 7));
    }

    /// In a child process (see below): five durable operations in `WEIR_TESTKIT_DIR`.
    #[test]
    fn child_file_operations() {
        let Ok(dir) = std::env::var("WEIR_TESTKIT_DIR") else {
            return;
        };
        let dir = Path::new(&dir);
        std::fs::write(dir.join("a"), b"x").unwrap();
        std::fs::rename(dir.join("a"), dir.join("b")).unwrap();
        std::fs::create_dir(dir.join("c")).unwrap();
        std::fs::hard_link(dir.join("b"), dir.join("d")).unwrap();
        std::fs::remove_file(dir.join("b")).unwrap();
        std::fs::remove_file(dir.join("d")).unwrap();
        std::fs::remove_dir(dir.join("c")).unwrap();
    }

    fn child(watched: &Path) -> Command {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", "crash_points::tests::child_file_operations"])
            .env("WEIR_TESTKIT_DIR", watched);
        command
    }

    #[test]
    fn the_injector_kills_at_the_chosen_operation_and_logs_what_it_counts() {
        let dir = tempfile::tempdir().unwrap();
        let root = absolute(dir.path());
        let log = root.join("ops.log");
        let watched = root.join("w");
        std::fs::create_dir(&watched).unwrap();
        let mut counting = child(&watched);
        inject(&mut counting, &watched, Fault::None, Some(&log));
        assert!(counting.output().unwrap().status.success());
        let ops: Vec<String> = read_log(&log).into_iter().map(|o| o.op).collect();
        assert_eq!(
            ops,
            ["create", "rename", "mkdir", "link", "unlink", "unlink", "rmdir"]
        );

        let mut killed = child(&watched);
        inject(&mut killed, &watched, Fault::KillAt(3), None);
        let status = killed.output().unwrap().status;
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(watched.join("b").exists(), "operations 1 and 2 ran");
        assert!(!watched.join("c").exists(), "operation 3 did not");

        let mut stopped = child(&watched);
        std::fs::remove_file(watched.join("b")).unwrap();
        inject(&mut stopped, &watched, Fault::StopAt(2), None);
        let mut stopped = stopped.spawn().unwrap();
        assert!(wait_stopped(&mut stopped, Duration::from_secs(10)));
        assert!(watched.join("a").exists() && !watched.join("b").exists());
        resume(&stopped);
        assert!(stopped.wait().unwrap().success());
        assert!(!watched.join("a").exists() && !watched.join("b").exists());
    }
}
