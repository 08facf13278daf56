//! Keyed aggregations at several parallelisms equal a sequential computation on the same
//! input.

use std::collections::HashMap;

use weir::{ExecutionConfig, StreamExecutionEnvironment};

const RECORDS: u64 = 200_000;
const KEYS: u64 = 1_000;

/// A deterministic, well-mixed key for record `i` (SplitMix64).
fn key_of(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % KEYS
}

fn env(parallelism: u32) -> StreamExecutionEnvironment {
    StreamExecutionEnvironment::new(
        ExecutionConfig::default()
            .with_parallelism(parallelism)
            .with_buffer_size(256),
    )
    .unwrap()
}

/// Final value per key of a rolling aggregation: the largest count seen for that key.
fn final_counts(updates: Vec<(u64, u64)>) -> HashMap<u64, u64> {
    let mut last = HashMap::new();
    for (k, c) in updates {
        let e = last.entry(k).or_insert(0);
        *e = (*e).max(c);
    }
    last
}

fn sequential_counts() -> HashMap<u64, u64> {
    let mut expected = HashMap::new();
    for i in 0..RECORDS {
        *expected.entry(key_of(i)).or_insert(0) += 1;
    }
    expected
}

#[test]
fn keyed_count_matches_sequential_at_parallelism_1_2_4() {
    let expected = sequential_counts();
    for parallelism in [1, 2, 4] {
        let env = env(parallelism);
        let out = env
            .generate(RECORDS, key_of)
            .key_by(|k: &u64| *k)
            .count()
            .collect();
        let result = env.execute("keyed count").unwrap();
        let updates = out.take();
        assert_eq!(
            updates.len() as u64,
            RECORDS,
            "one update per record at p={parallelism}"
        );
        // Every update of a key is one more than the previous: counts 1..=n, each once.
        let mut per_key: HashMap<u64, Vec<u64>> = HashMap::new();
        for (k, c) in &updates {
            per_key.entry(*k).or_default().push(*c);
        }
        for (k, mut counts) in per_key {
            counts.sort_unstable();
            let n = expected[&k];
            assert_eq!(
                counts,
                (1..=n).collect::<Vec<_>>(),
                "key {k} at p={parallelism}"
            );
        }
        assert_eq!(final_counts(updates), expected, "p={parallelism}");
        let count_op = result.operator("Keyed Count").unwrap();
        assert_eq!(count_op.records_in, RECORDS);
        assert_eq!(count_op.parallelism, parallelism);
    }
}

#[test]
fn keyed_sum_and_reduce_match_sequential() {
    let mut expected_sum: HashMap<u64, u64> = HashMap::new();
    let mut expected_max: HashMap<u64, u64> = HashMap::new();
    for i in 0..RECORDS {
        *expected_sum.entry(key_of(i)).or_insert(0) += i;
        let m = expected_max.entry(key_of(i)).or_insert(0);
        *m = (*m).max(i);
    }
    for parallelism in [1, 3] {
        let env = env(parallelism);
        let pairs = env.generate(RECORDS, |i| (key_of(i), i));
        let sums = pairs
            .key_by(|p: &(u64, u64)| p.0)
            .sum(|p: &(u64, u64)| p.1)
            .collect();
        let maxima = pairs
            .key_by(|p: &(u64, u64)| p.0)
            .reduce(|a, b| if a.1 >= b.1 { a } else { b })
            .collect();
        env.execute("sum and reduce").unwrap();
        assert_eq!(
            final_counts(sums.take()),
            expected_sum,
            "sum at p={parallelism}"
        );
        assert_eq!(
            final_counts(maxima.take()),
            expected_max,
            "reduce at p={parallelism}"
        );
    }
}

#[test]
fn keyed_process_function_keeps_value_state_per_key() {
    use weir::{BoxError, Collector, KeyedContext, KeyedProcessFunction, ValueState};

    /// Emits each key's running total once the input ends… per record, the running total.
    #[derive(Clone)]
    struct RunningTotal {
        total: ValueState<u64>,
    }
    impl KeyedProcessFunction<u64, (u64, u64), (u64, u64)> for RunningTotal {
        fn process_element(
            &mut self,
            value: (u64, u64),
            ctx: &mut KeyedContext<'_, u64>,
            out: &mut Collector<'_, (u64, u64)>,
        ) -> Result<(), BoxError> {
            assert_eq!(*ctx.current_key(), value.0);
            let total = self.total.value(ctx)?.unwrap_or(0) + value.1;
            self.total.update(ctx, total)?;
            out.collect((value.0, total));
            Ok(())
        }
    }

    let env = env(2);
    let out = env
        .generate(RECORDS, |i| (key_of(i), 1))
        .key_by(|p: &(u64, u64)| p.0)
        .process(RunningTotal {
            total: ValueState::new("total"),
        })
        .collect();
    env.execute("keyed process").unwrap();
    assert_eq!(final_counts(out.take()), sequential_counts());
}

#[test]
fn key_groups_follow_the_keyed_operators_own_max_parallelism() {
    // The keyed operator has 16 key groups; an operator chained after it declares 4. Routing
    // and state must both use the keyed operator's 16.
    let env = env(3);
    let out = env
        .generate(20_000, key_of)
        .key_by(|k: &u64| *k)
        .count()
        .max_parallelism(16)
        .map(|pair| pair)
        .max_parallelism(4)
        .collect();
    env.execute("custom key groups").unwrap();
    let mut expected = HashMap::new();
    for i in 0..20_000 {
        *expected.entry(key_of(i)).or_insert(0) += 1;
    }
    assert_eq!(final_counts(out.take()), expected);
}

/// Counts how often a key is serialized (what hashing it into a key group needs).
static KEY_ENCODINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A key that counts its serializations.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Deserialize)]
struct CountedKey(String);

impl serde::Serialize for CountedKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        KEY_ENCODINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.serialize(serializer)
    }
}

#[test]
fn a_key_is_hashed_once_where_it_is_routed_and_borrowed_keys_give_the_same_results() {
    use weir::prelude::*;
    let records = 20_000u64;
    let build = |env: &StreamExecutionEnvironment, borrowed: bool| {
        let keyed = env.generate(records, |i| (CountedKey(format!("k{}", key_of(i))), 1u64));
        let keyed = if borrowed {
            keyed.key_by_ref(|(k, _): &(CountedKey, u64)| k)
        } else {
            keyed.key_by(|(k, _): &(CountedKey, u64)| k.clone())
        };
        keyed.sum(|(_, n): &(CountedKey, u64)| *n).collect()
    };
    let mut results = Vec::new();
    for borrowed in [false, true] {
        KEY_ENCODINGS.store(0, std::sync::atomic::Ordering::Relaxed);
        let env = env(2);
        let sums = build(&env, borrowed);
        env.execute("counted keys").unwrap();
        let encodings = KEY_ENCODINGS.load(std::sync::atomic::Ordering::Relaxed);
        // Once at the sender to route it; the receiver takes the key group from the batch.
        assert_eq!(encodings, records, "borrowed: {borrowed}");
        let mut last: HashMap<String, u64> = HashMap::new();
        for (k, n) in sums.take() {
            let e = last.entry(k.0).or_insert(0);
            *e = (*e).max(n);
        }
        results.push(last);
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0].values().sum::<u64>(), records);
}
