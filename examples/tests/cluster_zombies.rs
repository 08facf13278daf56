//! Zombie sweeps of a cluster with checkpoints on object storage (the S3-compatible server of
//! `scripts/s3-server.sh`, which has no locks: the job record's compare-and-swap and the
//! sinks' own fences are all there is). A first cluster (a JobManager and three
//! TaskManagers) runs the census job; one of its processes is stopped (SIGSTOP) right before
//! its N-th durable operation; a second cluster takes the job over from S3 and runs it to
//! its end; then the stopped process continues (SIGCONT) — and must commit nothing more:
//! - `stale_jobmanager`: the JobManager stops right before its N-th request that writes
//!   object storage (checkpoint metadata, the job record, clean-ups) — the request is held
//!   and reaches storage only after it continues ([`StorageStops`]);
//! - `stale_taskmanager_storage`: TaskManager `tm-1` stops right before its N-th write to
//!   object storage (its state files), and the first JobManager dies;
//! - `stale_taskmanager_files`: `tm-1` stops right before its N-th durable file operation
//!   under the job's directory (the file sink's staging and commits), and the first
//!   JobManager dies.
//!
//! After each trial the committed output, read back with plain file reads, must be exactly
//! what one uninterrupted run gives, and a last `--resume` must find the job finished and
//! exact. CI runs a sample of points; `WEIR_CRASH_SWEEP=full` tries every one
//! (`scripts/crash-sweep.sh`), `WEIR_CRASH_SWEEP=n` n of them, and `WEIR_CRASH_POINT=n`
//! replays one. Each sweep prints `cluster zombie sweep <name>: …` with its figures.

use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_examples::census;
use weir_testkit::crash_points::{self, absolute, inject, Fault};
use weir_testkit::local_cluster::LocalCluster;
use weir_testkit::storage_stops::StorageStops;

/// How long a cluster may take to reach a point or to finish before the trial is called hung.
const HANG: Duration = Duration::from_secs(240);

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/census")
}

/// A fresh prefix on the test bucket.
fn s3_url(name: &str) -> String {
    let bucket = std::env::var("WEIR_S3_URL").unwrap_or_else(|_| {
        panic!("WEIR_S3_URL is not set: run through scripts/test.sh, or `eval $(scripts/s3-server.sh start)`")
    });
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{bucket}/{name}-{}-{nanos}", std::process::id())
}

/// The census job's flags over `work_dir` (its output) and checkpoint storage `url`.
fn census_args(work_dir: &Path, url: &str) -> Vec<String> {
    [
        "--work-dir",
        &work_dir.display().to_string(),
        "--quiet",
        "--parallelism",
        "3",
        "--fail-after-rows",
        "0",
        "--rate",
        "4000",
        "--checkpoint-interval-ms",
        "150",
        "--no-local-recovery",
        "--checkpoint-storage",
        url,
    ]
    .map(String::from)
    .to_vec()
}

/// A census cluster over `work`'s job directory and checkpoint storage `url`, logging into
/// `logs-<name>`.
fn census_cluster(work: &Path, url: &str, name: &str) -> LocalCluster {
    let args = census_args(&work.join("job"), url);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    LocalCluster::new(
        env!("CARGO_BIN_EXE_census"),
        &args,
        &work.join(format!("logs-{name}")),
    )
}

fn verify(work: &Path, when: &str) -> Result<(), String> {
    let verification = census::verify(&work.join("job/output"), &data_dir())
        .map_err(|e| format!("{when}: {e:#}"))?;
    if verification.committed_lines != verification.input_rows {
        return Err(format!(
            "{when}: {} committed lines for {} input rows",
            verification.committed_lines, verification.input_rows
        ));
    }
    Ok(())
}

/// Which process of the first cluster goes stale, and where it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stale {
    /// The JobManager, at its N-th object-storage write.
    JobManagerStorage,
    /// TaskManager `tm-1`, at its N-th object-storage write; the JobManager dies.
    TaskManagerStorage,
    /// TaskManager `tm-1`, at its N-th durable file operation under the job's directory;
    /// the JobManager dies.
    TaskManagerFiles,
}

