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
