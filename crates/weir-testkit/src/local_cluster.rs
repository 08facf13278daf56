//! A cluster of real processes on 127.0.0.1 for tests: one JobManager and N TaskManagers,
//! each a process of the same job binary started with the same job arguments and its role
//! flags, with its output captured in files. Processes can be SIGKILLed, restarted,
//! SIGSTOPped and continued; whatever is still running when the cluster is dropped is
//! killed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1 (free when asked; bind it soon).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port on 127.0.0.1")
}

/// The processes of one test cluster.
pub struct LocalCluster {
    binary: PathBuf,
    job_args: Vec<String>,
    cluster_args: Vec<String>,
    logs: PathBuf,
    /// The JobManager's RPC address.
    pub jobmanager_address: String,
    jobmanager: Option<Child>,
    jobmanager_starts: u32,
    taskmanagers: BTreeMap<String, Child>,
    taskmanager_starts: BTreeMap<String, u32>,
    /// Set-ups of one role's processes (`jobmanager` or a TaskManager id), applied to every
    /// process of that role started from then on.
    preparations: BTreeMap<String, Vec<Preparation>>,
}

/// Something done to a process's command before it starts (an environment variable, the
/// crash injector).
type Preparation = Box<dyn Fn(&mut Command) + Send>;

impl LocalCluster {
    /// A cluster of `binary` run with `job_args`, logging into `logs`. The heartbeat
    /// settings are short (200 ms, lost after 2 s) so that failures are detected quickly.
    pub fn new(binary: impl Into<PathBuf>, job_args: &[&str], logs: &Path) -> Self {
        let jobmanager_address = format!("127.0.0.1:{}", free_port());
        std::fs::create_dir_all(logs).expect("cannot create the log directory");
        Self {
            binary: binary.into(),
            job_args: job_args.iter().map(|s| s.to_string()).collect(),
            cluster_args: vec![
                "--jobmanager-address".into(),
                jobmanager_address.clone(),
                "--heartbeat-interval-ms".into(),
                "200".into(),
                "--heartbeat-timeout-ms".into(),
                "2000".into(),
                "--registration-timeout-ms".into(),
                "60000".into(),
                "--slot-timeout-ms".into(),
                "60000".into(),
            ],
            logs: logs.to_path_buf(),
            jobmanager_address,
            jobmanager: None,
            jobmanager_starts: 0,
            taskmanagers: BTreeMap::new(),
            taskmanager_starts: BTreeMap::new(),
            preparations: BTreeMap::new(),
        }
    }

    /// Replaces the value of cluster flag `flag` (`--registration-timeout-ms`, …) for every
    /// process started from now on.
    pub fn set_cluster_arg(&mut self, flag: &str, value: &str) {
        match self.cluster_args.iter().position(|a| a == flag) {
            Some(i) if i + 1 < self.cluster_args.len() => self.cluster_args[i + 1] = value.into(),
            _ => self
                .cluster_args
                .extend([flag.to_string(), value.to_string()]),
        }
    }

    /// Applies `setup` to the command of every process of `role` (`jobmanager`, or a
    /// TaskManager id) started from now on — an environment variable, the crash injector.
    pub fn prepare(&mut self, role: &str, setup: impl Fn(&mut Command) + Send + 'static) {
        self.preparations
            .entry(role.to_string())
            .or_default()
            .push(Box::new(setup));
    }

    /// The process id of the running JobManager.
    pub fn jobmanager_pid(&self) -> Option<u32> {
        self.jobmanager.as_ref().map(Child::id)
    }

    /// The process id of TaskManager `id`, if it runs.
    pub fn taskmanager_pid(&self, id: &str) -> Option<u32> {
        self.taskmanagers.get(id).map(Child::id)
    }

    /// Whether TaskManager `id` is stopped (SIGSTOP), per `/proc`.
    pub fn taskmanager_stopped(&self, id: &str) -> bool {
        self.taskmanagers
            .get(id)
            .is_some_and(crate::crash_points::is_stopped)
    }

