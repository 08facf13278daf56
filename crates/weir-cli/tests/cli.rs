//! Every `weir` command end to end, as a user runs them: against the `counting_job` example
//! started by `weir run` (in the foreground, and detached), with its REST endpoint, its
//! checkpoints and savepoints on disk.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn weir(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .env_remove("WEIR_REST_URL")
        .env_remove("WEIR_REST_TOKEN")
        .output()
        .expect("cannot run weir")
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `weir args` must succeed; its standard output.
fn ok(args: &[&str]) -> String {
    let output = weir(args);
    let (out, err) = text(&output);
    assert!(
        output.status.success(),
        "weir {args:?} failed:\n{out}\n{err}"
    );
    out
}

/// `weir args` must fail; its error output.
fn fails(args: &[&str]) -> String {
    let output = weir(args);
    let (out, err) = text(&output);
    assert!(
        !output.status.success(),
        "weir {args:?} should fail:\n{out}\n{err}"
    );
    err
}

/// An example job of this crate, built by `cargo test` beside this test.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap();
    let job = profile.join("examples").join(name);
    assert!(job.exists(), "{} is built with the tests", job.display());
    job
}

/// The example job that follows the job template.
fn counting_job() -> PathBuf {
    example("counting_job")
}

/// A job started with `weir run --detached`, killed when the test ends if still running.
struct Detached {
    url: String,
    pid: u32,
    id: String,
}

impl Drop for Detached {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-9")
            .arg(self.pid.to_string())
            .status();
    }
}

fn detached(work: &Path, rate: &str) -> Detached {
    detached_with(work, &["--records", "10000000", "--rate", rate])
}

fn detached_with(work: &Path, job_args: &[&str]) -> Detached {
    let job = counting_job();
    let mut args = vec![
        "run",
        "--detached",
        job.to_str().unwrap(),
        "--work-dir",
        work.to_str().unwrap(),
    ];
    args.extend_from_slice(job_args);
    let out = ok(&args);
    let find = |prefix: &str| -> String {
        out.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in:\n{out}"))
            .trim()
            .to_string()
    };
    let pid = find("Job ")
        .split("(process ")
        .nth(1)
        .and_then(|p| p.trim_end_matches(").").parse().ok())
        .unwrap_or_else(|| panic!("no process id in:\n{out}"));
    let id = find("Job ").split(' ').next().unwrap().to_string();
    Detached {
        url: find("Dashboard and REST API: ")
            .trim_end_matches('/')
            .to_string(),
        pid,
        id,
    }
}

