//! Side outputs: read in the same chain and across a shuffle, with watermarks, from process
//! functions, keyed process functions and windows; a side output nobody reads is dropped.

use std::time::Duration;

use weir::prelude::*;
use weir::windowing::TumblingEventTimeWindows;

/// Routes multiples of 3 to `threes` (as text) and of 5 to `fives`; the rest stays.
#[derive(Clone)]
struct Route {
    threes: OutputTag<String>,
    fives: OutputTag<u64>,
}

impl ProcessFunction<u64, u64> for Route {
    fn process_element(
        &mut self,
        value: u64,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        if value.is_multiple_of(3) {
            ctx.output(&self.threes, format!("three:{value}"))?;
        } else if value.is_multiple_of(5) {
            ctx.output(&self.fives, value)?;
        } else {
            out.collect(value);
        }
        Ok(())
    }
}

#[test]
fn side_outputs_reach_chained_and_shuffled_consumers() {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2)).unwrap();
    let threes = OutputTag::<String>::new("threes");
    let fives = OutputTag::<u64>::new("fives");
    let routed = env.generate(1_000, |i| i).process(Route {
        threes: threes.clone(),
        fives: fives.clone(),
    });
    // Chained: same parallelism, forward.
    let three_texts = routed.side_output(&threes).collect();
    // Across a shuffle: keyed by the last digit, counted per key.
    let five_counts = routed
        .side_output(&fives)
        .key_by(|v: &u64| v % 10)
        .count()
        .collect();
    let rest = routed.collect();
    env.execute("routing").unwrap();
    let mut texts = three_texts.take();
    texts.sort();
    let mut expected: Vec<String> = (0..1_000)
        .filter(|v| v % 3 == 0)
        .map(|v| format!("three:{v}"))
        .collect();
    expected.sort();
    assert_eq!(texts, expected);
    let mut finals = std::collections::BTreeMap::new();
    for (digit, count) in five_counts.take() {
        let c = finals.entry(digit).or_insert(0);
        *c = (*c).max(count);
    }
    let fives_total = (0..1_000u64).filter(|v| v % 3 != 0 && v % 5 == 0).count() as u64;
    assert_eq!(finals.values().sum::<u64>(), fives_total);
    assert!(finals.keys().all(|d| *d == 0 || *d == 5));
    assert_eq!(
        rest.take().len() as u64,
        1_000 - (0..1_000u64).filter(|v| v % 3 == 0 || v % 5 == 0).count() as u64
    );
}

/// Sends every record to a side output as well as the main one.
#[derive(Clone)]
struct Copy {
    copy: OutputTag<(u64, i64)>,
}

impl KeyedProcessFunction<u64, (u64, i64), u64> for Copy {
    fn process_element(
        &mut self,
        value: (u64, i64),
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        ctx.output(&self.copy, value)?;
        out.collect(value.0);
        Ok(())
    }
}

#[test]
fn watermarks_and_timestamps_reach_side_output_consumers() {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2)).unwrap();
    let copy = OutputTag::<(u64, i64)>::new("copy");
    let strategy = WatermarkStrategy::for_monotonous_timestamps()
        .with_timestamp_assigner(|e: &(u64, i64), _| e.1);
    let events: Vec<(u64, i64)> = (0..100).map(|i| (i % 4, i as i64 * 10)).collect();
    let main = env
        .from_source(CollectionSource::new(events), strategy, "events")
        .key_by(|e: &(u64, i64)| e.0)
        .process(Copy { copy: copy.clone() });
    // The copies carry their timestamps and the watermark: event-time windows fire on them.
    let per_window = main
        .side_output(&copy)
        .key_by(|e: &(u64, i64)| e.0)
        .window(TumblingEventTimeWindows::of(Duration::from_millis(100)))
        .aggregate(Count)
        .collect();
    main.sink_to(DiscardingSink, "main");
    env.execute("copies").unwrap();
    let mut counts = per_window.take();
    counts.sort();
    // 100 events over 1 000 ms, 4 keys: 10 windows × 4 keys, each holding 10 / 4 events.
    assert_eq!(counts.len(), 40);
    assert_eq!(counts.iter().sum::<u64>(), 100);
}

#[derive(Clone)]
struct Count;

impl AggregateFunction<(u64, i64), u64, u64> for Count {
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, _: (u64, i64), acc: &mut u64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
    fn merge(&self, a: u64, b: u64) -> u64 {
        a + b
    }
}

#[test]
fn a_side_output_of_a_source_is_refused() {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap();
    let tag = OutputTag::<u64>::new("nope");
    env.generate(3, |i| i)
        .side_output(&tag)
        .sink_to(DiscardingSink, "out");
    let error = env.execute("refused").unwrap_err();
    assert!(
        error.to_string().contains("side_output(\"nope\")"),
        "{error}"
    );
}
