//! Zombie sweeps of a job in cluster mode with its checkpoints on object storage (the
//! S3-compatible server of `scripts/s3-server.sh`, which has no locks: the job record's
//! compare-and-swap and the sinks' own fences are all there is). A first cluster (a
//! JobManager and TaskManagers `tm-1` …) runs the job; one of its processes is stopped
//! (SIGSTOP) right before its N-th durable operation of a kind ([`Stale`]); a second cluster
//! takes the job over from storage and runs it to its end; then the stopped process continues
//! (SIGCONT) and must commit nothing more. After each trial the committed output — checked by
//! the caller with an oracle outside Weir — must be exactly what one uninterrupted run gives,
//! and a last `--resume` (in local mode) must find the job finished and leave it exact.
//!
//! Points are chosen by [`crate::crash_points::points`]: `WEIR_CRASH_SWEEP=full` tries every
//! one, `WEIR_CRASH_SWEEP=n` n of them, `WEIR_CRASH_POINT=n` replays one.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::crash_points::{self, inject, Fault};
use crate::local_cluster::LocalCluster;
use crate::storage_stops::StorageStops;

/// How long a cluster may take to reach a point or to finish before the trial is called hung.
const HANG: Duration = Duration::from_secs(240);

/// Which process of the first cluster goes stale, and where it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stale {
    /// The JobManager, right before its N-th request that writes object storage (checkpoint
    /// metadata, the job record, clean-ups); the request is held and reaches storage only
    /// after the JobManager continues.
    JobManagerStorage,
    /// TaskManager `tm-1`, right before its N-th write to object storage (its state files);
    /// the first JobManager dies.
    TaskManagerStorage,
    /// `tm-1`, right before its N-th durable file operation under [`TrialJob::files`]; the
    /// first JobManager dies.
    TaskManagerFiles,
    /// `tm-1` started with `flag N`, the job binary's own stop point (it stops itself, as
    /// `--stop-before-commit N` does right before its N-th commit to an external system);
    /// points `1..=points`; the first JobManager dies.
    TaskManagerFlag {
        /// The flag.
        flag: &'static str,
        /// How many times a run reaches it, about (points past a run's end count as
        /// "ended before its point").
        points: u64,
    },
}

impl Stale {
    fn role(self) -> &'static str {
        match self {
            Stale::JobManagerStorage => "jobmanager",
            _ => "tm-1",
        }
    }
}

/// Checks a job's committed output; given the step it checks at, returns the problem.
pub type OutputCheck = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// One trial's job, made fresh for every trial (and for the counting run) by the caller.
pub struct TrialJob {
    /// The job's flags for every process of both clusters — its checkpoint storage on a
    /// fresh S3 prefix included — and for the last run in local mode (which adds `--resume`).
    pub args: Vec<String>,
    /// A scratch directory for the clusters' logs (it must outlive the trial).
    pub dir: PathBuf,
    /// The directory whose durable file operations [`Stale::TaskManagerFiles`] counts (an
    /// absolute path).
    pub files: PathBuf,
    /// Checks the committed output with an oracle outside Weir (a problem if it is not
    /// exactly what one uninterrupted run gives); `when` says at which step.
    pub check: OutputCheck,
    /// Whatever must live as long as the trial (its scratch directory, say).
    pub keep: Box<dyn std::any::Any + Send>,
}

/// A sweep: its name (for its figures and replays), the job binary, which process goes
/// stale, and the cluster's shape.
pub struct ClusterZombieSweep<'a> {
    /// Printed with the figures (`cluster zombie sweep <name>: …`).
    pub name: &'a str,
    /// The job binary (a process of it runs as either role).
    pub binary: &'a Path,
    /// Which process goes stale, and where.
    pub stale: Stale,
    /// TaskManagers per cluster (one slot each).
    pub taskmanagers: u32,
    /// Points tried unless `WEIR_CRASH_SWEEP` says otherwise.
    pub sample: usize,
    /// How to run this sweep alone (`cargo nextest run -p … --test … <name>`), for replays.
    pub replay: String,
}

/// What one trial saw.
#[derive(Debug, Default)]
struct Outcome {
    /// The stale process ended (or its job did) before it reached the point.
    finished_first: bool,
    /// Why the woken process ended, if with an error.
    reason: Option<String>,
}

