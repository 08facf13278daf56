//! Checkpoint storage that fails: writes refused for lack of space, files left truncated,
//! fsyncs and renames that fail, listings, reads and deletions that error — at chosen calls
//! and at random. Under each, the checkpoint in progress fails and is counted, the job goes
//! on within its tolerable failures, no checkpoint a write failed for is ever completed
//! (no sink commits it), every checkpoint left complete on disk verifies, and recovery —
//! forced by a failure right after the fault — restores complete state only: the committed
//! output is exactly once.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{committed, diff, mix, multiset, CommittedStore, CommittingSink, CountPerKey};
use weir::checkpoint::storage::{
    register_fault_plan, FaultPlan, InjectedFault, StorageFault, StorageOperation,
};
use weir::connectors::generator::GeneratorSource;
use weir::{
    BoxError, CheckpointConfig, CheckpointStorageConfig, Collector, ExecutionConfig,
    ProcessContext, ProcessFunction, RestartStrategyConfig, StreamExecutionEnvironment,
    WatermarkStrategy,
};
use weir_testkit::{seeds, Rng};

const RECORDS: u64 = 8_000;

fn key_of(i: u64) -> u64 {
    mix(i) % 37
}

/// What a run left: the committed output, the checkpoints whose completion was notified,
/// and the job's result.
struct Run {
    /// Whether this run resumed one that failed for good (whose statistics are gone).
    resumed: bool,
    store: CommittedStore<(u64, u64)>,
    output: Vec<(u64, u64)>,
    notified: BTreeSet<u64>,
    result: Result<weir::JobExecutionResult, weir::WeirError>,
}

/// When a task fails, once.
#[derive(Clone, Copy, Debug)]
enum Failure {
    Never,
    /// On the first record after the plan's first fault: recovery follows the fault.
    AfterFault,
    /// Once this many checkpoints completed: recovery reads what the faults left.
    AfterCheckpoints(usize),
}

/// Passes records on; fails once as told; records every checkpoint it is told completed.
#[derive(Clone)]
struct FaultFollower {
    plan: Arc<FaultPlan>,
    failure: Failure,
    failed: Arc<AtomicBool>,
    notified: Arc<Mutex<BTreeSet<u64>>>,
}

impl ProcessFunction<u64, u64> for FaultFollower {
    fn process_element(
        &mut self,
        i: u64,
        _: &mut ProcessContext<'_>,
        out: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        let due = match self.failure {
            Failure::Never => false,
            Failure::AfterFault => !self.plan.injected().is_empty(),
            Failure::AfterCheckpoints(n) => self.notified.lock().is_ok_and(|c| c.len() >= n),
        };
        if due && !self.failed.load(Ordering::Relaxed) && !self.failed.swap(true, Ordering::SeqCst)
        {
            panic!("injected failure after a storage fault, at record {i}");
        }
        out.collect(i);
        Ok(())
    }
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), BoxError> {
        self.notified.lock().unwrap().insert(checkpoint_id);
        Ok(())
    }
}

/// Runs a keyed count (parallelism 2, exactly-once sink) with checkpoints in `dir` behind
/// `plan`; a task fails once as `failure` says.
fn run(
    name: &str,
    dir: &Path,
    plan: Arc<FaultPlan>,
    tolerable: u32,
    restarts: u32,
    failure: Failure,
) -> Run {
    let (_, store) = CommittingSink::new();
    run_with(name, dir, plan, tolerable, restarts, failure, store, false)
}

