//! Cluster mode with real processes on 127.0.0.1: the census job on one JobManager and
//! three TaskManagers, with TaskManagers SIGKILLed and replaced, the JobManager SIGKILLed
//! and restarted, and a TaskManager SIGSTOPped — the committed output must be exactly what
//! an uninterrupted local run gives.
//!
//! Seeds: `WEIR_SEED=s` replays one, `WEIR_SEEDS=n` runs n.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use weir_examples::census;
use weir_testkit::local_cluster::LocalCluster;
use weir_testkit::{latest_checkpoint, report_kill, seeds, Rng};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/census")
}

/// A census cluster over `work`: parallelism 3, throttled so that the run lasts a few
/// seconds with checkpoints every 150 ms and a pause before each commit (which widens the
/// window between a checkpoint's completion and its commit).
fn census_cluster(work: &Path, rate: &str) -> LocalCluster {
    census_cluster_with(work, rate, &[])
}

/// [`census_cluster`] with more census options.
fn census_cluster_with(work: &Path, rate: &str, extra: &[&str]) -> LocalCluster {
    let work_dir = work.join("job");
    let mut args = vec![
        "--work-dir",
        work_dir.to_str().unwrap(),
        "--quiet",
        "--parallelism",
        "3",
        "--fail-after-rows",
        "0",
        "--rate",
        rate,
        "--checkpoint-interval-ms",
        "150",
        "--commit-delay-ms",
        "30",
    ];
    args.extend_from_slice(extra);
    LocalCluster::new(env!("CARGO_BIN_EXE_census"), &args, &work.join("logs"))
}

/// Unaligned checkpoints across processes: barriers overtake the queues over the network
/// (priority frames) into a slowed aggregation, the in-flight records are stored, and a
/// TaskManager killed after such a checkpoint is replaced and the job restores them, with
/// exactly-once output.
#[test]
fn unaligned_checkpoints_across_taskmanagers_survive_a_kill() {
    let work = tempfile::tempdir().unwrap();
    let extra = ["--unaligned", "--slow-aggregation-us", "300"];
    let mut cluster = census_cluster_with(work.path(), "40000", &extra);
    cluster.start(3, 1);
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut stored = 0;
    while stored == 0 && Instant::now() < deadline && !cluster.jobmanager_exited() {
        std::thread::sleep(Duration::from_millis(20));
        stored = census::in_flight_chunks(&checkpoints(work.path()));
    }
    assert!(
        stored > 0,
        "no checkpoint stored records in flight:\n{}",
        cluster.all_logs()
    );
    let victim = cluster.taskmanager_ids()[0].clone();
    println!("SIGKILL {victim} after a checkpoint with {stored} in-flight chunks");
    cluster.kill_taskmanager(&victim);
    cluster.start_taskmanager("tm-r0", 1);
    let verification = finish_and_verify(&mut cluster, work.path(), "unaligned cluster run");
    assert_eq!(verification.committed_lines, verification.input_rows);
    assert!(
        cluster.log("jobmanager-1.err").contains("TaskManager lost"),
        "the kill went unnoticed"
    );
}

fn checkpoints(work: &Path) -> PathBuf {
    work.join("job/checkpoints")
}

