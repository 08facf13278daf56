//! The side-by-side benchmark of Weir against Apache Flink (see `bench/README.md`).
//!
//! `cargo run --release -p weir-bench --bin weir-vs-flink` generates the inputs (once),
//! installs Flink into its own virtual environment (once), then runs every workload at
//! every parallelism on each engine, each run in a fresh process so that its peak memory is
//! its own, and prints one table, also written as JSON.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use serde::Serialize;
use weir_bench::compare;
use weir_bench::flink::{FlinkInput, FlinkRunner};
use weir_bench::kv_input::KvInputSpec;
use weir_bench::nexmark::generator::NexmarkInputSpec;
use weir_bench::report::{compare, table, Comparison};
use weir_bench::weir_jobs::{EventSource, Output};
use weir_bench::{
    floor, inputs, process_usage, weir_jobs, Engine, InputKind, RunFigures, Workload,
};

/// Where the Nexmark events come from.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum SourceKind {
    /// The JSON-lines part files (generated once under the data directory).
    Files,
    /// Made in memory by each engine: Weir's GeneratorSource and Flink SQL over a
    /// `datagen` sequence, the same events as the files', without JSON decoding.
    Generator,
}

#[derive(Parser, Debug)]
#[command(about = "Weir against Apache Flink on the same inputs, side by side")]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    suite: SuiteArgs,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Runs one workload on Weir or the floor in this process and prints `RESULT {json}`
    /// (the suite starts itself with this for every run).
    RunOne {
        /// weir, weir-traced, weir-no-checkpoints or floor.
        #[arg(long)]
        engine: Engine,
        /// The workload.
        #[arg(long)]
        workload: Workload,
        /// The input directory (`--source files`).
        #[arg(long)]
        input: Option<PathBuf>,
        /// Where the Nexmark events come from.
        #[arg(long, value_enum, default_value = "files")]
        source: SourceKind,
        /// Events to generate (`--source generator`).
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Seed of the generated events (`--source generator`).
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Parallelism.
        #[arg(long, default_value_t = 1)]
        parallelism: u32,
        /// Where checkpoints go (engine weir).
        #[arg(long)]
        checkpoint_dir: Option<PathBuf>,
        /// Writes the results as JSON lines into this directory instead of discarding them
        /// (the value check; Weir engines only).
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Prints the Flink SQL statements that generate the Nexmark events in memory, as a
    /// JSON list (what `--source generator` gives flink_job.py).
    GeneratorSql {
        /// Events.
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Seed.
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
}

#[derive(clap::Args, Debug, Serialize)]
struct SuiteArgs {
    /// Where inputs are generated and runs keep their checkpoints and logs.
    #[arg(long, default_value = "target/bench-data")]
    data_dir: PathBuf,
    /// Rows of the key,value input.
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    /// Distinct keys of the key,value input.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Nexmark events (bids are 46 of every 50).
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Where the Nexmark queries read their events: the JSON files, or an in-memory
    /// generator of the same events on each engine (no JSON decoding; the floor and the
    /// key,value workloads are skipped).
    #[arg(long, value_enum, default_value = "files")]
    source: SourceKind,
    /// Part files per input (splits for the sources).
    #[arg(long, default_value_t = 4)]
    files: u32,
    /// Seed of the generated inputs.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Parallelisms to run.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    parallelism: Vec<u32>,
    /// Workloads to run: stateless, keyed, q0, q1, q2, and the window and join queries
    /// q3, q4, q5, q6, q7, q8, q11, q12 (not by default: they have not been run at the
    /// default 10 million events, where Flink's regular joins in q3, q4 and q7 keep every
    /// row in state).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "stateless,keyed,q0,q1,q2"
    )]
    workloads: Vec<Workload>,
    /// Engines to run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "floor,weir-no-checkpoints,weir,flink"
    )]
    engines: Vec<Engine>,
    /// Runs of the floor and Weir per workload and parallelism; the one with the median
    /// records/s is kept (they take seconds, and the machine is noisy).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Runs of Flink per workload and parallelism (each takes half a minute or more).
    #[arg(long, default_value_t = 1)]
    flink_runs: usize,
    /// The PyFlink virtual environment (made by bench/flink/install.sh when missing).
    #[arg(long, default_value = "target/tools/flink/venv")]
    flink_venv: PathBuf,
    /// Skips checking Flink's output in a batch job after the runs of each workload (its
    /// count for q0–q2, its rows against Weir's for q3–q12).
    #[arg(long)]
    no_verify: bool,
    /// Where the table and figures are written as JSON.
    #[arg(long, default_value = "bench/results/latest.json")]
    json: PathBuf,
}

