//! `weir run BINARY [ARGS]…`: starts a job binary — on its local mini-cluster, or as the
//! JobManager of a cluster whose TaskManagers join it — with its REST endpoint on, and
//! follows the job over that endpoint until it ends.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::ProgressBar;
use serde_json::Value;

use crate::client::RestClient;
use crate::output::{duration_ms, rate};

/// What to run and how.
pub struct RunOptions<'a> {
    /// The job binary.
    pub binary: &'a Path,
    /// Its own arguments.
    pub args: &'a [String],
    /// `-D key=value` settings passed on.
    pub dynamic: &'a [String],
    /// A configuration file passed on.
    pub config: Option<&'a Path>,
    /// Run it as a cluster's JobManager.
    pub jobmanager: bool,
    /// Start from the job's newest restore point (`execution.start-mode=resume`).
    pub resume: bool,
    /// Return once the job runs, leaving it running.
    pub detached: bool,
    /// The token its REST endpoint requires, if any.
    pub token: Option<String>,
}

const URL_LINE: &str = "Weir dashboard and REST API: ";

/// The job binary's command: its own arguments as given, and `weir run`'s settings in the
/// environment variables that `weir_cluster::ClusterArgs` reads. Passed as flags, they would
/// make a binary without `ClusterArgs` fail on an unknown argument before it could say what
/// it lacks; in the environment, such a binary reaches `execute`, which names it.
fn command(options: &RunOptions<'_>) -> Command {
    let mut command = Command::new(options.binary);
    command.args(options.args);
    command.env(weir::cli::STARTED_BY_WEIR_RUN, "1");
    if let Some(config) = options.config {
        command.env("WEIR_CONFIG_FILE", config);
    }
    let mut dynamic: Vec<String> = options.dynamic.to_vec();
    // The endpoint on a free port unless told otherwise: its address is read back from the
    // line the job prints.
    if !options
        .dynamic
        .iter()
        .any(|d| d.trim_start().starts_with("rest.port"))
    {
        dynamic.push("rest.port=0".into());
    }
    if options.resume {
        dynamic.push("execution.start-mode=resume".into());
    }
    command.env(weir_cluster::DYNAMIC_PROPERTIES_ENV, dynamic.join("\n"));
    if options.jobmanager {
        command.env("WEIR_ROLE", "jobmanager");
    } else {
        command.env_remove("WEIR_ROLE");
    }
    command
}

fn spawn_error(binary: &Path, e: std::io::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "cannot start the job binary `{}`: {e}; give the path of a job built with Weir (for example target/release/census)",
        binary.display()
    )
}

