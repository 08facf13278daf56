//! The dashboard in a real browser: headless Chromium (Debian's `chromium` package, or
//! `WEIR_CHROMIUM`) loads its pages while a job runs, and what they show is checked against
//! the REST API. Screenshots are kept in `target/tmp/dashboard-screenshots/`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use weir::prelude::*;
use weir_rest::{Dispatcher, LocalClusterInfo, RestConfig, RestServer};

fn chromium() -> String {
    let browser = std::env::var("WEIR_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let found = Command::new(&browser).arg("--version").output();
    assert!(
        found.as_ref().is_ok_and(|o| o.status.success()),
        "the dashboard test needs headless Chromium: `apt-get install chromium` (scripts/test.sh installs it) or set WEIR_CHROMIUM; `{browser} --version` gave {found:?}"
    );
    browser
}

fn browser_args(url: &str) -> Vec<String> {
    vec![
        "--headless=new".into(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-dev-shm-usage".into(),
        "--hide-scrollbars".into(),
        "--window-size=1400,1800".into(),
        // Time enough for the page's script to fetch from the API and draw.
        "--virtual-time-budget=4000".into(),
        url.into(),
    ]
}

/// The page at `url` after its script ran.
fn dom(browser: &str, url: &str) -> String {
    let mut args = browser_args(url);
    args.insert(args.len() - 1, "--dump-dom".into());
    let output = Command::new(browser)
        .args(&args)
        .output()
        .expect("chromium runs");
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn screenshot(browser: &str, url: &str, file: &Path) {
    let mut args = browser_args(url);
    args.insert(args.len() - 1, format!("--screenshot={}", file.display()));
    let output = Command::new(browser)
        .args(&args)
        .output()
        .expect("chromium runs");
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let png = std::fs::read(file).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} is a real picture",
        file.display()
    );
}

/// Every element marked `data-testid="<id>"`: its attributes and its text.
fn elements(dom: &str, id: &str) -> Vec<(Vec<(String, String)>, String)> {
    let marker = format!("data-testid=\"{id}\"");
    let mut found = Vec::new();
    let mut rest = dom;
    while let Some(at) = rest.find(&marker) {
        let start = rest[..at].rfind('<').unwrap_or(0);
        let end = at + rest[at..].find('>').unwrap_or(rest.len() - at);
        let tag = &rest[start..end];
        let mut attributes = Vec::new();
        for part in tag.split("\" ") {
            if let Some((k, v)) = part.trim().split_once("=\"") {
                let key = k.rsplit(' ').next().unwrap_or(k).to_string();
                attributes.push((key, v.trim_end_matches('"').to_string()));
            }
        }
        let text_end = rest[end..].find('<').map_or(rest.len(), |i| end + i);
        found.push((attributes, rest[end + 1..text_end].trim().to_string()));
        rest = &rest[end..];
    }
    found
}

fn attribute<'a>(element: &'a (Vec<(String, String)>, String), name: &str) -> &'a str {
    element
        .0
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} on {element:?}"))
}

fn get(base: &str, path: &str) -> Value {
    let mut response = ureq::get(format!("{base}{path}")).call().unwrap();
    serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap()
}

static FAILED_ONCE: AtomicBool = AtomicBool::new(false);

