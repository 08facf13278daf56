//! One live process per job: an exclusive lock on `<job dir>/_lock`, held for the life of the
//! job manager.
//!
//! The lock is the operating system's (`flock`), so it dies with its process — a crashed job
//! can be resumed at once, with no lease to wait out — and a process that is merely stalled
//! (stopped, swapped out, frozen) keeps it, so no replacement can run beside it. The file
//! names the holder, so that a second process can say who is in the way.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::checkpoint::storage::StorageError;

/// File name of the lock inside the job's directory.
pub const LOCK_FILE: &str = "_lock";

/// The held lock of a job directory; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct JobLock {
    file: File,
    path: PathBuf,
    /// What the previous holder wrote into the file.
    previous_holder: String,
}

/// Which file a lock is on (device and inode): a lock file removed or replaced since is
/// another file, and its holder lost its exclusivity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockIdentity {
    /// The lock file's path.
    pub path: PathBuf,
    dev: u64,
    ino: u64,
}

impl LockIdentity {
    /// Whether the file at the lock's path is still the locked one.
    pub fn still_held(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&self.path).is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino)
    }
}

impl JobLock {
    /// Takes the lock of `job_dir`, or fails naming the process that holds it.
    pub fn acquire(job_dir: &Path) -> Result<Self, StorageError> {
        let path = job_dir.join(LOCK_FILE);
        let io = |action: &'static str| {
            let path = path.display().to_string();
            move |source| StorageError::Io {
                action,
                path,
                source,
            }
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io("open lock file"))?;
        match file.try_lock() {
            Ok(()) => {
                let mut previous_holder = String::new();
                let _ = file.read_to_string(&mut previous_holder);
                Ok(Self {
                    file,
                    path,
                    previous_holder,
                })
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                Err(StorageError::Locked {
                    path: path.display().to_string(),
                    holder: if holder.is_empty() {
                        "another process (it has not said which yet)".into()
                    } else {
                        holder.to_string()
                    },
                })
            }
            Err(std::fs::TryLockError::Error(e)) => Err(io("lock")(e)),
        }
    }

    /// Writes who holds the lock (for the error another process reports).
    pub fn describe_holder(&mut self, holder: &str) -> Result<(), StorageError> {
        let path = self.path.display().to_string();
        let result = self
            .file
            .set_len(0)
            .and_then(|()| self.file.seek(SeekFrom::Start(0)).map(|_| ()))
            .and_then(|()| self.file.write_all(holder.as_bytes()))
            .and_then(|()| self.file.sync_data());
        result.map_err(|source| StorageError::Io {
            action: "write lock file",
            path,
            source,
        })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The epoch the previous holder named in the lock file, if any: a floor for the next
    /// epoch even when the job record is gone.
    pub fn previous_epoch(&self) -> Option<u64> {
        let after = self.previous_holder.split("epoch ").nth(1)?;
        after
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    }

    /// Which file this lock is on.
    pub fn identity(&self) -> Result<LockIdentity, StorageError> {
        use std::os::unix::fs::MetadataExt;
        let metadata = self.file.metadata().map_err(|source| StorageError::Io {
            action: "stat lock file",
            path: self.path.display().to_string(),
            source,
        })?;
        Ok(LockIdentity {
            path: self.path.clone(),
            dev: metadata.dev(),
            ino: metadata.ino(),
        })
    }
}

/// `pid 123 on host h, epoch 4, since 2026-11-30 10:00:00 UTC`: who holds a job.
pub fn holder_description(epoch: u64) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    format!(
        "pid {} on host {host}, epoch {epoch}, since {}",
        std::process::id(),
        utc_now()
    )
}

/// The current time as `YYYY-MM-DD hh:mm:ss UTC`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm), valid for any date after 1970.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_name() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = JobLock::acquire(dir.path()).unwrap();
        first.describe_holder("pid 1 on host a, epoch 3").unwrap();
        let err = JobLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(err.contains("pid 1 on host a, epoch 3"), "{err}");
        assert!(err.contains("_lock"), "{err}");
        let identity = first.identity().unwrap();
        assert!(identity.still_held());
        drop(first);
        let mut again = JobLock::acquire(dir.path()).expect("released on drop");
        assert_eq!(again.previous_epoch(), Some(3));
        again.describe_holder("pid 2").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap(),
            "pid 2"
        );
        assert!(identity.still_held(), "the same file, locked again");
        std::fs::remove_file(dir.path().join(LOCK_FILE)).unwrap();
        assert!(!identity.still_held(), "a removed lock file is lost");
    }

    #[test]
    fn the_holder_says_when_it_started() {
        let text = holder_description(7);
        assert!(text.contains("epoch 7") && text.ends_with("UTC"), "{text}");
        assert!(text.contains(&format!("pid {}", std::process::id())));
        let date = utc_now();
        assert_eq!(date.len(), "2026-11-30 10:00:00 UTC".len(), "{date}");
        assert!(date.starts_with("20"), "{date}");
    }
}
