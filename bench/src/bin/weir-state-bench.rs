//! The cost of checkpoints by state size, on the heap backend (full checkpoints) and on
//! RocksDB (incremental), as a user would see it: a keyed `SUM/COUNT GROUP BY key` loads every
//! key once, then a fixed fraction of the keys is updated in each checkpoint interval; each
//! checkpoint after the load is measured — its duration, the bytes it uploaded against the
//! state's size, how long it blocked the task thread — and so are the process's peak resident
//! memory and, with `--recovery`, the time from a failure to records flowing again. Backends
//! `flink-rocksdb` and `flink-hashmap` run the same job on Flink (bench/flink/flink_state_job.py)
//! in the same run, so that the figures compare side by side.
//!
//! `cargo run --release -p weir-bench --bin weir-state-bench -- --keys 1000000,10000000`
//! prints one line per run; `--json` writes the figures. See bench/README.md.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde::Serialize;
use weir::checkpoint::stats::{CheckpointStats, CheckpointStatus};
use weir::connectors::discard::DiscardingSink;
use weir::prelude::*;
use weir::state::backend_factory::StateBackendConfig;
use weir_bench::flink::FlinkRunner;
use weir_bench::weir_jobs::SumAndCount;
use weir_rocksdb::RocksDbStateBackend;

#[derive(Parser, Debug)]
#[command(about = "Checkpoint cost, memory and recovery by state size, heap against RocksDB")]
struct Args {
    /// Distinct keys, one run per value.
    #[arg(long, value_delimiter = ',', default_value = "1000000")]
    keys: Vec<u64>,
    /// Backends: heap (full checkpoints), rocksdb (incremental), and Flink's on the same
    /// input: flink-rocksdb (incremental) and flink-hashmap (full).
    #[arg(long, value_delimiter = ',', default_value = "heap,rocksdb")]
    backends: Vec<String>,
    /// Fraction of the keys updated per checkpoint interval after the load.
    #[arg(long, default_value_t = 0.01)]
    update_fraction: f64,
    /// Checkpoint interval, ms.
    #[arg(long, default_value_t = 5000)]
    interval_ms: u64,
    /// Checkpoints measured after the load.
    #[arg(long, default_value_t = 4)]
    checkpoints: u64,
    /// Parallelism.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Keys as strings like `k123456` (as most real keys are) instead of integers.
    #[arg(long)]
    string_keys: bool,
    /// RocksDB memory per subtask, MiB.
    #[arg(long, default_value_t = 256)]
    memory_mb: u64,
    /// Also measure recovery: fail after the measured checkpoints, time until records
    /// flow again.
    #[arg(long)]
    recovery: bool,
    /// Scratch directory for checkpoints and RocksDB (emptied per run).
    #[arg(long, default_value = "target/state-bench")]
    dir: PathBuf,
    /// The PyFlink virtual environment (installed by bench/flink/install.sh if missing).
    #[arg(long, default_value = "target/tools/flink/venv")]
    flink_venv: PathBuf,
    /// Where to write the figures as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Internal: run one configuration in this process (`keys,backend`).
    #[arg(long, hide = true)]
    run_one: Option<String>,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
struct Figures {
    backend: String,
    keys: u64,
    #[serde(default)]
    string_keys: bool,
    parallelism: u32,
    load_seconds: f64,
    checkpoints: Vec<CheckpointFigures>,
    peak_rss_bytes: u64,
    recovery_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
struct CheckpointFigures {
    id: u64,
    duration_ms: f64,
    max_sync_ms: f64,
    max_async_ms: f64,
    state_bytes: u64,
    uploaded_bytes: u64,
}

impl CheckpointFigures {
    fn of(c: &CheckpointStats) -> Self {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        Self {
            id: c.id,
            duration_ms: c.duration.map_or(0.0, ms),
            max_sync_ms: ms(c.max_sync_duration()),
            max_async_ms: ms(c.max_async_duration()),
            state_bytes: c.state_size,
            uploaded_bytes: c.checkpointed_size,
        }
    }
}

fn peak_resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?.to_string();
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// A key of the update phase: spread over every key.
fn scattered(i: u64, keys: u64) -> i64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) % keys) as i64
}

/// Fails once when asked to, and notes when the first record passes through an instance
/// opened after the failure (the restored job's).
#[derive(Clone)]
struct RecoveryTimer {
    fail: Arc<AtomicBool>,
    failed_at: Arc<Mutex<Option<Instant>>>,
    resumed_at: Arc<Mutex<Option<Instant>>>,
    opened_at: Option<Instant>,
}

