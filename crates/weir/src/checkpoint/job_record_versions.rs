//! The job record as a chain of versions written once each: compare-and-swap on storage that
//! cannot compare a file's content before it replaces it.
//!
//! Version *n* of a job's record is the file (or object) `<job>/_job_record/<n>`. A process
//! that read version *n* writes *n + 1*, by a create that fails when that name exists — a hard
//! link on a filesystem, `If-None-Match: *` on object storage — and then lists the versions:
//! if one newer than its own exists, another process wrote first. Either way the write fails,
//! and a process whose write failed has lost the job for good. Without this, a process that
//! checked its fencing token and stalled before writing would wake up and replace the record
//! of the process that took the job over in the meantime — the check and the act were two
//! steps; here they are one.
//!
//! Readers take the newest version. Older ones are deleted once a newer one is durable; a
//! stalled process whose create succeeds only because its version was deleted as old finds
//! the newer one in the listing after its create (the newest version is never deleted), so it
//! fails the same way. After a write whose outcome it did not learn (an I/O error), a
//! process reads the newest version before it writes again, and goes on only if that one is
//! its own: a gap in its versions would let a stale process's next version land above a
//! successor's.

use crate::checkpoint::job_record::JobRecord;

/// Name of the directory (or object prefix) of the record's versions inside the job's directory.
pub const JOB_RECORD_DIR: &str = "_job_record";

/// The name of version `version`: zero-padded, so that names sort as numbers.
pub fn version_name(version: u64) -> String {
    format!("{version:020}")
}

/// The version a name holds, if it is a version's name.
pub fn parse_version(name: &str) -> Option<u64> {
    if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) {
        name.parse().ok()
    } else {
        None
    }
}

/// What a writer decides from the versions it listed right after creating version `written`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterCreate {
    /// `written` is the newest: the write took effect; these older versions may be deleted.
    Newest {
        /// Versions older than `written`.
        obsolete: Vec<u64>,
    },
    /// Another process wrote a newer version: this write does not count, and the writer has
    /// lost the job.
    Superseded {
        /// The newest version found.
        newest: u64,
    },
}

/// Decides whether the create of version `written` took effect, given every version listed
/// after it (`present`, which includes `written` unless something removed it since). A writer
/// always writes the version right after one it wrote or read itself — after a write whose
/// outcome it did not learn, it reads the newest again and goes on only if that one is its
/// own ([`same_writer`]) — so no version between goes unchecked.
pub fn after_create(written: u64, present: &[u64]) -> AfterCreate {
    match present.iter().copied().filter(|v| *v > written).max() {
        Some(newest) => AfterCreate::Superseded { newest },
        None => AfterCreate::Newest {
            obsolete: present.iter().copied().filter(|v| *v < written).collect(),
        },
    }
}

/// Whether version `other` of the record was written by the process that wrote `mine` (the
/// same epoch and holder): a version in the gap a failed write left must be.
pub fn same_writer(mine: &JobRecord, other: &JobRecord) -> bool {
    mine.epoch == other.epoch && mine.holder == other.holder
}

/// How many times a reader lists the versions again when the newest it listed is gone
/// before it could read it (a writer deletes older versions right after creating a new one).
pub const READ_ATTEMPTS: usize = 20;

/// Why the record's newest version `version` (named `name`) must not be trusted although
/// its checksum holds: its content says it is another version (a file copied from elsewhere).
pub fn mismatch(name: &str, version: u64, sequence: u64) -> Option<String> {
    (version != sequence).then(|| {
        format!(
            "it is named as version {version} of the job record but holds version {sequence} \
             (`{name}` was copied from elsewhere)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_as_versions_and_nothing_else_parses() {
        assert_eq!(version_name(42), "00000000000000000042");
        assert_eq!(parse_version(&version_name(42)), Some(42));
        assert_eq!(parse_version(&version_name(u64::MAX)), Some(u64::MAX));
        assert!(version_name(9) < version_name(10));
        for other in [
            "42",
            ".00000000000000000042.tmp",
            "0000000000000000004x",
            "",
        ] {
            assert_eq!(parse_version(other), None, "{other}");
        }
    }

    #[test]
    fn a_newer_version_beside_the_written_one_means_another_process_wrote_first() {
        assert_eq!(
            after_create(5, &[3, 4, 5]),
            AfterCreate::Newest {
                obsolete: vec![3, 4]
            }
        );
        // A stalled writer recreated version 5 after it had been deleted as old: the
        // successor's newest version is still there.
        assert_eq!(
            after_create(5, &[5, 9]),
            AfterCreate::Superseded { newest: 9 }
        );
        assert_eq!(after_create(5, &[7]), AfterCreate::Superseded { newest: 7 });
    }

    #[test]
    fn only_the_same_epoch_and_holder_is_the_same_writer() {
        let mut mine = JobRecord::new("j");
        mine.epoch = 3;
        mine.holder = "pid 1".into();
        let mut other = mine.clone();
        other.sequence = 9;
        assert!(same_writer(&mine, &other));
        other.holder = "pid 2".into();
        assert!(!same_writer(&mine, &other));
        other.holder = mine.holder.clone();
        other.epoch = 4;
        assert!(!same_writer(&mine, &other));
    }

    #[test]
    fn a_version_holding_another_sequence_is_named() {
        assert_eq!(mismatch("x", 4, 4), None);
        let why = mismatch("x/00000000000000000004", 4, 2).unwrap();
        assert!(why.contains("holds version 2"), "{why}");
    }
}
