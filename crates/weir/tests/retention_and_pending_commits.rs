//! Checkpoint retention never deletes what a sink's pending transaction still needs.
//!
//! With one retained checkpoint, checkpoint m's directory is deleted as soon as m+1
//! completes — possibly before a sink subtask has committed m's transaction (its completion
//! notice arrives after the barrier of m+1, or is lost in a crash). The two-phase-commit sink
//! therefore carries every transaction not yet committed into each later snapshot. This test
//! brings that moment about on purpose and fails the job right there: one sink subtask is
//! held back at a checkpoint until the other has pre-committed the next one, so that one
//! hears late that the first completed; when it is told, the job waits until retention has deleted the
//! first checkpoint's directory and then fails the commit. The restored job must commit the
//! transaction from the later checkpoint: every record is visible exactly once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir::connectors::two_phase_commit::{TwoPhaseCommit, TwoPhaseCommitSink};
use weir::prelude::*;

const RECORDS: u64 = 60_000;
const JOB: &str = "retention-and-pending-commits";

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Txn {
    id: u64,
    subtask: u32,
    /// The checkpoint whose barrier pre-committed it.
    checkpoint: Option<u64>,
}

/// What the test arranges and observes, shared by every subtask's sink.
#[derive(Default)]
struct Scene {
    /// Per subtask, the newest checkpoint it pre-committed.
    newest_pre_commit: [AtomicU64; 2],
    /// Whether subtask 1 was slow once already.
    slowed: AtomicBool,
    /// The checkpoint whose transaction's commit failed after its directory was deleted.
    failed_commit_of: Mutex<Option<u64>>,
}

/// A "database": staged rows per transaction, visible per transaction once committed.
#[derive(Clone)]
struct Db {
    staged: Arc<Mutex<BTreeMap<u64, Vec<u64>>>>,
    visible: Arc<Mutex<BTreeMap<u64, Vec<u64>>>>,
    next_id: Arc<AtomicU64>,
    scene: Arc<Scene>,
    job_dir: PathBuf,
    subtask: u32,
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    done()
}

impl TwoPhaseCommitSink<u64> for Db {
    type Transaction = Txn;

    fn abort_lingering(&mut self, _: &RuntimeContext, _known: &[Txn]) -> Result<(), BoxError> {
        Ok(())
    }

    fn begin_transaction(&mut self, context: &RuntimeContext) -> Result<Txn, BoxError> {
        self.subtask = context.subtask_index();
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        self.staged
            .lock()
            .map_err(|_| "poisoned")?
            .insert(id, Vec::new());
        Ok(Txn {
            id,
            subtask: self.subtask,
            checkpoint: None,
        })
    }

    fn write(&mut self, txn: &mut Txn, record: u64) -> Result<(), BoxError> {
        let mut staged = self.staged.lock().map_err(|_| "poisoned")?;
        staged
            .get_mut(&txn.id)
            .ok_or("unknown transaction")?
            .push(record);
        Ok(())
    }

    fn pre_commit(&mut self, _txn: &mut Txn) -> Result<(), BoxError> {
        Ok(())
    }

    fn pre_commit_for_checkpoint(
        &mut self,
        txn: &mut Txn,
        checkpoint: u64,
    ) -> Result<(), BoxError> {
        txn.checkpoint = Some(checkpoint);
        if let Some(newest) = self.scene.newest_pre_commit.get(txn.subtask as usize) {
            newest.fetch_max(checkpoint, Ordering::SeqCst);
        }
        // Subtask 1 holds its third checkpoint m back until subtask 0 has pre-committed m+1
        // (up to two checkpoints are in flight), however loaded the machine: m then
        // completes after subtask 0 passed the barrier of m+1.
        if txn.subtask == 1 && checkpoint >= 3 && !self.scene.slowed.swap(true, Ordering::SeqCst) {
            let newest = &self.scene.newest_pre_commit[0];
            wait_until(Duration::from_secs(10), || {
                newest.load(Ordering::SeqCst) > checkpoint
            });
        }
        Ok(())
    }

