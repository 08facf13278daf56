//! The event-time example job (clicks per page and minute, tumbling windows over
//! out-of-order rows) is killed with SIGKILL at random moments and resumed until it
//! finishes: the committed windows must be exactly an uninterrupted run's — window contents,
//! timers and source positions all come back from the checkpoint.
//!
//! Seeds: `WEIR_SEED=s` replays one, `WEIR_SEEDS=n` runs n (default 3).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use weir_examples::clicks;
use weir_testkit::{seeds, wait_bounded, Rng};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/clicks")
}

fn spawn(work: &Path, resume: bool) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_clicks_per_minute"));
    command
        .arg("--work-dir")
        .arg(work)
        .args(["--rate", "6000", "--checkpoint-interval-ms", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if resume {
        command.arg("--resume");
    }
    command.spawn().expect("cannot start the clicks job")
}

#[test]
fn windows_are_committed_exactly_once_across_sigkills() {
    for seed in seeds(3) {
        let mut rng = Rng(seed * 104_729);
        let work = tempfile::tempdir().unwrap();
        let kills: Vec<u64> = (0..2 + rng.below(3)).map(|_| 80 + rng.below(600)).collect();
        println!("seed {seed}: kills after {kills:?} ms (replay with WEIR_SEED={seed})");
        for (run, after) in kills.iter().enumerate() {
            let mut child = spawn(work.path(), run > 0);
            std::thread::sleep(Duration::from_millis(*after));
            // SIGKILL: nothing is flushed or cleaned up. (A run may have finished first.)
            let _ = child.kill();
            let status = child.wait().unwrap();
            println!("  run {run}: killed after {after} ms, exit {status:?}");
        }
        let mut child = spawn(work.path(), true);
        let status = wait_bounded(
            &mut child,
            Duration::from_secs(120),
            &format!("seed {seed}"),
        );
        assert!(
            status.success(),
            "seed {seed}: the final run failed: {status:?}"
        );
        let windows = clicks::verify(&work.path().join("output"), &data_dir())
            .unwrap_or_else(|e| panic!("seed {seed}: {e:#}"));
        assert_eq!(windows, 50, "seed {seed}");
    }
}
