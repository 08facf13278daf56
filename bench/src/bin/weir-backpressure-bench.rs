//! Checkpoints under backpressure, aligned against unaligned, Weir against Flink: a keyed
//! `SUM/COUNT GROUP BY key` whose output goes through a throttled stage chained after the
//! aggregation (so many rows per second per subtask), fed by a source far faster than the
//! throttle, so that the exchange into the aggregation stays full. An aligned checkpoint's
//! barriers wait behind everything queued; unaligned ones overtake it and store it. Each
//! engine runs for `--seconds`; the checkpoints completed after a warm-up are measured
//! (end-to-end duration, bytes of in-flight records stored), with the aggregation's input
//! rate. `flink-aligned` and `flink-unaligned` run the same job on Flink
//! (bench/flink/flink_backpressure_job.py) in the same run.
//!
//! `cargo run --release -p weir-bench --bin weir-backpressure-bench` prints one line per
//! engine; `--json` writes the figures. See bench/README.md.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde::{Deserialize, Serialize};
use weir::checkpoint::stats::CheckpointStatus;
use weir::connectors::discard::DiscardingSink;
use weir::prelude::*;
use weir_bench::flink::FlinkRunner;
use weir_bench::weir_jobs::SumAndCount;

#[derive(Parser, Debug)]
#[command(about = "Checkpoints under backpressure: aligned against unaligned, Weir against Flink")]
struct Args {
    /// Engines: weir-aligned, weir-unaligned, flink-aligned, flink-unaligned.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "weir-aligned,weir-unaligned,flink-aligned,flink-unaligned"
    )]
    engines: Vec<String>,
    /// How long each engine runs.
    #[arg(long, default_value_t = 30.0)]
    seconds: f64,
    /// Checkpoints triggered in the first seconds are not measured (the JVM's warm-up, and
    /// the queues filling).
    #[arg(long, default_value_t = 5.0)]
    warmup_seconds: f64,
    /// Rows per second per subtask through the throttle.
    #[arg(long, default_value_t = 2000)]
    rate: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 1000)]
    keys: u64,
    /// Parallelism.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Checkpoint interval, ms.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Scratch directory (emptied per run).
    #[arg(long, default_value = "target/backpressure-bench")]
    dir: PathBuf,
    /// The PyFlink virtual environment (installed by bench/flink/install.sh if missing).
    #[arg(long, default_value = "target/tools/flink/venv")]
    flink_venv: PathBuf,
    /// Where to write the figures as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One completed checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Checkpoint {
    id: u64,
    duration_ms: f64,
    persisted_bytes: u64,
    unaligned: bool,
    /// When it was triggered, ms since the Unix epoch.
    trigger_ms: u64,
}

/// What one engine's run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Figures {
    engine: String,
    seconds: f64,
    /// When the job started, ms since the Unix epoch.
    started_ms: u64,
    /// Rows the aggregation took in.
    records_in: u64,
    checkpoints: Vec<Checkpoint>,
}

/// Lets at most `per_second` rows through per subtask: a deadline per row, a sleep when
/// ahead by more than a millisecond (the same pacing as the Flink side's `Throttle`).
#[derive(Clone)]
struct Throttle {
    per_second: u64,
    next: Option<Instant>,
    passed: Arc<AtomicU64>,
}