fn await_output(args: &[&str], what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let out = ok(args);
        if check(&out) {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn run_follows_a_job_to_its_end_and_passes_its_exit_code() {
    let work = tempfile::tempdir().unwrap();
    let job = counting_job();
    let output = weir(&[
        "run",
        "-D",
        "parallelism.default=2",
        job.to_str().unwrap(),
        "--work-dir",
        work.path().to_str().unwrap(),
        "--records",
        "20000",
        "--rate",
        "10000",
    ]);
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}\n{err}");
    assert!(
        out.contains("Job `counting` Finished"),
        "the job's own output passes through: {out}"
    );
    assert!(
        err.contains("Following the job at http://127.0.0.1:"),
        "{err}"
    );
    assert!(err.contains("(counting) ended after"), "{err}");

    // A bad configuration fails the job's process at once, naming the key.
    let output = weir(&[
        "run",
        "-D",
        "execution.checkpointing.intreval=1s",
        job.to_str().unwrap(),
        "--work-dir",
        work.path().to_str().unwrap(),
    ]);
    let (out, err) = text(&output);
    assert!(!output.status.success(), "{out}\n{err}");
    assert!(err.contains("unknown configuration key `execution.checkpointing.intreval`; did you mean `execution.checkpointing.interval`?"), "{err}");

    let err = fails(&["run", "/nonexistent/job"]);
    assert!(
        err.contains("cannot start the job binary `/nonexistent/job`"),
        "{err}"
    );
}

#[test]
fn list_checkpoints_savepoint_inspect_verify_and_stop() {
    let work = tempfile::tempdir().unwrap();
    let job = detached(work.path(), "2000");
    let url = job.url.as_str();

    let list = ok(&["--url", url, "list"]);
    assert!(
        list.contains(&job.id) && list.contains("counting") && list.contains("RUNNING"),
        "{list}"
    );

    // By name: the history lists completed checkpoints with their paths.
    let history = await_output(
        &["--url", url, "checkpoints", "counting"],
        "two checkpoints",
        |o| o.matches("COMPLETED").count() >= 2,
    );
    assert!(history.contains("/checkpoints/counting/chk-"), "{history}");

    // By id prefix.
    let out = ok(&["--url", url, "savepoint", &job.id[..8]]);
    let savepoint = out
        .lines()
        .find_map(|l| l.strip_prefix("Savepoint completed: "))
        .unwrap_or_else(|| panic!("{out}"))
        .trim()
        .to_string();
    assert!(
        Path::new(&savepoint).join("_metadata").exists(),
        "{savepoint}"
    );

    let inspect = ok(&["inspect", &savepoint]);
    for expected in [
        "Savepoint",
        "of job `counting`",
        "numbers",
        "counts",
        "count-files",
        "keyed state:",
        "per key group:",
        "pending transaction of checkpoint",
    ] {
        assert!(inspect.contains(expected), "`{expected}` in:\n{inspect}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", "--json", &savepoint])).unwrap();
    assert_eq!(json["operators"].as_array().unwrap().len(), 3);
    assert!(ok(&["inspect", "--verify", &savepoint]).contains("Verified:"));

    // Damage one key group of a copy of the savepoint: --verify names the file.
    let copy = work.path().join("damaged");
    copy_dir(Path::new(&savepoint), &copy);
    let keyed = std::fs::read_dir(&copy)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "keyed"))
        .expect("a keyed state file");
    let mut bytes = std::fs::read(&keyed).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&keyed, bytes).unwrap();
    let output = weir(&["inspect", "--verify", copy.to_str().unwrap()]);
    let (out, err) = text(&output);
    assert!(!output.status.success(), "{out}");
    assert!(
        err.contains(&format!("DAMAGED {}", keyed.display())) && err.contains("checksum mismatch"),
        "{err}"
    );
    assert!(
        err.contains("1 of the checkpoint's state files are damaged"),
        "{err}"
    );
    // Truncated metadata: the whole checkpoint is unusable.
    let metadata = copy.join("_metadata");
    let bytes = std::fs::read(&metadata).unwrap();
    std::fs::write(&metadata, &bytes[..bytes.len() / 2]).unwrap();
    let err = fails(&["inspect", copy.to_str().unwrap()]);
    assert!(
        err.contains("the metadata") && err.contains("is unusable"),
        "{err}"
    );
    let err = fails(&["inspect", work.path().to_str().unwrap()]);
    assert!(err.contains("is not a checkpoint or savepoint"), "{err}");

    let out = ok(&["--url", url, "stop", "--savepoint", "counting"]);
    assert!(
        out.contains(&format!("Job {} stopped with savepoint ", job.id)),
        "{out}"
    );
    let err = fails(&["--url", url, "stop", "counting"]);
    assert!(
        err.contains("--savepoint"),
        "a stop without a savepoint is refused by the parser: {err}"
    );
}

#[test]
fn cancel_and_errors_that_say_what_to_do() {
    let work = tempfile::tempdir().unwrap();
    let job = detached(work.path(), "1000");
    let url = job.url.as_str();
    let err = fails(&["--url", url, "cancel", "no-such-job"]);
    assert!(
        err.contains("no job `no-such-job`") && err.contains("weir list"),
        "{err}"
    );
    let out = ok(&["--url", url, "cancel", &job.id]);
    assert!(
        out.contains(&format!("Job {} is CANCELED", job.id)),
        "{out}"
    );

    let err = fails(&["--url", "http://127.0.0.1:1", "list"]);
    assert!(
        err.contains("cannot reach the Weir REST API at http://127.0.0.1:1")
            && err.contains("--url"),
        "{err}"
    );
    let err = fails(&["config", "--check", "-D", "rest.prot=1"]);
    assert!(
        err.contains("unknown configuration key `rest.prot`; did you mean `rest.port`?"),
        "{err}"
    );
    let conf = work.path().join("weir.yaml");
    std::fs::write(
        &conf,
        "parallelism.default: 2\nexecution:\n  checkpointing:\n    interval: often\n",
    )
    .unwrap();
    let err = fails(&["config", "--check", "--config", conf.to_str().unwrap()]);
    assert!(
        err.contains(&format!(
            "{}:4: `execution.checkpointing.interval: often` is invalid",
            conf.display()
        )),
        "{err}"
    );
    std::fs::write(
        &conf,
        "parallelism.default: 2\nrest.authentication.token: secret\n",
    )
    .unwrap();
    let out = ok(&[
        "config",
        "--check",
        "--config",
        conf.to_str().unwrap(),
        "-D",
        "rest.port=9000",
    ]);
    assert!(
        out.contains("rest.port")
            && out.contains("-D on the command line")
            && out.contains("********"),
        "{out}"
    );
    assert!(!out.contains("secret"), "the token is not printed: {out}");
    assert!(ok(&["config"]).contains("execution.checkpointing.interval"));
}

