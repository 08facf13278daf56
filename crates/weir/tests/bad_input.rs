//! Bad input is never silent: a path that matches nothing, rows with the wrong number of
//! fields, rows that do not decode — each is an error that says what and where once, or a
//! count in the job's result.

use std::path::Path;

use weir::connectors::malformed::MalformedRecordError;
use weir::error::{GraphError, TaskError};
use weir::prelude::*;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Row {
    id: u32,
    name: String,
    score: f64,
}

fn env() -> StreamExecutionEnvironment {
    StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap()
}

fn read_rows(source: FileSource<Row>) -> Result<(Vec<Row>, JobExecutionResult), WeirError> {
    let env = env();
    let rows = env
        .from_source(source, WatermarkStrategy::no_watermarks(), "rows")
        .collect();
    let result = env.execute("rows")?;
    Ok((rows.take(), result))
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn a_path_that_matches_nothing_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    // An empty directory, a glob that matches nothing, a path that does not exist.
    let glob = dir.path().join("*.csv");
    let missing = dir.path().join("no/such/dir");
    for (path, says) in [
        (dir.path().to_path_buf(), "matches no file"),
        (glob, "matches no file"),
        (missing, "does not exist"),
    ] {
        let err = read_rows(FileSource::csv(&path)).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&*path.to_string_lossy()) && text.contains(says),
            "{text}"
        );
    }
}

#[test]
fn a_monitoring_source_may_start_empty() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let rows = env
        .from_source(
            FileSource::<Row>::csv(dir.path()).monitor(std::time::Duration::from_millis(10)),
            WatermarkStrategy::no_watermarks(),
            "rows",
        )
        .collect();
    let client = env.execute_async("monitor").unwrap();
    write(dir.path(), "late.csv", "id,name,score\n1,a,1.5\n");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let mut got = Vec::new();
    while got.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the late file was not read"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
        got.extend(rows.take());
    }
    client.cancel().unwrap();
    assert_eq!(got[0].name, "a");
}

#[test]
fn rows_with_extra_fields_are_malformed_unless_the_source_is_flexible() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "rows.csv",
        "id,name,score\n1,a,1.0\n500,name500,1.0,oops\n2,b,2.0\n",
    );
    let err = read_rows(FileSource::csv(dir.path())).unwrap_err();
    let bad = err.malformed_record().expect("a malformed record").clone();
    assert_eq!(bad.raw, "500,name500,1.0,oops");
    assert!(
        bad.error.reason.contains("expected 3 fields, found 4"),
        "{err}"
    );
    assert!(
        matches!(&bad.origin, RecordOrigin::File { line: 3, .. }),
        "{:?}",
        bad.origin
    );

    let (rows, result) =
        read_rows(FileSource::csv(dir.path()).on_malformed(MalformedRecordPolicy::Skip)).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(result.operator("Source: rows").unwrap().records_skipped, 1);

    // Flexible: the extra field is ignored, as the csv crate does when decoding by name.
    let (rows, _) = read_rows(FileSource::csv(dir.path()).flexible()).unwrap();
    assert_eq!(rows.len(), 3);
}

#[test]
fn a_malformed_row_is_a_typed_error_with_one_line_number_and_the_column() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("id,name,score\n");
    for i in 0..5000 {
        text.push_str(&format!("{i},n{i},1.5\n"));
    }
    text.push_str("5000,n5000,notanumber\n");
    write(dir.path(), "census-0.csv", &text);
    let err = read_rows(FileSource::csv(dir.path())).unwrap_err();

    // Typed: the job's error carries the record, located.
    let WeirError::JobFailed { failure, .. } = &err else {
        panic!("not a job failure: {err}");
    };
    let cause = match &failure.cause {
        TaskError::Operator { cause, .. } => cause.as_ref(),
        cause => cause,
    };
    let TaskError::MalformedRecord(MalformedRecordError { record }) = cause else {
        panic!("not a malformed-record error: {err}");
    };
    assert_eq!(failure.operator, "Source: rows");
    assert_eq!(record.error.column.as_deref(), Some("score"));
    let file = dir.path().join("census-0.csv");
    assert_eq!(
        record.origin,
        RecordOrigin::File {
            file: file.to_string_lossy().into_owned(),
            line: 5002
        }
    );

    // Said once, right: one line number, the column's name, the value.
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "{}:5002, column score: invalid float literal \"notanumber\"",
            file.display()
        )),
        "{text}"
    );
    assert!(!text.contains("5001") && !text.contains("byte"), "{text}");
    // Debug prints the same.
    assert_eq!(format!("{err:?}"), text);
}

