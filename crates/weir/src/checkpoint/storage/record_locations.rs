//! Restore points in a job record on a filesystem name their locations relative to the job's
//! directory (`chk-12`, `savepoint-7`), so that a work directory that was moved or mounted
//! elsewhere can still be resumed. In memory, and everywhere else in Weir, locations are full
//! paths: the storage makes them relative when it writes the record and full again when it
//! reads it. A location outside the job's directory (a checkpoint or savepoint the job was
//! started from by path) stays as it was given; records written before this change hold the
//! paths of their time (full, or relative to the working directory when the checkpoint
//! directory was configured so), which are read as they are: only a bare `chk-<id>` or
//! `savepoint-<id>` is taken to be inside the job's directory.

use std::path::Path;

use crate::checkpoint::job_record::{JobRecord, RecordedStatus};

/// `location` relative to `job_dir` when it lies directly inside it, else unchanged.
pub fn relative_location(job_dir: &Path, location: &str) -> String {
    match Path::new(location).strip_prefix(job_dir) {
        Ok(rest) if rest.components().count() == 1 => rest.display().to_string(),
        _ => location.to_string(),
    }
}

/// A location as recorded, made a full path again: a bare location name is inside `job_dir`.
pub fn resolved_location(job_dir: &Path, location: &str) -> String {
    if crate::checkpoint::storage::parse_any_location(location).is_none() {
        return location.to_string();
    }
    job_dir.join(location).display().to_string()
}

/// `record` as written: its locations inside `job_dir` relative to it.
pub fn relative_to(job_dir: &Path, record: &JobRecord) -> JobRecord {
    map_locations(record.clone(), |l| relative_location(job_dir, l))
}

/// `record` as read: its relative locations made full paths inside `job_dir`.
pub fn resolved_in(job_dir: &Path, record: JobRecord) -> JobRecord {
    map_locations(record, |l| resolved_location(job_dir, l))
}

fn map_locations(mut record: JobRecord, map: impl Fn(&str) -> String) -> JobRecord {
    for point in &mut record.completed {
        point.location = map(&point.location);
    }
    if let RecordedStatus::Stopped { location, .. } = &mut record.status {
        *location = map(location);
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::job_record::RecordedCheckpoint;
    use crate::runtime::stream_element::SnapshotType;

    #[test]
    fn locations_inside_the_job_directory_travel_with_it() {
        let mut record = JobRecord::new("j");
        record.completed = vec![
            RecordedCheckpoint::new(3, SnapshotType::Checkpoint, "/old/work/j/chk-3"),
            RecordedCheckpoint::new(1, SnapshotType::Savepoint, "/elsewhere/savepoint-1"),
        ];
        record.status = RecordedStatus::Stopped {
            savepoint: 4,
            location: "/old/work/j/savepoint-4".into(),
        };
        let written = relative_to(Path::new("/old/work/j"), &record);
        assert_eq!(written.completed[0].location, "chk-3");
        // Started from by path: not the job's own, kept whole.
        assert_eq!(written.completed[1].location, "/elsewhere/savepoint-1");
        let read = resolved_in(Path::new("/new/place/j"), written);
        assert_eq!(read.completed[0].location, "/new/place/j/chk-3");
        assert_eq!(read.completed[1].location, "/elsewhere/savepoint-1");
        assert_eq!(
            read.status,
            RecordedStatus::Stopped {
                savepoint: 4,
                location: "/new/place/j/savepoint-4".into()
            }
        );
        // Nested paths and URLs are never rewritten.
        assert_eq!(
            relative_location(Path::new("/w/j"), "/w/j/shared/x"),
            "/w/j/shared/x"
        );
        assert_eq!(
            resolved_location(Path::new("/w/j"), "s3://b/j/chk-1"),
            "s3://b/j/chk-1"
        );
        // A record of an earlier Weir, with a checkpoint directory relative to the working
        // directory, reads as it was written.
        assert_eq!(
            resolved_location(Path::new("work/cp/j"), "work/cp/j/chk-3"),
            "work/cp/j/chk-3"
        );
    }

    #[test]
    fn a_relative_job_directory_resolves_to_the_same_relative_form() {
        let dir = Path::new("target/work/checkpoints/j");
        assert_eq!(
            relative_location(dir, "target/work/checkpoints/j/chk-9"),
            "chk-9"
        );
        assert_eq!(
            resolved_location(dir, "chk-9"),
            "target/work/checkpoints/j/chk-9"
        );
    }
}
