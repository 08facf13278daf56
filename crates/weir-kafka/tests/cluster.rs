//! The Kafka word count in cluster mode: a JobManager and three TaskManagers as real
//! processes on 127.0.0.1. Its committed output must be exactly the expected running counts
//! — also when a TaskManager SIGKILLs itself between a checkpoint's completion and its
//! transaction's commit, and when another is SIGKILLed at a seeded random moment, each
//! replaced by a new TaskManager.
//!
//! Seeds: `WEIR_SEED=s` replays one, `WEIR_SEEDS=n` runs n.

mod common;

use std::time::{Duration, SystemTime};

use weir_kafka::client_config::KafkaConnection;
use weir_kafka::word_count;
use weir_testkit::local_cluster::LocalCluster;
use weir_testkit::{report_kill, seeds, Rng};

const PARTITIONS: i32 = 3;
const RECORDS: u64 = 30_000;

struct Setup {
    input: String,
    output: String,
    expected: std::collections::HashMap<String, u64>,
    work: tempfile::TempDir,
}

fn setup() -> Setup {
    let input = common::unique("cluster-words");
    let output = common::unique("cluster-counts");
    let connection = KafkaConnection::new(common::bootstrap());
    weir_kafka::admin::ensure_topic(&connection, &output, PARTITIONS).expect("output topic");
    let expected =
        word_count::produce_words(&common::bootstrap(), &input, PARTITIONS, RECORDS, 300)
            .expect("produce input");
    Setup {
        input,
        output,
        expected,
        work: tempfile::tempdir().expect("work dir"),
    }
}

fn cluster(setup: &Setup, rate: &str) -> LocalCluster {
    let work_dir = setup.work.path().join("job");
    let bootstrap = common::bootstrap();
    let args = [
        "--bootstrap",
        &bootstrap,
        "--input",
        &setup.input,
        "--output",
        &setup.output,
        "--guarantee",
        "exactly_once",
        "--parallelism",
        "3",
        "--rate",
        rate,
        "--checkpoint-interval-ms",
        "200",
        "--operation-timeout-ms",
        "10000",
        "--work-dir",
        work_dir.to_str().unwrap(),
    ];
    LocalCluster::new(
        env!("CARGO_BIN_EXE_weir-kafka-count"),
        &args,
        &setup.work.path().join("logs"),
    )
}

fn finish_and_verify(cluster: &mut LocalCluster, setup: &Setup, what: &str) {
    let (status, _) = cluster.wait_jobmanager(Duration::from_secs(180));
    assert!(
        status.success(),
        "{what}: the JobManager failed:\n{}",
        cluster.all_logs()
    );
    let committed = word_count::committed_counts(&common::bootstrap(), &setup.output, PARTITIONS)
        .expect("read output");
    if let Err(problems) = word_count::verify_counts(&committed, &setup.expected, true) {
        panic!(
            "{what}: output is wrong: {problems}\n{}",
            cluster.all_logs()
        );
    }
    assert!(
        cluster
            .wait_taskmanagers(Duration::from_secs(10))
            .is_empty(),
        "{what}: TaskManagers did not exit"
    );
}

#[test]
fn word_count_on_three_taskmanagers_is_exactly_once() {
    let setup = setup();
    let mut cluster = cluster(&setup, "0");
    cluster.start(3, 1);
    finish_and_verify(&mut cluster, &setup, "cluster run");
}

#[test]
fn taskmanagers_dying_before_and_after_commits_lose_and_duplicate_nothing() {
    for seed in seeds(1) {
        println!("seed {seed} (replay with WEIR_SEED={seed})");
        let mut rng = Rng(seed * 31_337);
        let setup = setup();
        let mut cluster = cluster(&setup, "8000");
        let since = SystemTime::now();
        cluster.start_jobmanager();
        // tm-1 kills itself right before its first transaction commit, after the
        // checkpoint completed: the hard case of two-phase commit.
        cluster.start_taskmanager_with("tm-1", 1, &["--kill-before-commit"]);
        cluster.start_taskmanager("tm-2", 1);
        cluster.start_taskmanager("tm-3", 1);
        let checkpoints = setup.work.path().join("job/checkpoints");
        cluster.expect_self_kill("tm-1", "killing myself before committing");
        report_kill(
            &checkpoints,
            word_count::JOB_NAME,
            "between-completion-and-commit",
            true,
            since,
        );
        cluster.start_taskmanager("tm-4", 1);
        // Then a random SIGKILL once the job committed again.
        if let Some(victim) = cluster.kill_random_after_next_checkpoint(
            &checkpoints,
            word_count::JOB_NAME,
            &mut rng,
            "tm-5",
            1,
        ) {
            println!("  SIGKILL {victim}");
        }
        finish_and_verify(&mut cluster, &setup, &format!("seed {seed}"));
    }
}

/// A TaskManager that stalls right before its first transaction commit (it stops itself,
/// after the checkpoint completed) is lost by heartbeat; the JobManager restarts the job on
/// a replacement, which settles the transaction from the checkpoint and finishes the job.
/// Continued, the stalled TaskManager finds its producer fenced and must neither commit nor
/// send anything again: the output stays exactly the expected running counts.
#[test]
fn a_stalled_taskmanager_commits_and_resends_nothing_after_the_job_moved_on() {
    let setup = setup();
    let mut cluster = cluster(&setup, "8000");
    cluster.start_jobmanager();
    cluster.start_taskmanager_with("tm-1", 1, &["--stop-before-commit", "1"]);
    cluster.start_taskmanager("tm-2", 1);
    cluster.start_taskmanager("tm-3", 1);
    cluster.await_log(
        "tm-1-1.err",
        "stopping myself before committing",
        1,
        Duration::from_secs(120),
    );
    cluster.start_taskmanager("tm-4", 1);
    let (status, _) = cluster.wait_jobmanager(Duration::from_secs(180));
    assert!(
        status.success(),
        "the JobManager failed:\n{}",
        cluster.all_logs()
    );
    cluster.continue_taskmanager("tm-1");
    // It gives up on its JobManager within the registration timeout; whatever it tried
    // meanwhile is in the log before the output is read.
    cluster.wait_taskmanager_exit("tm-1", Duration::from_secs(120));
    let committed = word_count::committed_counts(&common::bootstrap(), &setup.output, PARTITIONS)
        .expect("read output");
    if let Err(problems) = word_count::verify_counts(&committed, &setup.expected, true) {
        panic!(
            "output is wrong after the stalled TaskManager continued: {problems}\n{}",
            cluster.log("tm-1-1.err")
        );
    }
}
