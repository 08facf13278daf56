//! Tests of `completed_store`.

use super::*;
use crate::checkpoint::storage::FsCheckpointStorage;

fn empty(store: &CompletedCheckpointStore, id: u64, kind: SnapshotType) -> CheckpointMetadata {
    CheckpointMetadata {
        checkpoint_id: id,
        kind,
        job_name: "j".into(),
        epoch: store.fencing().epoch(),
        timestamp_millis: 0,
        operators: vec![],
    }
}

fn complete(store: &mut CompletedCheckpointStore, id: u64) -> String {
    let location = store
        .storage()
        .init_location(id, SnapshotType::Checkpoint)
        .unwrap();
    let metadata = empty(store, id, SnapshotType::Checkpoint);
    store
        .storage()
        .write_metadata(&location, &metadata)
        .unwrap();
    store.add_completed(&metadata, &location, 2).unwrap();
    location
}

#[test]
fn the_record_leads_the_files_and_the_epoch_fences_the_previous_holder() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(FsCheckpointStorage::new(dir.path(), "j").unwrap());
    let (mut first, previous) = CompletedCheckpointStore::open(storage.clone(), "j").unwrap();
    assert_eq!(previous, PreviousRecord::None);
    first.begin(Vec::new(), 0).unwrap();
    let one = complete(&mut first, 1);
    complete(&mut first, 2);
    complete(&mut first, 3);
    assert!(
        !std::path::Path::new(&one).exists(),
        "retention deletes what the record dropped"
    );
    assert_eq!(first.record().notified_through, 3);
    let err = match CompletedCheckpointStore::open(storage.clone(), "j") {
        Ok(_) => panic!("a second holder was let in"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );

    // The lock is gone (as if its file had been removed while the holder stalled): a
    // new holder takes over with a higher epoch, and the old one writes nothing more.
    let stalled_lock = first._lock.take();
    drop(stalled_lock);
    let (mut second, previous) = CompletedCheckpointStore::open(storage.clone(), "j").unwrap();
    let PreviousRecord::Found(previous) = previous else {
        panic!("{previous:?}")
    };
    assert_eq!(second.fencing().epoch(), first.fencing().epoch() + 1);
    second
        .begin(previous.completed.clone(), previous.notified_through)
        .unwrap();
    let err = first
        .record_end(RecordedStatus::Finished {
            final_checkpoint: Some(3),
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("lost the job to epoch 2"), "{err}");
    assert_eq!(
        storage.list_checkpoints().unwrap().len(),
        2,
        "nothing deleted"
    );
    second
        .record_end(RecordedStatus::Finished {
            final_checkpoint: Some(3),
        })
        .unwrap();
    assert!(storage.list_checkpoints().unwrap().is_empty());
    let record = storage.read_job_record().unwrap().unwrap();
    assert!(matches!(record.status, RecordedStatus::Finished { .. }));
}

#[test]
fn a_stop_savepoint_stays_the_restore_point_whatever_completed_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(FsCheckpointStorage::new(dir.path(), "j").unwrap());
    let (mut store, _) = CompletedCheckpointStore::open(storage.clone(), "j").unwrap();
    store.begin(Vec::new(), 0).unwrap();
    complete(&mut store, 1);
    let savepoint = storage.init_location(2, SnapshotType::Savepoint).unwrap();
    store
        .add_completed(&empty(&store, 2, SnapshotType::Savepoint), &savepoint, 2)
        .unwrap();
    complete(&mut store, 3);
    store
        .record_end(RecordedStatus::Stopped {
            savepoint: 2,
            location: savepoint.clone(),
        })
        .unwrap();
    let record = storage.read_job_record().unwrap().unwrap();
    assert_eq!(
        record.completed,
        vec![RecordedCheckpoint::new(
            2,
            SnapshotType::Savepoint,
            savepoint.clone()
        )]
    );
    assert!(storage.list_checkpoints().unwrap().is_empty());
    assert!(std::path::Path::new(&savepoint).exists(), "savepoints stay");
}