impl<K: Key> ProcessFunction<(K, (i64, i64)), (K, (i64, i64))> for RecoveryTimer {
    fn open(&mut self, _ctx: &RuntimeContext) -> Result<(), BoxError> {
        self.opened_at = Some(Instant::now());
        Ok(())
    }
    fn process_element(
        &mut self,
        record: (K, (i64, i64)),
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_, (K, (i64, i64))>,
    ) -> Result<(), BoxError> {
        if self.fail.swap(false, Ordering::SeqCst) {
            *self.failed_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            panic!("injected failure, to time the recovery");
        }
        let failed = *self.failed_at.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(failed), Some(opened)) = (failed, self.opened_at) {
            if opened > failed {
                self.resumed_at
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert_with(Instant::now);
            }
        }
        out.collect(record);
        Ok(())
    }
}

/// Loads every key once, then updates `rate` scattered keys per second, into a keyed
/// `SUM/COUNT` whose results pass `timer`.
fn pipeline<K: Key>(
    env: &StreamExecutionEnvironment,
    keys: u64,
    rate: f64,
    loaded: &Arc<AtomicU64>,
    timer: RecoveryTimer,
    key_of: fn(i64) -> K,
) {
    let load = {
        let loaded = loaded.clone();
        env.from_source(
            GeneratorSource::new(keys, move |i| (key_of(i as i64), 1i64)),
            WatermarkStrategy::no_watermarks(),
            "load",
        )
        .map(move |r: (K, i64)| {
            loaded.fetch_add(1, Ordering::Relaxed);
            r
        })
    };
    let updates = env.from_source(
        GeneratorSource::unbounded(move |i| (key_of(scattered(i, keys)), 1i64))
            .with_rate_limit(rate),
        WatermarkStrategy::no_watermarks(),
        "updates",
    );
    load.union(&updates)
        .key_by_ref(|(key, _): &(K, i64)| key)
        .aggregate(SumAndCount)
        .process(timer)
        .sink_to(DiscardingSink, "discard");
}