/// Waits (at most `limit`) until a checkpoint newer than `after` has completed.
fn await_checkpoint(work: &Path, after: u64, limit: Duration) -> u64 {
    let deadline = Instant::now() + limit;
    loop {
        let latest = latest_checkpoint(&checkpoints(work), census::JOB_NAME);
        if latest > after || Instant::now() > deadline {
            return latest;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for the JobManager's end and checks that the committed output is exactly once.
fn finish_and_verify(cluster: &mut LocalCluster, work: &Path, what: &str) -> census::Verification {
    let (status, out) = cluster.wait_jobmanager(Duration::from_secs(180));
    assert!(
        status.success(),
        "{what}: the JobManager failed ({status:?}):\n{}",
        cluster.all_logs()
    );
    assert!(out.contains("Verified:"), "{what}: {out}");
    let left = cluster.wait_taskmanagers(Duration::from_secs(10));
    assert!(
        left.is_empty(),
        "{what}: TaskManagers {left:?} did not exit after the job ended"
    );
    census::verify(&work.join("job/output"), &data_dir())
        .unwrap_or_else(|e| panic!("{what}: {e:#}\n{}", cluster.all_logs()))
}

#[test]
fn census_on_three_taskmanagers_equals_the_local_run() {
    let work = tempfile::tempdir().unwrap();
    let mut cluster = census_cluster(work.path(), "40000");
    cluster.start(3, 1);
    let distributed = finish_and_verify(&mut cluster, work.path(), "cluster run");
    for tm in ["tm-1", "tm-2", "tm-3"] {
        let log = cluster.log(&format!("{tm}-1.out"));
        assert!(log.contains("Finished"), "{tm}: {log}");
        assert!(
            cluster.log(&format!("{tm}-1.err")).contains("run deployed"),
            "{tm} ran nothing"
        );
    }
    // The same job in one process.
    let local_work = tempfile::tempdir().unwrap();
    let mut options = census::CensusOptions::new(data_dir(), local_work.path());
    options.parallelism = 3;
    options.fail_after_rows = None;
    options.rate = 1e9;
    census::run(&options).unwrap();
    let local = census::verify(&options.output, &data_dir()).unwrap();
    assert_eq!(distributed.finals, local.finals);
    assert_eq!(distributed.committed_lines, local.committed_lines);
}

#[test]
fn taskmanager_kills_with_replacements_are_exactly_once() {
    for seed in seeds(2) {
        let mut rng = Rng(seed * 104_729);
        let work = tempfile::tempdir().unwrap();
        let mut cluster = census_cluster(work.path(), "4000");
        let since = SystemTime::now();
        cluster.start(3, 1);
        let kills = 2 + rng.below(2);
        println!("seed {seed}: {kills} TaskManager kills (replay with WEIR_SEED={seed})");
        let mut checkpoint = 0;
        for k in 0..kills {
            // One kill in three after the first lands while the job fails over to the
            // replacement and restores; the others after the next checkpoint, right after
            // its completion (its commit pauses 30 ms) or a little later.
            let (window, delay) = if k > 0 && rng.below(3) == 0 {
                ("during-restore", rng.below(300))
            } else {
                checkpoint = await_checkpoint(work.path(), checkpoint, Duration::from_secs(300));
                if rng.below(2) == 0 {
                    ("between-completion-and-commit", rng.below(20))
                } else {
                    ("mid-run", 50 + rng.below(400))
                }
            };
            std::thread::sleep(Duration::from_millis(delay));
            if cluster.jobmanager_exited() {
                println!("  the job ended before kill {k}");
                report_kill(
                    &checkpoints(work.path()),
                    census::JOB_NAME,
                    window,
                    false,
                    since,
                );
                break;
            }
            let ids = cluster.taskmanager_ids();
            let victim = ids[rng.below(ids.len() as u64) as usize].clone();
            println!(
                "  kill {k} ({window}): SIGKILL {victim} {delay} ms after checkpoint {checkpoint}"
            );
            let killed = cluster.kill_taskmanager(&victim);
            report_kill(
                &checkpoints(work.path()),
                census::JOB_NAME,
                window,
                killed,
                since,
            );
            cluster.start_taskmanager(&format!("tm-r{k}"), 1);
        }
        let verification = finish_and_verify(&mut cluster, work.path(), &format!("seed {seed}"));
        assert_eq!(verification.committed_lines, verification.input_rows);
        let jm = cluster.log("jobmanager-1.err");
        let restarts = jm.matches("restoring").count();
        println!(
            "  {} failovers, {restarts} restores",
            jm.matches("TaskManager lost").count()
        );
        assert!(
            jm.contains("TaskManager lost"),
            "seed {seed}: no loss seen:\n{jm}"
        );
    }
}

#[test]
fn a_killed_jobmanager_is_restarted_and_resumes_the_job() {
    let work = tempfile::tempdir().unwrap();
    let mut cluster = census_cluster(work.path(), "4000");
    cluster.start(3, 1);
    let checkpoint = await_checkpoint(work.path(), 1, Duration::from_secs(300));
    std::thread::sleep(Duration::from_millis(10));
    println!("SIGKILL the JobManager after checkpoint {checkpoint}");
    cluster.kill_jobmanager();
    std::thread::sleep(Duration::from_millis(300));
    cluster.start_jobmanager();
    let verification = finish_and_verify(&mut cluster, work.path(), "restarted JobManager");
    assert_eq!(verification.committed_lines, verification.input_rows);
    let log = cluster.log("jobmanager-2.err");
    assert!(
        log.contains("restoring"),
        "the new JobManager did not restore:\n{log}"
    );
}

#[test]
fn a_stopped_taskmanager_is_lost_by_heartbeat_and_its_messages_are_stale() {
    let work = tempfile::tempdir().unwrap();
    let mut cluster = census_cluster(work.path(), "4000");
    cluster.start(3, 1);
    await_checkpoint(work.path(), 1, Duration::from_secs(300));
    cluster.stop_taskmanager("tm-2");
    // The heartbeat timeout is 2 s: the JobManager fails over to a replacement.
    cluster.start_taskmanager("tm-4", 1);
    std::thread::sleep(Duration::from_secs(4));
    cluster.continue_taskmanager("tm-2");
    let verification = finish_and_verify(&mut cluster, work.path(), "stopped TaskManager");
    assert_eq!(verification.committed_lines, verification.input_rows);
    let jm = cluster.log("jobmanager-1.err");
    assert!(
        jm.contains("no heartbeat"),
        "not detected by heartbeat:\n{jm}"
    );
    assert!(
        jm.contains("message of a stale session rejected"),
        "the continued TaskManager's messages were not rejected:\n{jm}"
    );
}

/// A proxy in front of one TaskManager's data port cuts the first data connection through
/// it in the middle of the stream: the tasks on it fail, the job recovers, exactly once,
/// and nothing hangs.
#[test]
fn a_data_connection_cut_mid_stream_recovers_exactly_once() {
    use weir_testkit::fault_proxy::FaultProxy;
    use weir_testkit::local_cluster::free_port;
    let work = tempfile::tempdir().unwrap();
    let mut cluster = census_cluster(work.path(), "8000");
    cluster.start(2, 1);
    // tm-3's peers dial it through the proxy (ids that sort first dial).
    let data_port = free_port();
    let target = format!("127.0.0.1:{data_port}").parse().unwrap();
    let proxy = FaultProxy::start("127.0.0.1:0", target, 32 * 1024, |n| n == 0);
    let bind = format!("127.0.0.1:{data_port}");
    let advertised = proxy.address.to_string();
    cluster.start_taskmanager_with(
        "tm-3",
        1,
        &[
            "--data-bind-address",
            &bind,
            "--advertised-host",
            &advertised,
        ],
    );
    let verification = finish_and_verify(&mut cluster, work.path(), "cut connection");
    assert_eq!(verification.committed_lines, verification.input_rows);
    assert_eq!(
        proxy.cuts.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "no connection was cut"
    );
    let jm = cluster.log("jobmanager-1.err");
    for line in jm.lines().filter(|l| l.contains("restarting")) {
        println!("{line}");
    }
    assert!(
        jm.contains("data connection to") || jm.contains("channel to"),
        "the failure does not name the connection:\n{jm}"
    );
    assert!(
        jm.contains("restoring") || jm.contains("restarting"),
        "no recovery:\n{jm}"
    );
}

/// Checkpoints on the S3-compatible server (`scripts/s3-server.sh`): the TaskManagers write
/// their state there directly, the JobManager the metadata; a TaskManager and then the
/// JobManager are SIGKILLed, and the job restores from S3 each time, exactly once.
#[test]
fn census_with_checkpoints_on_s3_survives_a_taskmanager_kill() {
    let bucket = std::env::var("WEIR_S3_URL").unwrap_or_else(|_| {
        panic!("WEIR_S3_URL is not set: run through scripts/test.sh, or `eval $(scripts/s3-server.sh start)`")
    });
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let url = format!("{bucket}/cluster-census-{}-{nanos}", std::process::id());
    let work = tempfile::tempdir().unwrap();
    let work_dir = work.path().join("job");
    let args = [
        "--work-dir",
        work_dir.to_str().unwrap(),
        "--quiet",
        "--parallelism",
        "3",
        "--fail-after-rows",
        "0",
        "--rate",
        "5000",
        "--checkpoint-interval-ms",
        "200",
        "--no-local-recovery",
        "--checkpoint-storage",
        &url,
    ];
    let mut cluster = LocalCluster::new(
        env!("CARGO_BIN_EXE_census"),
        &args,
        &work.path().join("logs"),
    );
    cluster.start(3, 1);
    // Wait for a completed checkpoint (the JobManager logs each), then kill a TaskManager.
    let deadline = Instant::now() + Duration::from_secs(300);
    while !cluster.log("jobmanager-1.err").contains("Completed") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    cluster.kill_taskmanager("tm-2");
    cluster.start_taskmanager("tm-4", 1);
    // Then the JobManager: started again, it resumes from its newest checkpoint on S3.
    let deadline = Instant::now() + Duration::from_secs(300);
    while cluster.log("jobmanager-1.err").matches("Completed").count() < 3
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    cluster.kill_jobmanager();
    cluster.start_jobmanager();
    let verification = finish_and_verify(&mut cluster, work.path(), "checkpoints on S3");
    assert_eq!(verification.committed_lines, verification.input_rows);
    for log in ["jobmanager-1.err", "jobmanager-2.err"] {
        let jm = cluster.log(log);
        assert!(
            jm.contains(&format!("location={url}/census/chk-")),
            "{log}: not restored from S3:\n{jm}"
        );
    }
}

/// Runs the census binary with `args` to its end (at most 60 s); its status and stderr.
fn census_process(work: &Path, args: &[&str]) -> (std::process::ExitStatus, String) {
    let work_dir = work.join("job");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_census"))
        .args([
            "--work-dir",
            work_dir.to_str().unwrap(),
            "--quiet",
            "--fail-after-rows",
            "0",
        ])
        .args(args)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    weir_testkit::wait_with_stderr(&mut child, Duration::from_secs(60), "census")
}

#[test]
fn a_taskmanager_built_from_another_job_graph_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let mut cluster = census_cluster(work.path(), "4000");
    cluster.start_jobmanager();
    // The same binary with another parallelism builds another job graph.
    let (status, stderr) = census_process(
        work.path(),
        &[
            "--role",
            "taskmanager",
            "--parallelism",
            "2",
            "--jobmanager-address",
            &cluster.jobmanager_address.clone(),
        ],
    );
    assert!(!status.success());
    assert!(
        stderr.contains("refused this TaskManager") && stderr.contains("another job graph"),
        "{stderr}"
    );
}

#[test]
fn bad_cluster_settings_name_the_setting() {
    let work = tempfile::tempdir().unwrap();
    // Nobody listens at the JobManager address: the TaskManager gives up after the
    // registration timeout, naming the address and the flag.
    let nowhere = format!("127.0.0.1:{}", weir_testkit::local_cluster::free_port());
    let (status, stderr) = census_process(
        work.path(),
        &[
            "--role",
            "taskmanager",
            "--jobmanager-address",
            &nowhere,
            "--registration-timeout-ms",
            "300",
        ],
    );
    assert!(!status.success());
    assert!(
        stderr.contains(&format!("cannot reach the JobManager at {nowhere}"))
            && stderr.contains("--jobmanager-address"),
        "{stderr}"
    );
    // The JobManager's port is taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let (status, stderr) = census_process(
        work.path(),
        &["--role", "jobmanager", "--jobmanager-address", &address],
    );
    assert!(!status.success());
    assert!(
        stderr.contains(&format!("cannot listen on {address}"))
            && stderr.contains("--jobmanager-address"),
        "{stderr}"
    );
    // A role without slots.
    let (status, stderr) = census_process(work.path(), &["--role", "taskmanager", "--slots", "0"]);
    assert!(!status.success());
    assert!(stderr.contains("--slots"), "{stderr}");
}

/// A copy of the census data under `work/data`, with line `index` (0-based, the header is
/// 0) of `file` edited field by field; the data directory and the edited file.
fn census_data_with_line_edited(
    work: &Path,
    file: &str,
    index: usize,
    edit: impl FnOnce(&mut Vec<String>),
) -> (PathBuf, PathBuf) {
    let data = work.join("data");
    std::fs::create_dir_all(&data).unwrap();
    for entry in std::fs::read_dir(data_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "csv") {
            std::fs::copy(&path, data.join(path.file_name().unwrap())).unwrap();
        }
    }
    let file = data.join(file);
    let text = std::fs::read_to_string(&file).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut fields: Vec<String> = lines[index].split(',').map(String::from).collect();
    edit(&mut fields);
    lines[index] = fields.join(",");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    (data, file)
}

