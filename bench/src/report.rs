//! The figures of one run, the side-by-side comparison with Flink, and the printed table.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::workload::Workload;

/// Who ran a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// The hand-written single-pass program: the physical limit.
    Floor,
    /// Weir with checkpointing off.
    WeirNoCheckpoints,
    /// Weir with exactly-once checkpoints every second.
    Weir,
    /// Weir as `weir`, tracing every record's origin from the first attempt
    /// (`RecordOriginTracing::Always`: what the attempt after a user-code failure pays).
    WeirTraced,
    /// Apache Flink with exactly-once checkpoints every second.
    Flink,
}

impl Engine {
    /// Its name in the table and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Floor => "floor",
            Engine::WeirNoCheckpoints => "weir-no-checkpoints",
            Engine::Weir => "weir",
            Engine::WeirTraced => "weir-traced",
            Engine::Flink => "flink",
        }
    }
}

impl std::str::FromStr for Engine {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [
            Engine::Floor,
            Engine::WeirNoCheckpoints,
            Engine::Weir,
            Engine::WeirTraced,
            Engine::Flink,
        ]
        .into_iter()
        .find(|e| e.name() == s)
        .ok_or_else(|| {
            format!("unknown engine `{s}`; the engines are floor, weir-no-checkpoints, weir, weir-traced, flink")
        })
    }
}

/// What one run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFigures {
    /// The workload.
    pub workload: Workload,
    /// The engine.
    pub engine: Engine,
    /// Parallelism (the floor is always 1).
    pub parallelism: u32,
    /// Input records processed.
    pub records: u64,
    /// Records that reached the sink, where the engine reports it.
    pub records_out: Option<u64>,
    /// Seconds the job ran: Weir from submission to the end; Flink from its execution
    /// graph's RUNNING to FINISHED (without JVM start, SQL planning and deployment).
    pub seconds: f64,
    /// CPU seconds of the engine's process while the job ran (for Flink its JVM from the
    /// job's RUNNING on: SQL planning and deployment before it are left out).
    pub cpu_seconds: f64,
    /// Flink only: CPU seconds of its JVM from submitting the SQL statement, planning,
    /// code generation and deployment included.
    #[serde(default)]
    pub cpu_seconds_with_setup: Option<f64>,
    /// Peak resident memory of the engine's process, MiB (for Flink its JVM).
    pub peak_rss_mib: f64,
    /// Checkpoints completed.
    pub checkpoints: u64,
    /// Their mean end-to-end duration, ms.
    pub checkpoint_mean_ms: Option<f64>,
    /// Fraction of the machine's CPU busy in the second before the run (other load).
    pub machine_busy_before: Option<f64>,
}

impl RunFigures {
    /// Input records per second of job time.
    pub fn records_per_second(&self) -> f64 {
        self.records as f64 / self.seconds.max(1e-9)
    }

    /// Input records per CPU second: throughput per core actually used.
    pub fn records_per_cpu_second(&self) -> f64 {
        self.records as f64 / self.cpu_seconds.max(1e-9)
    }
}

/// Weir (checkpoints on) against Flink for one workload and parallelism.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The workload.
    pub workload: Workload,
    /// Parallelism.
    pub parallelism: u32,
    /// Weir's records/s over Flink's.
    pub throughput_ratio: f64,
    /// Weir's records per CPU second over Flink's.
    pub per_core_ratio: f64,
    /// Flink's peak memory over Weir's.
    pub memory_ratio: f64,
    /// Whether the goal is met: per-core ratio ≥ 10 and memory ratio ≥ 10.
    pub goal_met: bool,
}

/// The goal of issue 7: Weir ≥ 10× Flink's records per second per core, at ≤ 1/10 of its
/// peak memory.
pub const GOAL_RATIO: f64 = 10.0;

