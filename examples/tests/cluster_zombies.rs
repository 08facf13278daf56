//! Zombie sweeps of the census job in cluster mode on object storage
//! ([`weir_testkit::cluster_zombies`]): a first cluster's process is stopped right before
//! its N-th durable operation, a second cluster runs the job to its end, the stopped process
//! continues and must commit nothing more — the committed files, read back with plain file
//! reads, stay exactly what one uninterrupted run gives:
//! - `stale_jobmanager`: the JobManager, at its N-th object-storage write;
//! - `stale_taskmanager_storage`: TaskManager `tm-1`, at its N-th object-storage write;
//! - `stale_taskmanager_files`: `tm-1`, at its N-th durable file operation under the job's
//!   directory (the file sink's staging and commits).
//!
//! Each prints `cluster zombie sweep <name>: …`; `scripts/crash-sweep.sh` runs every
//! point (`WEIR_CRASH_SWEEP=full`).

use std::path::Path;

use weir_examples::census;
use weir_testkit::cluster_zombies::{s3_prefix, ClusterZombieSweep, Stale, TrialJob};
use weir_testkit::crash_points::absolute;

/// A fresh census job on three TaskManagers, its output under a scratch directory and its
/// checkpoints under a fresh S3 prefix.
fn census_job(name: &str, trial: &str) -> TrialJob {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let root = absolute(dir.path());
    let job_dir = root.join("job");
    std::fs::create_dir_all(&job_dir).expect("the job directory");
    let url = s3_prefix(&format!("{name}-{trial}"));
    let args = [
        "--work-dir",
        &job_dir.display().to_string(),
        "--quiet",
        "--parallelism",
        "3",
        "--fail-after-rows",
        "0",
        "--rate",
        "4000",
        "--checkpoint-interval-ms",
        "150",
        "--no-local-recovery",
        "--checkpoint-storage",
        &url,
    ]
    .map(String::from)
    .to_vec();
    let output = job_dir.join("output");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/census");
    TrialJob {
        args,
        dir: root,
        files: job_dir,
        check: Box::new(move |when| {
            let verification =
                census::verify(&output, &data).map_err(|e| format!("{when}: {e:#}"))?;
            if verification.committed_lines != verification.input_rows {
                return Err(format!(
                    "{when}: {} committed lines for {} input rows",
                    verification.committed_lines, verification.input_rows
                ));
            }
            Ok(())
        }),
        keep: Box::new(dir),
    }
}

fn sweep(name: &str, stale: Stale, sample: usize) {
    let binary = Path::new(env!("CARGO_BIN_EXE_census"));
    ClusterZombieSweep::new("weir-examples", name, binary, stale, sample)
        .run(|trial| census_job(name, trial));
}

#[test]
fn stale_jobmanager() {
    sweep("stale_jobmanager", Stale::JobManagerStorage, 3);
}

#[test]
fn stale_taskmanager_storage() {
    sweep("stale_taskmanager_storage", Stale::TaskManagerStorage, 3);
}

#[test]
fn stale_taskmanager_files() {
    sweep("stale_taskmanager_files", Stale::TaskManagerFiles, 3);
}
