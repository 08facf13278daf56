//! Where records go: hash partitioning keeps a key on one subtask, rebalance spreads
//! evenly, broadcast reaches everyone, union merges inputs, forward keeps subtask indices.

use std::collections::{HashMap, HashSet};

use weir::state::key_group::{operator_index_for_key_group, KeyGroupAssigner};
use weir::{
    BoxError, Collector, ExecutionConfig, KeyedContext, KeyedProcessFunction, ProcessContext,
    ProcessFunction, StreamExecutionEnvironment,
};

fn env(parallelism: u32) -> StreamExecutionEnvironment {
    StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(parallelism))
        .unwrap()
}

/// Tags each record with the subtask that processed it.
#[derive(Clone)]
struct TagSubtask;
impl ProcessFunction<u64, (u64, u32)> for TagSubtask {
    fn process_element(
        &mut self,
        value: u64,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_, (u64, u32)>,
    ) -> Result<(), BoxError> {
        out.collect((value, ctx.subtask_index()));
        Ok(())
    }
}

/// Tags each keyed record with its key and the subtask that processed it.
#[derive(Clone)]
struct TagKeyedSubtask;
impl KeyedProcessFunction<String, u64, (String, u32)> for TagKeyedSubtask {
    fn process_element(
        &mut self,
        _value: u64,
        ctx: &mut KeyedContext<'_, String>,
        out: &mut Collector<'_, (String, u32)>,
    ) -> Result<(), BoxError> {
        out.collect((ctx.current_key().clone(), ctx.runtime().subtask_index()));
        Ok(())
    }
}

#[test]
fn every_record_of_a_key_reaches_the_subtask_owning_its_key_group() {
    let parallelism = 3;
    let env = env(parallelism);
    let out = env
        .generate(30_000, |i| i)
        .key_by(|i: &u64| format!("key-{}", i % 97))
        .process(TagKeyedSubtask)
        .collect();
    env.execute("routing").unwrap();
    let tagged = out.take();
    assert_eq!(tagged.len(), 30_000);
    let mut owner: HashMap<String, HashSet<u32>> = HashMap::new();
    for (key, subtask) in &tagged {
        owner.entry(key.clone()).or_default().insert(*subtask);
    }
    assert_eq!(owner.len(), 97);
    let mut assigner = KeyGroupAssigner::new(128);
    let mut used = HashSet::new();
    for (key, subtasks) in owner {
        assert_eq!(subtasks.len(), 1, "key {key} seen on subtasks {subtasks:?}");
        let expected =
            operator_index_for_key_group(128, parallelism, assigner.key_group(&key).unwrap());
        let actual = subtasks.into_iter().next().unwrap();
        assert_eq!(actual, expected, "key {key}");
        used.insert(actual);
    }
    assert_eq!(used.len(), 3, "97 keys should use all 3 subtasks");
}

#[test]
fn rebalance_spreads_records_evenly() {
    let env = env(4);
    let out = env
        .generate(10_001, |i| i)
        .parallelism(1)
        .rebalance()
        .process(TagSubtask)
        .collect();
    env.execute("rebalance").unwrap();
    let mut per_subtask = [0u64; 4];
    for (_, s) in out.take() {
        per_subtask[s as usize] += 1;
    }
    let (min, max) = (
        per_subtask.iter().min().unwrap(),
        per_subtask.iter().max().unwrap(),
    );
    assert_eq!(per_subtask.iter().sum::<u64>(), 10_001);
    assert!(max - min <= 1, "uneven: {per_subtask:?}");
}

#[test]
fn broadcast_reaches_every_subtask() {
    let env = env(3);
    let out = env
        .generate(100, |i| i)
        .parallelism(1)
        .broadcast()
        .process(TagSubtask)
        .collect();
    env.execute("broadcast").unwrap();
    let tagged = out.take();
    assert_eq!(tagged.len(), 300);
    for s in 0..3 {
        let mut values: Vec<u64> = tagged.iter().filter(|t| t.1 == s).map(|t| t.0).collect();
        values.sort_unstable();
        assert_eq!(values, (0..100).collect::<Vec<_>>(), "subtask {s}");
    }
}

#[test]
fn forward_keeps_records_on_their_subtask_and_preserves_order() {
    let env = env(2);
    let out = env
        .generate(5_000, |i| i)
        .process(TagSubtask)
        .disable_chaining()
        .forward()
        .map(|(v, s): (u64, u32)| (v, s))
        .collect();
    env.execute("forward").unwrap();
    let mut by_subtask: HashMap<u32, Vec<u64>> = HashMap::new();
    for (v, s) in out.take() {
        by_subtask.entry(s).or_default().push(v);
    }
    for values in by_subtask.values() {
        assert!(
            values.windows(2).all(|w| w[0] < w[1]),
            "order kept within a subtask"
        );
    }
    assert_eq!(by_subtask.values().map(Vec::len).sum::<usize>(), 5_000);
}

#[test]
fn union_merges_both_inputs() {
    let env = env(2);
    let evens = env.generate(1_000, |i| i * 2);
    let odds = env.from_collection((0..500u64).map(|i| i * 2 + 1).collect());
    let out = evens.union(&odds).map(|x| x).collect();
    let result = env.execute("union").unwrap();
    let mut all = out.take();
    all.sort_unstable();
    let mut expected: Vec<u64> = (0..1_000)
        .map(|i| i * 2)
        .chain((0..500).map(|i| i * 2 + 1))
        .collect();
    expected.sort_unstable();
    assert_eq!(all, expected);
    assert_eq!(result.operator("Map").unwrap().records_in, 1_500);
}

#[test]
fn flat_map_filter_and_fan_out() {
    let env = env(2);
    let words = env.from_collection(vec!["a b c".to_string(), "d e".to_string()]);
    let split = words.flat_map(|line: String, out: &mut Collector<'_, String>| {
        line.split(' ').for_each(|w| out.collect(w.to_string()))
    });
    let not_c = split.filter(|w| w != "c").collect();
    let all = split.map(|w| w.to_uppercase()).collect();
    let result = env.execute("fan out").unwrap();
    let (mut a, mut b) = (not_c.take(), all.take());
    a.sort();
    b.sort();
    assert_eq!(a, vec!["a", "b", "d", "e"]);
    assert_eq!(b, vec!["A", "B", "C", "D", "E"]);
    let fm = result.operator("Flat Map").unwrap();
    assert_eq!((fm.records_in, fm.records_out), (2, 5));
}
