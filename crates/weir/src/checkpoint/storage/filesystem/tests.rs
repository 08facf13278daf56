//! Tests of `filesystem`.

use super::super::conformance::{exercise, metadata};
use super::*;

#[test]
fn filesystem_storage() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FsCheckpointStorage::new(dir.path(), "my job/1").unwrap();
    assert!(storage.job_dir().ends_with("my_job_1"));
    exercise(&storage);
}

#[test]
fn filesystem_storage_with_a_local_copy() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FsCheckpointStorage::new(&dir.path().join("primary"), "job")
        .unwrap()
        .with_local_copy(&dir.path().join("copy"))
        .unwrap();
    exercise(&storage);
}

#[test]
fn corrupt_metadata_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FsCheckpointStorage::new(dir.path(), "job").unwrap();
    let loc = storage.init_location(5, SnapshotType::Checkpoint).unwrap();
    storage.write_metadata(&loc, &metadata(5)).unwrap();
    let path = Path::new(&loc).join(METADATA_FILE);
    let mut bytes = fs::read(&path).unwrap();
    bytes.truncate(bytes.len() - 1);
    fs::write(&path, bytes).unwrap();
    let err = storage.read_metadata(&loc).unwrap_err().to_string();
    assert!(
        err.contains("chk-5/_metadata") && err.contains("truncated"),
        "{err}"
    );
}

#[test]
fn a_damaged_or_deleted_primary_is_read_from_its_local_copy() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FsCheckpointStorage::new(&dir.path().join("primary"), "job")
        .unwrap()
        .with_local_copy(&dir.path().join("copy"))
        .unwrap();
    let loc = storage.init_location(4, SnapshotType::Checkpoint).unwrap();
    storage.write_file(&loc, "s.keyed", b"abcdef").unwrap();
    storage.write_metadata(&loc, &metadata(4)).unwrap();
    let crc = crc32fast::hash(b"bcd");
    let verify = move |b: &[u8]| {
        (crc32fast::hash(b) == crc)
            .then_some(())
            .ok_or_else(|| "checksum mismatch".to_string())
    };
    fs::write(Path::new(&loc).join("s.keyed"), b"aXXdef").unwrap();
    assert_eq!(
        storage.read_range(&loc, "s.keyed", 1, 3, &verify).unwrap(),
        b"bcd"
    );
    fs::remove_file(Path::new(&loc).join(METADATA_FILE)).unwrap();
    assert_eq!(storage.read_metadata(&loc).unwrap(), metadata(4));
    // The whole primary directory gone: still readable.
    fs::remove_dir_all(&loc).unwrap();
    assert_eq!(storage.read_metadata(&loc).unwrap(), metadata(4));
    // Both damaged: the error names both.
    let copy = storage.copy_of(Path::new(&loc)).unwrap();
    fs::write(copy.join("s.keyed"), b"aYYdef").unwrap();
    let err = storage
        .read_range(&loc, "s.keyed", 1, 3, &verify)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("missing") && err.contains("checksum mismatch"),
        "{err}"
    );
    fs::remove_file(copy.join(METADATA_FILE)).unwrap();
    let err = storage.read_metadata(&loc).unwrap_err().to_string();
    assert!(err.contains("nor does its local-recovery copy"), "{err}");
}

#[test]
fn the_job_record_survives_the_loss_of_one_copy() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FsCheckpointStorage::new(&dir.path().join("primary"), "job")
        .unwrap()
        .with_local_copy(&dir.path().join("copy"))
        .unwrap();
    let mut record = JobRecord::new("job");
    record.sequence = 3;
    storage.write_job_record(&record).unwrap();
    let primary = FsCheckpointStorage::newest_record_file(storage.job_dir()).unwrap();
    let copy = FsCheckpointStorage::newest_record_file(storage.copy_dir().unwrap()).unwrap();
    fs::write(&primary, [7u8; 40]).unwrap();
    assert_eq!(storage.read_job_record().unwrap(), Some(record.clone()));
    fs::remove_file(&copy).unwrap();
    let err = storage.read_job_record().unwrap_err().to_string();
    assert!(
        err.contains("_job_record") && err.contains("magic"),
        "{err}"
    );
    // The primary deleted outright: the copy's newest.
    fs::write(&copy, record.encode().unwrap()).unwrap();
    fs::remove_file(&primary).unwrap();
    assert_eq!(storage.read_job_record().unwrap(), Some(record));
}

