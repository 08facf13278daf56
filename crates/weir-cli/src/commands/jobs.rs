//! `weir list`, `weir cancel` and `weir checkpoints`.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use indicatif::ProgressBar;
use serde_json::Value;

use crate::client::RestClient;
use crate::output::{bytes, duration_ms, iso_time, table};

/// `weir list`: every job, newest last.
pub fn list(client: &RestClient) -> Result<()> {
    let jobs = client.get("/jobs/overview", "listing the jobs")?;
    let jobs = jobs["jobs"].as_array().cloned().unwrap_or_default();
    if jobs.is_empty() {
        println!("No jobs.");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                j["jid"].as_str().unwrap_or_default().to_string(),
                j["name"].as_str().unwrap_or_default().to_string(),
                j["state"].as_str().unwrap_or_default().to_string(),
                j["start-time"]
                    .as_u64()
                    .map(iso_time)
                    .unwrap_or_else(|| "-".into()),
                duration_ms(j["duration"].as_u64().unwrap_or(0)),
                format!(
                    "{}/{}",
                    j["tasks"]["running"].as_u64().unwrap_or(0),
                    j["tasks"]["total"].as_u64().unwrap_or(0)
                ),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "JOB ID",
                "NAME",
                "STATE",
                "STARTED",
                "DURATION",
                "RUNNING TASKS"
            ],
            &rows
        )
    );
    Ok(())
}

fn is_terminal(state: &str) -> bool {
    matches!(state, "FINISHED" | "CANCELED" | "FAILED")
}

/// `weir cancel JOB`: cancels and waits (at most `timeout`) for the job to end.
pub fn cancel(client: &RestClient, job: &str, timeout: Duration) -> Result<()> {
    let id = client.resolve_job(job)?;
    client.patch(
        &format!("/jobs/{id}?mode=cancel"),
        &format!("cancelling job {id}"),
    )?;
    let spinner = ProgressBar::new_spinner().with_message(format!("cancelling {id}"));
    spinner.enable_steady_tick(Duration::from_millis(100));
    let deadline = Instant::now() + timeout;
    loop {
        let details = match client.get(&format!("/jobs/{id}"), "reading the job") {
            Ok(details) => details,
            // The cancellation was accepted: a job process whose only job ended exits, and
            // its endpoint with it.
            Err(e) if e.to_string().starts_with("cannot reach") => {
                spinner.finish_and_clear();
                println!("Job {id} is CANCELED; its process has exited.");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let state = details["state"].as_str().unwrap_or_default().to_string();
        if is_terminal(&state) {
            spinner.finish_and_clear();
            println!(
                "Job {id} ({}) is {state}.",
                details["name"].as_str().unwrap_or_default()
            );
            return Ok(());
        }
        if Instant::now() > deadline {
            spinner.finish_and_clear();
            bail!("job {id} is still {state} after {timeout:?}; it may still be tearing down its tasks (`weir list` shows it)");
        }
        spinner.set_message(format!("cancelling {id}: {state}"));
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn checkpoint_row(c: &Value) -> Vec<String> {
    let kind = if c["is_savepoint"].as_bool().unwrap_or(false) {
        "savepoint"
    } else {
        "checkpoint"
    };
    vec![
        c["id"].to_string(),
        kind.to_string(),
        c["status"].as_str().unwrap_or_default().to_string(),
        c["trigger_timestamp"]
            .as_u64()
            .map(iso_time)
            .unwrap_or_else(|| "-".into()),
        c["end_to_end_duration"]
            .as_u64()
            .map(duration_ms)
            .unwrap_or_else(|| "-".into()),
        bytes(c["state_size"].as_u64().unwrap_or(0)),
        duration_ms(c["alignment_duration"].as_u64().unwrap_or(0)),
        c["failure_message"]
            .as_str()
            .or_else(|| c["external_path"].as_str())
            .unwrap_or_default()
            .to_string(),
    ]
}

/// `weir checkpoints JOB`: the counts and the recent history.
pub fn checkpoints(client: &RestClient, job: &str) -> Result<()> {
    let id = client.resolve_job(job)?;
    let stats = client.get(
        &format!("/jobs/{id}/checkpoints"),
        "reading the checkpoints",
    )?;
    let counts = &stats["counts"];
    println!(
        "Job {id}: {} completed, {} failed, {} in progress",
        counts["completed"], counts["failed"], counts["in_progress"]
    );
    let history = stats["history"].as_array().cloned().unwrap_or_default();
    if history.is_empty() {
        println!("No checkpoint yet.");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = history.iter().map(checkpoint_row).collect();
    print!(
        "{}",
        table(
            &[
                "ID",
                "KIND",
                "STATUS",
                "TRIGGERED",
                "DURATION",
                "STATE",
                "ALIGNMENT",
                "PATH / FAILURE"
            ],
            &rows
        )
    );
    Ok(())
}