/// Storage for job `j` under `dir`, and a store that took the job fresh.
fn begun(dir: &std::path::Path) -> (Arc<dyn CheckpointStorage>, CompletedCheckpointStore) {
    let storage: Arc<dyn CheckpointStorage> = Arc::new(FsCheckpointStorage::new(dir, "j").unwrap());
    let (mut store, _) = CompletedCheckpointStore::open(storage.clone(), "j").unwrap();
    store.begin(Vec::new(), 0).unwrap();
    (storage, store)
}

/// The interleaving a check before the write cannot fence: the holder checks its token,
/// stalls, loses its lock file, a successor takes over and completes checkpoints, and the
/// holder wakes up and writes. Its write is a compare-and-swap on the version it read, so
/// it fails and fences it for good; the successor's record stands.
#[test]
fn a_holder_that_stalled_between_its_check_and_its_write_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (storage, mut first) = begun(dir.path());
    complete(&mut first, 1);
    first.fencing().check().unwrap();
    drop(first._lock.take());
    let (mut second, previous) = CompletedCheckpointStore::open(storage.clone(), "j").unwrap();
    let PreviousRecord::Found(previous) = previous else {
        panic!("{previous:?}")
    };
    second
        .begin(previous.completed.clone(), previous.notified_through)
        .unwrap();
    complete(&mut second, 2);
    // The stalled holder's write, as if its check had passed just before.
    first.record.status = RecordedStatus::Finished {
        final_checkpoint: Some(1),
    };
    let err = first.persist().unwrap_err().to_string();
    assert!(
        err.contains("lost the job") && err.contains("version"),
        "{err}"
    );
    let record = storage.read_job_record().unwrap().unwrap();
    assert_eq!(record.epoch, second.fencing().epoch());
    assert_eq!(record.notified_through, 2);
    assert_eq!(record.latest().map(|c| (c.id, c.epoch)), Some((2, 2)));
    assert!(first.fencing().check().is_err(), "fenced for good");
    // Two processes that both read the same record (a lock file removed between their
    // starts): only the first to write takes the job.
    drop(second._lock.take());
    let (mut third, _) = CompletedCheckpointStore::open(storage.clone(), "j").unwrap();
    drop(third._lock.take());
    let (mut fourth, _) = CompletedCheckpointStore::open(storage.clone(), "j").unwrap();
    fourth.begin(Vec::new(), 2).unwrap();
    let err = third.begin(Vec::new(), 2).unwrap_err().to_string();
    assert!(err.contains("lost the job"), "{err}");
}

/// A record write whose outcome was not learnt leaves no gap another process could fill
/// under this one's next version: the next write reads the newest version first.
#[test]
fn after_a_failed_record_write_the_next_one_goes_on_only_from_its_own_version() {
    use crate::checkpoint::storage::{
        FaultInjectingStorage, FaultPlan, MemoryCheckpointStorage, StorageFault, StorageOperation,
    };
    for (fault, taken_over) in [
        (StorageFault::NoSpace, true),
        (StorageFault::FsyncFailed, true),
        (StorageFault::NoSpace, false),
        (StorageFault::FsyncFailed, false),
    ] {
        let inner: Arc<dyn CheckpointStorage> = Arc::new(MemoryCheckpointStorage::new("j"));
        // The first write is `begin`, the second the first checkpoint: the third fails.
        let plan = Arc::new(FaultPlan::new().fail_call(StorageOperation::WriteJobRecord, 3, fault));
        let faulty: Arc<dyn CheckpointStorage> =
            Arc::new(FaultInjectingStorage::new(inner.clone(), plan));
        let (mut first, _) = CompletedCheckpointStore::open(faulty, "j").unwrap();
        first.begin(Vec::new(), 0).unwrap();
        complete(&mut first, 1);
        let location = first
            .storage()
            .init_location(2, SnapshotType::Checkpoint)
            .unwrap();
        let metadata = empty(&first, 2, SnapshotType::Checkpoint);
        first
            .storage()
            .write_metadata(&location, &metadata)
            .unwrap();
        assert!(
            first.add_completed(&metadata, &location, 2).is_err(),
            "{fault:?}"
        );
        if taken_over {
            // Another process takes the job in the gap (memory storage has no lock).
            let (mut second, _) = CompletedCheckpointStore::open(inner.clone(), "j").unwrap();
            second.begin(Vec::new(), 1).unwrap();
            // The write itself, as if its fencing check had passed just before.
            let err = first.persist().unwrap_err().to_string();
            assert!(
                err.contains("lost the job") && err.contains("another process's"),
                "{fault:?}: {err}"
            );
            let newest = inner.read_job_record().unwrap().unwrap();
            assert_eq!(newest.epoch, second.fencing().epoch(), "{fault:?}");
        } else {
            complete(&mut first, 3);
            let newest = inner.read_job_record().unwrap().unwrap();
            assert_eq!(newest.latest().map(|c| c.id), Some(3), "{fault:?}");
        }
    }
}

