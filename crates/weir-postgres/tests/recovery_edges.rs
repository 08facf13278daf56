//! The edges of recovery for generated words → count → PostgreSQL (exactly-once append, by
//! two-phase commit), with the reference pipeline as a real process (the scenarios are
//! `weir_testkit::recovery_scenarios`): a crash while a finished job cleans up, a deleted
//! checkpoint, and two processes on one job — a stalled one that keeps its job, and one that
//! lost it while it stalled and must commit nothing more. The table must hold exactly the
//! expected rows and no prepared transaction may be left.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tempfile::TempDir;
use weir::checkpoint::job_record::JobRecord;
use weir_postgres::word_count;
use weir_postgres::PostgresConnection;
use weir_testkit::crash_points::absolute;
use weir_testkit::recovery_scenarios::{self, ReferenceJob};

const RECORDS: u64 = 8_000;
const WORDS: u64 = 200;

struct Job {
    table: String,
    work: PathBuf,
    _dir: TempDir,
}

impl Job {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let work = absolute(dir.path()).join("work");
        std::fs::create_dir_all(&work).unwrap();
        Self {
            table: common::unique("edge_counts"),
            work,
            _dir: dir,
        }
    }

    fn rows(&self) -> Vec<word_count::WordCount> {
        word_count::table_rows(&common::url(), &self.table).expect("read table")
    }

    fn prepared_left(&self) -> i64 {
        let mut client = PostgresConnection::new(&common::url())
            .unwrap()
            .connect("weir-test")
            .unwrap();
        client
            .query_one(
                "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE $1",
                &[&format!("weir-count-{}:%", self.table)],
            )
            .unwrap()
            .get(0)
    }
}

/// A job's prepared transactions outlive it on the server (and its restarts); a scenario's
/// probe, killed or stalled at a chosen point, leaves some behind. They are rolled back
/// when the job's test ends, so that repeated runs never fill the server's
/// `max_prepared_transactions`.
impl Drop for Job {
    fn drop(&mut self) {
        let Ok(mut client) =
            PostgresConnection::new(&common::url()).and_then(|c| c.connect("weir-test"))
        else {
            return;
        };
        let Ok(rows) = client.query(
            "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE $1",
            &[&format!("weir-count-{}:%", self.table)],
        ) else {
            return;
        };
        for row in rows {
            let gid: String = row.get(0);
            let _ =
                client.batch_execute(&format!("ROLLBACK PREPARED '{}'", gid.replace('\'', "''")));
        }
    }
}

impl ReferenceJob for Job {
    fn command(&self, resume: bool, extra: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weir-pg-count"));
        command
            .args(["--url", &common::url(), "--table", &self.table])
            .args(["--delivery", "exactly-once-append"])
            .args(["--records", &RECORDS.to_string()])
            .args(["--words", &WORDS.to_string()])
            .args(["--rate", "8000", "--checkpoint-interval-ms", "150"])
            .arg("--work-dir")
            .arg(&self.work)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if resume {
            command.arg("--resume");
        }
        command
    }

    fn work(&self) -> &Path {
        &self.work
    }

    fn job_dir(&self) -> PathBuf {
        self.work.join("checkpoints").join(word_count::JOB_NAME)
    }

    fn newest_restore_point(&self) -> PathBuf {
        let file = weir_testkit::job_record_file(&self.job_dir()).expect("a job record");
        let record =
            JobRecord::decode(&std::fs::read(file).expect("job record")).expect("readable record");
        // Recorded relative to the job's directory.
        self.job_dir()
            .join(&record.completed.last().expect("a restore point").location)
    }

    fn verify_exact(&self) -> Result<(), String> {
        word_count::verify_running_counts(
            &self.rows(),
            &word_count::expected_totals(RECORDS, WORDS),
        )?;
        match self.prepared_left() {
            0 => Ok(()),
            n => Err(format!("{n} prepared transactions left over")),
        }
    }

    fn verify_no_duplicates(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for row in self.rows() {
            if !seen.insert((row.word.clone(), row.count)) {
                return Err(format!("({}, {}) committed twice", row.word, row.count));
            }
        }
        Ok(())
    }
}

#[test]
fn a_crash_while_a_finished_job_cleans_up_does_not_run_it_again() {
    recovery_scenarios::crash_while_cleaning_up(&Job::new(), Job::new, 4);
}

#[test]
fn a_deleted_newest_checkpoint_is_read_from_its_copy_or_refused() {
    recovery_scenarios::deleted_newest_metadata(Job::new, 2, "--no-local-recovery");
}

#[test]
fn a_stalled_job_keeps_its_job_and_a_second_process_is_refused() {
    recovery_scenarios::stalled_process_keeps_its_job(&Job::new(), &Job::new());
}

#[test]
fn a_job_that_lost_its_lock_while_stalled_commits_nothing_more() {
    // Its first COMMIT PREPARED after waking may find its transaction settled already.
    recovery_scenarios::process_that_lost_its_job_commits_nothing(
        &Job::new(),
        &Job::new(),
        &["is gone before this process committed it"],
    );
}

#[test]
fn a_fresh_start_over_committed_rows_is_refused_until_they_are_cleared_on_purpose() {
    let job = Job::new();
    let first = job.command(false, &[]).output().unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    job.verify_exact().unwrap();
    // The work directory is gone (a new machine, a cleaned disk): nothing but the database
    // says that the job ran.
    std::fs::remove_dir_all(&job.work).unwrap();
    std::fs::create_dir_all(&job.work).unwrap();
    let again = job.command(false, &[]).output().unwrap();
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success(),
        "a second fresh run was not refused"
    );
    assert!(
        said.contains("committed output of this sink exists already")
            && said.contains(&format!("rows in table {}", job.table)),
        "the refusal does not say what it found: {said}"
    );
    job.verify_exact().unwrap();
    // The way on it names: clear the output, run its statement, and start over.
    let statement = said
        .split('`')
        .find(|part| part.starts_with("DELETE FROM weir_commits"))
        .unwrap_or_else(|| panic!("no statement to start over in: {said}"))
        .to_string();
    let mut client = PostgresConnection::new(&common::url())
        .unwrap()
        .connect("weir-test")
        .unwrap();
    client
        .batch_execute(&format!("TRUNCATE \"{}\"; {statement}", job.table))
        .unwrap();
    let over = job.command(false, &[]).output().unwrap();
    assert!(
        over.status.success(),
        "{}",
        String::from_utf8_lossy(&over.stderr)
    );
    job.verify_exact().unwrap();
}
