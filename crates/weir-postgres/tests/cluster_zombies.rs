//! Zombie sweeps of the PostgreSQL word count (exactly-once append) in cluster mode on
//! object storage ([`weir_testkit::cluster_zombies`]): a first cluster's process is stopped
//! right before its N-th durable operation, a second cluster runs the job to its end, the
//! stopped process continues and must commit nothing more:
//! - `pg_stale_jobmanager`: the JobManager, at its N-th object-storage write;
//! - `pg_stale_taskmanager_prepare`: TaskManager `tm-1`, right before its N-th
//!   `PREPARE TRANSACTION` (after its task checked that it holds the job);
//! - `pg_stale_taskmanager_commit`: `tm-1`, right before its N-th `COMMIT PREPARED` (after
//!   the checkpoint completed).
//!
//! After each step the table holds every running count exactly once and no transaction of the
//! sink is left prepared — both read with `psql`, not with Weir's code. Each prints
//! `cluster zombie sweep <name>: …`; `scripts/crash-sweep.sh` runs every
//! point (`WEIR_CRASH_SWEEP=full`).

mod common;

use std::path::Path;

use weir_postgres::word_count;
use weir_testkit::cluster_zombies::{s3_prefix, ClusterZombieSweep, Stale, TrialJob};
use weir_testkit::crash_points::absolute;

const RECORDS: u64 = 8000;
const WORDS: u64 = 100;
/// Prepares (and commits) of `tm-1` in one run, about: its one sink subtask has a transaction per
/// checkpoint, and a checkpoint of this cluster on the test S3 server takes about a second
/// end to end (points past a run's end count as ended before their point).
const TRANSACTION_POINTS: u64 = 5;

/// A fresh word count into a fresh table, its checkpoints under a fresh S3 prefix.
fn pg_job(name: &str, trial: &str) -> TrialJob {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let root = absolute(dir.path());
    let work = root.join("job");
    std::fs::create_dir_all(&work).expect("the job directory");
    let table = common::unique("cluster_zombie");
    let args = [
        "--url",
        &common::url(),
        "--table",
        &table,
        "--delivery",
        "exactly-once-append",
        "--records",
        &RECORDS.to_string(),
        "--words",
        &WORDS.to_string(),
        "--rate",
        "2000",
        "--parallelism",
        "3",
        "--checkpoint-interval-ms",
        "150",
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
            let left = common::psql_prepared(&table)?;
            if !left.is_empty() {
                return Err(format!("{when}: transactions left prepared: {left:?}"));
            }
            let expected = word_count::expected_totals(RECORDS, WORDS);
            word_count::verify_running_counts(&common::psql_rows(&table)?, &expected)
                .map_err(|problems| format!("{when}: table {table}: {problems}"))
        }),
        keep: Box::new(dir),
    }
}

fn sweep(name: &str, stale: Stale, sample: usize) {
    let binary = Path::new(env!("CARGO_BIN_EXE_weir-pg-count"));
    ClusterZombieSweep::new("weir-postgres", name, binary, stale, sample)
        .run(|trial| pg_job(name, trial));
}

#[test]
fn pg_stale_jobmanager() {
    sweep("pg_stale_jobmanager", Stale::JobManagerStorage, 3);
}

#[test]
fn pg_stale_taskmanager_prepare() {
    let stale = Stale::TaskManagerFlag {
        flag: "--stop-before-prepare",
        points: TRANSACTION_POINTS,
    };
    sweep("pg_stale_taskmanager_prepare", stale, 3);
}

#[test]
fn pg_stale_taskmanager_commit() {
    let stale = Stale::TaskManagerFlag {
        flag: "--stop-before-commit",
        points: TRANSACTION_POINTS,
    };
    sweep("pg_stale_taskmanager_commit", stale, 3);
}