/// The JSON report.
#[derive(Serialize)]
struct Report<'a> {
    date: String,
    machine: Machine,
    settings: &'a SuiteArgs,
    runs: &'a [RunFigures],
    comparisons: Vec<Comparison>,
    table: String,
}

#[derive(Serialize)]
struct Machine {
    cores: usize,
    cpu: String,
    memory_gib: f64,
}

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |text: &str, key: &str| {
        text.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split(':').nth(1))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let mem_kib: f64 = field(&meminfo, "MemTotal")
        .trim_end_matches(" kB")
        .parse()
        .unwrap_or(0.0);
    Machine {
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu: field(&cpuinfo, "model name"),
        memory_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
    }
}

fn run_one(
    engine: Engine,
    workload: Workload,
    source: &EventSource,
    parallelism: u32,
    checkpoint_dir: Option<&Path>,
    output: &Output,
) -> Result<()> {
    let (figures, details) = match engine {
        Engine::Floor => match source {
            EventSource::Files(input) => (floor::run(workload, input)?, Default::default()),
            EventSource::Generator { .. } => bail!("the floor reads files only"),
        },
        Engine::WeirNoCheckpoints => {
            weir_jobs::run(workload, source, parallelism, None, output, false)?
        }
        Engine::Weir | Engine::WeirTraced => {
            let dir =
                checkpoint_dir.context("engines weir and weir-traced need --checkpoint-dir")?;
            let traced = engine == Engine::WeirTraced;
            weir_jobs::run(workload, source, parallelism, Some(dir), output, traced)?
        }
        Engine::Flink => bail!("Flink runs through the suite, not run-one"),
    };
    println!("LATE {}", details.late_records_dropped);
    println!("RESULT {}", serde_json::to_string(&figures)?);
    Ok(())
}

/// How a child run reads its events, as run-one's arguments.
#[derive(Debug, Clone)]
enum RunInput<'a> {
    Files(&'a Path),
    Generator { events: u64, seed: u64 },
}

impl RunInput<'_> {
    fn add_args(&self, command: &mut Command) {
        match self {
            RunInput::Files(dir) => {
                command.arg("--input").arg(dir);
            }
            RunInput::Generator { events, seed } => {
                command.args([
                    "--source",
                    "generator",
                    "--events",
                    &events.to_string(),
                    "--seed",
                    &seed.to_string(),
                ]);
            }
        }
    }
}