#[test]
fn a_stale_copy_is_never_read_for_a_newer_damaged_primary() {
    let dir = tempfile::tempdir().unwrap();
    let with_copy = FsCheckpointStorage::new(&dir.path().join("primary"), "job")
        .unwrap()
        .with_local_copy(&dir.path().join("copy"))
        .unwrap();
    let mut record = JobRecord::new("job");
    record.sequence = 1;
    with_copy.write_job_record(&record).unwrap();
    // A later run without the copy moves the primary on; the copy stays at version 1.
    let without = FsCheckpointStorage::new(&dir.path().join("primary"), "job").unwrap();
    record.sequence = 2;
    without.write_job_record(&record).unwrap();
    let newest = FsCheckpointStorage::newest_record_file(without.job_dir()).unwrap();
    fs::write(&newest, [7u8; 40]).unwrap();
    let err = with_copy.read_job_record().unwrap_err().to_string();
    assert!(
        err.contains("magic") && err.contains("00000000000000000002"),
        "the damaged version 2 is reported, version 1 of the copy not used: {err}"
    );
    // A version copied over another is not trusted either.
    fs::write(&newest, {
        let mut older = record.clone();
        older.sequence = 1;
        older.encode().unwrap()
    })
    .unwrap();
    let err = without.read_job_record().unwrap_err().to_string();
    assert!(err.contains("holds version 1"), "{err}");
}

#[test]
fn the_one_file_record_of_an_earlier_weir_is_named_and_moved_aside_by_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FsCheckpointStorage::new(dir.path(), "job").unwrap();
    fs::write(storage.job_dir().join(JOB_RECORD_DIR), b"WEIRJOB1...").unwrap();
    let err = storage.read_job_record().unwrap_err().to_string();
    assert!(
        err.contains("earlier Weir") && err.contains("weir reset"),
        "{err}"
    );
    assert_eq!(storage.job_record_version().unwrap(), 0);
    let mut record = JobRecord::new("job");
    record.sequence = 1;
    storage.write_job_record(&record).unwrap();
    assert_eq!(storage.read_job_record().unwrap(), Some(record));
    assert!(storage.job_dir().join("_job_record.earlier-weir").is_file());
}

#[test]
fn a_record_version_is_written_once_and_a_late_writer_loses() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FsCheckpointStorage::new(dir.path(), "job").unwrap();
    let mut record = JobRecord::new("job");
    record.sequence = 1;
    storage.write_job_record(&record).unwrap();
    assert_eq!(storage.job_record_version().unwrap(), 1);
    let mut successor = record.clone();
    successor.sequence = 2;
    successor.epoch = 2;
    storage.write_job_record(&successor).unwrap();
    // The stalled process read version 1 too and now writes its own version 2.
    let mut stale = record.clone();
    stale.sequence = 2;
    stale.epoch = 1;
    let err = storage.write_job_record(&stale).unwrap_err();
    assert!(err.is_record_conflict(), "{err}");
    assert!(err.to_string().contains("exists already"), "{err}");
    assert_eq!(storage.read_job_record().unwrap(), Some(successor.clone()));
    // The successor moves on; version 2 is deleted as old; the stale process's create of
    // version 2 succeeds, and still loses to version 3.
    successor.sequence = 3;
    storage.write_job_record(&successor).unwrap();
    assert_eq!(
        FsCheckpointStorage::record_versions(storage.job_dir()).unwrap(),
        vec![3],
        "older versions are deleted"
    );
    let err = storage.write_job_record(&stale).unwrap_err();
    assert!(
        err.is_record_conflict() && err.to_string().contains("version 3 exists"),
        "{err}"
    );
    assert_eq!(storage.read_job_record().unwrap(), Some(successor));
}

#[test]
fn a_discard_cut_short_leaves_only_a_hidden_leftover() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FsCheckpointStorage::new(dir.path(), "job").unwrap();
    let loc = storage.init_location(9, SnapshotType::Checkpoint).unwrap();
    storage.write_metadata(&loc, &metadata(9)).unwrap();
    // What a crash between the rename and the deletion leaves.
    fs::rename(&loc, storage.job_dir().join(".discard-chk-9")).unwrap();
    assert!(storage.list_checkpoints().unwrap().is_empty());
    assert_eq!(storage.max_id().unwrap(), 9, "the id stays used");
    let removed = storage.remove_leftovers(&[]).unwrap();
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(storage.max_id().unwrap(), 0);
}