    fn commit(&mut self, txn: &Txn) -> Result<(), BoxError> {
        if let (0, Some(m)) = (txn.subtask, txn.checkpoint) {
            let first_failure = self
                .scene
                .failed_commit_of
                .lock()
                .map_err(|_| "poisoned")?
                .is_none();
            let lagging = self.scene.newest_pre_commit[0].load(Ordering::SeqCst) > m;
            if first_failure && lagging {
                // The notice of m came after the barrier of m+1: once m+1 completes, retention
                // deletes chk-m while this transaction is still to be committed.
                let checkpoint_dir = self.job_dir.join(format!("chk-{m}"));
                if wait_until(Duration::from_secs(10), || !checkpoint_dir.exists()) {
                    *self.scene.failed_commit_of.lock().map_err(|_| "poisoned")? = Some(m);
                    return Err(format!(
                        "injected failure: committing checkpoint {m}'s transaction after \
                         retention deleted chk-{m}"
                    )
                    .into());
                }
            }
        }
        let rows = self.staged.lock().map_err(|_| "poisoned")?.remove(&txn.id);
        if let Some(rows) = rows {
            self.visible
                .lock()
                .map_err(|_| "poisoned")?
                .insert(txn.id, rows);
        }
        Ok(())
    }

    fn abort(&mut self, txn: &Txn) -> Result<(), BoxError> {
        self.staged.lock().map_err(|_| "poisoned")?.remove(&txn.id);
        Ok(())
    }
}

#[test]
fn a_transaction_whose_checkpoint_retention_deleted_is_committed_from_a_later_one() {
    let dir = tempfile::tempdir().unwrap();
    let scene = Arc::new(Scene::default());
    let db = Db {
        staged: Arc::default(),
        visible: Arc::default(),
        next_id: Arc::new(AtomicU64::new(1)),
        scene: Arc::clone(&scene),
        job_dir: dir.path().join(JOB),
        subtask: 0,
    };
    let config = ExecutionConfig::default()
        .with_parallelism(2)
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_millis(20))
                .with_max_concurrent(2)
                .with_retained(1)
                .with_storage(CheckpointStorageConfig::FileSystem(
                    dir.path().to_path_buf(),
                )),
        )
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 2,
            delay: Duration::from_millis(10),
        });
    let env = StreamExecutionEnvironment::new(config).unwrap();
    // Source and sink chain per subtask; a pause every 20 records keeps the job running
    // for a few seconds, through many checkpoints.
    env.generate(RECORDS, |i| i)
        .map(|i: u64| {
            if i.is_multiple_of(20) {
                std::thread::sleep(Duration::from_millis(1));
            }
            i
        })
        .sink_to(TwoPhaseCommit(db.clone()), "db");
    let result = env.execute(JOB).unwrap();

    let failed = *scene.failed_commit_of.lock().unwrap();
    let Some(m) = failed else {
        panic!(
            "the job never reached a commit of a transaction whose checkpoint was deleted \
             (newest pre-commits {:?}); {}",
            scene.newest_pre_commit, result.checkpoints
        );
    };
    assert_eq!(
        result.restarts, 1,
        "the injected failure restarts the job once"
    );
    let mut rows: Vec<u64> = db
        .visible
        .lock()
        .unwrap()
        .values()
        .flatten()
        .copied()
        .collect();
    rows.sort_unstable();
    let missing = (0..RECORDS)
        .filter(|i| rows.binary_search(i).is_err())
        .count();
    let duplicated = rows.windows(2).filter(|w| w[0] == w[1]).count();
    assert_eq!(
        (missing, duplicated, rows.len() as u64),
        (0, 0, RECORDS),
        "after the commit of checkpoint {m}'s transaction failed with chk-{m} deleted, \
         the restored job must commit it from a later checkpoint"
    );
}
