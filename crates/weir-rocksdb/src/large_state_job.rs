//! The large-state reference job, for tests and benchmarks of the state backends: keyed
//! state of any size, exactly-once output that says whether the state was right.
//!
//! A generator emits `rounds` records for each of `keys` string keys (`k123456`), in an
//! order that visits every key once per round, scattered. A keyed function keeps, per key,
//! a count and a payload of `payload_bytes` that is a function of the key; each later record
//! checks the payload it finds, and the last round emits `key,count,ok` through the
//! transactional file sink. So the committed output is exactly one line per key with the
//! full count and `true` — whatever crashed, restored or rescaled in between — exactly when
//! the state survived intact.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir::connectors::file_sink::{committed_files, FileSink};
use weir::prelude::*;
use weir::state::backend_factory::StateBackendConfig;
use weir::CorruptCheckpointPolicy;

/// The job's name (and its checkpoint directory's).
pub const JOB_NAME: &str = "large-state";

/// How to run the job.
#[derive(Debug, Clone)]
pub struct LargeStateOptions {
    /// Distinct keys.
    pub keys: u64,
    /// Records per key.
    pub rounds: u32,
    /// Bytes of payload kept per key.
    pub payload_bytes: usize,
    /// Parallelism.
    pub parallelism: u32,
    /// Records per second, all readers together (`None`: as fast as it goes).
    pub rate: Option<f64>,
    /// Checkpoint interval.
    pub checkpoint_interval: Duration,
    /// Checkpoints retained.
    pub retained: u32,
    /// Output of the file sink.
    pub output: PathBuf,
    /// Checkpoint directory.
    pub checkpoints: PathBuf,
    /// Resume from the latest retained checkpoint.
    pub resume: bool,
    /// The keyed state backend.
    pub backend: StateBackendConfig,
    /// Fail once after this many records (in-process fault injection).
    pub fail_after: Option<u64>,
    /// Let recovery fall back past committed output when a checkpoint is unusable.
    pub allow_duplicates: bool,
}

impl LargeStateOptions {
    /// Defaults: outputs under `work_dir`, heap state, 100 000 keys of 2 rounds.
    pub fn new(work_dir: &Path) -> Self {
        Self {
            keys: 100_000,
            rounds: 2,
            payload_bytes: 64,
            parallelism: 2,
            rate: None,
            checkpoint_interval: Duration::from_millis(500),
            retained: 2,
            output: work_dir.join("output"),
            checkpoints: work_dir.join("checkpoints"),
            resume: false,
            backend: StateBackendConfig::default(),
            fail_after: None,
            allow_duplicates: false,
        }
    }

    /// Records in all.
    pub fn records(&self) -> u64 {
        self.keys * u64::from(self.rounds)
    }
}

/// A multiplier coprime with `keys`, so that `i ↦ i · m mod keys` visits every key once.
fn scatter(keys: u64) -> u64 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let mut m = 2_654_435_761 % keys.max(1);
    while keys > 1 && gcd(m, keys) != 1 {
        m += 1;
    }
    m.max(1)
}

/// The payload key `key` keeps: `len` bytes that depend on every byte of the key.
pub fn payload_of(key: &str, len: usize) -> Vec<u8> {
    let mut state = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut payload = Vec::with_capacity(len + 8);
    while payload.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        payload.extend_from_slice(&state.to_le_bytes());
    }
    payload.truncate(len);
    payload
}

/// Keeps a count and the payload per key; the last round emits `key,count,ok`.
#[derive(Clone)]
pub struct KeepAndCheck {
    state: ValueState<(u32, Vec<u8>)>,
    rounds: u32,
    payload_bytes: usize,
}

impl KeyedProcessFunction<String, (String, u32), String> for KeepAndCheck {
    fn process_element(
        &mut self,
        (key, _round): (String, u32),
        ctx: &mut KeyedContext<'_, String>,
        out: &mut Collector<'_, String>,
    ) -> Result<(), BoxError> {
        let expected = payload_of(&key, self.payload_bytes);
        let (count, ok) = match self.state.value(ctx)? {
            None => (1, true),
            Some((count, payload)) => (count + 1, payload == expected),
        };
        if count == self.rounds {
            out.collect(format!("{key},{count},{ok}"));
        }
        // A payload found damaged is kept damaged, so the last round reports it.
        let keep = if ok { expected } else { Vec::new() };
        self.state.update(ctx, (count, keep))?;
        Ok(())
    }
}

