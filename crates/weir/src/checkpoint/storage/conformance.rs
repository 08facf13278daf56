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
    assert_eq!(storage.job_record_version().unwrap(), 1);
    record.sequence = 2;
    storage.write_job_record(&record).unwrap();
    assert_eq!(storage.read_job_record().unwrap().unwrap().sequence, 2);
    // Compare-and-swap: a version is written once, and never below the newest.
    record.epoch = 9;
    for version in [2, 1] {
        record.sequence = version;
        let err = storage.write_job_record(&record).unwrap_err();
        assert!(err.is_record_conflict(), "version {version}: {err}");
    }
    let newest = storage.read_job_record().unwrap().unwrap();
    assert_eq!((newest.sequence, newest.epoch), (2, 2));
    assert_eq!(storage.read_primary_job_record().unwrap(), Some(newest));

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

    // The shared location: beside the checkpoints, untouched by their clean-up.
    let shared = storage.shared_location().unwrap();
    let loc4 = storage.init_location(4, SnapshotType::Checkpoint).unwrap();
    assert_eq!(storage.shared_location_of(&loc4), shared);
    let source = tempfile_path("weir-conformance-shared");
    std::fs::write(&source, b"shared bytes").unwrap();
    storage.copy_file_in(&shared, "x.sst", &source).unwrap();
    storage.copy_file_in(&loc4, "MANIFEST", &source).unwrap();
    let _ = std::fs::remove_file(&source);
    assert_eq!(
        storage
            .read_range(&shared, "x.sst", 0, 12, &accept)
            .unwrap(),
        b"shared bytes"
    );
    assert_eq!(storage.list_files(&shared).unwrap(), vec!["x.sst"]);
    storage.discard(&loc4).unwrap();
    storage.remove_leftovers(&[]).unwrap();
    assert_eq!(
        storage.list_files(&shared).unwrap(),
        vec!["x.sst"],
        "discards and clean-ups leave shared files alone"
    );
    storage.delete_file(&shared, "x.sst").unwrap();
    storage.delete_file(&shared, "x.sst").unwrap();
    assert!(storage.list_files(&shared).unwrap().is_empty());
    assert!(matches!(
        storage.read_range(&shared, "x.sst", 0, 1, &accept),
        Err(StorageError::NotFound { .. })
    ));
}

/// A path for a scratch file in the system's temporary directory, unique to this call.
fn tempfile_path(stem: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("{stem}-{}-{n}", std::process::id()))
}