/// Follows the job at `url` until `child` exits; returns the job's last details.
fn follow(
    child: &mut Child,
    client: &RestClient,
    spinner: &ProgressBar,
) -> Result<(std::process::ExitStatus, Option<Value>)> {
    let mut last: Option<Value> = None;
    let mut job_id: Option<String> = None;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((status, last));
        }
        if job_id.is_none() {
            job_id = client
                .get("/jobs", "listing the jobs")
                .ok()
                .and_then(|j| j["jobs"][0]["id"].as_str().map(str::to_string));
        }
        if let Some(id) = &job_id {
            if let (Ok(job), Ok(checkpoints)) = (
                client.get(&format!("/jobs/{id}"), "reading the job"),
                client.get(
                    &format!("/jobs/{id}/checkpoints"),
                    "reading the checkpoints",
                ),
            ) {
                spinner.set_message(progress_line(&job, &checkpoints));
                last = Some(job);
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// One line of progress: state, the sources' input, checkpoints, restarts.
fn progress_line(job: &Value, checkpoints: &Value) -> String {
    let vertices = job["vertices"].as_array().cloned().unwrap_or_default();
    let first = vertices.first().cloned().unwrap_or_default();
    let metrics = &first["metrics"];
    let latest = &checkpoints["latest"]["completed"];
    let last_checkpoint = latest["end_to_end_duration"]
        .as_u64()
        .map(|d| format!(" (last took {})", duration_ms(d)))
        .unwrap_or_default();
    format!(
        "{} {} {} | read {} records, {} | checkpoints {}{} | restarts {}",
        job["name"].as_str().unwrap_or_default(),
        job["state"].as_str().unwrap_or_default(),
        duration_ms(job["duration"].as_u64().unwrap_or(0)),
        metrics["read-records"].as_u64().unwrap_or(0),
        rate(metrics["read-records-per-second"].as_f64().unwrap_or(0.0)),
        checkpoints["counts"]["completed"].as_u64().unwrap_or(0),
        last_checkpoint,
        job["num-restarts"].as_u64().unwrap_or(0),
    )
}

/// Waits (at most `limit`) for the URL line in `lines`.
fn await_url(lines: &mpsc::Receiver<String>, child: &mut Child, limit: Duration) -> Result<String> {
    let deadline = Instant::now() + limit;
    loop {
        match lines.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                if let Some(url) = line.split(URL_LINE).nth(1) {
                    return Ok(url.trim().trim_end_matches('/').to_string());
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) | Err(mpsc::RecvTimeoutError::Timeout)
                if child.try_wait()?.is_some() =>
            {
                bail!("the job binary exited before it served its REST endpoint; its output above says why")
            }
            Err(_) if Instant::now() > deadline => bail!(
                "the job binary printed no REST endpoint within {limit:?}: is it a Weir job that applies `weir_cluster::apply` (and its `-D` flags)?"
            ),
            Err(_) => {}
        }
    }
}

/// The token to follow the job with: `--token`, else the one given to the job with `-D`.
fn token(options: &RunOptions<'_>) -> Option<String> {
    options.token.clone().or_else(|| {
        options.dynamic.iter().find_map(|d| {
            let (key, value) = d.split_once('=')?;
            (key.trim() == "rest.authentication.token").then(|| value.trim().to_string())
        })
    })
}

/// Runs the job and returns the exit code to end with.
pub fn run(options: &RunOptions<'_>) -> Result<i32> {
    if options.detached {
        return run_detached(options);
    }
    let mut child = command(options)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| spawn_error(options.binary, e))?;
    let stderr = child
        .stderr
        .take()
        .context("the job binary's error output")?;
    let spinner = ProgressBar::new_spinner();
    spinner.enable_steady_tick(Duration::from_millis(120));
    spinner.set_message("starting the job");
    // The job's error output goes on to ours (above the progress line); the line naming its
    // endpoint is also handed to this thread.
    let (tx, lines) = mpsc::channel();
    let printer = spinner.clone();
    let forward = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            printer.suspend(|| eprintln!("{line}"));
            let _ = tx.send(line);
        }
    });
    let url = match await_url(&lines, &mut child, Duration::from_secs(60)) {
        Ok(url) => url,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            spinner.finish_and_clear();
            let _ = forward.join();
            return Err(e);
        }
    };
    spinner.suspend(|| eprintln!("Following the job at {url}/"));
    let client = RestClient::new(&url, token(options), None)?;
    let (status, last) = follow(&mut child, &client, &spinner)?;
    spinner.finish_and_clear();
    let _ = forward.join();
    if let Some(job) = last {
        eprintln!(
            "Job {} ({}) ended after {}.",
            job["jid"].as_str().unwrap_or_default(),
            job["name"].as_str().unwrap_or_default(),
            duration_ms(job["duration"].as_u64().unwrap_or(0))
        );
    }
    Ok(status.code().unwrap_or(1))
}

fn run_detached(options: &RunOptions<'_>) -> Result<i32> {
    let log: PathBuf = std::env::temp_dir().join(format!(
        "weir-run-{}-{}.log",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    ));
    let file = std::fs::File::create(&log)
        .with_context(|| format!("cannot create the job's log `{}`", log.display()))?;
    let mut child = command(options)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .map_err(|e| spawn_error(options.binary, e))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let url = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(url) = text.lines().find_map(|l| l.split(URL_LINE).nth(1)) {
            break url.trim().trim_end_matches('/').to_string();
        }
        if let Some(status) = child.try_wait()? {
            bail!("the job binary exited ({status}) before it served its REST endpoint; its log `{}` says why", log.display());
        }
        if Instant::now() > deadline {
            bail!(
                "the job binary printed no REST endpoint within a minute; its log is `{}`",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let client = RestClient::new(&url, token(options), None)?;
    let id = loop {
        if let Some(id) = client
            .get("/jobs", "listing the jobs")
            .ok()
            .and_then(|j| j["jobs"][0]["id"].as_str().map(str::to_string))
        {
            break id;
        }
        if child.try_wait()?.is_some() || Instant::now() > deadline {
            bail!(
                "the job did not start; its log `{}` says why",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    println!("Job {id} is running (process {}).", child.id());
    println!("Dashboard and REST API: {url}/");
    println!("Log: {}", log.display());
    println!("Follow it with `weir --url {url} list`; stop it with `weir --url {url} stop --savepoint {id}`.");
    Ok(0)
}