/// Builds the job.
pub fn build(options: &LargeStateOptions) -> Result<StreamExecutionEnvironment, WeirError> {
    let mut checkpointing = CheckpointConfig::default()
        .with_interval(options.checkpoint_interval)
        .with_retained(options.retained)
        .with_retention_on_cancel(RetentionOnCancel::Retain)
        .with_storage(CheckpointStorageConfig::FileSystem(
            options.checkpoints.clone(),
        ));
    if options.allow_duplicates {
        checkpointing =
            checkpointing.with_corrupt_checkpoint_policy(CorruptCheckpointPolicy::AllowDuplicates);
    }
    let config = ExecutionConfig::default()
        .with_parallelism(options.parallelism)
        .with_checkpointing(checkpointing)
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 3,
            delay: Duration::from_millis(200),
        })
        .with_resume_from_latest_checkpoint(options.resume)
        .with_state_backend(options.backend.clone());
    let env = StreamExecutionEnvironment::new(config)?;
    let keys = options.keys.max(1);
    let multiplier = scatter(keys);
    let mut source = GeneratorSource::new(options.records(), move |i: u64| {
        let key = (i % keys) * multiplier % keys;
        (format!("k{key}"), (i / keys) as u32)
    });
    if let Some(rate) = options.rate {
        source = source.with_rate_limit(rate);
    }
    let failed = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicU64::new(0));
    let fail_after = options.fail_after;
    env.from_source(source, WatermarkStrategy::no_watermarks(), "records")
        .uid("records")
        .map(move |record: (String, u32)| {
            let n = seen.fetch_add(1, Ordering::Relaxed) + 1;
            if fail_after == Some(n) && !failed.swap(true, Ordering::SeqCst) {
                panic!("injected failure after {n} records");
            }
            record
        })
        .name("fault injector")
        .key_by(|record: &(String, u32)| record.0.clone())
        .process(KeepAndCheck {
            state: ValueState::new("count-and-payload"),
            rounds: options.rounds,
            payload_bytes: options.payload_bytes,
        })
        .name("keep and check")
        .uid("keep-and-check")
        .sink_to(
            FileSink::<String>::lines(&options.output).into_two_phase_commit_sink(),
            "committed lines",
        )
        .uid("committed-lines");
    Ok(env)
}

/// What the committed output says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// Lines committed.
    pub lines: u64,
    /// Distinct keys among them.
    pub distinct: u64,
    /// Lines whose count or payload check was wrong.
    pub wrong: u64,
}

impl Verification {
    /// Whether the output is exactly one right line per key.
    pub fn is_exact(&self, options: &LargeStateOptions) -> bool {
        self.lines == options.keys && self.distinct == options.keys && self.wrong == 0
    }
}

/// Reads the committed output.
pub fn verify(options: &LargeStateOptions) -> std::io::Result<Verification> {
    let mut keys = BTreeSet::new();
    let (mut lines, mut wrong) = (0, 0);
    let rounds = options.rounds.to_string();
    for file in committed_files(&options.output)? {
        for line in std::fs::read_to_string(file)?.lines() {
            lines += 1;
            let mut fields = line.split(',');
            let (key, count, ok) = (fields.next(), fields.next(), fields.next());
            keys.insert(key.unwrap_or_default().to_string());
            if count != Some(rounds.as_str()) || ok != Some("true") {
                wrong += 1;
            }
        }
    }
    Ok(Verification {
        lines,
        distinct: keys.len() as u64,
        wrong,
    })
}

/// The process's peak resident memory (`VmHWM`), in bytes, where the system tells it.
pub fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_visited_once_per_round() {
        for keys in [1u64, 7, 1000, 2_654_435_761] {
            let m = scatter(keys);
            let sample = keys.min(5000);
            let visited: BTreeSet<u64> = (0..sample).map(|i| i * m % keys).collect();
            assert_eq!(visited.len() as u64, sample, "{keys} keys");
        }
        assert_eq!(payload_of("k1", 16), payload_of("k1", 16));
        assert_ne!(payload_of("k1", 16), payload_of("k2", 16));
    }
}
