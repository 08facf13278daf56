//! The operating surface of a real cluster: a JobManager and a TaskManager of the
//! `counting_job` example, with mutual TLS between them. The JobManager's REST API lists
//! the TaskManager and the per-subtask metrics it sends; a TaskManager whose certificate is
//! not signed by the cluster's CA cannot register; `weir` drives the job over the API.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_testkit::local_cluster::LocalCluster;

fn counting_job() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples")
        .join("counting_job")
}

/// A CA, and a certificate and key it signed for 127.0.0.1, written as PEM files.
struct Pki {
    ca: rcgen::Certificate,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Pki {
    fn new(name: &str) -> Self {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let ca = params.self_signed(&key).unwrap();
        Self {
            ca,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// Writes `<stem>.crt`, `<stem>.key` and `<stem>-ca.crt` into `dir`.
    fn node(&self, dir: &Path, stem: &str) -> [String; 3] {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let files = [
            dir.join(format!("{stem}.crt")),
            dir.join(format!("{stem}.key")),
            dir.join(format!("{stem}-ca.crt")),
        ];
        std::fs::write(&files[0], cert.pem()).unwrap();
        std::fs::write(&files[1], key.serialize_pem()).unwrap();
        std::fs::write(&files[2], self.ca.pem()).unwrap();
        files.map(|f| f.to_str().unwrap().to_string())
    }
}

fn tls_args(files: &[String; 3]) -> Vec<String> {
    [
        "security.ssl.internal.enabled=true".to_string(),
        format!("security.ssl.internal.cert-file={}", files[0]),
        format!("security.ssl.internal.key-file={}", files[1]),
        format!("security.ssl.internal.trust-cert-file={}", files[2]),
    ]
    .into_iter()
    .flat_map(|a| ["-D".to_string(), a])
    .collect()
}

fn get(url: &str) -> Value {
    let mut response = ureq::get(url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap()
}

fn await_json(
    url: &str,
    what: &str,
    cluster: &LocalCluster,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let value = get(url);
        if check(&value) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {value:#}\n{}",
            cluster.all_logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_mutual_tls_cluster_serves_its_rest_api_and_refuses_a_foreign_taskmanager() {
    let work = tempfile::tempdir().unwrap();
    let pki = Pki::new("weir cluster CA");
    let node = pki.node(work.path(), "node");
    let rogue = Pki::new("someone else's CA").node(work.path(), "rogue");
    let job_dir = work.path().join("job");
    let job_args = [
        "--work-dir",
        job_dir.to_str().unwrap(),
        "--records",
        "400000",
        "--rate",
        "20000",
    ];
    let tls: Vec<String> = tls_args(&node);
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let mut cluster = LocalCluster::new(counting_job(), &job_args, &work.path().join("logs"))
        .with_cluster_args(&tls);
    cluster.start_jobmanager();
    let url = cluster
        .rest_url(Duration::from_secs(300))
        .unwrap_or_else(|| {
            panic!(
                "the JobManager serves its REST API:\n{}",
                cluster.all_logs()
            )
        });

    // A TaskManager with a certificate of another CA is refused at the handshake.
    let rogue_args: Vec<String> = tls_args(&rogue);
    let rogue_args: Vec<&str> = rogue_args.iter().map(String::as_str).collect();
    cluster.start_taskmanager_with("rogue", 2, &rogue_args);
    let deadline = Instant::now() + Duration::from_secs(300);
    while !cluster
        .log("rogue-1.err")
        .contains("no session with the JobManager")
    {
        assert!(
            Instant::now() < deadline,
            "the rogue TaskManager keeps trying:\n{}",
            cluster.all_logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    let rogue_log = cluster.log("rogue-1.err");
    assert!(
        !rogue_log.contains("registered with the JobManager"),
        "{rogue_log}"
    );
    assert!(get(&format!("{url}/taskmanagers"))["taskmanagers"]
        .as_array()
        .unwrap()
        .is_empty());
    cluster.kill_taskmanager("rogue");

    cluster.start_taskmanager("tm-1", 1);
    cluster.start_taskmanager("tm-2", 1);
    let tms = await_json(
        &format!("{url}/taskmanagers"),
        "two TaskManagers to register",
        &cluster,
        |t| t["taskmanagers"].as_array().is_some_and(|a| a.len() == 2),
    );
    let mut ids: Vec<&str> = tms["taskmanagers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["tm-1", "tm-2"]);
    assert_eq!(tms["taskmanagers"][0]["slotsNumber"], 1);
    assert_eq!(get(&format!("{url}/overview"))["slots-total"], 2);

    // Metrics come from the TaskManagers, labelled with them; records cross between them,
    // so bytes are counted on both ends of the network.
    let jobs = await_json(&format!("{url}/jobs"), "the job", &cluster, |j| {
        j["jobs"].as_array().is_some_and(|a| !a.is_empty())
    });
    let id = jobs["jobs"][0]["id"].as_str().unwrap().to_string();
    let vertex = await_json(
        &format!("{url}/jobs/{id}/vertices/0"),
        "records read on both TaskManagers",
        &cluster,
        |v| {
            v["subtasks"].as_array().is_some_and(|s| {
                s.len() == 2
                    && s.iter()
                        .all(|s| s["metrics"]["read-records"].as_u64().unwrap_or(0) > 0)
            })
        },
    );
    let mut hosts: Vec<&str> = vertex["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["taskmanager-id"].as_str().unwrap())
        .collect();
    hosts.sort_unstable();
    assert_eq!(hosts, ["tm-1", "tm-2"], "{vertex:#}");
    assert!(vertex["subtasks"][0]["status"] == "RUNNING", "{vertex:#}");
    let job = await_json(
        &format!("{url}/jobs/{id}"),
        "bytes over the network",
        &cluster,
        |j| {
            j["vertices"][0]["metrics"]["write-bytes"]
                .as_u64()
                .unwrap_or(0)
                > 0
                && j["vertices"][1]["metrics"]["read-bytes"]
                    .as_u64()
                    .unwrap_or(0)
                    > 0
        },
    );
    assert!(
        job["vertices"][0]["metrics"]["read-bytes"] == 0,
        "a source receives no bytes: {job:#}"
    );
    let metrics = ureq::get(format!("{url}/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(
        metrics.contains("tm_id=\"tm-1\"") && metrics.contains("tm_id=\"tm-2\""),
        "{metrics}"
    );

    // `weir` takes a savepoint of the cluster's job and stops it.
    let weir = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("--url")
            .arg(&url)
            .args(args)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "weir {args:?}: {out}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        out
    };
    assert!(weir(&["list"]).contains("RUNNING"));
    assert!(weir(&["savepoint", &id]).contains("Savepoint completed: "));
    assert!(weir(&["stop", "--savepoint", &id]).contains("stopped with savepoint"));
    let (status, out) = cluster.wait_jobmanager(Duration::from_secs(60));
    assert!(status.success(), "{out}\n{}", cluster.all_logs());
    assert!(out.contains("Stopped"), "{out}");
}

#[test]
fn weir_run_as_jobmanager_runs_the_job_on_taskmanagers_that_join_it() {
    let work = tempfile::tempdir().unwrap();
    let job_dir = work.path().join("job");
    let logs = work.path().join("logs");
    let job_args = [
        "--work-dir",
        job_dir.to_str().unwrap(),
        "--records",
        "20000",
        "--rate",
        "10000",
    ];
    // The cluster's TaskManagers; its JobManager is the process `weir run` starts.
    let mut cluster = LocalCluster::new(counting_job(), &job_args, &logs);
    let out = std::fs::File::create(work.path().join("weir.out")).unwrap();
    let err = std::fs::File::create(work.path().join("weir.err")).unwrap();
    let mut weir = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "--jobmanager"])
        .arg(counting_job())
        .args(job_args)
        .args([
            "--jobmanager-address",
            &cluster.jobmanager_address,
            "--heartbeat-interval-ms",
            "200",
            "--heartbeat-timeout-ms",
            "2000",
        ])
        .env("NO_COLOR", "1")
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap();
    let read = |name: &str| std::fs::read_to_string(work.path().join(name)).unwrap_or_default();
    // Nothing runs before a TaskManager offers slots: `weir run` waits, following the job.
    let deadline = Instant::now() + Duration::from_secs(300);
    while !read("weir.err").contains("Following the job at http://127.0.0.1:") {
        assert!(
            Instant::now() < deadline && weir.try_wait().unwrap().is_none(),
            "weir run never followed the job:\n{}",
            read("weir.err")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    cluster.start_taskmanager("tm-1", 1);
    cluster.start_taskmanager("tm-2", 1);
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = weir.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = weir.kill();
            panic!(
                "the job did not end:\n{}\n{}",
                read("weir.err"),
                cluster.all_logs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (out, err) = (read("weir.out"), read("weir.err"));
    assert!(status.success(), "{out}\n{err}\n{}", cluster.all_logs());
    assert!(out.contains("Job `counting` Finished"), "{out}\n{err}");
    assert!(err.contains("(counting) ended after"), "{err}");
    // The TaskManagers ran it: both took part, and the counts add up to every record.
    for tm in ["tm-1-1.err", "tm-2-1.err"] {
        assert!(
            cluster.log(tm).contains("registered with the JobManager"),
            "{tm}: {}",
            cluster.all_logs()
        );
    }
    let mut total = 0;
    let mut last = std::collections::BTreeMap::new();
    for entry in walk(&job_dir.join("output")) {
        for line in std::fs::read_to_string(&entry).unwrap().lines() {
            let (key, count) = line.split_once(',').unwrap();
            let count: u64 = count.parse().unwrap();
            let seen = last.entry(key.to_string()).or_insert(0);
            *seen = (*seen).max(count);
        }
    }
    for count in last.values() {
        total += count;
    }
    assert_eq!(last.len(), 10, "{last:?}");
    assert_eq!(total, 20_000, "{last:?}");
}

/// Every committed file under `dir`, recursively.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else if !entry.file_name().to_string_lossy().starts_with('.') {
            // Hidden: in-progress and pending parts, not committed output.
            files.push(path);
        }
    }
    files
}
