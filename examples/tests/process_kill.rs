//! Process-level crash recovery: the census job runs as a child process and is killed with
//! SIGKILL at random moments — at random times, right between a checkpoint's completion and
//! its commit, and while it restores — then restarted with `--resume` until it finishes. The
//! committed output must be exactly what an uninterrupted run gives, for both the
//! two-phase-commit file sink and the write-ahead-log sink.
//!
//! Seeds: `WEIR_SEED=s` replays one, `WEIR_SEEDS=n` runs n (default 3 per sink).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use weir_examples::census;
use weir_testkit::{report_kill, seeds, wait_bounded, Rng};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/census")
}

fn spawn(work: &Path, sink: &str, resume: bool, extra: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_census"));
    command
        .arg("--work-dir")
        .arg(work)
        .args(["--quiet", "--sink", sink, "--fail-after-rows", "0"])
        .args(["--checkpoint-interval-ms", "80", "--commit-delay-ms", "40"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if !extra.contains(&"--rate") {
        command.args(["--rate", "25000"]);
    }
    if resume {
        command.arg("--resume");
    }
    let mut child = command.spawn().expect("cannot start the census job");
    // Forward the child's stderr lines so the test can time kills against commits.
    let (tx, rx) = mpsc::channel();
    if let Some(stderr) = child.stderr.take() {
        std::thread::spawn(move || {
            // Drain to the end even when nobody listens, or the child's writes would fail.
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    (child, rx)
}

/// How a run is ended.
#[derive(Debug, Clone, Copy)]
enum Kill {
    /// SIGKILL after a random time.
    AfterMillis(u64),
    /// SIGKILL as soon as a commit starts (after its checkpoint completed).
    AtCommit,
    /// SIGKILL shortly after a resumed start, while it restores.
    DuringRestore(u64),
    /// SIGKILL as soon as a completed checkpoint holds records in flight (unaligned).
    AfterInFlightCheckpoint,
}

fn kill_test(sink: &str, extra: &[&str], default_seeds: u64) {
    kill_test_over(sink, extra, default_seeds, &data_dir());
}

/// [`kill_test`] over the CSV files in `data`; with `--dead-letters` among `extra`, the
/// committed dead letters are checked too.
fn kill_test_over(sink: &str, extra: &[&str], default_seeds: u64, data: &Path) {
    let unaligned = extra.contains(&"--unaligned");
    let dead_letters = extra.contains(&"--dead-letters");
    let data_arg = data.to_string_lossy().into_owned();
    let extra: Vec<&str> = ["--data", data_arg.as_str()]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let extra = &extra[..];
    let mut stored_in_flight = 0;
    for seed in seeds(default_seeds) {
        let mut rng = Rng(seed * 7919 + u64::from(sink.as_bytes()[0]));
        let work = tempfile::tempdir().unwrap();
        let kills = 2 + rng.below(3);
        let mut plan = Vec::new();
        // The soak campaign (scripts/soak.sh) weights the commit point up with
        // WEIR_COMMIT_KILL_WEIGHT=w: w chances in w + 2 to kill at a commit after the first run.
        let commit_weight = std::env::var("WEIR_COMMIT_KILL_WEIGHT")
            .ok()
            .and_then(|w| w.parse::<u64>().ok())
            .unwrap_or(1)
            .max(1);
        for k in 0..kills {
            plan.push(match (k, rng.below(2 + commit_weight)) {
                // The first run is killed once a checkpoint holding records in flight is
                // stored (seen on disk, however long that takes on a loaded machine), so that
                // a restore replays some.
                (0, _) if unaligned => Kill::AfterInFlightCheckpoint,
                (0, _) | (_, 0) => Kill::AfterMillis(50 + rng.below(700)),
                (_, c) if c <= commit_weight => Kill::AtCommit,
                _ => Kill::DuringRestore(rng.below(40)),
            });
        }
        println!(
            "sink {sink} {extra:?}, seed {seed}: kills {plan:?} (replay with WEIR_SEED={seed})"
        );
        for (run, kill) in plan.iter().enumerate() {
            let since = std::time::SystemTime::now();
            let (mut child, lines) = spawn(work.path(), sink, run > 0, extra);
            // Whether the commit point was seen (else an AtCommit kill is a mid-run one).
            let mut at_commit = false;
            match kill {
                Kill::AfterMillis(ms) | Kill::DuringRestore(ms) => {
                    std::thread::sleep(Duration::from_millis(*ms))
                }
                Kill::AfterInFlightCheckpoint => {
                    let checkpoints = work.path().join("checkpoints");
                    let deadline = std::time::Instant::now() + Duration::from_secs(300);
                    while census::in_flight_chunks(&checkpoints) == 0 {
                        if matches!(child.try_wait(), Ok(Some(_))) {
                            break;
                        }
                        assert!(
                            std::time::Instant::now() < deadline,
                            "sink {sink}, seed {seed}: no checkpoint with records in flight"
                        );
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                Kill::AtCommit => {
                    // Only a guard against a hang: a busy machine may take long to commit.
                    let deadline = std::time::Instant::now() + Duration::from_secs(120);
                    while std::time::Instant::now() < deadline {
                        match lines.recv_timeout(Duration::from_millis(50)) {
                            Ok(line) if line.contains("committing") => {
                                at_commit = true;
                                break;
                            }
                            Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                            Err(mpsc::RecvTimeoutError::Disconnected) => break,
                        }
                    }
                }
            }
            // SIGKILL: no cleanup, no flush, like a machine dying. (A run may have finished
            // first; resuming it afterwards must then do nothing.)
            let _ = child.kill();
            let status = child.wait().unwrap();
            // Killed unless it had exited by itself (with a code, not by the signal).
            let killed = status.code().is_none();
            let window = match kill {
                Kill::AtCommit if at_commit => "between-completion-and-commit",
                Kill::AfterMillis(_) | Kill::AtCommit | Kill::AfterInFlightCheckpoint => "mid-run",
                Kill::DuringRestore(_) => "during-restore",
            };
            let checkpoints = work.path().join("checkpoints");
            report_kill(&checkpoints, census::JOB_NAME, window, killed, since);
            stored_in_flight += census::in_flight_chunks(&checkpoints);
            println!("  run {run}: killed ({kill:?}), exit {status:?}");
        }
        let (mut child, lines) = spawn(work.path(), sink, true, extra);
        let status = wait_bounded(
            &mut child,
            Duration::from_secs(300),
            &format!("sink {sink}, seed {seed}"),
        );
        let log: Vec<String> = lines.try_iter().collect();
        assert!(
            status.success(),
            "sink {sink}, seed {seed}: final run failed: {status:?}\n{}",
            log.join("\n")
        );
        let verification = census::verify(&work.path().join("output"), data)
            .unwrap_or_else(|e| panic!("sink {sink}, seed {seed}: {e:#}"));
        assert_eq!(verification.committed_lines, verification.input_rows);
        if dead_letters {
            let letters = census::verify_dead_letters(&work.path().join("dead-letters"), data)
                .unwrap_or_else(|e| panic!("sink {sink}, seed {seed}: dead letters: {e:#}"));
            println!("  {letters} dead letters committed, each exactly once");
        }
        let outputs = ["output", "dead-letters"];
        let hidden: Vec<String> = outputs[..1 + usize::from(dead_letters)]
            .iter()
            .flat_map(|dir| std::fs::read_dir(work.path().join(dir)).unwrap())
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(
            hidden.is_empty(),
            "sink {sink}, seed {seed}: left behind {hidden:?}"
        );
    }
    if unaligned {
        assert!(
            stored_in_flight > 0,
            "sink {sink}: no checkpoint a run was killed after held records in flight"
        );
    }
}

#[test]
fn two_phase_commit_file_sink_survives_sigkill() {
    kill_test("2pc", &[], 3);
}

#[test]
fn write_ahead_log_sink_survives_sigkill() {
    kill_test("wal", &[], 3);
}

/// Unaligned checkpoints under backpressure (the aggregation pauses after each row, so the
/// source's output queues stay full): the checkpoints that the kills fall between store
/// the records in flight, and the restores replay them.
#[test]
fn unaligned_checkpoints_under_backpressure_survive_sigkill() {
    let extra = [
        "--unaligned",
        "--slow-aggregation-us",
        "100",
        "--rate",
        "60000",
    ];
    kill_test("2pc", &extra, 2);
    kill_test("wal", &extra, 1);
}

/// The census files with every `every`-th row (from a seeded offset) replaced by one that
/// does not decode: a word for a number, a field too few, a field too many.
fn census_with_malformed_rows(dir: &Path, seed: u64, every: usize) -> usize {
    let mut rng = Rng(seed);
    let mut malformed = 0;
    for entry in std::fs::read_dir(data_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "csv") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let offset = 1 + rng.below(every as u64) as usize;
        let lines: Vec<String> = text
            .lines()
            .enumerate()
            .map(|(i, line)| {
                if i == 0 || !(i + offset).is_multiple_of(every) {
                    return line.to_string();
                }
                malformed += 1;
                match rng.below(3) {
                    0 => line.replacen(',', ",x", 4).replacen(",x", ",", 3),
                    1 => line
                        .rsplit_once(',')
                        .map_or(line, |(head, _)| head)
                        .to_string(),
                    _ => format!("{line},extra"),
                }
            })
            .collect();
        std::fs::write(dir.join(path.file_name().unwrap()), lines.join("\n") + "\n").unwrap();
    }
    malformed
}

/// Malformed rows become dead letters, committed by a transactional file sink of their own:
/// through the same kills, every malformed row is committed exactly once as a dead letter,
/// and the aggregation over the other rows is exact.
#[test]
fn dead_letters_are_committed_exactly_once_through_sigkill() {
    let data = tempfile::tempdir().unwrap();
    let malformed = census_with_malformed_rows(data.path(), 17, 97);
    let expected = census::expected_output(data.path()).unwrap();
    assert_eq!(
        expected.malformed.len(),
        malformed,
        "the oracle sees every bad row"
    );
    kill_test_over("2pc", &["--dead-letters"], 2, data.path());
    kill_test_over("wal", &["--dead-letters"], 1, data.path());
}

#[test]
fn resuming_a_finished_job_does_not_run_it_again() {
    let work = tempfile::tempdir().unwrap();
    for resume in [false, true] {
        let (mut child, _) = spawn(work.path(), "2pc", resume, &[]);
        assert!(wait_bounded(&mut child, Duration::from_secs(120), "census").success());
        let verification = census::verify(&work.path().join("output"), &data_dir()).unwrap();
        assert_eq!(
            verification.committed_lines, verification.input_rows,
            "resume={resume}"
        );
    }
}
