//! Checkpoint storage on a real S3-compatible server (s3s-fs on 127.0.0.1, started by
//! `scripts/s3-server.sh`, which `scripts/test.sh` runs): the storage contract every
//! checkpoint storage keeps, a job checkpointing to it and restoring from it, and clear
//! errors for a URL that cannot work.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use weir::checkpoint::storage::conformance::exercise;
use weir::checkpoint::storage::CheckpointStorage;
use weir::prelude::*;
use weir_cluster::object_storage::{register, ObjectCheckpointStorage};

/// The bucket URL the server serves: `WEIR_S3_URL`.
fn bucket() -> String {
    std::env::var("WEIR_S3_URL").unwrap_or_else(|_| {
        panic!(
            "WEIR_S3_URL is not set: these tests need the S3-compatible server. Run them through \
             scripts/test.sh, or start it with `eval $(scripts/s3-server.sh start)`"
        )
    })
}

/// A prefix in the bucket no other test uses.
fn unique_url(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{}/{name}-{}-{nanos}-{}",
        bucket(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

#[test]
fn object_storage_keeps_the_checkpoint_storage_contract() {
    let storage = ObjectCheckpointStorage::open(&unique_url("contract"), "j").unwrap();
    exercise(&storage);
}

#[test]
fn a_job_checkpoints_to_s3_and_resumes_from_it() {
    register();
    let url = unique_url("job");
    let build = |resume: bool| {
        let config = ExecutionConfig::default()
            .with_parallelism(2)
            .with_resume_from_latest_checkpoint(resume)
            .with_checkpointing(
                CheckpointConfig::default()
                    .with_interval(Duration::from_millis(50))
                    .with_storage(CheckpointStorageConfig::from_url(&url)),
            );
        let env = StreamExecutionEnvironment::new(config).unwrap();
        // The first run is stopped long before its input ends (at 200 records a second it
        // would take 100 s): the stop waits for a completed checkpoint, not for a duration.
        // The resumed run reads the rest at full speed.
        let numbers = GeneratorSource::new(20_000, |i| i % 10);
        let numbers = if resume {
            numbers
        } else {
            numbers.with_rate_limit(200.0)
        };
        let sums = env
            .from_source(numbers, WatermarkStrategy::no_watermarks(), "numbers")
            .key_by(|k: &u64| *k)
            .count()
            .uid("counts")
            .collect();
        (env, sums)
    };
    let (env, _) = build(false);
    let client = env.execute_async("s3 job").unwrap();
    while client.checkpoint_history().unwrap().completed == 0 {
        assert!(
            !client.is_finished(),
            "the job ended before a checkpoint completed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (savepoint, result) = client.stop_with_savepoint().unwrap();
    assert!(savepoint.location().starts_with("s3://"), "{savepoint}");
    assert!(
        result.checkpoints.completed >= 1,
        "no checkpoint completed on S3"
    );
    let storage = ObjectCheckpointStorage::open(&url, "s3 job").unwrap();
    assert!(!storage.list_savepoints().unwrap().is_empty());
    // A second run resumes from the savepoint on S3 and finishes the input: every key's
    // count ends at 2 000.
    let (env, counts) = build(true);
    let result = env.execute("s3 job").unwrap();
    assert_eq!(result.restored_from, vec![savepoint.checkpoint_id()]);
    let mut finals = std::collections::BTreeMap::new();
    for (k, n) in counts.take() {
        let e = finals.entry(k).or_insert(0);
        *e = (*e).max(n);
    }
    assert_eq!(finals.len(), 10);
    assert!(finals.values().all(|n| *n == 2_000), "{finals:?}");
}

#[test]
fn unusable_urls_say_what_is_wrong() {
    register();
    let err = ObjectCheckpointStorage::open("s3://no-such-bucket-weir/x", "j")
        .expect_err("a missing bucket")
        .to_string();
    assert!(
        err.contains("s3://no-such-bucket-weir/x") && err.contains("cannot be read"),
        "{err}"
    );
    let err = ObjectCheckpointStorage::open("ftp://host/x", "j")
        .expect_err("ftp")
        .to_string();
    assert!(err.contains("does not serve `ftp://`"), "{err}");
}
