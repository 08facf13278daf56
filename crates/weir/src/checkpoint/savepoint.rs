//! The handle of a savepoint: what `trigger_savepoint` and `stop_with_savepoint` return,
//! and what a later run restores from.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// A completed savepoint: its id and where it is (a directory under the checkpoint storage,
/// `<dir>/<job>/savepoint-<id>`). Restore a job from it with
/// [`ExecutionConfig::with_restore`](crate::ExecutionConfig::with_restore).
///
/// ```
/// use weir::prelude::*;
///
/// let dir = tempfile::tempdir()?;
/// let config = || {
///     ExecutionConfig::default()
///         .with_parallelism(2)
///         .with_checkpointing(
///             CheckpointConfig::default().with_storage(CheckpointStorageConfig::directory(dir.path())),
///         )
/// };
/// let env = StreamExecutionEnvironment::new(config())?;
/// env.from_source(GeneratorSource::unbounded(|i| i % 10).with_rate_limit(10_000.0), WatermarkStrategy::no_watermarks(), "numbers")
///     .key_by(|n: &u64| *n)
///     .count()
///     .uid("counts")
///     .sink_to(DiscardingSink, "discard");
/// let client = env.execute_async("numbers")?;
/// let (savepoint, result) = client.stop_with_savepoint()?;
/// assert_eq!(result.status, JobStatus::Stopped);
/// assert!(savepoint.path().join("_metadata").is_file());
///
/// // A later run, at another parallelism, continues from it.
/// let resumed = config().with_parallelism(3).with_restore(&savepoint);
/// # let _ = resumed;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Savepoint {
    checkpoint_id: u64,
    location: String,
}

impl Savepoint {
    /// The savepoint `checkpoint_id` at `location` (made absolute if it is a relative path).
    pub(crate) fn new(checkpoint_id: u64, location: String) -> Self {
        Self {
            checkpoint_id,
            location: absolute_location(location),
        }
    }
    /// Its id, in the sequence of the job's checkpoints.
    pub fn checkpoint_id(&self) -> u64 {
        self.checkpoint_id
    }
    /// Where it is, as the checkpoint storage names it.
    pub fn location(&self) -> &str {
        &self.location
    }
    /// Its directory (savepoints in a directory storage).
    pub fn path(&self) -> &Path {
        Path::new(&self.location)
    }
}

/// `location` as an absolute path if it is a relative one (a storage configured with a
/// relative directory), so that what is printed and handed to other processes (`weir stop`
/// answers through the REST API of a job running elsewhere) names the same place from any
/// working directory; URLs (`s3://…`) and absolute paths stay as they are.
pub(crate) fn absolute_location(location: String) -> String {
    if location.contains("://") || Path::new(&location).is_absolute() {
        return location;
    }
    match std::path::absolute(&location) {
        Ok(path) => path.display().to_string(),
        Err(_) => location,
    }
}

impl fmt::Display for Savepoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.location)
    }
}

impl AsRef<Path> for Savepoint {
    fn as_ref(&self) -> &Path {
        self.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_locations_become_absolute_and_urls_stay() {
        let relative = Savepoint::new(3, "work/checkpoints/job/savepoint-3".into());
        assert!(relative.path().is_absolute(), "{relative}");
        assert!(relative
            .location()
            .ends_with("work/checkpoints/job/savepoint-3"));
        let url = Savepoint::new(3, "s3://bucket/job/savepoint-3".into());
        assert_eq!(url.location(), "s3://bucket/job/savepoint-3");
        let absolute = Savepoint::new(3, "/data/job/savepoint-3".into());
        assert_eq!(absolute.location(), "/data/job/savepoint-3");
    }
}