#[test]
fn skipped_and_dead_lettered_rows_are_counted_in_the_result_without_a_subscriber() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("id,name,score\n");
    for i in 0..40 {
        if i % 4 == 0 {
            text.push_str(&format!("x{i},n{i},1\n"));
        } else {
            text.push_str(&format!("{i},n{i},1\n"));
        }
    }
    write(dir.path(), "rows.csv", &text);
    let (rows, result) =
        read_rows(FileSource::csv(dir.path()).on_malformed(MalformedRecordPolicy::Skip)).unwrap();
    assert_eq!(rows.len(), 30);
    let source = result.operator("Source: rows").unwrap();
    assert_eq!(
        (source.records_skipped, source.records_dead_lettered),
        (10, 0)
    );
    assert!(
        result
            .to_string()
            .contains("Source: rows: 10 malformed records skipped, 0 sent to dead letters"),
        "{result}"
    );

    let env = env();
    let all = env
        .from_source(
            FileSource::<Row>::csv(dir.path()).with_dead_letters(),
            WatermarkStrategy::no_watermarks(),
            "rows",
        )
        .collect();
    let result = env.execute("dead letters").unwrap();
    assert_eq!(all.take().iter().filter(|r| r.is_err()).count(), 10);
    let source = result.operator("Source: rows").unwrap();
    assert_eq!(
        (source.records_skipped, source.records_dead_lettered),
        (0, 10)
    );
    assert!(
        result
            .to_string()
            .contains("0 malformed records skipped, 10 sent to dead letters"),
        "{result}"
    );
}

#[test]
fn executing_twice_says_so() {
    let env = env();
    env.generate(3, |i| i).collect();
    env.execute("once").unwrap();
    let err = env.execute("twice").unwrap_err();
    assert!(
        matches!(&err, WeirError::Graph(GraphError::AlreadyExecuted { job }) if job == "once"),
        "{err}"
    );
    assert!(err.to_string().contains("already executed"), "{err}");
}

#[test]
fn shortcuts_configure_the_job_and_are_checked_when_it_runs() {
    let zero = env();
    zero.set_parallelism(0);
    zero.generate(3, |i| i).collect();
    let err = zero.execute("zero").unwrap_err();
    assert!(
        matches!(&err, WeirError::Config(e) if e.option == "parallelism"),
        "{err}"
    );

    let three = env();
    three
        .enable_checkpointing(std::time::Duration::from_millis(10))
        .set_parallelism(3);
    assert_eq!(
        three.config().checkpoint.interval,
        Some(std::time::Duration::from_millis(10))
    );
    three.generate(10, |i| i).collect();
    let plan = three.plan("shortcuts").unwrap();
    assert_eq!(plan.stream_graph.nodes[0].parallelism, 3);
}

#[test]
fn checkpoints_stay_in_memory_unless_a_directory_is_chosen() {
    let cwd = std::env::current_dir().unwrap();
    let env = env();
    env.enable_checkpointing(std::time::Duration::from_millis(10));
    env.generate(2000, |i| i % 10)
        .key_by(|k: &u64| *k)
        .count()
        .collect();
    let result = env.execute("in memory").unwrap();
    assert!(result.checkpoints.completed >= 1, "{result}");
    assert!(!cwd.join("weir-checkpoints").exists());
}

