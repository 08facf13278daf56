//! `weir savepoint` and `weir stop --savepoint`: started over the REST API, followed until
//! done.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use indicatif::ProgressBar;
use serde_json::Value;

use crate::client::RestClient;

/// Follows operation `request` of job `id` until it completes (at most `timeout`); returns
/// the savepoint's location.
fn follow(
    client: &RestClient,
    id: &str,
    request: &str,
    what: &str,
    timeout: Duration,
) -> Result<String> {
    let spinner = ProgressBar::new_spinner().with_message(format!("{what} of job {id}"));
    spinner.enable_steady_tick(Duration::from_millis(100));
    let started = Instant::now();
    loop {
        let status = client.get(&format!("/jobs/{id}/savepoints/{request}"), what)?;
        if status["status"]["id"] == "COMPLETED" {
            spinner.finish_and_clear();
            let operation = &status["operation"];
            if let Some(location) = operation["location"].as_str() {
                return Ok(location.to_string());
            }
            bail!(
                "{what} of job {id} failed: {}",
                operation["failure-cause"]
                    .as_str()
                    .unwrap_or("no cause given")
            );
        }
        if started.elapsed() > timeout {
            spinner.finish_and_clear();
            bail!("{what} of job {id} is not complete after {timeout:?} (request {request}); it may still complete — `weir checkpoints {id}` shows it");
        }
        spinner.set_message(format!(
            "{what} of job {id} ({:.1} s)",
            started.elapsed().as_secs_f64()
        ));
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn request_id(answer: &Value) -> Result<String> {
    answer["request-id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("the REST API answered without a request id: {answer}"))
}

/// `weir savepoint JOB`.
pub fn savepoint(client: &RestClient, job: &str, timeout: Duration) -> Result<()> {
    let id = client.resolve_job(job)?;
    let answer = client.post(
        &format!("/jobs/{id}/savepoints"),
        None,
        "triggering a savepoint",
    )?;
    let location = follow(client, &id, &request_id(&answer)?, "savepoint", timeout)?;
    println!("Savepoint completed: {location}");
    println!("Resume from it with `-D execution.savepoint.path={location}`.");
    Ok(())
}

/// `weir stop --savepoint [--drain] JOB`.
pub fn stop(client: &RestClient, job: &str, drain: bool, timeout: Duration) -> Result<()> {
    let id = client.resolve_job(job)?;
    let answer = client.post(
        &format!("/jobs/{id}/stop"),
        Some(serde_json::json!({ "drain": drain })),
        "stopping the job",
    )?;
    let location = follow(
        client,
        &id,
        &request_id(&answer)?,
        "stop with savepoint",
        timeout,
    )?;
    println!("Job {id} stopped with savepoint {location}");
    println!("Continue it with `weir run --resume` (its newest restore point), or restore this one with `-D execution.savepoint.path={location}`.");
    Ok(())
}