impl ProcessFunction<(i64, (i64, i64)), (i64, (i64, i64))> for Throttle {
    fn process_element(
        &mut self,
        value: (i64, (i64, i64)),
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_, (i64, (i64, i64))>,
    ) -> Result<(), BoxError> {
        let now = Instant::now();
        let next = self.next.get_or_insert(now);
        *next += Duration::from_nanos(1_000_000_000 / self.per_second.max(1));
        if let Some(ahead) = next.checked_duration_since(now) {
            if ahead > Duration::from_millis(1) {
                std::thread::sleep(ahead);
            }
        }
        self.passed.fetch_add(1, Ordering::Relaxed);
        out.collect(value);
        Ok(())
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn run_weir(args: &Args, unaligned: bool) -> Result<Figures> {
    let engine = if unaligned {
        "weir-unaligned"
    } else {
        "weir-aligned"
    };
    let work = args.dir.join(engine);
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    let config = ExecutionConfig::default()
        .with_parallelism(args.parallelism)
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_millis(args.interval_ms))
                .with_timeout(Duration::from_secs(600))
                .with_unaligned(unaligned)
                .with_retained(1)
                .with_storage(CheckpointStorageConfig::FileSystem(
                    work.join("checkpoints"),
                )),
        );
    let env = StreamExecutionEnvironment::new(config)?;
    let passed = Arc::new(AtomicU64::new(0));
    let keys = args.keys.max(1) as i64;
    env.from_source(
        GeneratorSource::unbounded(move |i| ((i as i64).wrapping_mul(7919) % keys, 1i64)),
        WatermarkStrategy::no_watermarks(),
        "source",
    )
    .key_by(|(key, _): &(i64, i64)| *key)
    .aggregate(SumAndCount)
    .process(Throttle {
        per_second: args.rate,
        next: None,
        passed: passed.clone(),
    })
    .name("throttle")
    .sink_to(DiscardingSink, "discard");
    let started_ms = now_ms();
    let started = Instant::now();
    let client = env.execute_async("backpressure bench")?;
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let seconds = started.elapsed().as_secs_f64();
    let records_in = passed.load(Ordering::Relaxed);
    let history = client.details().checkpoints.clone();
    client.cancel()?;
    let checkpoints = history
        .recent
        .iter()
        .filter(|c| c.status == CheckpointStatus::Completed)
        .map(|c| Checkpoint {
            id: c.id,
            duration_ms: c.duration.map_or(0.0, |d| d.as_secs_f64() * 1e3),
            persisted_bytes: c.persisted_data(),
            unaligned: c.is_unaligned(),
            trigger_ms: c.trigger_timestamp_millis,
        })
        .collect();
    let _ = std::fs::remove_dir_all(&work);
    Ok(Figures {
        engine: engine.into(),
        seconds,
        started_ms,
        records_in,
        checkpoints,
    })
}

/// Compiles the Flink side's throttle into a jar (again when the source is newer).
fn throttle_jar(args: &Args, bench_dir: &Path, flink: &FlinkRunner) -> Result<PathBuf> {
    let jar = args.dir.join("throttle.jar");
    let source = bench_dir.join("flink/java/weir/bench/Throttle.java");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if modified(&jar).is_some_and(|j| modified(&source).is_some_and(|s| j >= s)) {
        return Ok(jar);
    }
    let lib = flink
        .python
        .parent()
        .and_then(Path::parent)
        .context("the Flink venv's root")?;
    let jars: Vec<PathBuf> = glob_jars(lib)?;
    if jars.is_empty() {
        bail!("no Flink jars under {}", lib.display());
    }
    let classpath = jars
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let classes = args.dir.join("throttle-classes");
    std::fs::create_dir_all(&classes)?;
    let installer = bench_dir.join("flink/install.sh");
    let status = std::process::Command::new(&installer)
        .arg("--jdk")
        .stdout(std::process::Stdio::null())
        .status()
        .with_context(|| format!("running {} --jdk", installer.display()))?;
    if !status.success() {
        bail!(
            "{} --jdk failed: the Java throttle needs javac",
            installer.display()
        );
    }
    let status = std::process::Command::new("javac")
        .args(["-cp", &classpath, "-d"])
        .arg(&classes)
        .arg(&source)
        .status()
        .context("running javac")?;
    if !status.success() {
        bail!("javac failed on bench/flink/java/weir/bench/Throttle.java");
    }
    let status = std::process::Command::new("jar")
        .arg("cf")
        .arg(&jar)
        .arg("-C")
        .arg(&classes)
        .arg(".")
        .status()
        .context("running jar")?;
    if !status.success() {
        bail!("jar failed");
    }
    Ok(jar)
}

