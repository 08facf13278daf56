//! The checkpoint lifecycle: expiry, tolerable failures, concurrent checkpoints, cleanup of
//! aborted and subsumed checkpoints, fallback from corrupt metadata, ids that grow across
//! runs, and invalid configurations.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir::WatermarkStrategy;

use common::{committed, mix, CommittingSink};
use weir::checkpoint::stats::CheckpointStatus;
use weir::connectors::discard::DiscardingSink;
use weir::connectors::generator::GeneratorSource;
use weir::{
    BoxError, CheckpointConfig, CheckpointStorageConfig, Collector, CorruptCheckpointPolicy,
    ExecutionConfig, FunctionStateContext, ProcessContext, ProcessFunction, RecoveryError,
    RestartStrategyConfig, RetentionOnCancel, RuntimeContext, StreamExecutionEnvironment,
};

/// Passes records on; sleeps in every snapshot, to make checkpoints slow.
#[derive(Clone)]
struct SlowSnapshot(Duration);

impl ProcessFunction<u64, u64> for SlowSnapshot {
    fn process_element(
        &mut self,
        v: u64,
        _: &mut ProcessContext<'_>,
        out: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        out.collect(v);
        Ok(())
    }
    fn snapshot_state(&mut self, _: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        std::thread::sleep(self.0);
        Ok(())
    }
}