/// [`run`], committing into `store`, resuming the job's latest checkpoint if `resume`.
#[allow(clippy::too_many_arguments)]
fn run_with(
    name: &str,
    dir: &Path,
    plan: Arc<FaultPlan>,
    tolerable: u32,
    restarts: u32,
    failure: Failure,
    store: CommittedStore<(u64, u64)>,
    resume: bool,
) -> Run {
    register_fault_plan(name, Arc::clone(&plan));
    let storage = CheckpointStorageConfig::from_url(&format!("faults://{name}/{}", dir.display()));
    let config = ExecutionConfig::default()
        .with_parallelism(2)
        .with_buffer_size(64)
        .with_buffer_timeout(Duration::from_millis(5))
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_millis(25))
                .with_retained(2)
                .with_tolerable_failures(tolerable)
                .with_storage(storage),
        )
        .with_resume_from_latest_checkpoint(resume)
        .with_restart_strategy(if restarts == 0 {
            RestartStrategyConfig::None
        } else {
            RestartStrategyConfig::FixedDelay {
                attempts: restarts,
                delay: Duration::from_millis(5),
            }
        });
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let sink = CommittingSink {
        store: store.clone(),
    };
    let follower = FaultFollower {
        plan: Arc::clone(&plan),
        failure,
        failed: Arc::new(AtomicBool::new(false)),
        notified: Arc::default(),
    };
    let notified = Arc::clone(&follower.notified);
    // The last quarter of each split waits for what the failure waits for, so that records
    // come after it however fast or slow the machine: checkpoints go on meanwhile. A fault
    // planned for a call that only the job's end makes is released after 40 checkpoints.
    let release: Box<dyn Fn() -> bool + Send + Sync> = {
        let (plan, notified) = (Arc::clone(&plan), Arc::clone(&notified));
        let checkpoints = move || notified.lock().map_or(0, |n| n.len());
        match failure {
            Failure::Never => Box::new(|| true),
            Failure::AfterFault => {
                Box::new(move || !plan.injected().is_empty() || checkpoints() >= 40)
            }
            Failure::AfterCheckpoints(n) => Box::new(move || checkpoints() >= n),
        }
    };
    env.from_source(
        GeneratorSource::new(RECORDS, |i| i).with_held_tail(RECORDS / 4, release),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .process(follower)
    .name("fault follower")
    .key_by(|i: &u64| key_of(*i))
    .process(CountPerKey::default())
    .uid("count")
    .sink_to(sink, "committed")
    .uid("sink");
    let result = env.execute(name);
    // Verification reads storage too: no more faults.
    plan.set_paused(true);
    Run {
        resumed: resume,
        output: committed(&store),
        store,
        notified: notified.lock().map(|n| n.clone()).unwrap_or_default(),
        result,
    }
}

/// A run the faults made fail for good — its start refused, or its restarts used up by a
/// storage that fails every restore — must have failed on an injected I/O fault, naming the
/// file; the job then resumes, without faults, where its complete checkpoints say.
fn resume_if_refused(first: Run, name: &str, dir: &Path, plan: &FaultPlan, context: &str) -> Run {
    let Err(e) = &first.result else {
        return first;
    };
    let message = e.to_string();
    assert!(
        message.contains("(injected)") && plan.injected().iter().any(|f| message.contains(&f.path)),
        "{context}: failed on something else than a fault: {message}"
    );
    println!("  the job failed on a fault, resuming: {message}");
    let mut next = run_with(
        name,
        dir,
        Arc::new(FaultPlan::new()),
        3,
        5,
        Failure::Never,
        first.store.clone(),
        true,
    );
    next.notified.extend(first.notified);
    next
}

/// Faults on a checkpoint's own files: that checkpoint must never complete. (A location
/// that could not be created had no barrier and no files: a later process may take its id.)
fn fails_its_checkpoint(fault: &InjectedFault, resumed: bool) -> Option<u64> {
    match fault.operation {
        StorageOperation::CreateLocation if !resumed => fault.snapshot_id(),
        StorageOperation::WriteFile
        | StorageOperation::CopyFileIn
        | StorageOperation::WriteMetadata => fault.snapshot_id(),
        _ => None,
    }
}

/// Every checkpoint left complete in `dir` (with its metadata) verifies, file by file.
fn complete_checkpoints_verify(dir: &Path, context: &str) {
    let Ok(jobs) = std::fs::read_dir(dir) else {
        return;
    };
    for job in jobs.flatten() {
        let Ok(entries) = std::fs::read_dir(job.path()) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if !name.starts_with("chk-") || !path.join("_metadata").exists() {
                continue;
            }
            match weir::checkpoint::inspect::verify(&path) {
                Ok(damage) => assert!(
                    damage.is_empty(),
                    "{context}: complete checkpoint {} is damaged: {damage:?}",
                    path.display()
                ),
                Err(e) => panic!(
                    "{context}: complete checkpoint {} does not read: {e}",
                    path.display()
                ),
            }
        }
    }
}