#[test]
fn a_token_protected_endpoint_needs_the_token() {
    let work = tempfile::tempdir().unwrap();
    let job = counting_job();
    let out = ok(&[
        "run",
        "--detached",
        "-D",
        "rest.authentication.token=let-me-in",
        job.to_str().unwrap(),
        "--work-dir",
        work.path().to_str().unwrap(),
        "--records",
        "10000000",
        "--rate",
        "1000",
    ]);
    let url = out
        .lines()
        .find_map(|l| l.strip_prefix("Dashboard and REST API: "))
        .unwrap_or_else(|| panic!("{out}"))
        .trim()
        .trim_end_matches('/')
        .to_string();
    let pid: String = out
        .lines()
        .find_map(|l| l.split("(process ").nth(1))
        .unwrap()
        .trim_end_matches(").")
        .into();
    let _kill = Detached {
        url: url.clone(),
        pid: pid.parse().unwrap(),
        id: String::new(),
    };
    let err = fails(&["--url", &url, "list"]);
    assert!(
        err.contains("requires a token; pass --token or set WEIR_REST_TOKEN"),
        "{err}"
    );
    let err = fails(&["--url", &url, "--token", "wrong", "list"]);
    assert!(err.contains("refused the token"), "{err}");
    assert!(ok(&["--url", &url, "--token", "let-me-in", "list"]).contains("counting"));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
}

#[test]
fn a_local_job_serves_no_rest_api_unless_rest_port_is_set() {
    let run = |extra: &[&str]| {
        // A work directory each: a second run over the first would be refused.
        let work = tempfile::tempdir().unwrap();
        let output = Command::new(counting_job())
            .args(["--work-dir", work.path().to_str().unwrap()])
            .args(["--records", "2000", "--rate", "20000"])
            .args(extra)
            .env("RUST_LOG", "weir=info")
            .output()
            .unwrap();
        let (out, err) = text(&output);
        assert!(output.status.success(), "{out}\n{err}");
        err
    };
    let err = run(&[]);
    assert!(!err.contains("Weir dashboard and REST API"), "{err}");
    let err = run(&["-D", "rest.port=0"]);
    assert!(
        err.contains("Weir dashboard and REST API: http://127.0.0.1:"),
        "{err}"
    );
}

/// The committed lines of a counting job's output.
fn committed_lines(work: &Path) -> Vec<String> {
    let mut lines: Vec<String> = weir::connectors::file_sink::committed_files(work.join("output"))
        .unwrap()
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    lines.sort();
    lines
}

#[test]
fn a_second_fresh_run_is_refused_until_weir_reset_starts_the_job_over() {
    let work = tempfile::tempdir().unwrap();
    let job = || {
        let mut command = Command::new(counting_job());
        command
            .args(["--work-dir", work.path().to_str().unwrap()])
            .args(["--records", "500", "--rate", "50000"]);
        command
    };
    let first = job().output().unwrap();
    assert!(first.status.success(), "{:?}", text(&first));
    let once = committed_lines(work.path());
    assert_eq!(once.len(), 500, "one line per record");
    let job_dir = work.path().join("checkpoints").join("counting");
    let job_dir = job_dir.to_str().unwrap();
    let again = job().output().unwrap();
    let (_, err) = text(&again);
    assert!(!again.status.success(), "a second fresh run went ahead");
    assert!(
        err.contains("ran here before") && err.contains(&format!("weir reset {job_dir}")),
        "{err}"
    );
    assert_eq!(
        committed_lines(work.path()),
        once,
        "nothing committed twice"
    );
    let output = work.path().join("output");
    let said = ok(&["reset", job_dir, "--output", output.to_str().unwrap()]);
    assert!(said.contains("a run that finished"), "{said}");
    assert!(
        committed_lines(work.path()).is_empty(),
        "the old output is gone"
    );
    let third = job().output().unwrap();
    assert!(third.status.success(), "{:?}", text(&third));
    assert_eq!(
        committed_lines(work.path()),
        once,
        "exactly one run's output"
    );
    let err = fails(&["reset", &format!("{job_dir}-missing")]);
    assert!(err.contains("does not exist"), "{err}");
}