/// Every jar of PyFlink's `lib` directory under the venv `root`.
fn glob_jars(root: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let lib = root.join("lib");
    for python in std::fs::read_dir(&lib).with_context(|| format!("reading {}", lib.display()))? {
        let dir = python?.path().join("site-packages/pyflink/lib");
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries {
                let path = entry?.path();
                if path.extension().is_some_and(|e| e == "jar") {
                    found.push(path);
                }
            }
        }
    }
    Ok(found)
}

fn run_flink(
    args: &Args,
    bench_dir: &Path,
    flink: &FlinkRunner,
    unaligned: bool,
) -> Result<Figures> {
    let jar = throttle_jar(args, bench_dir, flink)?;
    let engine = if unaligned {
        "flink-unaligned"
    } else {
        "flink-aligned"
    };
    let work = args.dir.join(engine);
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    let mut command = std::process::Command::new(&flink.python);
    command
        .arg(bench_dir.join("flink/flink_backpressure_job.py"))
        .args(["--seconds", &args.seconds.to_string()])
        .args(["--rate", &args.rate.to_string()])
        .args(["--keys", &args.keys.to_string()])
        .args(["--parallelism", &args.parallelism.to_string()])
        .args(["--interval-ms", &args.interval_ms.to_string()])
        .arg("--jar")
        .arg(&jar)
        .arg("--dir")
        .arg(&work);
    if unaligned {
        command.arg("--unaligned");
    }
    let output = command.output().context("running Flink")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let Some(json) = stdout.lines().find_map(|l| l.strip_prefix("RESULT ")) else {
        bail!(
            "{engine} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let _ = std::fs::remove_dir_all(&work);
    Ok(serde_json::from_str(json)?)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn main() -> std::process::ExitCode {
    weir::cli::exit_code(run())
}

fn run() -> Result<()> {
    let args = Args::parse();
    let bench_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(&args.dir)?;
    let flink = if args.engines.iter().any(|e| e.starts_with("flink-")) {
        Some(FlinkRunner::install(bench_dir, &args.flink_venv)?)
    } else {
        None
    };
    let mut all = Vec::new();
    for engine in &args.engines {
        let figures = match (engine.as_str(), &flink) {
            ("weir-aligned", _) => run_weir(&args, false)?,
            ("weir-unaligned", _) => run_weir(&args, true)?,
            ("flink-aligned", Some(flink)) => run_flink(&args, bench_dir, flink, false)?,
            ("flink-unaligned", Some(flink)) => run_flink(&args, bench_dir, flink, true)?,
            (other, _) => bail!(
                "unknown engine `{other}`: weir-aligned, weir-unaligned, flink-aligned or flink-unaligned"
            ),
        };
        let warm = figures.started_ms + (args.warmup_seconds * 1e3) as u64;
        let measured: Vec<&Checkpoint> = figures
            .checkpoints
            .iter()
            .filter(|c| c.trigger_ms >= warm)
            .collect();
        let durations: Vec<f64> = measured.iter().map(|c| c.duration_ms).collect();
        println!(
            "{engine:>16}: {} checkpoints measured ({} unaligned), duration median {:.0} ms (max {:.0}), in flight stored median {:.1} KiB, aggregation input {:.0} rows/s",
            measured.len(),
            measured.iter().filter(|c| c.unaligned).count(),
            median(durations.clone()),
            durations.iter().copied().fold(0.0, f64::max),
            median(measured.iter().map(|c| c.persisted_bytes as f64).collect()) / 1024.0,
            figures.records_in as f64 / figures.seconds,
        );
        if engine.ends_with("-unaligned")
            && !measured
                .iter()
                .any(|c| c.unaligned && c.persisted_bytes > 0)
        {
            bail!("{engine}: no unaligned checkpoint stored records in flight");
        }
        all.push(figures);
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&all)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