/// Pairs each Weir (checkpointed) run with the Flink run of the same workload and
/// parallelism.
pub fn compare(runs: &[RunFigures]) -> Vec<Comparison> {
    let find = |engine, workload, parallelism| {
        runs.iter()
            .find(|r| r.engine == engine && r.workload == workload && r.parallelism == parallelism)
    };
    runs.iter()
        .filter(|r| r.engine == Engine::Weir)
        .filter_map(|weir| {
            let flink = find(Engine::Flink, weir.workload, weir.parallelism)?;
            let per_core_ratio = weir.records_per_cpu_second() / flink.records_per_cpu_second();
            let memory_ratio = flink.peak_rss_mib / weir.peak_rss_mib.max(1e-9);
            Some(Comparison {
                workload: weir.workload,
                parallelism: weir.parallelism,
                throughput_ratio: weir.records_per_second() / flink.records_per_second(),
                per_core_ratio,
                memory_ratio,
                goal_met: per_core_ratio >= GOAL_RATIO && memory_ratio >= GOAL_RATIO,
            })
        })
        .collect()
}

fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// The runs and comparisons as a Markdown table (one row per run, the ratios on Weir's rows).
pub fn table(runs: &[RunFigures]) -> String {
    let comparisons = compare(runs);
    let mut out = String::from(
        "| workload | p | engine | records/s | records/CPU-s | CPU s | peak RSS MiB | checkpoints | mean checkpoint ms | × Flink records/s | × Flink per core | Flink RSS ÷ |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in runs {
        let ratio = comparisons.iter().find(|c| {
            r.engine == Engine::Weir && c.workload == r.workload && c.parallelism == r.parallelism
        });
        let (tput, core, mem) = ratio.map_or((String::new(), String::new(), String::new()), |c| {
            (
                format!("{:.1}", c.throughput_ratio),
                format!("{:.1}", c.per_core_ratio),
                format!("{:.1}", c.memory_ratio),
            )
        });
        let checkpoints = match r.engine {
            Engine::Floor | Engine::WeirNoCheckpoints => "–".to_string(),
            _ => r.checkpoints.to_string(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.2} | {:.0} | {} | {} | {tput} | {core} | {mem} |",
            r.workload,
            r.parallelism,
            r.engine.name(),
            thousands(r.records_per_second()),
            thousands(r.records_per_cpu_second()),
            r.cpu_seconds,
            r.peak_rss_mib,
            checkpoints,
            r.checkpoint_mean_ms
                .map_or("–".to_string(), |m| format!("{m:.1}")),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(engine: Engine, parallelism: u32, seconds: f64, cpu: f64, rss: f64) -> RunFigures {
        RunFigures {
            workload: Workload::Keyed,
            engine,
            parallelism,
            records: 1_000_000,
            records_out: None,
            seconds,
            cpu_seconds: cpu,
            cpu_seconds_with_setup: None,
            peak_rss_mib: rss,
            checkpoints: 3,
            checkpoint_mean_ms: Some(12.5),
            machine_busy_before: None,
        }
    }

    #[test]
    fn ratios_pair_runs_of_the_same_workload_and_parallelism() {
        let runs = vec![
            run(Engine::Flink, 1, 4.0, 8.0, 4000.0),
            run(Engine::Weir, 1, 0.5, 0.5, 40.0),
            run(Engine::Weir, 2, 0.5, 1.0, 400.0),
            run(Engine::Flink, 2, 2.0, 4.0, 4000.0),
            run(Engine::WeirNoCheckpoints, 1, 0.4, 0.4, 30.0),
        ];
        let c = compare(&runs);
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].parallelism, c[0].throughput_ratio), (1, 8.0));
        assert_eq!((c[0].per_core_ratio, c[0].memory_ratio), (16.0, 100.0));
        assert!(c[0].goal_met);
        assert_eq!((c[1].per_core_ratio, c[1].memory_ratio), (4.0, 10.0));
        assert!(!c[1].goal_met, "per core 4× misses the goal");
        let t = table(&runs);
        assert!(t.contains("| keyed | 1 | weir | 2 000 000 | 2 000 000 | 0.50 | 40 | 3 | 12.5 | 8.0 | 16.0 | 100.0 |"), "{t}");
        assert!(
            t.contains("| keyed | 1 | weir-no-checkpoints | 2 500 000 |"),
            "{t}"
        );
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1000.0), "1 000");
        assert_eq!(thousands(12_345_678.0), "12 345 678");
    }
}