/// A poison row — the aggregation panics on it, on every restart — makes the JobManager
/// give up after the restart strategy's attempts, naming the file and line the row was read
/// at: the origin travelled with the record from a source on one TaskManager through the
/// network to the aggregation on another.
#[test]
fn a_poison_record_is_named_across_taskmanagers_when_restarts_give_up() {
    let work = tempfile::tempdir().unwrap();
    // Line 3001 of census-2.csv (row 3000 after the header) gets an occupation of its own.
    let (data, file) = census_data_with_line_edited(work.path(), "census-2.csv", 3000, |f| {
        f[3] = "Poison".into()
    });
    let data_arg = data.to_string_lossy().into_owned();
    let extra = ["--data", data_arg.as_str(), "--poison-occupation", "Poison"];
    let mut cluster = census_cluster_with(work.path(), "200000", &extra);
    cluster.start(3, 1);
    let (status, out) = cluster.wait_jobmanager(Duration::from_secs(180));
    let log = cluster.log("jobmanager-1.err");
    assert!(!status.success(), "the job did not fail: {out}\n{log}");
    let named = format!("the record was read at {}:3001", file.display());
    assert!(
        log.contains(&named) && log.contains("poison record: occupation Poison"),
        "the JobManager's error does not name the record ({named}):\n{}",
        cluster.all_logs()
    );
    let gave_up = log
        .lines()
        .find(|l| l.contains("restart strategy gives up"))
        .unwrap_or_else(|| panic!("the restart strategy did not give up:\n{log}"));
    assert!(gave_up.contains(&named), "{gave_up}");
    // The origin reached the JobManager as a value (`WeirError::record_origin`), not only
    // inside the TaskManager's rendered message.
    let origin = serde_json::json!({"file": {"file": file.to_str().unwrap(), "line": 3001}});
    assert!(
        log.contains(&format!("census: failing record {origin}")),
        "the JobManager's error has no record origin ({origin}):\n{log}"
    );
}

