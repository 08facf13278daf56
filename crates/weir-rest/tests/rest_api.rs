//! The REST API's contract, against real running jobs: every route answers in Flink's
//! shape with values that agree with the job, savepoints and stops work end to end, the
//! token is enforced, and HTTPS serves with a real certificate.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use weir::prelude::*;
use weir_rest::{Dispatcher, LocalClusterInfo, RestConfig, RestServer};

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

struct Api {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

impl Api {
    fn new(server: &RestServer) -> Self {
        Self {
            agent: agent(),
            base: server.url(),
            token: None,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, String) {
        let url = format!("{}{path}", self.base);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let result = match method {
            "GET" => {
                let mut r = self.agent.get(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            "POST" => {
                let mut r = self.agent.post(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                match body {
                    Some(body) => r.send_json(body),
                    None => r.send_empty(),
                }
            }
            "PATCH" => {
                let mut r = self.agent.patch(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.send_empty()
            }
            other => panic!("no method {other}"),
        };
        let mut response = result.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        (status, text)
    }

    fn get(&self, path: &str) -> Value {
        let (status, text) = self.call("GET", path, None);
        assert_eq!(status, 200, "GET {path}: {text}");
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("GET {path} is not JSON ({e}): {text}"))
    }

    fn await_json(&self, path: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let value = self.get(path);
            if check(&value) {
                return value;
            }
            if Instant::now() >= deadline {
                let id = path.split('/').nth(2).unwrap_or("");
                let exceptions = self.get(&format!("/jobs/{id}/exceptions"));
                panic!("timed out waiting for {what}: {value:#}\nexceptions: {exceptions:#}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn serve(clients: &[Arc<JobClient>], config: RestConfig) -> RestServer {
    let dispatcher = Arc::new(Dispatcher::new(Box::new(LocalClusterInfo)));
    for client in clients {
        dispatcher.register(client.clone());
    }
    RestServer::start(&config.with_port(0), dispatcher).unwrap()
}

/// An endless keyed job at parallelism 2 with checkpoints to `dir`.
fn endless_job(dir: &std::path::Path, name: &str) -> Arc<JobClient> {
    let env = StreamExecutionEnvironment::new(
        ExecutionConfig::default()
            .with_parallelism(2)
            .with_metrics_update_interval(Duration::from_millis(100))
            .with_checkpointing(
                CheckpointConfig::default()
                    .with_interval(Duration::from_millis(100))
                    .with_storage(CheckpointStorageConfig::directory(dir)),
            ),
    )
    .unwrap();
    env.from_source(
        GeneratorSource::unbounded(|i| i).with_rate_limit(20_000.0),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .key_by(|i: &u64| i % 16)
    .reduce(|a: u64, b: u64| a.wrapping_add(b))
    .name("sums")
    .sink_to(DiscardingSink, "discard");
    Arc::new(env.execute_async(name).unwrap())
}

#[test]
fn every_route_answers_in_flinks_shape_against_a_running_job() {
    let dir = tempfile::tempdir().unwrap();
    let client = endless_job(&dir.path().join("a"), "rest contract");
    let other = endless_job(&dir.path().join("b"), "to cancel");
    let server = serve(&[client.clone(), other.clone()], RestConfig::default());
    assert!(
        server.address().ip().is_loopback(),
        "binds to loopback by default"
    );
    let api = Api::new(&server);
    let id = client.job_id();

    let jobs = api.get("/jobs");
    let ids: Vec<&str> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![id.as_str(), other.job_id().as_str()]);

    // Wait until the job has run a while: records counted, checkpoints completed.
    let job = api.await_json(&format!("/jobs/{id}"), "records and a running state", |j| {
        j["state"] == "RUNNING"
            && j["vertices"]
                .as_array()
                .unwrap()
                .iter()
                .all(|v| v["metrics"]["read-records"].as_u64().unwrap_or(0) > 1000)
    });
    assert_eq!(job["jid"], id.as_str());
    assert_eq!(job["name"], "rest contract");
    assert_eq!(job["end-time"], -1);
    let vertices = job["vertices"].as_array().unwrap();
    assert_eq!(vertices.len(), 2, "source, then the keyed chain: {job:#}");
    assert!(vertices
        .iter()
        .all(|v| v["parallelism"] == 2 && v["status"] == "RUNNING"));
    assert_eq!(
        vertices[1]["operators"],
        serde_json::json!(["sums", "Sink: discard"])
    );
    assert!(["OK", "LOW", "HIGH"].contains(&vertices[0]["backpressure-level"].as_str().unwrap()));

    let overview = api.get("/overview");
    assert_eq!(overview["jobs-running"], 2);
    assert_eq!(overview["taskmanagers"], 1);
    let summary = api.get("/jobs/overview");
    assert_eq!(summary["jobs"][0]["tasks"]["total"], 4);

    let plan = api.get(&format!("/jobs/{id}/plan"));
    for layer in ["stream_graph", "job_graph", "execution_graph", "physical"] {
        assert!(
            plan["plan"].get(layer).is_some(),
            "the plan has its {layer}: {plan:#}"
        );
    }

    // A vertex's subtasks add up to the vertex.
    let vertex = api.get(&format!("/jobs/{id}/vertices/1"));
    let subtasks = vertex["subtasks"].as_array().unwrap();
    assert_eq!(subtasks.len(), 2);
    assert!(subtasks
        .iter()
        .all(|s| s["taskmanager-id"] == "local" && s["operators"].as_array().unwrap().len() == 2));
    // Each chained operator has its own rates: the keyed sums and the sink after them see
    // the same records.
    let vertex = api.await_json(
        &format!("/jobs/{id}/vertices/1"),
        "per-operator rates",
        |v| {
            v["subtasks"].as_array().unwrap().iter().all(|s| {
                s["operators"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|o| o["read-records-per-second"].as_f64().unwrap_or(0.0) > 0.0)
            })
        },
    );
    let sums = &vertex["subtasks"][0]["operators"][0];
    assert!(
        sums["write-records-per-second"].as_f64().unwrap() > 0.0,
        "{vertex:#}"
    );
    let back = api.get(&format!("/jobs/{id}/vertices/0/backpressure"));
    assert_eq!(back["subtasks"].as_array().unwrap().len(), 2);
    let (status, missing) = api.call("GET", &format!("/jobs/{id}/vertices/9"), None);
    assert_eq!(status, 404);
    assert!(missing.contains("no vertex `9`"), "{missing}");

    let checkpoints = api.await_json(
        &format!("/jobs/{id}/checkpoints"),
        "two completed checkpoints",
        |c| c["counts"]["completed"].as_u64().unwrap_or(0) >= 2,
    );
    let latest = &checkpoints["latest"]["completed"];
    assert_eq!(latest["status"], "COMPLETED");
    assert_eq!(latest["num_acknowledged_subtasks"], 4);
    let detail = api.get(&format!("/jobs/{id}/checkpoints/details/{}", latest["id"]));
    assert_eq!(detail["subtasks"].as_array().unwrap().len(), 4);
    assert_eq!(
        api.call(
            "GET",
            &format!("/jobs/{id}/checkpoints/details/999999"),
            None
        )
        .0,
        404
    );

    // Flink's savepoint options: a target directory is refused, naming it, and so is a
    // field Flink does not have; nothing is triggered.
    let (status, refused) = api.call(
        "POST",
        &format!("/jobs/{id}/savepoints"),
        Some(serde_json::json!({"target-directory": "/elsewhere", "cancel-job": false})),
    );
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused.contains("`target-directory` (`/elsewhere`) is not supported")
            && refused.contains("state.checkpoints.dir"),
        "{refused}"
    );
    let (status, refused) = api.call(
        "POST",
        &format!("/jobs/{id}/savepoints"),
        Some(serde_json::json!({"cancel_job": true})),
    );
    assert_eq!(status, 400, "{refused}");
    assert!(refused.contains("unknown field `cancel_job`"), "{refused}");
    // A savepoint, asynchronously: a request id at once, its location once completed.
    let (status, trigger) = api.call(
        "POST",
        &format!("/jobs/{id}/savepoints"),
        Some(serde_json::json!({"target-directory": null, "cancel-job": false, "formatType": "CANONICAL"})),
    );
    assert_eq!(status, 202, "{trigger}");
    let request: Value = serde_json::from_str(&trigger).unwrap();
    let request = request["request-id"].as_str().unwrap().to_string();
    let done = api.await_json(
        &format!("/jobs/{id}/savepoints/{request}"),
        "the savepoint",
        |o| o["status"]["id"] == "COMPLETED",
    );
    let location = done["operation"]["location"]
        .as_str()
        .unwrap_or_else(|| panic!("a location: {done:#}"));
    assert!(
        std::path::Path::new(location).exists(),
        "the savepoint is on disk at {location}"
    );

    let metrics = {
        let (status, text) = api.call("GET", "/metrics", None);
        assert_eq!(status, 200);
        text
    };
    assert!(
        metrics.contains(&format!(
            "weir_task_numRecordsIn_total{{job_id=\"{id}\",job_name=\"rest contract\",task_name="
        )),
        "{metrics}"
    );
    assert_eq!(
        metrics
            .matches("# TYPE weir_task_numRecordsIn counter")
            .count(),
        1,
        "one family for both jobs"
    );
    assert!(
        metrics.contains("weir_job_numberOfCompletedCheckpoints_total{"),
        "{metrics}"
    );
    assert!(metrics.ends_with("# EOF\n"));

    let openapi = api.get("/openapi.json");
    for path in [
        "/jobs/{job_id}",
        "/jobs/{job_id}/savepoints",
        "/metrics",
        "/jobs/{job_id}/checkpoints/details/{checkpoint_id}",
    ] {
        assert!(
            openapi["paths"].get(path).is_some(),
            "the OpenAPI description has {path}"
        );
    }
    assert!(openapi["components"]["schemas"]
        .get("JobDetailsInfo")
        .is_some());

    assert_eq!(
        api.get("/taskmanagers")["taskmanagers"][0]["slotsNumber"],
        4
    );
    let (status, unknown) = api.call("GET", "/jobs/0123", None);
    assert_eq!(status, 404);
    assert!(unknown.contains("no job with id `0123`"), "{unknown}");

    // Cancel one job, stop the other with a savepoint.
    assert_eq!(
        api.call(
            "PATCH",
            &format!("/jobs/{}?mode=cancel", other.job_id()),
            None
        )
        .0,
        202
    );
    assert_eq!(other.wait().unwrap().status, JobStatus::Cancelled);
    let cancelled = api.get(&format!("/jobs/{}", other.job_id()));
    assert_eq!(cancelled["state"], "CANCELED");
    assert!(cancelled["end-time"].as_i64().unwrap() > 0);
    assert_eq!(
        api.call(
            "PATCH",
            &format!("/jobs/{}?mode=cancel", other.job_id()),
            None
        )
        .0,
        409
    );

    // Flink's cancel with savepoint: the job ends once the savepoint is complete, as a
    // stop (its sinks commit the savepoint's output). `POST /stop` is the same without it.
    let (status, stop) = api.call(
        "POST",
        &format!("/jobs/{id}/savepoints"),
        Some(serde_json::json!({"cancel-job": true})),
    );
    assert_eq!(status, 202, "{stop}");
    let stop: Value = serde_json::from_str(&stop).unwrap();
    let done = api.await_json(
        &format!(
            "/jobs/{id}/savepoints/{}",
            stop["request-id"].as_str().unwrap()
        ),
        "the stop",
        |o| o["status"]["id"] == "COMPLETED",
    );
    assert!(done["operation"]["location"].is_string(), "{done:#}");
    assert_eq!(client.wait().unwrap().status, JobStatus::Stopped);
    let stopped = api.get(&format!("/jobs/{id}"));
    assert_eq!(stopped["state"], "FINISHED");
    assert_eq!(api.get("/overview")["jobs-running"], 0);
    server.stop();
}

/// What the process logs, kept for the test to read.
#[derive(Clone, Default)]
struct CapturedLogs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLogs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_request_without_the_token_is_refused() {
    let logs = CapturedLogs::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .init();
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap();
    env.generate(10, |i| i).sink_to(DiscardingSink, "discard");
    let client = Arc::new(env.execute_async("guarded").unwrap());
    client.wait().unwrap();
    let server = serve(
        std::slice::from_ref(&client),
        RestConfig::default().with_token("s3cret-token"),
    );
    let mut api = Api::new(&server);
    assert_eq!(
        api.call("GET", "/", None).0,
        200,
        "the dashboard's page holds no data"
    );
    for path in ["/jobs", "/metrics", "/openapi.json"] {
        let (status, body) = api.call("GET", path, None);
        assert_eq!(status, 401, "GET {path} without a token: {body}");
        assert!(body.contains("rest.authentication.token"), "{body}");
    }
    let (status, _) = api.call("PATCH", &format!("/jobs/{}", client.job_id()), None);
    assert_eq!(status, 401);
    api.token = Some("s3cret-tokeN".into());
    assert_eq!(api.call("GET", "/jobs", None).0, 401);
    api.token = Some("s3cret-token".into());
    assert_eq!(api.get("/jobs")["jobs"][0]["status"], "FINISHED");
    // Every refusal is logged, with what was asked and why; the token never is.
    let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert_eq!(
        logged.matches("REST request refused").count(),
        5,
        "{logged}"
    );
    assert!(
        logged.contains("path=/metrics") && logged.contains("reason=\"no token\""),
        "{logged}"
    );
    assert!(logged.contains("reason=\"wrong token\""), "{logged}");
    assert!(!logged.contains("s3cret"), "{logged}");
}

#[test]
fn https_serves_with_the_configured_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
    let (cert_path, key_path) = (dir.path().join("rest.crt"), dir.path().join("rest.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();

    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap();
    env.generate(10, |i| i).sink_to(DiscardingSink, "discard");
    let client = Arc::new(env.execute_async("encrypted").unwrap());
    client.wait().unwrap();
    let server = serve(
        &[client],
        RestConfig::default().with_tls(&cert_path, &key_path),
    );
    assert!(server.url().starts_with("https://"));

    let trusting: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(Arc::new(vec![
                    ureq::tls::Certificate::from_der(cert.der()).to_owned(),
                ])))
                .build(),
        )
        .build()
        .into();
    let url = format!("https://localhost:{}/jobs", server.address().port());
    let body = trusting
        .get(&url)
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(body.contains("FINISHED"), "{body}");
    // A client that does not trust the certificate cannot talk to it.
    assert!(agent().get(&url).call().is_err());

    // A key file that is not one is refused at start, naming the file and the key.
    std::fs::write(&key_path, "not a key").unwrap();
    let dispatcher = Arc::new(Dispatcher::new(Box::new(LocalClusterInfo)));
    let error = RestServer::start(
        &RestConfig::default()
            .with_port(0)
            .with_tls(&cert_path, &key_path),
        dispatcher,
    )
    .unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("rest.key") && message.contains("security.ssl.rest.key-file"),
        "{message}"
    );
}