impl<'a> ClusterZombieSweep<'a> {
    /// Sweep `name` — a test of the same name in test target `cluster_zombies` of `package` —
    /// of `binary` on three TaskManagers, `sample` points of `stale`.
    pub fn new(
        package: &str,
        name: &'a str,
        binary: &'a Path,
        stale: Stale,
        sample: usize,
    ) -> Self {
        Self {
            name,
            binary,
            stale,
            taskmanagers: 3,
            sample,
            replay: format!("cargo nextest run -p {package} --test cluster_zombies {name}"),
        }
    }

    /// Runs the sweep over trials made by `job` (given a label for the trial) and panics with
    /// every violation; prints its figures and why the stale processes ended.
    pub fn run(&self, job: impl Fn(&str) -> TrialJob + Sync) {
        let total = match self.stale {
            Stale::TaskManagerFlag { points, .. } => points,
            _ => self.count(&job("count")),
        };
        assert!(
            total > 0,
            "{}: the counting run made no operation of the kind swept",
            self.name
        );
        let seed = crate::seeds(1)[0];
        let points = crash_points::points(1..=total, self.sample, seed);
        let (outcomes, failures) = crash_points::run_trials(
            &points,
            |point| self.trial(&job(&point.to_string()), point),
            |point| {
                format!(
                    "stop point {point} (replay: WEIR_CRASH_POINT={point} WEIR_SEED={seed} {})",
                    self.replay
                )
            },
        );
        println!(
            "cluster zombie sweep {}: {} trials over stop points 1..={total} ({} ended before \
             their point), {} violations",
            self.name,
            points.len(),
            outcomes.iter().filter(|o| o.finished_first).count(),
            failures.len()
        );
        crash_points::print_reasons(outcomes.iter().filter_map(|o| o.reason.as_deref()));
        crash_points::assert_no_violations(self.name, points.len(), &failures);
        assert!(
            outcomes.iter().any(|o| !o.finished_first),
            "{}: no trial reached its stop point: nothing was swept",
            self.name
        );
    }

    /// The first cluster, with the stale process set up to stop at `point` (only to count,
    /// with `None`), and the storage proxy (for storage points).
    fn first_cluster(
        &self,
        job: &TrialJob,
        point: Option<u64>,
        file_log: Option<PathBuf>,
    ) -> (LocalCluster, Option<std::sync::Arc<StorageStops>>) {
        let args: Vec<&str> = job.args.iter().map(String::as_str).collect();
        let mut cluster = LocalCluster::new(self.binary, &args, &job.dir.join("logs-first"));
        // Processes that lost their JobManager give up soon, so that a trial does not wait
        // long for them; a JobManager that lost its TaskManagers does too. A stale
        // JobManager's TaskManagers still try to register with it when it wakes (the
        // successor takes seconds), so that it has a cluster to act through.
        let registration_ms = match self.stale {
            Stale::JobManagerStorage => "30000",
            _ => "8000",
        };
        cluster.set_cluster_arg("--registration-timeout-ms", registration_ms);
        cluster.set_cluster_arg("--slot-timeout-ms", "8000");
        let role = self.stale.role();
        let stops = match self.stale {
            Stale::JobManagerStorage | Stale::TaskManagerStorage => {
                let stops = std::sync::Arc::new(StorageStops::to_test_server(point));
                let proxy = stops.clone();
                cluster.prepare(role, move |command| proxy.route(command));
                Some(stops)
            }
            Stale::TaskManagerFiles => {
                let (dir, fault) = (job.files.clone(), point.map_or(Fault::None, Fault::StopAt));
                cluster.prepare(role, move |command| {
                    inject(command, &dir, fault, file_log.as_deref());
                });
                None
            }
            Stale::TaskManagerFlag { flag, .. } => {
                if let Some(n) = point {
                    cluster.prepare(role, move |command| {
                        command.args([flag, &n.to_string()]);
                    });
                }
                None
            }
        };
        cluster.start(self.taskmanagers, 1);
        if let Some(stops) = &stops {
            let pid = match self.stale {
                Stale::JobManagerStorage => cluster.jobmanager_pid(),
                _ => cluster.taskmanager_pid("tm-1"),
            };
            stops.watch(pid.expect("the stale process runs"));
        }
        (cluster, stops)
    }

    /// The durable operations of the stale process in an undisturbed run.
    fn count(&self, job: &TrialJob) -> u64 {
        let log = job.dir.join("ops.log");
        let (mut cluster, stops) = self.first_cluster(job, None, Some(log.clone()));
        let (status, out) = cluster.wait_jobmanager(HANG);
        assert!(
            status.success(),
            "the counting run failed ({status:?}): {out}\n{}",
            cluster.all_logs()
        );
        cluster.wait_taskmanagers(HANG);
        match stops {
            Some(stops) => {
                if let Some(problem) = stops.problem() {
                    panic!("the storage stop proxy could not follow the requests: {problem}");
                }
                stops.requests().len() as u64
            }
            None => crash_points::read_log(&log).len() as u64,
        }
    }