#[test]
fn weir_run_explains_what_a_binary_without_the_job_template_lacks() {
    let job = example("job_without_cluster_args");
    // Run directly, it is an ordinary job.
    let direct = Command::new(&job).output().unwrap();
    assert!(direct.status.success(), "{:?}", text(&direct));
    // Under `weir run`, whose settings it would ignore, it refuses and says what it lacks.
    let output = weir(&["run", "-D", "parallelism.default=2", job.to_str().unwrap()]);
    let (out, err) = text(&output);
    assert!(!output.status.success(), "{out}\n{err}");
    assert!(
        err.contains("started by `weir run`")
            && err.contains("does not apply them")
            && err.contains("flatten `weir_cluster::ClusterArgs`")
            && err.contains("weir_cluster::apply(&args.cluster, &env)"),
        "{err}"
    );
    assert!(
        err.contains("the job binary exited before it served its REST endpoint"),
        "{err}"
    );
}

/// A run with `--resume` continues from the savepoint a stop took, and says so; resuming the
/// finished job again does nothing, and says why.
#[test]
fn weir_run_resume_continues_from_the_savepoint_and_says_where_it_started() {
    let work = tempfile::tempdir().unwrap();
    let records = 20_000;
    let expected: Vec<String> = {
        let mut lines: Vec<String> = (0..records)
            .map(|i| format!("{},{}", i % 10, i / 10 + 1))
            .collect();
        lines.sort();
        lines
    };
    // The first run holds back the last 5 000 numbers of each split: it cannot finish before
    // the stop, however fast or slow the machine.
    let records_arg = records.to_string();
    let job = detached_with(
        work.path(),
        &[
            "--records",
            &records_arg,
            "--rate",
            "1000000",
            "--hold-last",
            "5000",
        ],
    );
    let url = job.url.as_str();
    await_output(
        &["--url", url, "checkpoints", "counting"],
        "a checkpoint",
        |o| o.contains("COMPLETED"),
    );
    let out = ok(&["--url", url, "stop", "--savepoint", "counting"]);
    let savepoint = out
        .split("stopped with savepoint ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("{out}"))
        .trim()
        .to_string();
    assert!(out.contains("weir run --resume"), "{out}");
    assert!(
        Path::new(&savepoint).is_absolute(),
        "an absolute path: {savepoint}"
    );
    let resumed = |what: &str| {
        let output = weir(&[
            "run",
            "--resume",
            counting_job().to_str().unwrap(),
            "--work-dir",
            work.path().to_str().unwrap(),
            "--records",
            &records.to_string(),
            "--rate",
            "1000000",
            // A `-D` of the binary's own: `weir run`'s settings (`--resume`, the REST port)
            // still apply.
            "-D",
            "execution.checkpointing.interval=100ms",
        ]);
        let (out, err) = text(&output);
        assert!(output.status.success(), "{what}: {out}\n{err}");
        out
    };
    let out = resumed("the resumed run");
    assert!(
        out.contains("Resumed from restore point") && out.contains(&format!("(`{savepoint}`)")),
        "the result says where the job started: {out}"
    );
    assert_eq!(
        committed_lines(work.path()),
        expected,
        "every count exactly once"
    );
    let out = resumed("resuming the finished job");
    assert!(out.contains("Nothing to do: "), "{out}");
    assert!(
        out.contains("already ran to the end of its input") && out.contains("weir reset"),
        "{out}"
    );
    assert_eq!(committed_lines(work.path()), expected, "nothing twice");
}
