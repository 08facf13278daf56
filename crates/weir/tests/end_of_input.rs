//! What operators emit when their bounded input ends: keyed functions visit every key with
//! its state, and what they emit is committed exactly once by transactional sinks, with
//! checkpoints and failures too (the end of data comes before the final checkpoint's barrier,
//! as in Flink's FLIP-147).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir::connectors::file_sink::committed_files;
use weir::prelude::*;

const WORDS: u64 = 30_000;
const DISTINCT: u64 = 97;

fn word(i: u64) -> String {
    format!("w{}", common::mix(i) % DISTINCT)
}

fn expected_counts() -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for i in 0..WORDS {
        *counts.entry(word(i)).or_insert(0) += 1;
    }
    counts
}

/// Counts words and emits only each word's final count, at the end of the input.
#[derive(Clone)]
struct FinalCount {
    seen: ValueState<u64>,
}

impl KeyedProcessFunction<String, String, String> for FinalCount {
    fn process_element(
        &mut self,
        _word: String,
        ctx: &mut KeyedContext<'_, String>,
        _out: &mut Collector<'_, String>,
    ) -> Result<(), BoxError> {
        let n = self.seen.value(ctx)?.unwrap_or(0) + 1;
        Ok(self.seen.update(ctx, n)?)
    }

    fn end_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, String>,
        out: &mut Collector<'_, String>,
    ) -> Result<(), BoxError> {
        ctx.for_each_key(&self.seen, |key| {
            let n = self.seen.value(key)?.unwrap_or(0);
            out.collect(format!("{} {n}", key.current_key()));
            Ok(())
        })
    }
}

fn read_counts(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut lines = Vec::new();
    for file in committed_files(dir).unwrap() {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            let (word, n) = line.split_once(' ').unwrap();
            lines.push((word.to_string(), n.parse().unwrap()));
        }
    }
    lines.sort();
    lines
}

/// The final counts, once per word, committed by the file sink whether or not the job
/// checkpoints and fails over on the way.
fn run_final_count(checkpointing: bool, fail_once: bool) {
    let out = tempfile::tempdir().unwrap();
    let mut config = ExecutionConfig::default().with_parallelism(2);
    if checkpointing {
        config = common::failover_config(2, Duration::from_millis(20));
    }
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let failed = Arc::new(AtomicBool::new(!fail_once));
    env.from_source(
        GeneratorSource::new(WORDS, word).with_rate_limit(100_000.0),
        WatermarkStrategy::no_watermarks(),
        "words",
    )
    .uid("words")
    .map(move |w: String| {
        if w == "w3" && !failed.swap(true, Ordering::SeqCst) {
            panic!("injected failure");
        }
        w
    })
    .key_by(|w: &String| w.clone())
    .process(FinalCount {
        seen: ValueState::new("seen"),
    })
    .uid("final counts")
    .sink_to(FileSink::lines(out.path()), "counts")
    .uid("counts");
    let result = env.execute("final counts").unwrap();
    if fail_once {
        assert!(result.restarts >= 1, "the failure was not injected");
    }
    let expected: Vec<(String, u64)> = expected_counts().into_iter().collect();
    assert_eq!(read_counts(out.path()), expected);
}

#[test]
fn keyed_end_of_input_emits_each_keys_final_state_without_checkpoints() {
    run_final_count(false, false);
}

#[test]
fn what_end_of_input_emits_is_committed_by_the_final_checkpoint() {
    run_final_count(true, false);
}

#[test]
fn end_of_input_output_is_exactly_once_across_a_failover() {
    run_final_count(true, true);
}

#[test]
fn end_of_input_lines_reach_every_exactly_once_sink() {
    let out = tempfile::tempdir().unwrap();
    let env =
        StreamExecutionEnvironment::new(common::failover_config(1, Duration::from_millis(10)))
            .unwrap();
    env.generate(100, |i| i)
        .process(common::MarkEnd::default())
        .sink_to(FileSink::lines(out.path()), "lines");
    env.execute("trailer").unwrap();
    let lines = common::committed_lines(out.path());
    assert_eq!(lines.len(), 101, "{lines:?}");
    assert_eq!(lines.last().map(String::as_str), Some("end-input-0"));
}