/// The checks every faulty run must pass.
fn check(run: &Run, plan: &FaultPlan, dir: &Path, context: &str) {
    let injected = plan.injected();
    assert!(
        !injected.is_empty(),
        "{context}: no fault was injected; {:?}; calls {:?}",
        run.result.as_ref().map(|r| r.restarts),
        StorageOperation::ALL
            .iter()
            .map(|op| (op, plan.calls(*op)))
            .collect::<Vec<_>>()
    );
    let result = match &run.result {
        Ok(result) => result,
        Err(e) => panic!("{context}: the job failed: {e}; faults {injected:?}"),
    };
    let expected = multiset(&common::rolling_counts(RECORDS, key_of));
    if let Some(d) = diff(&expected, &multiset(&run.output)) {
        panic!(
            "{context}: {d}; {} restarts; faults {injected:?}",
            result.restarts
        );
    }
    let failed_checkpoints: BTreeSet<u64> = injected
        .iter()
        .filter_map(|f| fails_its_checkpoint(f, run.resumed))
        .collect();
    for id in &failed_checkpoints {
        assert!(
            !run.notified.contains(id),
            "{context}: checkpoint {id} met a write fault but was notified complete; faults \
             {injected:?}; {} restarts; {}",
            result.restarts,
            result.checkpoints
        );
    }
    assert!(
        run.resumed || result.checkpoints.failed >= failed_checkpoints.len() as u64,
        "{context}: {} checkpoints counted as failed, {} met write faults ({failed_checkpoints:?})",
        result.checkpoints.failed,
        failed_checkpoints.len()
    );
    complete_checkpoints_verify(dir, context);
}

#[test]
fn each_storage_fault_fails_its_checkpoint_cleanly_and_the_output_stays_exact() {
    use StorageFault::*;
    use StorageOperation::*;
    let cases = [
        (WriteFile, 5, NoSpace),
        (WriteFile, 6, Truncated),
        (WriteFile, 7, FsyncFailed),
        (WriteMetadata, 2, NoSpace),
        (WriteMetadata, 2, FsyncFailed),
        (WriteMetadata, 3, RenameFailed),
        (WriteJobRecord, 3, NoSpace),
        (WriteJobRecord, 3, FsyncFailed),
        (WriteJobRecord, 4, RenameFailed),
        (CreateLocation, 3, NoSpace),
        (CreateLocation, 4, IoError),
        (Delete, 1, IoError),
        (List, 4, IoError),
        (ReadMetadata, 1, IoError),
        (ReadFile, 1, IoError),
        (ReadJobRecord, 2, IoError),
    ];
    for (i, (operation, call, fault)) in cases.into_iter().enumerate() {
        let context = format!("{fault:?} at call {call} of {operation:?}");
        let name = format!("chosen{i}");
        println!("{context}");
        let dir = tempfile::tempdir().unwrap();
        let plan = Arc::new(FaultPlan::new().fail_call(operation, call, fault));
        let run = match operation {
            // A read fault needs a recovery that reads: a first run fails for good midway,
            // and a second one (a new JobManager, as it were) resumes it with the faults.
            ReadMetadata | ReadFile | ReadJobRecord => {
                let (_, store) = CommittingSink::new();
                let first = run_with(
                    &name,
                    dir.path(),
                    Arc::new(FaultPlan::new()),
                    3,
                    0,
                    Failure::AfterCheckpoints(4),
                    store.clone(),
                    false,
                );
                assert!(
                    first.result.is_err(),
                    "{context}: the first run did not fail"
                );

                let second = run_with(
                    &name,
                    dir.path(),
                    Arc::clone(&plan),
                    3,
                    5,
                    Failure::Never,
                    store.clone(),
                    true,
                );
                // A state file that cannot be read fails that deployment only: the restart
                // reads it again. Metadata or the record that cannot be read at the start
                // refuses the start, naming the file.
                if operation == ReadFile {
                    second
                } else {
                    resume_if_refused(second, &name, dir.path(), &plan, &context)
                }
            }
            // A write fault is followed by a failure, and recovery.
            _ => run(
                &name,
                dir.path(),
                Arc::clone(&plan),
                3,
                5,
                Failure::AfterFault,
            ),
        };
        check(&run, &plan, dir.path(), &context);
    }
}