impl Stale {
    fn name(self) -> &'static str {
        match self {
            Stale::JobManagerStorage => "stale_jobmanager",
            Stale::TaskManagerStorage => "stale_taskmanager_storage",
            Stale::TaskManagerFiles => "stale_taskmanager_files",
        }
    }

    fn role(self) -> &'static str {
        match self {
            Stale::JobManagerStorage => "jobmanager",
            Stale::TaskManagerStorage | Stale::TaskManagerFiles => "tm-1",
        }
    }
}

/// What one trial saw.
#[derive(Debug, Default)]
struct Outcome {
    /// The stale process ended (or its job did) before it reached the point.
    finished_first: bool,
    /// Why the woken process ended, if with an error.
    reason: Option<String>,
}

/// The first cluster, with `stale`'s process set up to stop at `point` (or only to count,
/// with `None`): the cluster and the storage proxy (for storage points).
fn first_cluster(
    stale: Stale,
    work: &Path,
    url: &str,
    point: Option<u64>,
    file_log: Option<PathBuf>,
) -> (LocalCluster, Option<StorageStops>) {
    let mut cluster = census_cluster(work, url, "first");
    // Processes that lost their JobManager give up soon, so that a trial does not wait long
    // for them; a JobManager that lost its TaskManagers does too. A stale JobManager's
    // TaskManagers still try to register with it when it wakes (the successor takes about
    // ten seconds), so that it has a cluster to act through.
    let registration_ms = match stale {
        Stale::JobManagerStorage => "30000",
        Stale::TaskManagerStorage | Stale::TaskManagerFiles => "8000",
    };
    cluster.set_cluster_arg("--registration-timeout-ms", registration_ms);
    cluster.set_cluster_arg("--slot-timeout-ms", "8000");
    let stops = match stale {
        Stale::JobManagerStorage | Stale::TaskManagerStorage => {
            let stops = StorageStops::to_test_server(point);
            let endpoint = stops.endpoint.clone();
            cluster.prepare(stale.role(), move |command| {
                command.env("AWS_ENDPOINT", &endpoint);
            });
            Some(stops)
        }
        Stale::TaskManagerFiles => {
            let dir = work.join("job");
            let fault = point.map_or(Fault::None, Fault::StopAt);
            cluster.prepare(stale.role(), move |command| {
                inject(command, &dir, fault, file_log.as_deref());
            });
            None
        }
    };
    cluster.start(3, 1);
    if let Some(stops) = &stops {
        let pid = match stale {
            Stale::JobManagerStorage => cluster.jobmanager_pid(),
            _ => cluster.taskmanager_pid("tm-1"),
        };
        stops.watch(pid.expect("the stale process runs"));
    }
    (cluster, stops)
}

/// The durable operations of the stale process in an undisturbed run.
fn count(stale: Stale) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let work = absolute(dir.path());
    std::fs::create_dir_all(work.join("job")).unwrap();
    let log = work.join("ops.log");
    let (mut cluster, stops) = first_cluster(
        stale,
        &work,
        &s3_url(&format!("{}-count", stale.name())),
        None,
        Some(log.clone()),
    );
    let (status, out) = cluster.wait_jobmanager(HANG);
    assert!(
        status.success() && out.contains("Verified:"),
        "the counting run failed ({status:?}): {out}\n{}",
        cluster.all_logs()
    );
    cluster.wait_taskmanagers(HANG);
    match stops {
        Some(stops) => stops.requests().len() as u64,
        None => crash_points::read_log(&log).len() as u64,
    }
}

