//! Writes the seed corpus of the fuzz targets to `fuzz/corpus/<target>/`: the built-in seeds,
//! and those of the checkpoints a small keyed job leaves when it fails for good (metadata,
//! job record, key group blocks). Run from the repository's root:
//! `cargo run -p weir-fuzz --bin weir-fuzz-seeds`.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use weir::connectors::discard::DiscardingSink;
use weir::connectors::generator::GeneratorSource;
use weir::{
    CheckpointConfig, CheckpointStorageConfig, ExecutionConfig, RestartStrategyConfig,
    StreamExecutionEnvironment, WatermarkStrategy,
};

const JOB: &str = "fuzz-seeds";

fn main() -> Result<()> {
    let corpus = Path::new("fuzz/corpus");
    let work = tempfile_dir()?;
    run_failing_job(&work)?;
    let mut seeds = weir_fuzz::seeds::built_in();
    seeds.extend(weir_fuzz::seeds::from_checkpoints(&work.join(JOB))?);
    let mut written = 0;
    for (target, bytes) in seeds {
        let dir = corpus.join(target);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // Named by content, as libFuzzer names what it adds, so reruns add nothing twice.
        let name = format!("seed-{:08x}", crc32fast::hash(&bytes));
        std::fs::write(dir.join(name), &bytes)?;
        written += 1;
    }
    std::fs::remove_dir_all(&work).ok();
    println!(
        "weir-fuzz-seeds: {written} seeds under {}",
        corpus.display()
    );
    Ok(())
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("weir-fuzz-seeds-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A keyed count over string keys with checkpoints every 50 ms that fails for good after
/// 6 000 records, leaving its checkpoints behind.
fn run_failing_job(work: &Path) -> Result<()> {
    let env = StreamExecutionEnvironment::new(
        ExecutionConfig::default()
            .with_parallelism(2)
            .with_restart_strategy(RestartStrategyConfig::None)
            .with_checkpointing(
                CheckpointConfig::default()
                    .with_interval(Duration::from_millis(50))
                    .with_storage(CheckpointStorageConfig::FileSystem(work.to_path_buf())),
            ),
    )?;
    let source = GeneratorSource::new(10_000, |i: u64| (format!("k{}", i % 97), i))
        .with_rate_limit(20_000.0);
    let seen = Arc::new(AtomicU64::new(0));
    env.from_source(source, WatermarkStrategy::no_watermarks(), "numbers")
        .uid("numbers")
        .map(move |(key, i): (String, u64)| {
            if seen.fetch_add(1, Ordering::Relaxed) == 6_000 {
                panic!("the seed job fails here, leaving its checkpoints");
            }
            (key, i)
        })
        .key_by(|(key, _): &(String, u64)| key.clone())
        .count()
        .uid("count")
        .sink_to(DiscardingSink, "discard");
    let failed = env.execute(JOB).is_err();
    anyhow::ensure!(failed, "the seed job was meant to fail");
    Ok(())
}