/// A row that cannot be decoded, read by a source on one TaskManager under the policy to
/// fail, reaches the JobManager as the malformed record itself (`WeirError::malformed_record`):
/// its file, line, column and text, as in one process.
#[test]
fn a_malformed_record_reaches_the_jobmanager_as_a_value() {
    let work = tempfile::tempdir().unwrap();
    let (data, file) =
        census_data_with_line_edited(work.path(), "census-1.csv", 2000, |f| f[4] = "forty".into());
    let data_arg = data.to_string_lossy().into_owned();
    let mut cluster = census_cluster_with(work.path(), "200000", &["--data", data_arg.as_str()]);
    cluster.start(3, 1);
    let (status, out) = cluster.wait_jobmanager(Duration::from_secs(180));
    let log = cluster.log("jobmanager-1.err");
    assert!(!status.success(), "the job did not fail: {out}\n{log}");
    let line = log
        .lines()
        .find_map(|l| l.strip_prefix("census: malformed record "))
        .unwrap_or_else(|| {
            panic!(
                "no malformed record reached the JobManager:\n{}",
                cluster.all_logs()
            )
        });
    let record: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(
        record["origin"],
        serde_json::json!({"file": {"file": file.to_str().unwrap(), "line": 2001}}),
        "{line}"
    );
    assert_eq!(record["error"]["column"], "hours_per_week", "{line}");
    assert!(
        record["raw"].as_str().unwrap().contains(",forty,"),
        "{line}"
    );
}
