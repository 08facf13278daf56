//! What every [`CheckpointStorage`] must do, as a test any implementation runs against
//! itself (a storage in another crate, say on object storage, included). It panics naming
//! the first broken promise.

use super::{CheckpointStorage, StorageError};
use crate::checkpoint::job_record::{JobRecord, RecordedCheckpoint};
use crate::checkpoint::metadata::CheckpointMetadata;
use crate::runtime::stream_element::SnapshotType;

/// Metadata of an empty checkpoint `id`.
pub fn metadata(id: u64) -> CheckpointMetadata {
    CheckpointMetadata {
        checkpoint_id: id,
        kind: SnapshotType::Checkpoint,
        job_name: "j".into(),
        epoch: 1,
        timestamp_millis: 0,
        operators: vec![],
    }
}

fn accept(_: &[u8]) -> Result<(), String> {
    Ok(())
}

/// What every storage must do; panics naming the first thing it does not.
pub fn exercise(storage: &dyn CheckpointStorage) {
    let loc1 = storage.init_location(1, SnapshotType::Checkpoint).unwrap();
    let loc2 = storage.init_location(2, SnapshotType::Checkpoint).unwrap();
    storage.init_location(3, SnapshotType::Savepoint).unwrap();
    assert!(
        storage.init_location(3, SnapshotType::Savepoint).is_err(),
        "never reused"
    );
    assert_eq!(storage.max_id().unwrap(), 3);
    storage.write_file(&loc1, "a.keyed", b"0123456789").unwrap();
    assert_eq!(
        storage.read_range(&loc1, "a.keyed", 2, 3, &accept).unwrap(),
        b"234"
    );
    assert!(matches!(
        storage.read_range(&loc1, "a.keyed", 8, 5, &accept),
        Err(StorageError::Corrupt { .. })
    ));
    let refuse = |_: &[u8]| Err("checksum mismatch".to_string());
    let err = storage
        .read_range(&loc1, "a.keyed", 0, 3, &refuse)
        .unwrap_err();
    assert!(err.to_string().contains("checksum mismatch"), "{err}");
    storage.write_metadata(&loc1, &metadata(1)).unwrap();
    assert_eq!(storage.read_metadata(&loc1).unwrap(), metadata(1));
    let listed = storage.list_checkpoints().unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|c| (c.id, c.has_metadata))
            .collect::<Vec<_>>(),
        vec![(1, true), (2, false)]
    );
    assert!(matches!(
        storage.read_metadata(&loc2),
        Err(StorageError::NotFound { .. })
    ));
    storage.discard(&loc1).unwrap();
    assert_eq!(storage.list_checkpoints().unwrap().len(), 1);
    assert!(
        storage.write_file(&loc1, "late", b"x").is_err(),
        "a discarded location takes no files"
    );
    assert_eq!(storage.max_id().unwrap(), 3, "ids are never reused");

    assert_eq!(storage.read_job_record().unwrap(), None);
    let mut record = JobRecord::new("j");
    record.epoch = 2;
    record.sequence = 1;
    record.add_completed(
        RecordedCheckpoint::new(2, SnapshotType::Checkpoint, loc2.clone()),
        1,
    );
    storage.write_job_record(&record).unwrap();
    assert_eq!(storage.read_job_record().unwrap(), Some(record.clone()));
    record.sequence = 2;
    storage.write_job_record(&record).unwrap();
    assert_eq!(storage.read_job_record().unwrap().unwrap().sequence, 2);

    // Location 2 never got metadata, but the record names it: it is kept.
    let removed = storage
        .remove_leftovers(std::slice::from_ref(&loc2))
        .unwrap();
    assert!(
        removed.iter().any(|r| r.contains("savepoint-3")),
        "{removed:?}"
    );
    assert_eq!(storage.list_checkpoints().unwrap().len(), 1);
    storage.remove_leftovers(&[]).unwrap();
    assert!(storage.list_checkpoints().unwrap().is_empty());
}