#[test]
fn a_reset_keeps_epochs_and_ids_growing_and_a_stale_holder_out() {
    let dir = tempfile::tempdir().unwrap();
    let (storage, mut first) = begun(dir.path());
    complete(&mut first, 1);
    complete(&mut first, 2);
    let savepoint = storage.init_location(3, SnapshotType::Savepoint).unwrap();
    storage
        .write_metadata(&savepoint, &empty(&first, 3, SnapshotType::Savepoint))
        .unwrap();
    let err = match CompletedCheckpointStore::reset(storage.clone(), "j", |_| Ok(())) {
        Ok(_) => panic!("a reset over a live holder"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("locked by another process"), "{err}");
    drop(first._lock.take());
    let mut moved = None;
    let outcome = CompletedCheckpointStore::reset(storage.clone(), "j", |epoch| {
        moved = Some(epoch);
        Ok(())
    })
    .unwrap();
    assert_eq!(moved, Some(2));
    assert_eq!(outcome.epoch, 2);
    assert_eq!(outcome.removed_checkpoints, vec![1, 2]);
    assert_eq!(outcome.savepoints, vec![savepoint.clone()]);
    assert!(
        outcome
            .previous
            .as_deref()
            .is_some_and(|p| p.contains("checkpoint 2")),
        "{outcome}"
    );
    let record = storage.read_job_record().unwrap().unwrap();
    assert_eq!(record.status, RecordedStatus::Reset);
    assert!(record.completed.is_empty() && record.notified_through == 0);
    assert!(!record.has_earlier_run());
    assert!(storage.list_checkpoints().unwrap().is_empty());
    let (next, _) = CompletedCheckpointStore::open(storage.clone(), "j").unwrap();
    assert_eq!(next.next_id(), 4, "ids continue above the savepoint");
    assert_eq!(next.fencing().epoch(), 3);
    // The holder from before the reset wakes up: it writes nothing.
    let err = first
        .record_end(RecordedStatus::Finished {
            final_checkpoint: Some(2),
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("lost the job"), "{err}");
}

#[test]
fn epochs_never_repeat_even_when_the_record_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(FsCheckpointStorage::new(dir.path(), "j").unwrap());
    let (mut first, _) = CompletedCheckpointStore::open(storage.clone(), "j").unwrap();
    first.begin(Vec::new(), 0).unwrap();
    let epoch = first.fencing().epoch();
    drop(first);
    std::fs::remove_dir_all(
        dir.path()
            .join("j")
            .join(crate::checkpoint::job_record_versions::JOB_RECORD_DIR),
    )
    .unwrap();
    let (second, previous) = CompletedCheckpointStore::open(storage, "j").unwrap();
    assert_eq!(previous, PreviousRecord::None);
    assert!(
        second.fencing().epoch() > epoch,
        "the lock file remembers the epoch"
    );
}