    /// Waits until the stale process is stopped at its point (true), or it or its job ended
    /// first (false).
    fn reached(&self, first: &mut LocalCluster, stops: Option<&StorageStops>) -> bool {
        if let Some(stops) = stops {
            return match self.stale {
                Stale::JobManagerStorage => stops.wait_stopped(HANG, || first.jobmanager_exited()),
                _ => stops.wait_stopped(HANG, || first.taskmanager_exited("tm-1")),
            };
        }
        let deadline = Instant::now() + HANG;
        loop {
            if first.taskmanager_stopped("tm-1") {
                return true;
            }
            if first.taskmanager_exited("tm-1")
                || first.jobmanager_exited()
                || Instant::now() > deadline
            {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// One trial: the stale process stopped at `point`, a second cluster run to the end, the
    /// stale process continued, a last `--resume`, the output checked after each.
    fn trial(&self, job: &TrialJob, point: u64) -> Result<Outcome, String> {
        let (mut first, stops) = self.first_cluster(job, Some(point), None);
        let mut outcome = Outcome::default();
        if !self.reached(&mut first, stops.as_deref()) {
            // Nothing stopped: the run must end by itself and exactly.
            let (status, out) = first.wait_jobmanager(HANG);
            if !status.success() {
                return Err(format!(
                    "the first cluster failed before point {point} ({status:?}): {out}\n{}",
                    first.all_logs()
                ));
            }
            outcome.finished_first = true;
            (job.check)("after a run that ended before its point")?;
            return Ok(outcome);
        }
        if self.stale != Stale::JobManagerStorage {
            // The stale TaskManager's JobManager dies: a successor takes the job over.
            first.kill_jobmanager();
        }
        let args: Vec<&str> = job.args.iter().map(String::as_str).collect();
        let mut second = LocalCluster::new(self.binary, &args, &job.dir.join("logs-second"));
        second.start(self.taskmanagers, 1);
        let (status, out) = second.wait_jobmanager(HANG);
        if !status.success() {
            return Err(format!(
                "the successor failed ({status:?}): {out}\n{}\n{}",
                second.all_logs(),
                first.all_logs()
            ));
        }
        (job.check)("after the successor")?;
        if let Some(stops) = &stops {
            stops.release();
        }
        let stale_log = format!("{}-1.err", self.stale.role());
        if self.stale == Stale::JobManagerStorage {
            first.continue_jobmanager();
            let (status, _) = first.wait_jobmanager(HANG);
            if !status.success() {
                outcome.reason = crash_points::ending_reason(&first.log(&stale_log))
                    .or_else(|| Some(status.to_string()));
            }
        } else {
            first.continue_taskmanager("tm-1");
        }
        let stuck = first.wait_taskmanagers(HANG);
        if !stuck.is_empty() {
            return Err(format!(
                "stale TaskManagers {stuck:?} never ended:\n{}",
                first.all_logs()
            ));
        }
        if self.stale != Stale::JobManagerStorage {
            outcome.reason = crash_points::ending_reason(&first.log(&stale_log));
        }
        (job.check)("after the stale process continued").map_err(|problem| {
            format!(
                "{problem}\nthe stale {} said:\n{}",
                self.stale.role(),
                tail(&first.log(&stale_log))
            )
        })?;
        // Whatever the stale process did, the job is not stranded: a resume finds it
        // finished.
        let mut last = Command::new(self.binary)
            .args(&job.args)
            .arg("--resume")
            .env("RUST_LOG", "weir=warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        let (status, said) = crate::wait_with_stderr(&mut last, HANG, "the last --resume");
        if !status.success() {
            return Err(format!(
                "a resume after the stale process failed ({status}): {}",
                tail(&said)
            ));
        }
        (job.check)("after a last --resume")?;
        Ok(outcome)
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// A fresh prefix for one run on the test bucket (`$WEIR_S3_URL`).
pub fn s3_prefix(name: &str) -> String {
    let bucket = std::env::var("WEIR_S3_URL").unwrap_or_else(|_| {
        panic!("WEIR_S3_URL is not set: run through scripts/test.sh, or `eval $(scripts/s3-server.sh start)`")
    });
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{bucket}/{name}-{}-{nanos}", std::process::id())
}