fn slow_job(
    checkpoint: CheckpointConfig,
    restart: RestartStrategyConfig,
    snapshot: Duration,
    records: u64,
) -> Result<weir::JobExecutionResult, weir::WeirError> {
    let config = ExecutionConfig::default()
        .with_parallelism(1)
        .with_checkpointing(checkpoint)
        .with_restart_strategy(restart);
    let env = StreamExecutionEnvironment::new(config).unwrap();
    env.from_source(
        GeneratorSource::new(records, |i| i).with_rate_limit(10_000.0),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .process(SlowSnapshot(snapshot))
    .sink_to(DiscardingSink, "discard");
    env.execute("slow")
}

#[test]
fn checkpoints_that_exceed_the_timeout_expire() {
    let checkpoint = CheckpointConfig::default()
        .with_interval(Duration::from_millis(20))
        .with_timeout(Duration::from_millis(30))
        .with_tolerable_failures(1000)
        .with_storage(CheckpointStorageConfig::Memory);
    // Unbounded and cancelled: a bounded job would need its final checkpoint to succeed.
    let config = ExecutionConfig::default()
        .with_parallelism(1)
        .with_checkpointing(checkpoint);
    let env = StreamExecutionEnvironment::new(config).unwrap();
    env.from_source(
        GeneratorSource::unbounded(|i| i).with_rate_limit(10_000.0),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .process(SlowSnapshot(Duration::from_millis(80)))
    .sink_to(DiscardingSink, "discard");
    let client = env.execute_async("slow").unwrap();
    // A snapshot takes 80 ms, more than the timeout: every checkpoint expires, and the job is
    // cancelled once one has, however slow the machine.
    common::wait_until("an expired checkpoint", || {
        client.checkpoint_history().unwrap().failed >= 1
    });
    let result = client.cancel().unwrap();
    let history = &result.checkpoints;
    assert!(history.failed >= 1, "{history}");
    let expired = history
        .recent
        .iter()
        .find(|s| s.status == CheckpointStatus::Failed)
        .unwrap();
    assert!(
        expired.failure.as_deref().unwrap_or("").contains("expired"),
        "{expired:?}"
    );
}

#[test]
fn too_many_failed_checkpoints_fail_the_job() {
    let checkpoint = CheckpointConfig::default()
        .with_interval(Duration::from_millis(20))
        .with_timeout(Duration::from_millis(30))
        .with_tolerable_failures(0)
        .with_storage(CheckpointStorageConfig::Memory);
    let err = slow_job(
        checkpoint,
        RestartStrategyConfig::None,
        Duration::from_millis(80),
        50_000,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("tolerable checkpoint failures"),
        "{err}"
    );
}

/// Passes records on; notes the newest checkpoint it took its snapshot for.
#[derive(Clone)]
struct NoteSnapshot(Arc<AtomicU64>);

impl ProcessFunction<u64, u64> for NoteSnapshot {
    fn process_element(
        &mut self,
        v: u64,
        _: &mut ProcessContext<'_>,
        out: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        out.collect(v);
        Ok(())
    }
    fn snapshot_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        let id = ctx.checkpoint_id().ok_or("no checkpoint id")?;
        self.0.fetch_max(id, Ordering::SeqCst);
        Ok(())
    }
}

/// Passes records on; its snapshot for checkpoint n waits until the upstream task took its
/// snapshot for n + 2 (or `released` says the test has seen enough), so that checkpoint n
/// is still in flight when n + 1 and n + 2 start.
#[derive(Clone)]
struct AwaitLater {
    upstream: Arc<AtomicU64>,
    released: Arc<AtomicBool>,
}

impl ProcessFunction<u64, u64> for AwaitLater {
    fn process_element(
        &mut self,
        v: u64,
        _: &mut ProcessContext<'_>,
        out: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        out.collect(v);
        Ok(())
    }
    fn snapshot_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        let id = ctx.checkpoint_id().ok_or("no checkpoint id")?;
        let deadline = Instant::now() + Duration::from_secs(300);
        while self.upstream.load(Ordering::SeqCst) < id + 2 && !self.released.load(Ordering::SeqCst)
        {
            if Instant::now() > deadline {
                return Err(format!("checkpoint {} never started", id + 2).into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

#[test]
fn concurrent_checkpoints_overlap() {
    let checkpoint = CheckpointConfig::default()
        .with_interval(Duration::from_millis(10))
        .with_max_concurrent(3)
        .with_storage(CheckpointStorageConfig::Memory);
    let config = ExecutionConfig::default()
        .with_parallelism(1)
        .with_checkpointing(checkpoint)
        .with_restart_strategy(RestartStrategyConfig::None);
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let upstream = Arc::new(AtomicU64::new(0));
    let released = Arc::new(AtomicBool::new(false));
    let release = released.clone();
    // The last numbers wait until three checkpoints completed, each only once the next two
    // had started.
    env.from_source(
        GeneratorSource::new(5_000, |i| i)
            .with_held_tail(4_000, move || release.load(Ordering::SeqCst)),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .process(NoteSnapshot(upstream.clone()))
    .process(AwaitLater {
        upstream,
        released: released.clone(),
    })
    // In a task of its own: the source's task goes on taking snapshots while it waits.
    .start_new_chain()
    .sink_to(DiscardingSink, "discard");
    let client = env.execute_async("overlap").unwrap();
    common::await_checkpoints(&client, 3);
    released.store(true, Ordering::SeqCst);
    let result = client.wait().unwrap();
    let done: Vec<_> = result
        .checkpoints
        .recent
        .iter()
        .filter(|s| s.status == CheckpointStatus::Completed)
        .collect();
    assert!(done.len() >= 3, "{}", result.checkpoints);
    let overlapping = done.windows(2).any(|w| {
        let end_of_first =
            w[0].trigger_timestamp_millis + w[0].duration.unwrap().as_millis() as u64;
        w[1].trigger_timestamp_millis < end_of_first
    });
    assert!(
        overlapping,
        "no two checkpoints were in flight together: {}",
        result.checkpoints
    );
}

fn job_dir(dir: &Path, job: &str) -> PathBuf {
    dir.join(job)
}

fn checkpoint_dirs(job_dir: &Path) -> Vec<(u64, bool)> {
    let mut found: Vec<(u64, bool)> = std::fs::read_dir(job_dir)
        .map(|entries| {
            entries
                .filter_map(|e| {
                    let e = e.ok()?;
                    let id = e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok()?;
                    Some((id, e.path().join("_metadata").exists()))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort_unstable();
    found
}

#[test]
fn aborted_checkpoints_are_removed_and_only_the_retained_kept() {
    let dir = tempfile::tempdir().unwrap();
    let config = ExecutionConfig::default()
        .with_parallelism(1)
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_millis(15))
                .with_timeout(Duration::from_secs(1))
                .with_tolerable_failures(1000)
                .with_retained(2)
                .with_retention_on_cancel(RetentionOnCancel::Retain)
                .with_storage(CheckpointStorageConfig::FileSystem(
                    dir.path().to_path_buf(),
                )),
        );
    let env = StreamExecutionEnvironment::new(config).unwrap();
    // Snapshots alternate between fast and too slow, so some checkpoints expire: a slow one
    // waits until the test saw a checkpoint expire (after which none is slow).
    let slow = Arc::new(AtomicBool::new(false));
    let expired = Arc::new(AtomicBool::new(false));
    #[derive(Clone)]
    struct Alternating(Arc<AtomicBool>, Arc<AtomicBool>);
    impl ProcessFunction<u64, u64> for Alternating {
        fn process_element(
            &mut self,
            v: u64,
            _: &mut ProcessContext<'_>,
            out: &mut Collector<'_, u64>,
        ) -> Result<(), BoxError> {
            out.collect(v);
            Ok(())
        }
        fn snapshot_state(&mut self, _: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
            if !self.0.fetch_xor(true, Ordering::SeqCst) {
                let deadline = Instant::now() + Duration::from_secs(300);
                while !self.1.load(Ordering::SeqCst) {
                    if Instant::now() > deadline {
                        return Err("no checkpoint expired".into());
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            Ok(())
        }
    }
    env.from_source(
        GeneratorSource::unbounded(|i| i).with_rate_limit(5_000.0),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .process(Alternating(slow, expired.clone()))
    .sink_to(DiscardingSink, "discard");
    let client = env.execute_async("cleanup").unwrap();
    common::wait_until("an expired checkpoint", || {
        client.checkpoint_history().unwrap().failed >= 1
    });
    expired.store(true, Ordering::SeqCst);
    // Three more, so that one of them is subsumed.
    common::await_checkpoints(&client, 3);
    let result = client.cancel().unwrap();
    assert!(
        result.checkpoints.failed >= 1 && result.checkpoints.completed >= 2,
        "{}",
        result.checkpoints
    );
    let dirs = checkpoint_dirs(&job_dir(dir.path(), "cleanup"));
    assert_eq!(
        dirs.len(),
        2,
        "only the 2 retained checkpoints remain: {dirs:?}"
    );
    assert!(
        dirs.iter().all(|(_, has_metadata)| *has_metadata),
        "partial checkpoint left behind: {dirs:?}"
    );

    // A job that finishes discards its checkpoints.
    let config = ExecutionConfig::default()
        .with_parallelism(1)
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_millis(15))
                .with_storage(CheckpointStorageConfig::FileSystem(
                    dir.path().to_path_buf(),
                )),
        );
    let env = StreamExecutionEnvironment::new(config).unwrap();
    env.from_source(
        GeneratorSource::new(2_000, |i| i).with_rate_limit(10_000.0),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .sink_to(DiscardingSink, "discard");
    let result = env.execute("finishing").unwrap();
    assert!(result.checkpoints.completed >= 1);
    assert!(checkpoint_dirs(&job_dir(dir.path(), "finishing")).is_empty());
}

#[test]
fn checkpoint_ids_keep_growing_across_runs_of_a_job() {
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        ExecutionConfig::default()
            .with_parallelism(1)
            .with_checkpointing(
                CheckpointConfig::default()
                    .with_interval(Duration::from_millis(15))
                    .with_retention_on_cancel(RetentionOnCancel::Retain)
                    .with_storage(CheckpointStorageConfig::FileSystem(
                        dir.path().to_path_buf(),
                    )),
            )
    };
    let mut last = 0;
    for run in 0..2 {
        let env = StreamExecutionEnvironment::new(config()).unwrap();
        env.from_source(
            GeneratorSource::unbounded(|i| i).with_rate_limit(5_000.0),
            WatermarkStrategy::no_watermarks(),
            "numbers",
        )
        .sink_to(DiscardingSink, "discard");
        let client = env.execute_async("ids").unwrap();
        common::await_checkpoints(&client, 1);
        let result = client.cancel().unwrap();
        let ids: Vec<u64> = result.checkpoints.recent.iter().map(|s| s.id).collect();
        assert!(!ids.is_empty(), "run {run}");
        assert!(
            ids[0] > last,
            "run {run}: ids {ids:?} restart at or below {last}"
        );
        last = *ids.last().unwrap();
    }
}

/// What the fault injector damages before it fails.
#[derive(Clone, Copy, PartialEq)]
enum Damage {
    /// Truncates the newest checkpoint's metadata.
    NewestMetadata,
    /// Truncates every retained checkpoint's metadata.
    AllMetadata,
    /// Flips bytes in the newest checkpoint's keyed state files (its metadata stays valid).
    NewestStateFiles,
}

fn damage(checkpoint_dir: &Path, what: Damage) {
    if what == Damage::NewestStateFiles {
        for entry in std::fs::read_dir(checkpoint_dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "keyed") {
                let mut bytes = std::fs::read(&path).unwrap();
                for i in (8..bytes.len()).step_by(7) {
                    bytes[i] ^= 0x5A;
                }
                std::fs::write(&path, bytes).unwrap();
            }
        }
    } else {
        let path = checkpoint_dir.join("_metadata");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    }
}

/// How a corruption run is set up.
#[derive(Clone, Copy, Default)]
struct Setup {
    allow_duplicates: bool,
    local_recovery: bool,
    /// The sink declares that replays are harmless.
    idempotent_sink: bool,
}

/// A sink that declares its replays harmless (it is the committing sink underneath, so the
/// test still sees what it committed).
#[derive(Clone)]
struct DeclaredIdempotent(CommittingSink<(u64, u64)>);

impl weir::connectors::sink::Sink<(u64, u64)> for DeclaredIdempotent {
    type Writer = common::CommittingWriter<(u64, u64)>;
    fn create_writer(&self, context: &RuntimeContext) -> Result<Self::Writer, BoxError> {
        self.0.create_writer(context)
    }
    fn commits_on_checkpoint_completion(&self) -> bool {
        false
    }
}

/// Passes numbers on; at the first from `fail_at` on (once two checkpoints completed), damages
/// the newest complete checkpoint(s) on disk and fails, once.
#[derive(Clone)]
struct DamageThenFail {
    fail_at: u64,
    what: Damage,
    job: PathBuf,
    failed: Arc<AtomicBool>,
    corrupted: Arc<std::sync::Mutex<Vec<u64>>>,
    /// The last checkpoint this subtask took its snapshot for.
    last_snapshot: u64,
}

impl ProcessFunction<u64, u64> for DamageThenFail {
    fn process_element(
        &mut self,
        i: u64,
        _: &mut ProcessContext<'_>,
        out: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        let ready = || {
            checkpoint_dirs(&self.job)
                .into_iter()
                .filter(|c| c.1)
                .count()
                >= 2
        };
        if i >= self.fail_at
            && !self.failed.load(Ordering::SeqCst)
            && ready()
            && !self.failed.swap(true, Ordering::SeqCst)
        {
            // While this subtask is here it takes no snapshot, so no checkpoint after the
            // last one it took can complete; that one settles (completes, or is aborted and
            // removed) and then the newest complete checkpoint stays the newest.
            let last = self.job.join(format!("chk-{}", self.last_snapshot));
            let deadline = Instant::now() + Duration::from_secs(300);
            while last.exists() && !last.join("_metadata").exists() {
                assert!(
                    Instant::now() < deadline,
                    "{} never settled",
                    last.display()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            let complete: Vec<u64> = checkpoint_dirs(&self.job)
                .into_iter()
                .filter(|c| c.1)
                .map(|c| c.0)
                .collect();
            let victims: Vec<u64> = if self.what == Damage::AllMetadata {
                complete.clone()
            } else {
                complete.last().copied().into_iter().collect()
            };
            self.corrupted
                .lock()
                .unwrap()
                .extend(victims.iter().copied());
            for id in victims {
                damage(&self.job.join(format!("chk-{id}")), self.what);
            }
            panic!("injected failure after corrupting checkpoints {complete:?}");
        }
        out.collect(i);
        Ok(())
    }

    fn snapshot_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        self.last_snapshot = ctx.checkpoint_id().unwrap_or(self.last_snapshot);
        Ok(())
    }
}

/// What a corruption run saw: the damaged checkpoints, the result, and the committed counts.
type CorruptionRun = (Vec<u64>, weir::JobExecutionResult, Vec<(u64, u64)>);

/// A keyed count whose fault injector, before failing once at `fail_at`, damages the
/// newest checkpoint(s) on disk.
fn run_with_corruption(
    dir: &Path,
    fail_at: u64,
    what: Damage,
    setup: Setup,
) -> Result<CorruptionRun, weir::WeirError> {
    const RECORDS: u64 = 12_000;
    let mut checkpointing = CheckpointConfig::default()
        .with_interval(Duration::from_millis(30))
        .with_retained(3)
        .with_storage(CheckpointStorageConfig::FileSystem(dir.join("primary")));
    if setup.allow_duplicates {
        checkpointing =
            checkpointing.with_corrupt_checkpoint_policy(CorruptCheckpointPolicy::AllowDuplicates);
    }
    if setup.local_recovery {
        checkpointing = checkpointing.with_local_recovery(dir.join("local-copy"));
    }
    let config = ExecutionConfig::default()
        .with_parallelism(2)
        .with_buffer_size(64)
        .with_buffer_timeout(Duration::from_millis(5))
        .with_checkpointing(checkpointing)
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 3,
            delay: Duration::from_millis(5),
        });
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let (sink, store) = CommittingSink::new();
    let corrupted: Arc<std::sync::Mutex<Vec<u64>>> = Arc::default();
    let job = job_dir(&dir.join("primary"), "corrupt");
    // The numbers from `fail_at` on (the last third of the second split, at 8 000 from 6 000
    // to 12 000) are held back until two checkpoints completed, so that the failure comes
    // with an older checkpoint to fall back to, however slow the machine.
    let two_checkpoints = Arc::new(AtomicBool::new(false));
    let release = {
        let (job, two) = (job.clone(), two_checkpoints.clone());
        move || {
            two.load(Ordering::SeqCst)
                || (checkpoint_dirs(&job).into_iter().filter(|c| c.1).count() >= 2
                    && !two.swap(true, Ordering::SeqCst))
        }
    };
    let counts = env
        .from_source(
            GeneratorSource::new(RECORDS, |i| i).with_held_tail(RECORDS - fail_at, release),
            WatermarkStrategy::no_watermarks(),
            "numbers",
        )
        .process(DamageThenFail {
            fail_at,
            what,
            job,
            failed: Arc::new(AtomicBool::new(false)),
            corrupted: corrupted.clone(),
            last_snapshot: 0,
        })
        .key_by(|i: &u64| mix(*i) % 53)
        .count()
        .uid("count");
    if setup.idempotent_sink {
        counts.sink_to(DeclaredIdempotent(sink), "committed");
    } else {
        counts.sink_to(sink, "committed");
    }
    let result = env.execute("corrupt")?;
    let output = committed(&store);
    let mut max_count: HashMap<u64, u64> = HashMap::new();
    for (k, n) in &output {
        let e = max_count.entry(*k).or_insert(0);
        *e = (*e).max(*n);
    }
    let mut truth: HashMap<u64, u64> = HashMap::new();
    for i in 0..RECORDS {
        *truth.entry(mix(i) % 53).or_insert(0) += 1;
    }
    assert_eq!(max_count, truth, "final counts after recovery");
    let corrupted = corrupted.lock().unwrap().clone();
    Ok((corrupted, result, output))
}

#[test]
fn a_corrupt_newest_checkpoint_is_refused_when_sinks_may_have_committed_its_output() {
    for what in [
        Damage::NewestMetadata,
        Damage::NewestStateFiles,
        Damage::AllMetadata,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let err = run_with_corruption(dir.path(), 8_000, what, Setup::default())
            .expect_err("must not fall back past committed output");
        let text = err.to_string();
        assert!(
            matches!(
                err,
                weir::WeirError::Recovery(RecoveryError::Unusable { .. })
            ),
            "{text}"
        );
        let newest = checkpoint_dirs(&job_dir(&dir.path().join("primary"), "corrupt"))
            .into_iter()
            .map(|c| c.0)
            .max()
            .unwrap();
        assert!(
            text.contains(&format!(
                "cannot restore checkpoint {newest} of job `corrupt`"
            )) && text.contains("recovery.fallback-on-corrupt-checkpoint")
                && text.contains("`Sink: committed`"),
            "{text}"
        );
        let file = if what == Damage::NewestStateFiles {
            ".keyed"
        } else {
            "_metadata"
        };
        assert!(
            text.contains(&format!("chk-{newest}/")) && text.contains(file),
            "names the file: {text}"
        );
    }
}

#[test]
fn falling_back_past_committed_output_needs_the_option_or_idempotent_sinks() {
    let allowed = Setup {
        allow_duplicates: true,
        ..Setup::default()
    };
    let idempotent = Setup {
        idempotent_sink: true,
        ..Setup::default()
    };
    for setup in [allowed, idempotent] {
        for what in [Damage::NewestMetadata, Damage::NewestStateFiles] {
            let dir = tempfile::tempdir().unwrap();
            let (corrupted, result, _) =
                run_with_corruption(dir.path(), 8_000, what, setup).unwrap();
            assert_eq!(
                corrupted.len(),
                1,
                "a checkpoint completed before the failure"
            );
            assert_eq!(result.restarts, 1);
            assert_eq!(result.restored_from.len(), 1, "{:?}", result.restored_from);
            assert!(
                result.restored_from[0] < corrupted[0],
                "restored from {:?}, but checkpoint {} was corrupt",
                result.restored_from,
                corrupted[0]
            );
            // The result says what recovery did, without a logging setup.
            let notes = result.recovery_notes.join("\n");
            assert!(
                notes.contains(&format!("checkpoint {}", corrupted[0])),
                "{notes}"
            );
            assert!(result.to_string().contains("Recovery: "), "{result}");
        }
    }
}

#[test]
fn the_local_copy_keeps_the_newest_checkpoint_restorable_and_the_output_exact() {
    let setup = Setup {
        local_recovery: true,
        ..Setup::default()
    };
    for what in [
        Damage::NewestMetadata,
        Damage::NewestStateFiles,
        Damage::AllMetadata,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (corrupted, result, output) =
            run_with_corruption(dir.path(), 8_000, what, setup).unwrap();
        let newest = corrupted.iter().copied().max().unwrap();
        assert_eq!(
            result.restored_from,
            vec![newest],
            "the damaged newest checkpoint is restored from its copy"
        );
        // Exactly once: every running count of every key, once.
        let mut seen: HashMap<(u64, u64), usize> = HashMap::new();
        for pair in output {
            *seen.entry(pair).or_default() += 1;
        }
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "duplicated: {twice:?}");
    }
}

#[test]
fn invalid_checkpoint_configurations_are_rejected() {
    let bad = ExecutionConfig::default().with_checkpointing(
        CheckpointConfig::default()
            .with_interval(Duration::from_millis(100))
            .with_min_pause(Duration::from_millis(50))
            .with_max_concurrent(2),
    );
    let err = StreamExecutionEnvironment::new(bad).err().unwrap();
    assert_eq!(err.option, "checkpoint.min_pause");
    let bad =
        ExecutionConfig::default().with_restart_strategy(RestartStrategyConfig::FailureRate {
            max_failures: 0,
            interval: Duration::from_secs(1),
            delay: Duration::ZERO,
        });
    assert!(StreamExecutionEnvironment::new(bad).is_err());
}

/// Passes numbers on; says when its input ended.
#[derive(Clone)]
struct NoteEnd(Arc<AtomicBool>);

impl ProcessFunction<u64, u64> for NoteEnd {
    fn process_element(
        &mut self,
        v: u64,
        _: &mut ProcessContext<'_>,
        out: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        out.collect(v);
        Ok(())
    }
    fn end_input(
        &mut self,
        _: &RuntimeContext,
        _: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        self.0.store(true, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn checkpoints_go_on_after_a_bounded_source_reads_all_its_input() {
    let config = ExecutionConfig::default()
        .with_parallelism(1)
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_millis(20))
                .with_storage(CheckpointStorageConfig::Memory),
        );
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let ended = Arc::new(AtomicBool::new(false));
    let bounded = env
        .from_collection((0..10u64).collect())
        .process(NoteEnd(ended.clone()));
    let endless = env.from_source(
        GeneratorSource::unbounded(|i| i).with_rate_limit(2_000.0),
        WatermarkStrategy::no_watermarks(),
        "endless",
    );
    bounded.union(&endless).sink_to(DiscardingSink, "discard");
    let client = env.execute_async("mixed").unwrap();
    // Five checkpoints complete after the bounded source's task ended its input.
    common::wait_until("the end of the bounded input", || {
        ended.load(Ordering::SeqCst)
    });
    let before = client.checkpoint_history().unwrap().completed;
    common::await_checkpoints(&client, before + 5);
    let result = client.cancel().unwrap();
    let history = &result.checkpoints;
    assert!(history.completed >= before + 5, "{history}");
    // Only a checkpoint still in flight when the job was cancelled may have failed.
    let unexpected: Vec<_> = history
        .recent
        .iter()
        .filter(|s| s.status == CheckpointStatus::Failed)
        .filter(|s| !s.failure.as_deref().unwrap_or("").contains("cancelled"))
        .collect();
    assert!(unexpected.is_empty(), "{history}");
}

#[test]
fn a_corrupt_restore_point_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        ExecutionConfig::default()
            .with_parallelism(1)
            .with_checkpointing(
                CheckpointConfig::default()
                    .with_interval(Duration::from_millis(20))
                    .with_storage(CheckpointStorageConfig::FileSystem(
                        dir.path().to_path_buf(),
                    )),
            )
    };
    // With `held`, the last half of the numbers is withheld for good; `read` counts the rest.
    let build = |env: &StreamExecutionEnvironment, held: bool, read: &Arc<AtomicU64>| {
        let mut numbers = GeneratorSource::new(20_000, (|i| i) as fn(u64) -> u64);
        if held {
            numbers = numbers.with_held_tail(10_000, || false);
        }
        let read = read.clone();
        env.from_source(numbers, WatermarkStrategy::no_watermarks(), "numbers")
            .map(move |i: u64| {
                read.fetch_add(1, Ordering::SeqCst);
                i
            })
            .key_by(|i: &u64| i % 100)
            .count()
            .sink_to(DiscardingSink, "discard");
    };
    let env = StreamExecutionEnvironment::new(config()).unwrap();
    let read = Arc::new(AtomicU64::new(0));
    build(&env, true, &read);
    let client = env.execute_async("corrupt restore").unwrap();
    // Stopped once the count has keyed state (the savepoint's barrier follows the numbers
    // read) and the job runs (a checkpoint completed); it cannot have ended.
    common::wait_until("the first half read", || {
        read.load(Ordering::SeqCst) >= 10_000
    });
    common::await_checkpoints(&client, 1);
    let (savepoint, _) = client.stop_with_savepoint().unwrap();
    damage(savepoint.path(), Damage::NewestStateFiles);
    let env = StreamExecutionEnvironment::new(config().with_restore(&savepoint)).unwrap();
    // Nothing withheld: had the restore succeeded, the job would end.
    build(&env, false, &Arc::default());
    let err = env.execute("corrupt restore").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("is corrupt"), "{text}");
}

/// A resume whose newest restore point turns out damaged when its state files are read (at
/// deployment, after its metadata read fine) falls back, as allowed, and the result says
/// where the job really started and what recovery skipped.
#[test]
fn the_result_names_the_restore_point_a_resume_really_started_from() {
    let dir = tempfile::tempdir().unwrap();
    let config = |resume: bool| {
        ExecutionConfig::default()
            .with_parallelism(2)
            .with_checkpointing(
                CheckpointConfig::default()
                    .with_interval(Duration::from_millis(30))
                    .with_retained(3)
                    .with_retention_on_cancel(RetentionOnCancel::Retain)
                    .with_corrupt_checkpoint_policy(CorruptCheckpointPolicy::AllowDuplicates)
                    .with_storage(CheckpointStorageConfig::FileSystem(dir.path().into())),
            )
            .with_resume_from_latest_checkpoint(resume)
    };
    let build = |env: &StreamExecutionEnvironment, held: bool| {
        let numbers = GeneratorSource::new(4_000, |i| i);
        let numbers = if held {
            numbers.with_held_tail(1_000, || false)
        } else {
            numbers
        };
        env.from_source(numbers, WatermarkStrategy::no_watermarks(), "numbers")
            .uid("numbers")
            .key_by(|i: &u64| i % 7)
            .count()
            .uid("count")
            .sink_to(DiscardingSink, "discard");
    };
    let env = StreamExecutionEnvironment::new(config(false)).unwrap();
    build(&env, true);
    let client = env.execute_async("resumed").unwrap();
    common::await_checkpoints(&client, 2);
    let first = client.cancel().unwrap();
    assert_eq!(first.start, Some(weir::JobStart::Fresh));
    let job = job_dir(dir.path(), "resumed");
    let complete: Vec<u64> = checkpoint_dirs(&job)
        .into_iter()
        .filter(|c| c.1)
        .map(|c| c.0)
        .collect();
    let newest = *complete.last().unwrap();
    damage(&job.join(format!("chk-{newest}")), Damage::NewestStateFiles);

    let env = StreamExecutionEnvironment::new(config(true)).unwrap();
    build(&env, false);
    let result = env.execute("resumed").unwrap();
    match &result.start {
        Some(weir::JobStart::Resumed { checkpoint_id, .. }) => assert!(
            *checkpoint_id < newest,
            "resumed from {checkpoint_id}, but {newest} was damaged"
        ),
        other => panic!("{other:?}: {result}"),
    }
    assert!(
        result
            .recovery_notes
            .iter()
            .any(|n| n.contains(&format!("checkpoint {newest}"))),
        "{:?}",
        result.recovery_notes
    );
    let printed = result.to_string();
    assert!(
        printed.contains("Resumed from restore point") && printed.contains("Recovery: "),
        "{printed}"
    );
}