fn run_one(args: &Args, keys: u64, backend: &str) -> Result<Figures> {
    let work = args.dir.join(format!("{backend}-{keys}"));
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    let state_backend: StateBackendConfig = match backend {
        "heap" => StateBackendConfig::default(),
        "rocksdb" => RocksDbStateBackend::new()
            .with_incremental_checkpoints(true)
            .with_memory_budget(args.memory_mb << 20)
            .with_local_dir(work.join("rocksdb"))
            .into(),
        other => bail!("unknown backend `{other}`: heap or rocksdb"),
    };
    let interval = Duration::from_millis(args.interval_ms);
    let config = ExecutionConfig::default()
        .with_parallelism(args.parallelism)
        .with_state_backend(state_backend)
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(interval)
                .with_retained(1)
                .with_storage(CheckpointStorageConfig::FileSystem(
                    work.join("checkpoints"),
                )),
        )
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 1,
            delay: Duration::ZERO,
        });
    let env = StreamExecutionEnvironment::new(config)?;
    let loaded = Arc::new(AtomicU64::new(0));
    let fail = Arc::new(AtomicBool::new(false));
    let failed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let resumed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let timer = RecoveryTimer {
        fail: fail.clone(),
        failed_at: failed_at.clone(),
        resumed_at: resumed_at.clone(),
        opened_at: None,
    };
    let rate = (args.update_fraction * keys as f64) / interval.as_secs_f64();
    if args.string_keys {
        pipeline(&env, keys, rate, &loaded, timer, |i| format!("k{i}"));
    } else {
        pipeline(&env, keys, rate, &loaded, timer, |i| i);
    }
    let started = Instant::now();
    let client = env.execute_async("state bench")?;
    while loaded.load(Ordering::Relaxed) < keys {
        if client.is_finished() {
            bail!("the job ended during the load: {:?}", client.wait());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let load_seconds = started.elapsed().as_secs_f64();
    // The first checkpoint that starts after the load holds every key.
    let completed = |client: &JobClient| -> Vec<CheckpointStats> {
        client
            .details()
            .checkpoints
            .recent
            .iter()
            .filter(|c| c.status == CheckpointStatus::Completed)
            .cloned()
            .collect()
    };
    let after_load = completed(&client).last().map_or(0, |c| c.id) + 1;
    let deadline =
        Instant::now() + interval * (args.checkpoints as u32 + 4) + Duration::from_secs(120);
    let measured = loop {
        let done: Vec<CheckpointStats> = completed(&client)
            .into_iter()
            .filter(|c| c.id > after_load)
            .collect();
        if done.len() as u64 >= args.checkpoints {
            break done;
        }
        if Instant::now() > deadline || client.is_finished() {
            bail!("only {} checkpoints completed after the load", done.len());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut recovery_ms = None;
    if args.recovery {
        fail.store(true, Ordering::SeqCst);
        let until = Instant::now() + Duration::from_secs(300);
        while resumed_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
        {
            if Instant::now() > until || client.is_finished() {
                bail!("records did not flow again after the failure");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let failed = failed_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .context("no failure")?;
        let resumed = resumed_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .context("no resume")?;
        recovery_ms = Some(resumed.saturating_duration_since(failed).as_secs_f64() * 1e3);
    }
    client.cancel()?;
    let figures = Figures {
        backend: backend.to_string(),
        keys,
        string_keys: args.string_keys,
        parallelism: args.parallelism,
        load_seconds,
        checkpoints: measured.iter().map(CheckpointFigures::of).collect(),
        peak_rss_bytes: peak_resident_bytes(),
        recovery_ms,
    };
    let _ = std::fs::remove_dir_all(&work);
    Ok(figures)
}

/// Flink's side of one run: bench/flink/flink_state_job.py, same input and settings.
fn flink_command(
    args: &Args,
    bench_dir: &Path,
    flink: &FlinkRunner,
    keys: u64,
    backend: &str,
) -> Result<std::process::Command> {
    if !matches!(backend, "rocksdb" | "hashmap") {
        bail!("unknown backend `flink-{backend}`: flink-rocksdb or flink-hashmap");
    }
    let work = args.dir.join(format!("flink-{backend}-{keys}"));
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    let mut command = std::process::Command::new(&flink.python);
    command
        .arg(bench_dir.join("flink/flink_state_job.py"))
        .args(["--keys", &keys.to_string(), "--backend", backend])
        .args(["--update-fraction", &args.update_fraction.to_string()])
        .args(["--interval-ms", &args.interval_ms.to_string()])
        .args(["--checkpoints", &args.checkpoints.to_string()])
        .args(["--parallelism", &args.parallelism.to_string()])
        .args(["--memory-mb", &args.memory_mb.to_string()])
        .arg("--checkpoint-dir")
        .arg(&work);
    if args.string_keys {
        command.arg("--string-keys");
    }
    Ok(command)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn main() -> std::process::ExitCode {
    weir_rocksdb::register();
    weir::cli::exit_code(run())
}

fn run() -> Result<()> {
    let args = Args::parse();
    std::panic::set_hook(Box::new(|info| eprintln!("(injected) {info}")));
    if let Some(one) = &args.run_one {
        let (keys, backend) = one.split_once(',').context("--run-one KEYS,BACKEND")?;
        let figures = run_one(&args, keys.parse()?, backend)?;
        println!("RESULT {}", serde_json::to_string(&figures)?);
        return Ok(());
    }
    let bench_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let flink = if args.backends.iter().any(|b| b.starts_with("flink-")) {
        Some(FlinkRunner::install(bench_dir, &args.flink_venv)?)
    } else {
        None
    };
    let mut all = Vec::new();
    for &keys in &args.keys {
        for backend in &args.backends {
            // Each run in a fresh process, so that its peak memory is its own.
            let output = match (backend.strip_prefix("flink-"), &flink) {
                (Some(flink_backend), Some(flink)) => {
                    let output = flink_command(&args, bench_dir, flink, keys, flink_backend)?
                        .output()
                        .context("running Flink")?;
                    let _ = std::fs::remove_dir_all(args.dir.join(format!("{backend}-{keys}")));
                    output
                }
                _ => {
                    let mut command = std::process::Command::new(std::env::current_exe()?);
                    command.args(std::env::args().skip(1));
                    command.args(["--run-one", &format!("{keys},{backend}")]);
                    command.output().context("running one configuration")?
                }
            };
            let stdout = String::from_utf8_lossy(&output.stdout);
            let Some(json) = stdout.lines().find_map(|l| l.strip_prefix("RESULT ")) else {
                bail!(
                    "{backend} at {keys} keys failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            };
            let figures: Figures = serde_json::from_str(json)?;
            if figures.checkpoints.is_empty() {
                bail!("{backend} at {keys} keys measured no checkpoint");
            }
            let c = &figures.checkpoints;
            println!(
                "{backend:>13} {keys:>10} keys: load {:.1} s, checkpoint median {:.0} ms (max {:.0}), uploaded median {:.1} MB of {:.1} MB state, task blocked max {:.2} ms, peak RSS {:.0} MiB ({:.0} B/key){}",
                figures.load_seconds,
                median(c.iter().map(|c| c.duration_ms).collect()),
                c.iter().map(|c| c.duration_ms).fold(0.0, f64::max),
                median(c.iter().map(|c| c.uploaded_bytes as f64).collect()) / 1e6,
                median(c.iter().map(|c| c.state_bytes as f64).collect()) / 1e6,
                c.iter().map(|c| c.max_sync_ms).fold(0.0, f64::max),
                figures.peak_rss_bytes as f64 / (1 << 20) as f64,
                figures.peak_rss_bytes as f64 / keys as f64,
                figures
                    .recovery_ms
                    .map_or(String::new(), |ms| format!(", recovery {ms:.0} ms")),
            );
            all.push(figures);
        }
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&all)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
