//! Errors: user function panics and errors fail the job with operator, subtask and cause;
//! cancellation never hangs; invalid configurations and graphs are rejected up front.

use std::sync::mpsc;
use std::time::Duration;
use weir::WatermarkStrategy;

use weir::connectors::discard::DiscardingSink;
use weir::connectors::generator::GeneratorSource;
use weir::error::{GraphError, TaskError};
use weir::{
    BoxError, Collector, ExecutionConfig, JobExecutionResult, ProcessContext, ProcessFunction,
    StreamExecutionEnvironment, WeirError,
};

fn env(parallelism: u32) -> StreamExecutionEnvironment {
    StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(parallelism))
        .unwrap()
}

/// Runs a job on another thread and fails the test if it does not end within a minute.
fn execute_with_watchdog(
    build: impl FnOnce(&StreamExecutionEnvironment) + Send + 'static,
) -> Result<JobExecutionResult, WeirError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let env = env(2);
        build(&env);
        let _ = tx.send(env.execute("watched"));
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the job hung instead of failing")
}

fn failure(result: Result<JobExecutionResult, WeirError>) -> weir::error::OperatorFailure {
    match result {
        Err(WeirError::JobFailed { failure, .. }) => *failure,
        other => panic!("expected a job failure, got {other:?}"),
    }
}

#[test]
fn panicking_map_fails_the_job_with_operator_subtask_and_message() {
    let f = failure(execute_with_watchdog(|env| {
        env.generate(10_000, |i| i)
            .map(|i| {
                if i == 7_777 {
                    panic!("cannot handle record {i}");
                }
                i
            })
            .name("exploding map")
            .sink_to(DiscardingSink, "discard");
    }));
    assert_eq!(f.operator, "exploding map");
    assert!(f.subtask < 2);
    assert!(matches!(f.cause, TaskError::UserPanic { .. }));
    let text = f.to_string();
    assert!(text.contains("cannot handle record 7777"), "{text}");
    assert!(
        text.contains(&format!("subtask {}/2", f.subtask + 1)),
        "{text}"
    );
}

#[derive(Clone)]
struct RejectNegative;
impl ProcessFunction<i64, i64> for RejectNegative {
    fn process_element(
        &mut self,
        value: i64,
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_, i64>,
    ) -> Result<(), BoxError> {
        if value < 0 {
            return Err(format!("negative value {value}").into());
        }
        out.collect(value);
        Ok(())
    }
}

#[test]
fn error_returned_by_a_process_function_fails_the_job() {
    let f = failure(execute_with_watchdog(|env| {
        env.from_collection(vec![1i64, 2, -3, 4])
            .process(RejectNegative)
            .name("validate")
            .collect();
    }));
    assert_eq!(f.operator, "validate");
    assert!(matches!(f.cause, TaskError::User(_)));
    assert!(f.to_string().contains("negative value -3"), "{f}");
}

#[test]
fn failing_sink_cancels_an_unbounded_source_without_hanging() {
    let f = failure(execute_with_watchdog(|env| {
        env.from_source(
            GeneratorSource::unbounded(|i| i),
            WatermarkStrategy::no_watermarks(),
            "endless",
        )
        .rebalance()
        .map(|i: u64| {
            assert!(i < 50_000, "sink-side failure at {i}");
            i
        })
        .name("guard")
        .sink_to(DiscardingSink, "discard");
    }));
    assert_eq!(f.operator, "guard");
    assert!(f.to_string().contains("sink-side failure"), "{f}");
}

#[test]
fn panicking_key_selector_fails_the_job() {
    let result = execute_with_watchdog(|env| {
        env.generate(1_000, |i| i)
            .key_by(|i: &u64| {
                assert!(*i != 500, "bad key {i}");
                *i
            })
            .count()
            .sink_to(DiscardingSink, "discard");
    });
    let f = failure(result);
    assert!(f.to_string().contains("bad key 500"), "{f}");
}

#[test]
fn invalid_configuration_is_rejected_with_the_option_name() {
    let err = StreamExecutionEnvironment::new(ExecutionConfig::default().with_buffer_size(0))
        .err()
        .unwrap();
    assert_eq!(err.option, "buffer_size");
}

#[test]
fn forward_between_different_parallelisms_is_rejected() {
    let env = env(2);
    env.generate(10, |i| i)
        .forward()
        .map(|i| i)
        .parallelism(3)
        .collect();
    let err = env.execute("bad forward").unwrap_err();
    assert!(
        matches!(
            err,
            WeirError::Graph(GraphError::ForwardParallelismMismatch { .. })
        ),
        "{err}"
    );
}

#[test]
fn configuring_a_union_is_rejected() {
    let env = env(1);
    let a = env.generate(10, |i| i);
    let b = env.generate(10, |i| i);
    a.union(&b).name("not an operator");
    let line = line!() - 1;
    let err = env.explain("misuse").unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "`.name()` at {}:{line} applies to an operator",
            file!()
        )),
        "{err}"
    );
    // After a repartitioning, too, the error points at the call.
    let env = self::env(1);
    env.generate(10, |i| i).rebalance().uid("misplaced");
    let line = line!() - 1;
    let err = env.execute("misuse").unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("`.uid()` at {}:{line}", file!())),
        "{err}"
    );
}

#[test]
fn collection_source_is_not_parallel() {
    let parallel = env(4);
    parallel.from_collection(vec![1u8]).parallelism(2).collect();
    let err = parallel.execute("parallel collection").unwrap_err();
    assert!(err.to_string().contains("supports at most 1"), "{err}");
    // Without an explicit parallelism it runs with 1, the rest of the job with 4.
    let env = env(4);
    let out = env.from_collection(vec![1u8, 2]).map(|x| x).collect();
    let plan = env.plan("collection").unwrap();
    assert_eq!(plan.stream_graph.nodes[0].parallelism, 1);
    assert_eq!(plan.stream_graph.nodes[1].parallelism, 4);
    env.execute("collection").unwrap();
    assert_eq!(out.take().len(), 2);
}

#[test]
fn an_environment_runs_one_job() {
    let env = env(1);
    env.generate(10, |i| i).collect();
    env.execute("first").unwrap();
    env.generate(10, |i| i).collect();
    assert!(env.execute("second").is_err());
}