#[test]
fn the_line_is_where_the_row_starts_after_empty_lines_and_quoted_newlines() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "rows.csv",
        "id,name,score\n1,\"two\nlines\",1.0\n\n\n2,b,x\n",
    );
    let err = read_rows(FileSource::csv(dir.path())).unwrap_err();
    let bad = err.malformed_record().expect("a malformed record");
    assert!(
        matches!(&bad.origin, RecordOrigin::File { line: 6, .. }),
        "{:?}",
        bad.origin
    );
    // Windows line endings count once per line too.
    write(
        dir.path(),
        "rows.csv",
        "id,name,score\r\n1,a,1.0\r\n\r\n2,b,x\r\n",
    );
    let err = read_rows(FileSource::csv(dir.path())).unwrap_err();
    let bad = err.malformed_record().expect("a malformed record");
    assert!(
        matches!(&bad.origin, RecordOrigin::File { line: 4, .. }),
        "{:?}",
        bad.origin
    );
}

#[test]
fn a_line_longer_than_the_maximum_is_a_malformed_record_under_each_policy() {
    let dir = tempfile::tempdir().unwrap();
    let long = "x".repeat(3 << 20);
    // The limit is exact: a line of 1024 bytes passes, one of 1025 does not.
    let at_limit = "y".repeat(1024);
    write(
        dir.path(),
        "lines.txt",
        &format!("first\n{long}\n{at_limit}\r\n{}\nlast", "z".repeat(1025)),
    );
    let source = || FileSource::lines(dir.path()).with_max_record_bytes(1024);

    let job = env();
    let lines = job
        .from_source(
            source().on_malformed(MalformedRecordPolicy::Skip),
            WatermarkStrategy::no_watermarks(),
            "lines",
        )
        .collect();
    let result = job.execute("skip").unwrap();
    assert_eq!(
        lines.take(),
        vec!["first".to_string(), at_limit.clone(), "last".into()]
    );
    assert_eq!(result.operator("Source: lines").unwrap().records_skipped, 2);

    let job = env();
    let all = job
        .from_source(
            source().with_dead_letters(),
            WatermarkStrategy::no_watermarks(),
            "lines",
        )
        .collect();
    job.execute("dead letters").unwrap();
    let dead: Vec<MalformedRecord> = all.take().into_iter().filter_map(Result::err).collect();
    assert_eq!(dead.len(), 2);
    let RecordOrigin::File { line, .. } = dead[0].origin else {
        panic!("{:?}", dead[0].origin);
    };
    assert_eq!(line, 2);
    assert!(
        dead[0].raw.len() <= 256,
        "the dead letter holds {} bytes",
        dead[0].raw.len()
    );
    assert!(
        dead[0]
            .error
            .to_string()
            .contains(&format!("record takes {} bytes", long.len() + 1)),
        "{}",
        dead[0].error
    );

    let job = env();
    job.from_source(source(), WatermarkStrategy::no_watermarks(), "lines")
        .collect();
    let err = job.execute("fail").unwrap_err().to_string();
    assert!(
        err.contains("lines.txt:2") && err.contains("with_max_record_bytes"),
        "{err}"
    );
}

#[test]
fn a_csv_row_longer_than_the_maximum_is_malformed_and_the_rows_after_it_are_read() {
    let dir = tempfile::tempdir().unwrap();
    // A long unquoted row, and a long quoted field: neither may swallow the rows after it.
    let text = format!(
        "id,name,score\n1,a,1\n2,{},2\n3,c,3\n4,\"{}\",4\n5,e,5\n",
        "b".repeat(5000),
        "d".repeat(5000)
    );
    write(dir.path(), "rows.csv", &text);
    let source = || FileSource::<Row>::csv(dir.path()).with_max_record_bytes(100);
    let (rows, result) = read_rows(source().on_malformed(MalformedRecordPolicy::Skip)).unwrap();
    assert_eq!(
        rows.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![1, 3, 5],
        "{rows:?}"
    );
    assert_eq!(result.operator("Source: rows").unwrap().records_skipped, 2);
    let err = read_rows(source()).unwrap_err().to_string();
    assert!(
        err.contains("rows.csv:3") && err.contains("record takes 5005 bytes"),
        "{err}"
    );
}