/// Runs a Weir or floor run in a fresh process of this program; with `output`, writes its
/// results there. Returns its figures and the records its windows dropped as late.
fn spawn_one(
    engine: Engine,
    workload: Workload,
    input: &RunInput<'_>,
    parallelism: u32,
    work_dir: &Path,
    output: Option<&Path>,
) -> Result<(RunFigures, u64)> {
    let exe = std::env::current_exe().context("finding this program")?;
    let mut command = Command::new(exe);
    command.args([
        "run-one",
        "--engine",
        engine.name(),
        "--workload",
        workload.name(),
    ]);
    input.add_args(&mut command);
    command.args(["--parallelism", &parallelism.to_string()]);
    if matches!(engine, Engine::Weir | Engine::WeirTraced) {
        command
            .arg("--checkpoint-dir")
            .arg(work_dir.join("checkpoints"));
    }
    if let Some(output) = output {
        command.arg("--output").arg(output);
    }
    let result = command.output().context("starting a run")?;
    if !result.status.success() {
        bail!(
            "{} {workload} p{parallelism} failed ({}): {}",
            engine.name(),
            result.status,
            String::from_utf8_lossy(&result.stderr).trim()
        );
    }
    let stdout = String::from_utf8_lossy(&result.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .with_context(|| format!("{} {workload} printed no RESULT: {stdout}", engine.name()))?;
    let late = stdout
        .lines()
        .find_map(|l| l.strip_prefix("LATE "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    Ok((serde_json::from_str(line)?, late))
}

/// Checks Weir's results of `workload` against Flink's batch results over the same events:
/// Weir (no checkpoints, at `parallelism`) and Flink write their rows under `dir`, which are
/// then compared as multisets (see `weir_bench::compare`).
fn check_values(
    flink: &FlinkRunner,
    workload: Workload,
    run_input: &RunInput<'_>,
    flink_input: &FlinkInput,
    parallelism: u32,
    dir: &Path,
) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let (weir_dir, flink_dir) = (dir.join("weir"), dir.join("flink"));
    let (_, late) = spawn_one(
        Engine::WeirNoCheckpoints,
        workload,
        run_input,
        parallelism,
        dir,
        Some(&weir_dir),
    )?;
    flink.write_output(workload, flink_input, parallelism, &flink_dir)?;
    let weir_rows = compare::read_json_lines(&weir_dir)?;
    let flink_rows = compare::read_json_lines(&flink_dir)?;
    let agreement = compare::compare(workload, &flink_rows, &weir_rows)
        .with_context(|| format!("the rows are under {}", dir.display()))?;
    eprintln!(
        "{workload:<9} values agree with Flink (batch) at p{parallelism}: {} rows, {}{}",
        agreement.rows,
        agreement.what,
        if late > 0 {
            format!(" ({late} records dropped as late by Weir)")
        } else {
            String::new()
        }
    );
    Ok(())
}

fn median_run(mut runs: Vec<RunFigures>) -> Option<RunFigures> {
    runs.sort_by(|a, b| a.records_per_second().total_cmp(&b.records_per_second()));
    let middle = runs.len() / 2;
    runs.into_iter().nth(middle)
}

fn suite(args: &SuiteArgs) -> Result<()> {
    let bench_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let data_dir = args.data_dir.canonicalize()?;
    let generator = args.source == SourceKind::Generator;
    let workloads: Vec<Workload> = args
        .workloads
        .iter()
        .copied()
        .filter(|w| {
            let keep = !(generator && w.input() != InputKind::Nexmark);
            if !keep {
                eprintln!("{w}: reads the key,value files, not Nexmark events: skipped with --source generator");
            }
            keep
        })
        .collect();
    let needs = |kind| workloads.iter().any(|w| w.input() == kind);
    let kv_spec = KvInputSpec {
        rows: args.rows,
        keys: args.keys,
        seed: args.seed,
        files: args.files,
        string_keys: false,
    };
    let kv = if needs(InputKind::KeyValue) {
        eprintln!(
            "input: {} key,value rows over {} keys",
            args.rows, args.keys
        );
        Some(inputs::key_value_input(&data_dir, &kv_spec)?)
    } else {
        None
    };
    let kvs = if needs(InputKind::StringKeyValue) {
        eprintln!(
            "input: {} key,value rows over {} string keys",
            args.rows, args.keys
        );
        Some(inputs::string_key_value_input(&data_dir, &kv_spec)?)
    } else {
        None
    };
    let nexmark = if needs(InputKind::Nexmark) && !generator {
        eprintln!("input: {} Nexmark events", args.events);
        let spec = NexmarkInputSpec {
            events: args.events,
            seed: args.seed,
            files: args.files,
            generator_version: weir_bench::nexmark::generator::GENERATOR_VERSION,
        };
        Some(inputs::nexmark_input(&data_dir, &spec)?)
    } else {
        None
    };
    let generator_sql = data_dir.join(format!(
        "nexmark-generator-{}-{}.sql.json",
        args.seed, args.events
    ));
    if generator {
        eprintln!(
            "input: {} Nexmark events generated in memory by each engine",
            args.events
        );
        let sql = weir_bench::nexmark::generator::flink_generator_sql(args.seed, args.events);
        std::fs::write(&generator_sql, serde_json::to_vec_pretty(&sql)?)
            .with_context(|| format!("writing {}", generator_sql.display()))?;
    }
    let flink = if args.engines.contains(&Engine::Flink) {
        Some(FlinkRunner::install(bench_dir, &args.flink_venv)?)
    } else {
        None
    };
    // The value check runs at the highest parallelism asked for: shuffles and the
    // watermarks of several source subtasks are what could make results differ.
    let check_parallelism = args.parallelism.iter().copied().max().unwrap_or(1);

    let mut runs: Vec<RunFigures> = Vec::new();
    for &workload in &workloads {
        let (run_input, flink_input, records) = match (workload.input(), generator) {
            (InputKind::KeyValue, _) => (
                RunInput::Files(kv.as_deref().context("input not generated")?),
                FlinkInput::Files(kv.clone().context("input not generated")?),
                args.rows,
            ),
            (InputKind::StringKeyValue, _) => (
                RunInput::Files(kvs.as_deref().context("input not generated")?),
                FlinkInput::Files(kvs.clone().context("input not generated")?),
                args.rows,
            ),
            (InputKind::Nexmark, false) => (
                RunInput::Files(nexmark.as_deref().context("input not generated")?),
                FlinkInput::Files(nexmark.clone().context("input not generated")?),
                args.events,
            ),
            (InputKind::Nexmark, true) => (
                RunInput::Generator {
                    events: args.events,
                    seed: args.seed,
                },
                FlinkInput::Generator(generator_sql.clone()),
                args.events,
            ),
        };
        for (i, &parallelism) in args.parallelism.iter().enumerate() {
            for &engine in &args.engines {
                // The floor is one thread: it runs once per workload, over files, for the
                // workloads it has.
                if engine == Engine::Floor && (i > 0 || generator || !workload.has_floor()) {
                    continue;
                }
                if engine == Engine::Flink && !workload.flink_streaming() {
                    eprintln!("{workload:<9} p{parallelism} flink: not run, Flink's streaming SQL does not support it (its batch SQL checks Weir's values)");
                    continue;
                }
                let parallelism = if engine == Engine::Floor {
                    1
                } else {
                    parallelism
                };
                let mut repeats = Vec::new();
                let repeat = match engine {
                    Engine::Flink => args.flink_runs,
                    _ => args.runs,
                };
                for _ in 0..repeat.max(1) {
                    let work_dir = data_dir
                        .join("runs")
                        .join(format!("{workload}-p{parallelism}-{}", engine.name()));
                    if work_dir.exists() {
                        std::fs::remove_dir_all(&work_dir)?;
                    }
                    std::fs::create_dir_all(&work_dir)?;
                    let busy = process_usage::machine_busy_fraction(Duration::from_secs(1));
                    let mut figures = match (&flink, engine) {
                        (Some(flink), Engine::Flink) => {
                            flink.run(workload, &flink_input, records, parallelism, &work_dir)?
                        }
                        _ => {
                            spawn_one(engine, workload, &run_input, parallelism, &work_dir, None)?.0
                        }
                    };
                    figures.machine_busy_before = busy;
                    // Checkpoints are large and not looked at again; logs are kept.
                    let _ = std::fs::remove_dir_all(work_dir.join("checkpoints"));
                    eprintln!(
                        "{workload:<9} p{parallelism} {:<20} {:>12.0} records/s {:>7.2} CPU s {:>7.0} MiB {:>3} checkpoints{}",
                        engine.name(),
                        figures.records_per_second(),
                        figures.cpu_seconds,
                        figures.peak_rss_mib,
                        figures.checkpoints,
                        match busy {
                            Some(b) if b > 0.2 => format!("  (machine {:.0}% busy before: suspect)", b * 100.0),
                            _ => String::new(),
                        }
                    );
                    repeats.push(figures);
                }
                runs.extend(median_run(repeats));
            }
        }
        if let (Some(flink), false) = (&flink, args.no_verify) {
            if workload.compares_values() {
                let dir = data_dir.join("check").join(workload.name());
                check_values(
                    flink,
                    workload,
                    &run_input,
                    &flink_input,
                    check_parallelism,
                    &dir,
                )?;
            } else {
                let counted = flink.count_output(workload, &flink_input)?;
                eprintln!("{workload:<9} Flink (batch) emits {counted} records");
                for r in runs
                    .iter_mut()
                    .filter(|r| r.workload == workload && r.engine == Engine::Flink)
                {
                    r.records_out = Some(counted);
                }
            }
        }
        check_outputs_agree(&runs, workload, records)?;
    }

    let table = table(&runs);
    println!("{table}");
    for c in compare(&runs) {
        println!(
            "{} p{}: Weir {:.1}× Flink's records/s, {:.1}× per core, {:.1}× less memory: goal (≥{}× per core, ≥{}× less memory) {}",
            c.workload,
            c.parallelism,
            c.throughput_ratio,
            c.per_core_ratio,
            c.memory_ratio,
            weir_bench::report::GOAL_RATIO,
            weir_bench::report::GOAL_RATIO,
            if c.goal_met { "met" } else { "NOT met" }
        );
    }
    let report = Report {
        date: Command::new("date")
            .arg("-u")
            .arg("+%Y-%m-%dT%H:%M:%SZ")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default(),
        machine: machine(),
        settings: args,
        runs: &runs,
        comparisons: compare(&runs),
        table,
    };
    if let Some(parent) = args.json.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&args.json, serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("writing {}", args.json.display()))?;
    eprintln!("figures written to {}", args.json.display());
    Ok(())
}

/// Every engine must have read every record, and Weir must emit as many records as the floor
/// (or, without a floor, Flink's batch job) emits.
fn check_outputs_agree(runs: &[RunFigures], workload: Workload, records: u64) -> Result<()> {
    let of_workload = || runs.iter().filter(move |r| r.workload == workload);
    for r in of_workload() {
        if r.records != records {
            bail!(
                "{} read {} of the {records} records of {workload} at p{}",
                r.engine.name(),
                r.records,
                r.parallelism
            );
        }
    }
    if let Some(r) = of_workload().find(|r| r.engine != Engine::Flink && r.records_out.is_none()) {
        bail!(
            "{} reported no output count for {workload}",
            r.engine.name()
        );
    }
    // The floor's count, or without a floor (generated events) the count of Flink's batch job.
    let expected = [Engine::Floor, Engine::Flink]
        .into_iter()
        .find_map(|engine| {
            of_workload()
                .find(|r| r.engine == engine)
                .and_then(|r| r.records_out)
                .map(|out| (engine, out))
        });
    if let Some((reference, expected)) = expected {
        for r in of_workload() {
            if let Some(out) = r.records_out.filter(|out| *out != expected) {
                bail!(
                    "{} emitted {out} records for {workload} at p{} where {} emitted {expected}",
                    r.engine.name(),
                    r.parallelism,
                    match reference {
                        Engine::Floor => "the floor",
                        _ => "Flink (batch)",
                    }
                );
            }
        }
    }
    Ok(())
}

/// Errors print as one line with their causes, never with a backtrace.
fn main() -> std::process::ExitCode {
    weir::cli::exit_code(run())
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Cmd::RunOne {
            engine,
            workload,
            input,
            source,
            events,
            seed,
            parallelism,
            checkpoint_dir,
            output,
        }) => {
            let source = match source {
                SourceKind::Files => EventSource::Files(input.context("--input is needed")?),
                SourceKind::Generator => EventSource::Generator { events, seed },
            };
            let output = output.map_or(Output::Discard, Output::JsonFiles);
            run_one(
                engine,
                workload,
                &source,
                parallelism,
                checkpoint_dir.as_deref(),
                &output,
            )
        }
        Some(Cmd::GeneratorSql { events, seed }) => {
            let sql = weir_bench::nexmark::generator::flink_generator_sql(seed, events);
            println!("{}", serde_json::to_string_pretty(&sql)?);
            Ok(())
        }
        None => suite(&cli.suite),
    }
}
