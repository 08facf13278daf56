//! Zombie sweeps of the Kafka word count (exactly once) in cluster mode on object storage
//! ([`weir_testkit::cluster_zombies`]): a first cluster's process is stopped right before its
//! N-th durable operation, a second cluster runs the job to its end, the stopped process
//! continues and must commit and re-send nothing:
//! - `kafka_stale_jobmanager`: the JobManager, at its N-th object-storage write;
//! - `kafka_stale_taskmanager_commit`: TaskManager `tm-1`, right before its N-th transaction
//!   commit (after the checkpoint completed).
//!
//! After each step the output topic's committed records hold every running count exactly
//! once. Each prints `cluster zombie sweep <name>: …`; `scripts/crash-sweep.sh` runs
//! every point (`WEIR_CRASH_SWEEP=full`).

mod common;

use std::path::Path;

use weir_kafka::client_config::KafkaConnection;
use weir_kafka::word_count;
use weir_testkit::cluster_zombies::{s3_prefix, ClusterZombieSweep, Stale, TrialJob};
use weir_testkit::crash_points::absolute;

const PARTITIONS: i32 = 3;
const RECORDS: u64 = 8000;
const WORDS: u64 = 100;
/// Commits of `tm-1` in one run, about: its one sink subtask has a transaction per
/// checkpoint, and a checkpoint of this cluster on the test S3 server takes about a second
/// end to end (points past a run's end count as ended before their point).
const COMMIT_POINTS: u64 = 5;

/// A fresh word count between fresh topics, its checkpoints under a fresh S3 prefix.
fn kafka_job(name: &str, trial: &str) -> TrialJob {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let root = absolute(dir.path());
    let work = root.join("job");
    std::fs::create_dir_all(&work).expect("the job directory");
    let bootstrap = common::bootstrap();
    let input = common::unique("cluster-zombie-words");
    let output = common::unique("cluster-zombie-counts");
    weir_kafka::admin::ensure_topic(&KafkaConnection::new(&bootstrap), &output, PARTITIONS)
        .expect("the output topic");
    let expected = word_count::produce_words(&bootstrap, &input, PARTITIONS, RECORDS, WORDS)
        .expect("the input topic");
    let args = [
        "--bootstrap",
        &bootstrap,
        "--input",
        &input,
        "--output",
        &output,
        "--guarantee",
        "exactly_once",
        "--parallelism",
        "3",
        "--rate",
        "2000",
        "--checkpoint-interval-ms",
        "150",
        "--operation-timeout-ms",
        "10000",
        "--work-dir",
        &work.display().to_string(),
        "-D",
        &format!(
            "state.checkpoints.dir={}",
            s3_prefix(&format!("{name}-{trial}"))
        ),
        "--no-local-recovery",
    ]
    .map(String::from)
    .to_vec();
    TrialJob {
        args,
        dir: root,
        files: work,
        check: Box::new(move |when| {
            let committed = word_count::committed_counts(&bootstrap, &output, PARTITIONS)
                .map_err(|e| format!("{when}: reading topic {output}: {e}"))?;
            word_count::verify_counts(&committed, &expected, true)
                .map_err(|problems| format!("{when}: topic {output}: {problems}"))
        }),
        keep: Box::new(dir),
    }
}

fn sweep(name: &str, stale: Stale, sample: usize) {
    let binary = Path::new(env!("CARGO_BIN_EXE_weir-kafka-count"));
    ClusterZombieSweep::new("weir-kafka", name, binary, stale, sample)
        .run(|trial| kafka_job(name, trial));
}

#[test]
fn kafka_stale_jobmanager() {
    sweep("kafka_stale_jobmanager", Stale::JobManagerStorage, 3);
}

#[test]
fn kafka_stale_taskmanager_commit() {
    let stale = Stale::TaskManagerFlag {
        flag: "--stop-before-commit",
        points: COMMIT_POINTS,
    };
    sweep("kafka_stale_taskmanager_commit", stale, 3);
}
