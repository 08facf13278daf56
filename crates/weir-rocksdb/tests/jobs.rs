//! The RocksDB backend in real jobs, each a process of the large-state job
//! (`weir-large-state`): state several times larger than the memory it may use, incremental
//! checkpoints across SIGKILLs with rescaling 2 → 3 → 1, shared files never deleted while
//! referred to and none left after the job, and a damaged shared file caught by its
//! checksum. Seeded tests print their seed; `WEIR_SEED=s` replays one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use weir::checkpoint::inspect;
use weir::checkpoint::metadata::CheckpointMetadata;
use weir::checkpoint::storage::{CheckpointStorage, FsCheckpointStorage};
use weir_testkit::{kill_after_checkpoint, latest_checkpoint, seeds, Rng};

const JOB: &str = "large-state";

/// A run of the large-state job on `work`, its databases under `local`.
fn job(work: &Path, local: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir-large-state"));
    command
        .args(["--state-backend", "rocksdb", "--incremental"])
        .arg("--work-dir")
        .arg(work)
        .arg("--local-dir")
        .arg(local)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn describe(output: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The value of `name=` in the job's figures line.
fn figure(output: &Output, name: &str) -> u64 {
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .split_whitespace()
        .find_map(|field| field.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in: {stdout}"))
}

fn checkpoints(work: &Path) -> PathBuf {
    work.join("checkpoints")
}

fn shared(work: &Path) -> PathBuf {
    checkpoints(work).join(JOB).join("shared")
}

/// The completed checkpoints' locations, by id.
fn completed(work: &Path) -> Vec<PathBuf> {
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(checkpoints(work).join(JOB))
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().join("_metadata").exists())
                .filter_map(|e| {
                    let id = e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok()?;
                    Some((id, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

fn metadata(location: &Path) -> CheckpointMetadata {
    let bytes = std::fs::read(location.join("_metadata")).unwrap();
    CheckpointMetadata::decode(&bytes).unwrap()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Every completed checkpoint verifies: each shared and private file it refers to is there,
/// whole, with its checksum.
fn assert_checkpoints_whole(work: &Path, when: &str) {
    for location in completed(work) {
        let damage = inspect::verify(&location).unwrap();
        assert!(
            damage.is_empty(),
            "{when}: {} is damaged: {damage:?}",
            location.display()
        );
    }
}

#[test]
fn a_state_several_times_its_memory_bound_stays_within_it_and_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (work, local) = (dir.path().join("work"), dir.path().join("local"));
    let bound: u64 = 100 << 20;
    let output = job(
        &work,
        &local,
        &[
            "--keys",
            "250000",
            "--payload-bytes",
            "1536",
            "--memory-mb",
            "16",
            "--checkpoint-interval-ms",
            "1000",
        ],
    )
    .output()
    .unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let (peak, state) = (
        figure(&output, "peak_rss_bytes"),
        figure(&output, "last_state_bytes"),
    );
    println!(
        "large state: peak resident {} MiB, state {} MiB on disk, bound {} MiB",
        peak >> 20,
        state >> 20,
        bound >> 20
    );
    assert!(
        peak < bound,
        "resident memory {peak} passed its bound {bound}"
    );
    assert!(
        state > 3 * bound,
        "the state ({state} bytes) should be several times the bound"
    );
}

#[test]
fn incremental_checkpoints_survive_kills_and_rescaling_two_three_one_and_leave_nothing() {
    for seed in seeds(1) {
        println!("seed {seed}");
        let mut rng = Rng(seed);
        let dir = tempfile::tempdir().unwrap();
        let (work, local) = (dir.path().join("work"), dir.path().join("local"));
        let common = [
            "--keys",
            "40000",
            // 6 rounds of 40 000 records at 60 000/s last 4 s at least, so that both kills
            // land before the input runs out even when checkpoints are slow on a loaded
            // machine (at 3 rounds, CI once saw the second run finish first).
            "--rounds",
            "6",
            "--payload-bytes",
            "200",
            "--rate",
            "60000",
            "--checkpoint-interval-ms",
            "100",
        ];
        let mut reused = 0;
        for (parallelism, resume) in [("2", false), ("3", true)] {
            let mut args = common.to_vec();
            args.extend(["--parallelism", parallelism]);
            if resume {
                args.push("--resume");
            }
            let before = latest_checkpoint(&checkpoints(&work), JOB);
            let mut child = job(&work, &local, &args).spawn().unwrap();
            let killed = kill_after_checkpoint(
                &mut child,
                &checkpoints(&work),
                JOB,
                before + 2 + rng.below(3),
                Duration::from_millis(rng.below(80)),
                Duration::from_secs(60),
            );
            assert!(
                killed,
                "seed {seed}: the run at parallelism {parallelism} ended before its kill"
            );
            assert_checkpoints_whole(
                &work,
                &format!("after the kill at parallelism {parallelism}"),
            );
            for location in completed(&work) {
                let m = metadata(&location);
                reused += m
                    .shared_files()
                    .filter(|f| f.uploaded_in < m.checkpoint_id)
                    .count();
            }
        }
        assert!(
            reused > 0,
            "no checkpoint referred to an earlier one's files"
        );
        let mut args = common.to_vec();
        args.extend(["--parallelism", "1", "--resume"]);
        let output = job(&work, &local, &args).output().unwrap();
        assert!(
            output.status.success(),
            "seed {seed}: {}",
            describe(&output)
        );
        println!("{}", String::from_utf8_lossy(&output.stdout).trim());
        assert!(
            figure(&output, "restored_from") > 0,
            "the last run restored from a checkpoint"
        );
        // The last run verified its output is exact before it succeeded; and it left nothing.
        assert!(
            completed(&work).is_empty(),
            "checkpoints left: {:?}",
            completed(&work)
        );
        assert_eq!(
            files_in(&shared(&work)),
            Vec::<String>::new(),
            "shared files left"
        );
        assert_eq!(
            files_in(&local),
            Vec::<String>::new(),
            "working directories left"
        );
    }
}

#[test]
fn a_damaged_shared_file_is_caught_by_its_checksum_and_recovery_never_uses_it() {
    let dir = tempfile::tempdir().unwrap();
    let (work, local) = (dir.path().join("work"), dir.path().join("local"));
    let args = [
        "--keys",
        "30000",
        "--rounds",
        "3",
        "--payload-bytes",
        "200",
        "--rate",
        "40000",
        "--checkpoint-interval-ms",
        "100",
        "--parallelism",
        "1",
    ];
    let mut child = job(&work, &local, &args).spawn().unwrap();
    kill_after_checkpoint(
        &mut child,
        &checkpoints(&work),
        JOB,
        3,
        Duration::ZERO,
        Duration::from_secs(60),
    );
    // The restore points are what the job record names (a checkpoint whose metadata was
    // written just before the kill may not have entered it).
    let record = FsCheckpointStorage::new(&checkpoints(&work), JOB)
        .unwrap()
        .read_job_record()
        .unwrap()
        .expect("a job record");
    let locations: Vec<PathBuf> = record
        .completed
        .iter()
        .map(|c| PathBuf::from(&c.location))
        .collect();
    let latest = locations.last().expect("a recorded checkpoint");
    let m = metadata(latest);
    let victim = m
        .shared_files()
        .max_by_key(|f| f.uploaded_in)
        .expect("a shared file")
        .clone();
    let path = shared(&work).join(&victim.stored_name);
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let damage = inspect::verify(latest).unwrap();
    assert!(
        damage
            .iter()
            .any(|d| d.file == path && d.problem.contains("checksum")),
        "{damage:?}"
    );

    // Its output is committed: recovery refuses to fall back past it, naming the file.
    let mut resumed = args.to_vec();
    resumed.push("--resume");
    let output = job(&work, &local, &resumed).output().unwrap();
    assert!(!output.status.success(), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&victim.stored_name) && stderr.contains("checksum"),
        "the error names the damaged file: {stderr}"
    );

    // Allowed to, it falls back to a checkpoint without the file, never to partial state.
    let older_without_it = locations[..locations.len() - 1].iter().any(|l| {
        !metadata(l)
            .shared_files()
            .any(|f| f.stored_name == victim.stored_name)
    });
    resumed.push("--allow-duplicates");
    let output = job(&work, &local, &resumed).output().unwrap();
    println!("fallback to a checkpoint without the damaged file possible: {older_without_it}");
    if older_without_it {
        // Duplicates are allowed now, so the output may hold a key twice; every key must
        // still be there with its full count and an intact payload.
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stdout.contains("exact=true") || stderr.contains("30000 distinct, 0 wrong"),
            "{}",
            describe(&output)
        );
    } else {
        assert!(!output.status.success(), "{}", describe(&output));
    }
}
