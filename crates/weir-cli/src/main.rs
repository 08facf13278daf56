//! `weir`: the command line of Weir. See the crate's README.

mod client;
mod commands;
mod output;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// Runs, watches and controls Weir jobs, and reads their checkpoints.
#[derive(Parser, Debug)]
#[command(name = "weir", version, about)]
struct Cli {
    /// The JobManager's REST endpoint.
    #[arg(
        long,
        global = true,
        env = "WEIR_REST_URL",
        default_value = "http://127.0.0.1:8081"
    )]
    url: String,
    /// The bearer token the endpoint requires (`rest.authentication.token`).
    #[arg(long, global = true, env = "WEIR_REST_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A PEM CA certificate to trust for an HTTPS endpoint.
    #[arg(long = "ca-cert", global = true, env = "WEIR_REST_CA_CERT")]
    ca_cert: Option<PathBuf>,
    /// How long to wait for a savepoint, a stop or a cancellation, in seconds.
    #[arg(long, global = true, default_value_t = 600)]
    timeout_secs: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs a job binary on its local mini-cluster (or, with --jobmanager, as the JobManager
    /// of a cluster) with its dashboard, showing its progress until it ends.
    Run {
        /// Return once the job runs, leaving it running in the background.
        #[arg(long)]
        detached: bool,
        /// Run it as the JobManager of a cluster: TaskManagers started with `--role
        /// taskmanager` join it.
        #[arg(long)]
        jobmanager: bool,
        /// Continue the job from its newest restore point (the latest retained checkpoint, or
        /// the savepoint it was stopped with) instead of starting it from empty state:
        /// `-D execution.start-mode=resume`.
        #[arg(long)]
        resume: bool,
        /// A configuration file for the job (`weir.yaml`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Sets a configuration key for the job: `-D parallelism.default=4`.
        #[arg(short = 'D', value_name = "KEY=VALUE")]
        dynamic: Vec<String>,
        /// The job binary.
        binary: PathBuf,
        /// The job's own arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Lists the jobs.
    List,
    /// Cancels a job and waits for it to end.
    Cancel {
        /// Job id, unique id prefix, or name.
        job: String,
    },
    /// Takes a savepoint of a job.
    Savepoint {
        /// Job id, unique id prefix, or name.
        job: String,
    },
    /// Stops a job with a savepoint.
    Stop {
        /// Take a savepoint, at which the sources stop (required: a stop without one is
        /// `weir cancel`).
        #[arg(long, required = true)]
        savepoint: bool,
        /// End the sources' input first, so that every window and timer fires; for a job
        /// that will not be resumed.
        #[arg(long)]
        drain: bool,
        /// Job id, unique id prefix, or name.
        job: String,
    },
    /// Lists a job's checkpoints.
    Checkpoints {
        /// Job id, unique id prefix, or name.
        job: String,
    },
    /// Shows what a checkpoint or savepoint holds (its directory or its `_metadata`).
    Inspect {
        /// The `chk-N` or `savepoint-N` directory, or its `_metadata` file.
        path: PathBuf,
        /// Check every checksum and report what is damaged (exit code 1 if anything is).
        #[arg(long)]
        verify: bool,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Starts a job over where it ran before: records the reset (on a filesystem refused
    /// while a process holds the job, running or stalled; on object storage, which has no
    /// lock, it fences a JobManager still running it), removes from the given output directories what
    /// the job's earlier runs wrote, and deletes the job's checkpoints. Savepoints stay.
    Reset {
        /// The job's checkpoint directory, `<checkpoint storage>/<job>` (the one holding
        /// `_job_record`), as a path or a URL (`s3://bucket/prefix/job`).
        job_dir: String,
        /// An output directory of the job's file sinks, whose files the earlier runs wrote are
        /// removed (by the epoch in their names; repeat it for several).
        #[arg(long = "output", value_name = "DIR")]
        outputs: Vec<PathBuf>,
        /// The job's local-recovery directory (`state.backend.local-recovery`), if it has
        /// one: its copies are reset too.
        #[arg(long)]
        local_recovery: Option<PathBuf>,
    },
    /// Lists the configuration keys; with --check, validates a configuration.
    Config {
        /// Load and check the configuration (`weir.yaml`, the environment, `-D`).
        #[arg(long)]
        check: bool,
        /// The file to check (default: `$WEIR_CONF_DIR/weir.yaml` or `./weir.yaml`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// A `-D key=value` to check with it.
        #[arg(short = 'D', value_name = "KEY=VALUE")]
        dynamic: Vec<String>,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(error) => {
            eprintln!("weir: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<i32> {
    let timeout = Duration::from_secs(cli.timeout_secs);
    let client = || client::RestClient::new(&cli.url, cli.token.clone(), cli.ca_cert.as_deref());
    match &cli.command {
        Command::Run {
            detached,
            jobmanager,
            resume,
            config,
            dynamic,
            binary,
            args,
        } => {
            return commands::run::run(&commands::run::RunOptions {
                binary,
                args,
                dynamic,
                config: config.as_deref(),
                jobmanager: *jobmanager,
                resume: *resume,
                detached: *detached,
                token: cli.token.clone(),
            })
        }
        Command::List => commands::jobs::list(&client()?)?,
        Command::Cancel { job } => commands::jobs::cancel(&client()?, job, timeout)?,
        Command::Savepoint { job } => commands::savepoints::savepoint(&client()?, job, timeout)?,
        Command::Stop { drain, job, .. } => {
            commands::savepoints::stop(&client()?, job, *drain, timeout)?
        }
        Command::Checkpoints { job } => commands::jobs::checkpoints(&client()?, job)?,
        Command::Inspect { path, verify, json } => {
            commands::inspect::inspect(path, *verify, *json)?
        }
        Command::Reset {
            job_dir,
            outputs,
            local_recovery,
        } => commands::reset::reset(job_dir, outputs, local_recovery.as_deref())?,
        Command::Config {
            check,
            config,
            dynamic,
        } => commands::config::config(*check, config.as_deref(), dynamic)?,
    }
    Ok(0)
}