#[test]
fn random_storage_faults_never_complete_a_partial_checkpoint_and_stay_exact() {
    let writes = [
        StorageOperation::CreateLocation,
        StorageOperation::WriteFile,
        StorageOperation::CopyFileIn,
        StorageOperation::WriteMetadata,
        StorageOperation::WriteJobRecord,
        StorageOperation::Delete,
        StorageOperation::List,
        StorageOperation::ReadFile,
        StorageOperation::ReadMetadata,
    ];
    for seed in seeds(4) {
        let mut rng = Rng(seed);
        let probability = 0.02 + rng.below(8) as f64 / 100.0;
        let context = format!(
            "seed {seed}: faults with probability {probability:.2} (replay with WEIR_SEED={seed})"
        );
        println!("{context}");
        let dir = tempfile::tempdir().unwrap();
        // Faults at the job's start fail its submission (tested below): these strike once
        // it runs.
        // One fault for sure, at a random state file write; the rest by chance.
        let faults = StorageOperation::WriteFile.possible_faults();
        let sure = faults[rng.below(faults.len() as u64) as usize];
        let plan = Arc::new(
            FaultPlan::new()
                .fail_call(StorageOperation::WriteFile, 3 + rng.below(20), sure)
                .random(seed, probability, &writes)
                .armed_after(StorageOperation::CreateLocation),
        );
        let run = run(
            &format!("random{seed}"),
            dir.path(),
            Arc::clone(&plan),
            1_000,
            50,
            Failure::AfterFault,
        );
        println!("  {} faults injected", plan.injected().len());
        let run = resume_if_refused(run, &format!("random{seed}"), dir.path(), &plan, &context);
        check(&run, &plan, dir.path(), &context);
    }
}

#[test]
fn a_storage_fault_beyond_the_tolerable_failures_fails_the_job_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let plan =
        Arc::new(FaultPlan::new().fail_call(StorageOperation::WriteFile, 1, StorageFault::NoSpace));
    let run = run(
        "intolerable",
        dir.path(),
        Arc::clone(&plan),
        0,
        0,
        Failure::Never,
    );
    let Err(err) = run.result else {
        panic!("the job succeeded with no tolerable checkpoint failure");
    };
    let message = err.to_string();
    let fault = &plan.injected()[0];
    assert!(
        message.contains("tolerable checkpoint failures")
            && message.contains("No space left on device")
            && message.contains(&fault.path),
        "{message}"
    );
    // The checkpoint the fault hit was never completed.
    assert!(!run.notified.contains(&fault.snapshot_id().unwrap_or(0)));
    complete_checkpoints_verify(dir.path(), "intolerable");
}

#[test]
fn a_storage_fault_before_the_job_runs_fails_its_start_naming_the_storage() {
    for (operation, fault) in [
        (StorageOperation::List, StorageFault::IoError),
        (StorageOperation::WriteJobRecord, StorageFault::RenameFailed),
        (StorageOperation::WriteJobRecord, StorageFault::NoSpace),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let plan = Arc::new(FaultPlan::new().fail_call(operation, 1, fault));
        let run = run("start", dir.path(), Arc::clone(&plan), 3, 5, Failure::Never);
        let Err(err) = run.result else {
            panic!("{fault:?} at the first {operation:?}: the job ran");
        };
        let message = err.to_string();
        assert!(
            message.contains("checkpoint storage") && message.contains(&plan.injected()[0].path),
            "{fault:?} at the first {operation:?}: {message}"
        );
        assert!(run.output.is_empty() && run.notified.is_empty());
    }
}

#[test]
fn a_failed_checkpoints_id_is_never_taken_again_not_even_by_a_resumed_job() {
    let dir = tempfile::tempdir().unwrap();
    // The third checkpoint's first state file cannot be written, and the job fails for good
    // right after: the failed checkpoint is the newest id it used.
    let plan =
        Arc::new(FaultPlan::new().fail_call(StorageOperation::WriteFile, 5, StorageFault::NoSpace));
    let first = run(
        "reuse",
        dir.path(),
        Arc::clone(&plan),
        3,
        0,
        Failure::AfterFault,
    );
    assert!(first.result.is_err(), "the first run did not fail");
    let failed = plan.injected()[0]
        .snapshot_id()
        .expect("a checkpoint's file");
    let resumed = run_with(
        "reuse",
        dir.path(),
        Arc::new(FaultPlan::new()),
        3,
        0,
        Failure::Never,
        first.store.clone(),
        true,
    );
    let result = resumed.result.as_ref().expect("the resumed run");
    assert!(result.checkpoints.completed > 0);
    let reused: Vec<u64> = resumed
        .notified
        .iter()
        .copied()
        .filter(|id| *id <= failed)
        .collect();
    assert!(
        reused.is_empty(),
        "checkpoint {failed} failed, yet the resumed job took ids {reused:?}"
    );
    let expected = multiset(&common::rolling_counts(RECORDS, key_of));
    if let Some(d) = diff(&expected, &multiset(&resumed.output)) {
        panic!("{d}");
    }
}
