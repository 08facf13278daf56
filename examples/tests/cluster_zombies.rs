//! Stale processes of a cluster with checkpoints on object storage (the S3-compatible server
//! of `scripts/s3-server.sh`, which has no locks: the job record's compare-and-swap is the
//! only fence there). A first cluster runs the census job; then its JobManager is stopped
//! (SIGSTOP) — or its JobManager dies and its TaskManagers are stopped — a second cluster
//! takes the job over from S3 and runs it to its end, and the stopped processes continue
//! (SIGCONT). They must commit nothing more: the output stays exactly what one uninterrupted
//! run gives, read back with plain file reads, and a stale JobManager ends fenced.

use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_examples::census;
use weir_testkit::local_cluster::LocalCluster;

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

/// A census cluster over the shared work directory (its output) and checkpoint storage,
/// logging into `logs-<name>`.
fn census_cluster(work: &Path, url: &str, name: &str) -> LocalCluster {
    let work_dir = work.join("job");
    let args = [
        "--work-dir",
        work_dir.to_str().unwrap(),
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
    ];
    LocalCluster::new(
        env!("CARGO_BIN_EXE_census"),
        &args,
        &work.join(format!("logs-{name}")),
    )
}

/// Waits until the cluster's JobManager logged `n` completed checkpoints.
fn await_completed(cluster: &LocalCluster, n: usize) {
    cluster.await_log("jobmanager-1.err", "Completed", n, Duration::from_secs(90));
}

/// Runs the successor to its end and checks the output.
fn successor_finishes(second: &mut LocalCluster, work: &Path) {
    let (status, out) = second.wait_jobmanager(Duration::from_secs(240));
    assert!(
        status.success() && out.contains("Verified:"),
        "the successor failed ({status:?}): {out}\n{}",
        second.all_logs()
    );
    verify(work, "after the successor");
}

fn verify(work: &Path, when: &str) {
    let verification = census::verify(&work.join("job/output"), &data_dir())
        .unwrap_or_else(|e| panic!("{when}: {e:#}"));
    assert_eq!(
        verification.committed_lines, verification.input_rows,
        "{when}"
    );
}

#[test]
fn a_stopped_jobmanager_commits_nothing_after_a_successor_finished_the_job() {
    let work = tempfile::tempdir().unwrap();
    let url = s3_url("stale-jobmanager");
    let mut first = census_cluster(work.path(), &url, "first");
    first.start(3, 1);
    await_completed(&first, 2);
    first.stop_jobmanager();
    let mut second = census_cluster(work.path(), &url, "second");
    second.start(3, 1);
    successor_finishes(&mut second, work.path());
    first.continue_jobmanager();
    let (status, _) = first.wait_jobmanager(Duration::from_secs(240));
    let log = first.log("jobmanager-1.err");
    assert!(
        !status.success() && log.contains("lost the job"),
        "the stale JobManager did not end fenced ({status:?}):\n{log}"
    );
    first.wait_taskmanagers(Duration::from_secs(90));
    verify(work.path(), "after the stale JobManager continued");
}

#[test]
fn stopped_taskmanagers_of_a_dead_jobmanager_commit_nothing_after_a_successor_finished() {
    let work = tempfile::tempdir().unwrap();
    let url = s3_url("stale-taskmanagers");
    let mut first = census_cluster(work.path(), &url, "first");
    first.start(3, 1);
    await_completed(&first, 2);
    let stale = first.taskmanager_ids();
    for id in &stale {
        first.stop_taskmanager(id);
    }
    first.kill_jobmanager();
    let mut second = census_cluster(work.path(), &url, "second");
    second.start(3, 1);
    successor_finishes(&mut second, work.path());
    for id in &stale {
        first.continue_taskmanager(id);
    }
    // They find their JobManager gone and give up registering with it (a minute), whatever
    // they had in hand when they stopped.
    first.wait_taskmanagers(Duration::from_secs(120));
    verify(work.path(), "after the stale TaskManagers continued");
}