#[test]
fn the_dashboard_shows_what_the_rest_api_says() {
    let browser = chromium();
    let shots: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let dir = tempfile::tempdir().unwrap();

    // A running job that failed once and restarted, with checkpoints.
    let env = StreamExecutionEnvironment::new(
        ExecutionConfig::default()
            .with_parallelism(2)
            .with_metrics_update_interval(Duration::from_millis(200))
            .with_checkpointing(
                CheckpointConfig::default()
                    .with_interval(Duration::from_millis(150))
                    .with_storage(CheckpointStorageConfig::directory(dir.path())),
            )
            .with_restart_strategy(RestartStrategyConfig::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(50),
            }),
    )
    .unwrap();
    env.from_source(
        GeneratorSource::unbounded(|i| i).with_rate_limit(5_000.0),
        WatermarkStrategy::no_watermarks(),
        "clicks",
    )
    .map(|i: u64| {
        if i == 1_000 && !FAILED_ONCE.swap(true, Ordering::SeqCst) {
            panic!("a bad click at {i}");
        }
        i
    })
    .name("validate")
    .key_by(|i: &u64| i % 8)
    .reduce(|a: u64, b: u64| a.wrapping_add(b))
    .name("totals")
    .sink_to(DiscardingSink, "discard");
    let client = Arc::new(env.execute_async("clickstream").unwrap());
    let dispatcher = Arc::new(Dispatcher::new(Box::new(LocalClusterInfo)));
    dispatcher.register(client.clone());
    let server = RestServer::start(&RestConfig::default().with_port(0), dispatcher).unwrap();
    let base = server.url();
    let id = client.job_id();

    // Wait for the restart and a few checkpoints after it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let job = get(&base, &format!("/jobs/{id}"));
        let completed = get(&base, &format!("/jobs/{id}/checkpoints"))["counts"]["completed"]
            .as_u64()
            .unwrap_or(0);
        if job["num-restarts"] == 1 && job["state"] == "RUNNING" && completed >= 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the job did not restart and checkpoint: {job:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The job page, between two readings of the API.
    let before = get(&base, &format!("/jobs/{id}"));
    let before_checkpoints = get(&base, &format!("/jobs/{id}/checkpoints"));
    let page = dom(&browser, &format!("{base}/#/jobs/{id}"));
    let after = get(&base, &format!("/jobs/{id}"));
    let after_checkpoints = get(&base, &format!("/jobs/{id}/checkpoints"));

    let title = elements(&page, "job-title");
    assert_eq!(title.len(), 1, "{page}");
    assert!(title[0].1.starts_with("clickstream"), "{title:?}");
    assert_eq!(elements(&page, "job-state")[0].1, "RUNNING");
    assert_eq!(elements(&page, "restarts")[0].1, "1");
    // It keeps redrawing from the API while it is shown (each second; the browser's
    // virtual time budget lets four go by).
    let connection = elements(&page, "connection");
    let refreshes: u32 = attribute(&connection[0], "data-refreshes")
        .parse()
        .unwrap_or(0);
    assert!(
        refreshes >= 2,
        "the page redrew {refreshes} times: {connection:?}"
    );

    let vertices = elements(&page, "vertex");
    let api_vertices = after["vertices"].as_array().unwrap();
    assert_eq!(vertices.len(), api_vertices.len(), "one box per vertex");
    for (shown, api) in vertices.iter().zip(api_vertices) {
        assert_eq!(
            attribute(shown, "data-vertex-id"),
            api["id"].as_str().unwrap()
        );
        assert_eq!(
            attribute(shown, "data-parallelism"),
            api["parallelism"].to_string()
        );
        let index = api["id"].as_str().unwrap().parse::<usize>().unwrap();
        let shown_in: u64 = attribute(shown, "data-records-in").parse().unwrap();
        let low = before["vertices"][index]["metrics"]["read-records"]
            .as_u64()
            .unwrap();
        let high = api["metrics"]["read-records"].as_u64().unwrap();
        assert!(
            (low..=high).contains(&shown_in),
            "vertex {index} shows {shown_in} records in, the API said {low} then {high}"
        );
        assert!(["OK", "LOW", "HIGH"].contains(&attribute(shown, "data-backpressure")));
    }
    let completed: u64 = elements(&page, "checkpoints-completed")[0]
        .1
        .parse()
        .unwrap();
    let (low, high) = (
        before_checkpoints["counts"]["completed"].as_u64().unwrap(),
        after_checkpoints["counts"]["completed"].as_u64().unwrap(),
    );
    assert!(
        (low..=high).contains(&completed),
        "{completed} checkpoints shown, the API said {low} then {high}"
    );
    let rows = elements(&page, "checkpoint-row");
    assert!(
        !rows.is_empty()
            && rows.len()
                <= after_checkpoints["history"]
                    .as_array()
                    .unwrap()
                    .len()
                    .max(rows.len())
    );
    assert!(rows
        .iter()
        .all(|r| attribute(r, "data-status") == "COMPLETED"
            || attribute(r, "data-status") == "FAILED"));
    assert_eq!(elements(&page, "checkpoint-chart").len(), 1);
    assert_eq!(elements(&page, "throughput-chart").len(), 1);
    assert_eq!(elements(&page, "watermark-row").len(), api_vertices.len());
    let exceptions = elements(&page, "exception");
    assert_eq!(exceptions.len(), 1, "{page}");
    assert!(
        page.contains("a bad click at 1000"),
        "the exception names the failure: {page}"
    );
    screenshot(
        &browser,
        &format!("{base}/#/jobs/{id}"),
        &shots.join("job.png"),
    );

    // The job list and the TaskManagers.
    let list = dom(&browser, &format!("{base}/#/"));
    let rows = elements(&list, "job-row");
    assert_eq!(rows.len(), 1);
    assert_eq!(attribute(&rows[0], "data-job-id"), id);
    assert_eq!(elements(&list, "job-state")[0].1, "RUNNING");
    assert_eq!(elements(&list, "jobs-running")[0].1, "1");
    assert_eq!(elements(&list, "taskmanager-count")[0].1, "1");
    screenshot(&browser, &format!("{base}/#/"), &shots.join("jobs.png"));
    let tms = dom(&browser, &format!("{base}/#/taskmanagers"));
    assert_eq!(elements(&tms, "taskmanager-row").len(), 1);
    assert!(tms.contains("local"));
    screenshot(
        &browser,
        &format!("{base}/#/taskmanagers"),
        &shots.join("taskmanagers.png"),
    );

    // Once cancelled, the page says so.
    client.cancel().unwrap();
    let page = dom(&browser, &format!("{base}/#/jobs/{id}"));
    assert_eq!(elements(&page, "job-state")[0].1, "CANCELED");
    server.stop();
}
