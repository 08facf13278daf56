//! `weir reset JOB_DIR [--output DIR]…`: starts a job over where it ran before.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use weir::checkpoint::config::{CheckpointConfig, CheckpointStorageConfig};
use weir::checkpoint::reset::reset_job;

/// Splits the job's checkpoint directory (`<storage>/<job>`, a path or a URL) into the
/// storage and the job's directory name.
fn split(job_dir: &str) -> Result<(CheckpointStorageConfig, String)> {
    let trimmed = job_dir.trim_end_matches('/');
    let Some((storage, job)) = trimmed.rsplit_once('/') else {
        bail!(
            "`{job_dir}` is not a job's checkpoint directory: give `<checkpoint storage>/<job>`, \
             the directory that holds the job's `_job_record`"
        );
    };
    if job.is_empty() || storage.is_empty() || storage.ends_with(':') || storage.ends_with(":/") {
        bail!("`{job_dir}` names no job directory inside a checkpoint storage");
    }
    Ok((CheckpointStorageConfig::from_url(storage), job.to_string()))
}

/// Resets the job whose checkpoint directory is `job_dir`.
pub fn reset(job_dir: &str, outputs: &[PathBuf], local_recovery: Option<&Path>) -> Result<()> {
    weir_cluster::object_storage::register();
    let (storage, job) = split(job_dir)?;
    if let CheckpointStorageConfig::FileSystem(dir) = &storage {
        let path = dir.join(&job);
        if !path.is_dir() {
            bail!("`{}` does not exist: no job to reset there", path.display());
        }
    }
    let mut config = CheckpointConfig::default().with_storage(storage);
    if let Some(dir) = local_recovery {
        config = config.with_local_recovery(dir);
    }
    let outputs: Vec<&Path> = outputs.iter().map(PathBuf::as_path).collect();
    let outcome =
        reset_job(&config, &job, &outputs).with_context(|| format!("cannot reset job `{job}`"))?;
    println!("{outcome}");
    for output in outputs {
        println!(
            "removed the earlier runs' files from `{}`",
            output.display()
        );
    }
    println!(
        "The job starts from empty state at its next run; output it committed to other systems \
         (Kafka topics, PostgreSQL tables) stays."
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_directory_splits_into_storage_and_job() {
        let (storage, job) = split("/work/checkpoints/census/").unwrap();
        assert_eq!(
            storage,
            CheckpointStorageConfig::directory("/work/checkpoints")
        );
        assert_eq!(job, "census");
        let (storage, job) = split("s3://bucket/prefix/census").unwrap();
        assert_eq!(
            storage,
            CheckpointStorageConfig::Url("s3://bucket/prefix".into())
        );
        assert_eq!(job, "census");
        assert!(split("census").is_err());
        assert!(split("s3://census").is_err());
    }
}
