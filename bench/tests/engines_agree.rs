//! Weir's pipelines read every record and emit what the hand-written floor emits, for every
//! workload the floor has (stateless, keyed, keyed_strings, q0–q2), with and without
//! checkpoints, with record origins traced, and at
//! parallelism 1 and 2, over generated inputs. The window and join queries are checked in
//! `nexmark_windows.rs`.

use weir_bench::kv_input::{write_kv_input, KvInputSpec};
use weir_bench::nexmark::generator::{write_nexmark_input, NexmarkInputSpec};
use weir_bench::weir_jobs::{EventSource, Output};
use weir_bench::{floor, weir_jobs, Engine, InputKind, Workload};

#[test]
fn weir_pipelines_match_the_floor() {
    let dir = tempfile::tempdir().unwrap();
    let kv = dir.path().join("kv");
    let kvs = dir.path().join("kvs");
    let nexmark = dir.path().join("nexmark");
    let spec = KvInputSpec {
        rows: 30_000,
        keys: 500,
        seed: 5,
        files: 3,
        string_keys: false,
    };
    write_kv_input(&kv, &spec).unwrap();
    write_kv_input(
        &kvs,
        &KvInputSpec {
            string_keys: true,
            ..spec
        },
    )
    .unwrap();
    write_nexmark_input(
        &nexmark,
        &NexmarkInputSpec {
            events: 30_000,
            seed: 5,
            files: 3,
            generator_version: weir_bench::nexmark::generator::GENERATOR_VERSION,
        },
    )
    .unwrap();
    for workload in Workload::ALL.into_iter().filter(|w| w.has_floor()) {
        let input = match workload.input() {
            InputKind::KeyValue => &kv,
            InputKind::StringKeyValue => &kvs,
            InputKind::Nexmark => &nexmark,
        };
        let expected = floor::compute(workload, input).unwrap();
        assert_eq!(expected.records, 30_000);
        assert!(expected.records_out > 0, "{workload} emits nothing");
        // The traced run carries every record's origin through the pipeline (what the
        // attempt after a failure of user code does) and must emit the same.
        for (parallelism, checkpointed, traced) in
            [(1, false, false), (2, true, false), (2, true, true)]
        {
            let checkpoints = dir.path().join(format!("checkpoints-{workload}-{traced}"));
            let (figures, _) = weir_jobs::run(
                workload,
                &EventSource::Files(input.clone()),
                parallelism,
                checkpointed.then_some(checkpoints.as_path()),
                &Output::Discard,
                traced,
            )
            .unwrap();
            let engine = match (checkpointed, traced) {
                (true, true) => Engine::WeirTraced,
                (true, false) => Engine::Weir,
                (false, _) => Engine::WeirNoCheckpoints,
            };
            assert_eq!(figures.engine, engine);
            assert_eq!(
                figures.records, expected.records,
                "{workload} p{parallelism}"
            );
            assert_eq!(
                figures.records_out,
                Some(expected.records_out),
                "{workload} p{parallelism}"
            );
            assert!(figures.cpu_seconds > 0.0 && figures.peak_rss_mib > 0.0);
        }
    }
}