    /// Whether TaskManager `id` has exited (or was never started).
    pub fn taskmanager_exited(&mut self, id: &str) -> bool {
        self.taskmanagers
            .get_mut(id)
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// Adds `args` to every process started from now on.
    pub fn with_cluster_args(mut self, args: &[&str]) -> Self {
        self.cluster_args.extend(args.iter().map(|s| s.to_string()));
        self
    }

    fn spawn(&self, role: &str, role_args: &[String], log: &str) -> Child {
        let out = std::fs::File::create(self.logs.join(format!("{log}.out")))
            .expect("cannot create a log file");
        let err = std::fs::File::create(self.logs.join(format!("{log}.err")))
            .expect("cannot create a log file");
        let mut command = Command::new(&self.binary);
        command
            .args(&self.job_args)
            .args(&self.cluster_args)
            .args(role_args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "weir=info,weir_cluster=info".into()),
            )
            // Plain text logs, for reading and searching.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for setup in self.preparations.get(role).into_iter().flatten() {
            setup(&mut command);
        }
        command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.binary.display()))
    }

    /// Starts the JobManager (again, after a kill: its logs get a new number).
    pub fn start_jobmanager(&mut self) {
        assert!(self.jobmanager.is_none(), "the JobManager is running");
        self.jobmanager_starts += 1;
        let log = format!("jobmanager-{}", self.jobmanager_starts);
        // Its REST endpoint on any free port, so that test clusters never compete for 8081.
        let args = ["--role", "jobmanager", "-D", "rest.port=0"].map(String::from);
        self.jobmanager = Some(self.spawn("jobmanager", &args, &log));
    }

    /// The base URL of the running JobManager's REST endpoint, once it has printed it.
    pub fn rest_url(&self, within: Duration) -> Option<String> {
        let log = self
            .logs
            .join(format!("jobmanager-{}.err", self.jobmanager_starts));
        let deadline = Instant::now() + within;
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(line) = text
                .lines()
                .find_map(|l| l.split("Weir dashboard and REST API: ").nth(1))
            {
                return Some(line.trim().trim_end_matches('/').to_string());
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts TaskManager `id` with `slots` slots.
    pub fn start_taskmanager(&mut self, id: &str, slots: u32) {
        self.start_taskmanager_with(id, slots, &[]);
    }

    /// Starts TaskManager `id` with `slots` slots and `extra` flags.
    pub fn start_taskmanager_with(&mut self, id: &str, slots: u32, extra: &[&str]) {
        assert!(
            !self.taskmanagers.contains_key(id),
            "TaskManager {id} is running"
        );
        let starts = self.taskmanager_starts.entry(id.to_string()).or_default();
        *starts += 1;
        let log = format!("{id}-{starts}");
        let mut args: Vec<String> = vec![
            "--role".into(),
            "taskmanager".into(),
            "--taskmanager-id".into(),
            id.into(),
            "--slots".into(),
            slots.to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = self.spawn(id, &args, &log);
        self.taskmanagers.insert(id.to_string(), child);
    }

    /// Starts a JobManager and TaskManagers `tm-1` … `tm-n` with `slots` slots each.
    pub fn start(&mut self, taskmanagers: u32, slots: u32) {
        self.start_jobmanager();
        for i in 1..=taskmanagers {
            self.start_taskmanager(&format!("tm-{i}"), slots);
        }
    }

    /// SIGKILLs TaskManager `id`; whether it was still running (and so was killed).
    pub fn kill_taskmanager(&mut self, id: &str) -> bool {
        match self.taskmanagers.remove(id) {
            Some(mut child) => {
                let killed = matches!(child.try_wait(), Ok(None)) && child.kill().is_ok();
                let _ = child.wait();
                killed
            }
            None => false,
        }
    }

    /// SIGKILLs the JobManager.
    pub fn kill_jobmanager(&mut self) {
        if let Some(mut child) = self.jobmanager.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOPs the JobManager (a stalled, not a dead one: it keeps its port and sessions).
    pub fn stop_jobmanager(&self) {
        if let Some(child) = &self.jobmanager {
            crate::crash_points::stop(child);
        }
    }

    /// SIGCONTs the JobManager.
    pub fn continue_jobmanager(&self) {
        if let Some(child) = &self.jobmanager {
            crate::crash_points::resume(child);
        }
    }

    /// SIGSTOPs TaskManager `id`.
    pub fn stop_taskmanager(&self, id: &str) {
        if let Some(child) = self.taskmanagers.get(id) {
            crate::crash_points::stop(child);
        }
    }

    /// SIGCONTs TaskManager `id`.
    pub fn continue_taskmanager(&self, id: &str) {
        if let Some(child) = self.taskmanagers.get(id) {
            crate::crash_points::resume(child);
        }
    }

    /// The ids of the running TaskManagers.
    pub fn taskmanager_ids(&self) -> Vec<String> {
        self.taskmanagers.keys().cloned().collect()
    }

    /// Whether the JobManager has exited.
    pub fn jobmanager_exited(&mut self) -> bool {
        self.jobmanager
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// Waits for the JobManager to exit (killing everything after `limit` and failing the
    /// test); returns its status and its standard output.
    pub fn wait_jobmanager(&mut self, limit: Duration) -> (ExitStatus, String) {
        let mut child = self.jobmanager.take().expect("no JobManager is running");
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the JobManager did not finish within {limit:?}; its log:\n{}",
                    self.log(&format!("jobmanager-{}.err", self.jobmanager_starts))
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = self.log(&format!("jobmanager-{}.out", self.jobmanager_starts));
        (status, out)
    }

    /// Waits up to `limit` for TaskManager `id` to exit by itself; true if it did.
    pub fn wait_taskmanager_exit(&mut self, id: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            match self.taskmanagers.get_mut(id).map(|c| c.try_wait()) {
                None | Some(Ok(Some(_))) => {
                    self.taskmanagers.remove(id);
                    return true;
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        false
    }

    /// Once a checkpoint of `job` newer than the latest now in `checkpoints` completes (or
    /// the job ends, or a minute passes), waits up to 300 ms (seeded by `rng`), SIGKILLs a
    /// TaskManager chosen by `rng` and starts `replacement` with `slots` slots. Returns the
    /// victim, if the job was still running; the kill is reported for the soak campaign
    /// ([`crate::report_kill`], window `mid-run`).
    pub fn kill_random_after_next_checkpoint(
        &mut self,
        checkpoints: &Path,
        job: &str,
        rng: &mut crate::Rng,
        replacement: &str,
        slots: u32,
    ) -> Option<String> {
        let since = std::time::SystemTime::now();
        let reached = crate::latest_checkpoint(checkpoints, job);
        let deadline = Instant::now() + Duration::from_secs(300);
        while crate::latest_checkpoint(checkpoints, job) <= reached
            && Instant::now() < deadline
            && !self.jobmanager_exited()
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(rng.below(300)));
        let ids = self.taskmanager_ids();
        if self.jobmanager_exited() || ids.is_empty() {
            crate::report_kill(checkpoints, job, "mid-run", false, since);
            return None;
        }
        let victim = ids[rng.below(ids.len() as u64) as usize].clone();
        let killed = self.kill_taskmanager(&victim);
        crate::report_kill(checkpoints, job, "mid-run", killed, since);
        self.start_taskmanager(replacement, slots);
        Some(victim)
    }

    /// Waits (a minute at most) for TaskManager `id`'s first process to end by itself and
    /// checks that its log says `why` — for a TaskManager told to kill itself at some point.
    pub fn expect_self_kill(&mut self, id: &str, why: &str) {
        assert!(
            self.wait_taskmanager_exit(id, Duration::from_secs(60)),
            "{id} never ended:\n{}",
            self.all_logs()
        );
        let log = self.log(&format!("{id}-1.err"));
        assert!(log.contains(why), "{id} did not end with `{why}`:\n{log}");
    }

    /// Waits up to `limit` for every TaskManager to exit; returns those still running.
    pub fn wait_taskmanagers(&mut self, limit: Duration) -> Vec<String> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            self.taskmanagers
                .retain(|_, c| !matches!(c.try_wait(), Ok(Some(_))));
            if self.taskmanagers.is_empty() {
                return Vec::new();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.taskmanager_ids()
    }

    /// A log file's text (`jobmanager-1.err`, `tm-2-1.out`, …).
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.logs.join(name)).unwrap_or_default()
    }

    /// Waits until log `name` holds `text` at least `times` times — something a process
    /// printed, never a duration — and panics with every log once `limit` has passed.
    pub fn await_log(&self, name: &str, text: &str, times: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.log(name).matches(text).count() < times {
            assert!(
                Instant::now() < deadline,
                "{name} never said `{text}` {times} times within {limit:?}:\n{}",
                self.all_logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every log file, concatenated with headers (for a failing test's message).
    pub fn all_logs(&self) -> String {
        let mut names: Vec<PathBuf> = std::fs::read_dir(&self.logs)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        names.sort();
        names
            .iter()
            .map(|p| {
                format!(
                    "==== {} ====\n{}",
                    p.display(),
                    std::fs::read_to_string(p).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for child in self
            .taskmanagers
            .values_mut()
            .chain(self.jobmanager.as_mut())
        {
            // A stopped process must be continued to die promptly on SIGKILL's delivery.
            crate::crash_points::resume(child);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