#[test]
fn a_csv_source_resumes_after_a_cut_row_at_the_right_offset() {
    // Checkpointed offsets come from the cutting reader: a restored split must start at the
    // row after the cut one, in the file's bytes.
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("id,name,score\n");
    for i in 0..2000u32 {
        if i % 100 == 7 {
            text.push_str(&format!("{i},{},1\n", "x".repeat(3000)));
        } else {
            text.push_str(&format!("{i},n{i},1\n"));
        }
    }
    write(dir.path(), "rows.csv", &text);
    let config = ExecutionConfig::default()
        .with_parallelism(1)
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(std::time::Duration::from_millis(10))
                .with_storage(CheckpointStorageConfig::Memory),
        )
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 3,
            delay: std::time::Duration::ZERO,
        });
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let failed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rows = env
        .from_source(
            FileSource::<Row>::csv(dir.path())
                .with_max_record_bytes(100)
                .on_malformed(MalformedRecordPolicy::Skip)
                .with_rate_limit(20_000.0),
            WatermarkStrategy::no_watermarks(),
            "rows",
        )
        .map(move |r: Row| {
            if r.id == 1500 && !failed.swap(true, std::sync::atomic::Ordering::SeqCst) {
                panic!("injected failure at row 1500");
            }
            r.id
        })
        .collect();
    let result = env.execute("resume").unwrap();
    assert_eq!(result.restarts, 1);
    let mut ids = rows.take();
    ids.sort_unstable();
    ids.dedup();
    let expected: Vec<u32> = (0..2000).filter(|i| i % 100 != 7).collect();
    assert_eq!(ids, expected);
}

#[test]
fn a_last_csv_row_without_a_line_break_is_cut_and_malformed_too() {
    let dir = tempfile::tempdir().unwrap();
    // The last row is too long and ends the file, and would decode once cut (a long number);
    // rows end at `\r` as well.
    let text = format!("id,name,score\r1,a,1\r2,b,{}", "1".repeat(500));
    write(dir.path(), "rows.csv", &text);
    let (rows, result) = read_rows(
        FileSource::<Row>::csv(dir.path())
            .with_max_record_bytes(100)
            .on_malformed(MalformedRecordPolicy::Skip),
    )
    .unwrap();
    assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(result.operator("Source: rows").unwrap().records_skipped, 1);
}

#[test]
fn a_rate_limit_that_is_not_positive_is_refused_when_the_job_is_built_naming_the_source() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "rows.csv", "id,name,score\n1,a,0.5\n");
    for rate in [0.0, -5.0, f64::NAN] {
        let env = env();
        env.from_source(
            GeneratorSource::new(10, |i| i).with_rate_limit(rate),
            WatermarkStrategy::no_watermarks(),
            "numbers",
        )
        .sink_to(DiscardingSink, "discard");
        // Before anything runs: `explain` says it too.
        let err = env.explain("numbers").unwrap_err().to_string();
        assert!(
            err.contains("source `numbers`: the rate limit must be a positive number")
                && err.contains(&rate.to_string()),
            "{err}"
        );
        assert!(!err.contains("user function"), "{err}");
        let err = read_rows(FileSource::<Row>::csv(dir.path()).with_rate_limit(rate)).unwrap_err();
        assert!(
            matches!(&err, WeirError::Graph(GraphError::InvalidSource { source_name, .. }) if source_name == "rows"),
            "{err}"
        );
    }
}