/// One trial: `stale`'s process stopped at `point`, a second cluster run to the end, the
/// stale process continued, a last `--resume`, the output checked after each.
fn trial(stale: Stale, point: u64) -> Result<Outcome, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let work = absolute(dir.path());
    std::fs::create_dir_all(work.join("job")).map_err(|e| e.to_string())?;
    let url = s3_url(&format!("{}-{point}", stale.name()));
    let (mut first, stops) = first_cluster(stale, &work, &url, Some(point), None);
    let mut outcome = Outcome::default();
    let reached = match (&stops, stale) {
        (Some(stops), Stale::JobManagerStorage) => {
            stops.wait_stopped(HANG, || first.jobmanager_exited())
        }
        (Some(stops), _) => stops.wait_stopped(HANG, || first.taskmanager_exited("tm-1")),
        (None, _) => {
            let deadline = std::time::Instant::now() + HANG;
            loop {
                if first.taskmanager_stopped("tm-1") {
                    break true;
                }
                if first.taskmanager_exited("tm-1") || std::time::Instant::now() > deadline {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    if !reached {
        let (status, out) = first.wait_jobmanager(HANG);
        if !status.success() {
            return Err(format!(
                "the first cluster failed before point {point} ({status:?}): {out}\n{}",
                first.all_logs()
            ));
        }
        outcome.finished_first = true;
        verify(&work, "a run that ended before its point")?;
        return Ok(outcome);
    }
    if stale != Stale::JobManagerStorage {
        // The stale TaskManager's JobManager dies: a successor takes the job over.
        first.kill_jobmanager();
    }
    let mut second = census_cluster(&work, &url, "second");
    second.start(3, 1);
    let (status, out) = second.wait_jobmanager(HANG);
    if !status.success() || !out.contains("Verified:") {
        return Err(format!(
            "the successor failed ({status:?}): {out}\n{}\n{}",
            second.all_logs(),
            first.all_logs()
        ));
    }
    verify(&work, "after the successor")?;
    if let Some(stops) = &stops {
        stops.release();
    }
    match stale {
        Stale::JobManagerStorage => {
            first.continue_jobmanager();
            let (status, _) = first.wait_jobmanager(HANG);
            if !status.success() {
                outcome.reason = crash_points::ending_reason(&first.log("jobmanager-1.err"))
                    .or_else(|| Some(format!("{status}")));
            }
        }
        _ => first.continue_taskmanager("tm-1"),
    }
    let stuck = first.wait_taskmanagers(HANG);
    if !stuck.is_empty() {
        return Err(format!(
            "stale TaskManagers {stuck:?} never ended:\n{}",
            first.all_logs()
        ));
    }
    if stale != Stale::JobManagerStorage {
        outcome.reason = crash_points::ending_reason(&first.log("tm-1-1.err"));
    }
    verify(&work, "after the stale process continued").map_err(|problem| {
        format!(
            "{problem}\nthe stale {} said:\n{}",
            stale.role(),
            tail(&first.log(&format!("{}-1.err", stale.role())))
        )
    })?;
    // Whatever the stale process did, the job is not stranded: a resume finds it finished.
    let last = std::process::Command::new(env!("CARGO_BIN_EXE_census"))
        .args(census_args(&work.join("job"), &url))
        .arg("--resume")
        .env("RUST_LOG", "weir=warn")
        .output()
        .map_err(|e| e.to_string())?;
    if !last.status.success() {
        return Err(format!(
            "a resume after the stale process failed: {}{}",
            String::from_utf8_lossy(&last.stdout),
            String::from_utf8_lossy(&last.stderr)
        ));
    }
    verify(&work, "after a last --resume")?;
    Ok(outcome)
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

fn sweep(stale: Stale, sample: usize) {
    let total = count(stale);
    let seed = weir_testkit::seeds(1)[0];
    let points = crash_points::points(1..=total, sample, seed);
    let (outcomes, failures) = crash_points::run_trials(
        &points,
        |point| trial(stale, point),
        |point| {
            format!(
                "stop point {point} (replay: WEIR_CRASH_POINT={point} cargo nextest run -p weir-examples --test cluster_zombies {})",
                stale.name()
            )
        },
    );
    println!(
        "cluster zombie sweep {}: {} trials over stop points 1..={total} ({} ended before their \
         point), {} violations",
        stale.name(),
        points.len(),
        outcomes.iter().filter(|o| o.finished_first).count(),
        failures.len()
    );
    crash_points::print_reasons(outcomes.iter().filter_map(|o| o.reason.as_deref()));
    assert!(
        failures.is_empty(),
        "{}: {} of {} stop points broke exactly-once:\n{}",
        stale.name(),
        failures.len(),
        points.len(),
        failures.join("\n")
    );
}

#[test]
fn stale_jobmanager() {
    sweep(Stale::JobManagerStorage, 3);
}

#[test]
fn stale_taskmanager_storage() {
    sweep(Stale::TaskManagerStorage, 3);
}

#[test]
fn stale_taskmanager_files() {
    sweep(Stale::TaskManagerFiles, 3);
}
