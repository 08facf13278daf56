//! The PostgreSQL word count in cluster mode: a JobManager and three TaskManagers as real
//! processes on 127.0.0.1, with PostgreSQL's two-phase commit. One TaskManager SIGKILLs
//! itself right before a COMMIT PREPARED (after the checkpoint completed) and another is
//! SIGKILLed at a seeded random moment; each is replaced. The table must hold exactly the
//! expected counts, and no prepared transaction may be left behind.
//!
//! Seeds: `WEIR_SEED=s` replays one, `WEIR_SEEDS=n` runs n.

mod common;

use std::time::{Duration, SystemTime};

use weir_postgres::word_count;
use weir_testkit::local_cluster::LocalCluster;
use weir_testkit::{report_kill, seeds, Rng};

const RECORDS: u64 = 20_000;
const WORDS: u64 = 200;

#[test]
fn exactly_once_table_survives_taskmanager_kills() {
    for seed in seeds(1) {
        println!("seed {seed} (replay with WEIR_SEED={seed})");
        let mut rng = Rng(seed * 7_777);
        let url = common::url();
        let table = common::unique("cluster_counts");
        let work = tempfile::tempdir().unwrap();
        let work_dir = work.path().join("job");
        let records = RECORDS.to_string();
        let words = WORDS.to_string();
        let args = [
            "--url",
            &url,
            "--table",
            &table,
            "--delivery",
            "exactly-once-append",
            "--records",
            &records,
            "--words",
            &words,
            "--rate",
            "6000",
            "--parallelism",
            "3",
            "--checkpoint-interval-ms",
            "200",
            "--work-dir",
            work_dir.to_str().unwrap(),
        ];
        let mut cluster = LocalCluster::new(
            env!("CARGO_BIN_EXE_weir-pg-count"),
            &args,
            &work.path().join("logs"),
        );
        let checkpoints = work_dir.join("checkpoints");
        let since = SystemTime::now();
        cluster.start_jobmanager();
        cluster.start_taskmanager_with("tm-1", 1, &["--kill-before-commit"]);
        cluster.start_taskmanager("tm-2", 1);
        cluster.start_taskmanager("tm-3", 1);
        cluster.expect_self_kill("tm-1", "killing myself before COMMIT PREPARED");
        report_kill(
            &checkpoints,
            word_count::JOB_NAME,
            "between-completion-and-commit",
            true,
            since,
        );
        cluster.start_taskmanager("tm-4", 1);
        if let Some(victim) = cluster.kill_random_after_next_checkpoint(
            &checkpoints,
            word_count::JOB_NAME,
            &mut rng,
            "tm-5",
            1,
        ) {
            println!("  SIGKILL {victim}");
        }
        let (status, _) = cluster.wait_jobmanager(Duration::from_secs(180));
        assert!(
            status.success(),
            "the JobManager failed:\n{}",
            cluster.all_logs()
        );
        let rows = word_count::table_rows(&url, &table).expect("read the table");
        let expected = word_count::expected_totals(RECORDS, WORDS);
        if let Err(problems) = word_count::verify_running_counts(&rows, &expected) {
            panic!(
                "seed {seed}: table is wrong: {problems}\n{}",
                cluster.all_logs()
            );
        }
        let left = common::prepared_transactions(&url, &format!("weir-count-{table}:%"));
        assert_eq!(left, 0, "prepared transactions left over");
    }
}

/// A TaskManager that stalls right before a `PREPARE TRANSACTION` (it stops itself, after
/// its task checked that the job is still its JobManager's) is lost by heartbeat; the
/// JobManager restarts the job on a replacement — same epoch, next attempt — which finishes
/// it. Continued, the stalled TaskManager must prepare nothing: the sink's fence row names the
/// newer attempt. The table must be exact and no prepared transaction left behind.
#[test]
fn a_stalled_taskmanager_of_an_earlier_attempt_prepares_nothing() {
    let url = common::url();
    let table = common::unique("cluster_stale");
    let work = tempfile::tempdir().unwrap();
    let work_dir = work.path().join("job");
    let records = 12_000u64;
    let args = [
        "--url",
        &url,
        "--table",
        &table,
        "--delivery",
        "exactly-once-append",
        "--records",
        &records.to_string(),
        "--words",
        &WORDS.to_string(),
        "--rate",
        "6000",
        "--parallelism",
        "2",
        "--checkpoint-interval-ms",
        "200",
        "--work-dir",
        work_dir.to_str().unwrap(),
    ];
    let mut cluster = LocalCluster::new(
        env!("CARGO_BIN_EXE_weir-pg-count"),
        &args,
        &work.path().join("logs"),
    );
    cluster.start_jobmanager();
    cluster.start_taskmanager_with("tm-1", 1, &["--stop-before-prepare", "2"]);
    cluster.start_taskmanager("tm-2", 1);
    cluster.await_log(
        "tm-1-1.err",
        "stopping myself before PREPARE TRANSACTION",
        1,
        Duration::from_secs(120),
    );
    cluster.start_taskmanager("tm-3", 1);
    let (status, _) = cluster.wait_jobmanager(Duration::from_secs(180));
    assert!(
        status.success(),
        "the JobManager failed:\n{}",
        cluster.all_logs()
    );
    cluster.continue_taskmanager("tm-1");
    // It finds its session gone; it gives up on its JobManager within the registration
    // timeout, and whatever it tried meanwhile must not have prepared anything.
    cluster.wait_taskmanager_exit("tm-1", Duration::from_secs(120));
    let left = common::prepared_transactions(&url, &format!("weir-count-{table}:%"));
    assert_eq!(
        left,
        0,
        "the stale TaskManager left a prepared transaction:\n{}",
        cluster.log("tm-1-1.err")
    );
    let rows = word_count::table_rows(&url, &table).expect("read the table");
    let expected = word_count::expected_totals(records, WORDS);
    if let Err(problems) = word_count::verify_running_counts(&rows, &expected) {
        panic!("table is wrong: {problems}\n{}", cluster.all_logs());
    }
}
