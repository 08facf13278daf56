//! The file source: lines and CSV, files, directories and globs, malformed rows under each
//! policy, exact replay of offsets after failures, and directory monitoring.

mod common;

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weir::WatermarkStrategy;

use common::{committed, diff, failover_config, multiset, CommittingSink};
use serde::{Deserialize, Serialize};
use weir::connectors::file_reader::{RawRecord, RecordLocation};
use weir::connectors::file_source::{FileFormat, FileSource};
use weir::connectors::malformed::{
    DecodeError, MalformedRecord, MalformedRecordPolicy, RecordOrigin,
};
use weir::{ExecutionConfig, StreamExecutionEnvironment, WeirError};

fn new_env(parallelism: u32) -> StreamExecutionEnvironment {
    StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(parallelism))
        .unwrap()
}

fn write(path: &Path, text: &str) {
    std::fs::File::create(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

#[test]
fn reads_lines_of_a_file_a_directory_and_a_glob() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("a.txt"), "one\ntwo\r\nthree");
    write(&dir.path().join("b.txt"), "four\n\nsix\n");
    write(&dir.path().join("c.log"), "seven\n");
    write(&dir.path().join(".hidden"), "never\n");
    let all = vec!["", "four", "one", "seven", "six", "three", "two"];
    for (path, expected) in [
        (
            dir.path().join("a.txt").display().to_string(),
            vec!["one", "three", "two"],
        ),
        (dir.path().display().to_string(), all.clone()),
        (
            format!("{}/*.txt", dir.path().display()),
            vec!["", "four", "one", "six", "three", "two"],
        ),
    ] {
        let env = new_env(2);
        let out = env
            .from_source(
                FileSource::lines(&path),
                WatermarkStrategy::no_watermarks(),
                "files",
            )
            .collect();
        env.execute("lines").unwrap();
        assert_eq!(sorted(out.take()), expected, "{path}");
    }
}

#[test]
fn lines_know_their_numbers_and_may_be_longer_than_the_read_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("numbers.txt");
    let long = "7".repeat(700_000);
    write(&path, &format!("1\r\n{long}\n3\nx\n5"));
    let path = path.display().to_string();
    let parse = |raw: RawRecord<'_>, _: &RecordLocation<'_>| match raw {
        RawRecord::Line(line) => std::str::from_utf8(line)
            .map_err(|e| DecodeError::new(e.to_string()))
            .and_then(|text| match text.bytes().all(|b| b.is_ascii_digit()) {
                true => Ok(text.len()),
                false => Err(DecodeError::new(format!("{text:?} is not a number"))),
            }),
        RawRecord::Csv { .. } => Err(DecodeError::new("not a line")),
    };
    let env = new_env(1);
    let kept = env
        .from_source(
            FileSource::with_decoder(&path, FileFormat::Lines, Arc::new(parse))
                .on_malformed(MalformedRecordPolicy::Skip),
            WatermarkStrategy::no_watermarks(),
            "numbers",
        )
        .collect();
    env.execute("skip").unwrap();
    assert_eq!(kept.take(), vec![1, 700_000, 1, 1]);
    let env = new_env(1);
    env.from_source(
        FileSource::with_decoder(&path, FileFormat::Lines, Arc::new(parse)),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .collect();
    let text = env.execute("fail").unwrap_err().to_string();
    assert!(
        text.contains("numbers.txt:4") && text.contains("\"x\""),
        "{text}"
    );
}

/// Random CSV text (blank lines, CRLF, quotes balanced or not, quoted line ends, lone
/// carriage returns) reads as the csv crate reads it, and decodes as it decodes it.
#[test]
fn csv_reads_as_the_csv_crate_reads_it() {
    let plain = ["a", "bb", ",", ",", "\n", "\n", "\r\n", " "];
    let special = ["\"", "\"q,\nx\"", "\r"];
    for seed in weir_testkit::seeds(40) {
        println!("seed {seed}");
        let mut rng = weir_testkit::Rng(seed);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("random.csv");
        // Some files are plain throughout; in others the special pieces come now and then.
        let special_one_in = [0, 30, 150][rng.below(3) as usize];
        let text: String = (0..rng.below(600))
            .map(|_| match special_one_in {
                0 => plain[rng.below(plain.len() as u64) as usize],
                n if rng.below(n) == 0 => special[rng.below(special.len() as u64) as usize],
                _ => plain[rng.below(plain.len() as u64) as usize],
            })
            .collect();
        write(&path, &text);
        let expected: Vec<Vec<String>> = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(text.as_bytes())
            .deserialize()
            .map(|r| r.unwrap())
            .collect();
        let env = new_env(1);
        let out = env
            .from_source(
                FileSource::<Vec<String>>::csv(path.display().to_string())
                    .has_header(false)
                    .flexible(),
                WatermarkStrategy::no_watermarks(),
                "random",
            )
            .collect();
        env.execute("random csv").unwrap();
        assert_eq!(out.take(), expected, "seed {seed}, text {text:?}");
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Person {
    name: String,
    age: u32,
}

#[test]
fn decodes_csv_rows_by_header_or_position_with_any_delimiter() {
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir.path().join("h.csv"),
        "age,name\n30,ann\n41,\"bob, jr\"\n",
    );
    write(&dir.path().join("p.tsv"), "carl\t7\ndana\t9\n");
    let env = new_env(1);
    let by_header = env
        .from_source(
            FileSource::<Person>::csv(dir.path().join("h.csv").display().to_string()),
            WatermarkStrategy::no_watermarks(),
            "h",
        )
        .collect();
    let by_position = env
        .from_source(
            FileSource::<Person>::csv(dir.path().join("p.tsv").display().to_string())
                .has_header(false)
                .delimiter(b'\t'),
            WatermarkStrategy::no_watermarks(),
            "p",
        )
        .collect();
    env.execute("csv").unwrap();
    let person = |name: &str, age| Person {
        name: name.into(),
        age,
    };
    assert_eq!(
        sorted(by_header.take()),
        vec![person("ann", 30), person("bob, jr", 41)]
    );
    assert_eq!(
        sorted(by_position.take()),
        vec![person("carl", 7), person("dana", 9)]
    );
}

#[test]
fn malformed_rows_fail_with_location_or_are_skipped_or_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("people.csv");
    write(&path, "name,age\nann,30\nbob,old\ncarl,7\n");
    let path = path.display().to_string();

    let env = new_env(1);
    env.from_source(
        FileSource::<Person>::csv(&path),
        WatermarkStrategy::no_watermarks(),
        "people",
    )
    .collect();
    let err = env.execute("fail").unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("people.csv:3") && text.contains("bob,old"),
        "{text}"
    );

    let env = new_env(1);
    let kept = env
        .from_source(
            FileSource::<Person>::csv(&path).on_malformed(MalformedRecordPolicy::Skip),
            WatermarkStrategy::no_watermarks(),
            "people",
        )
        .collect();
    env.execute("skip").unwrap();
    assert_eq!(kept.take().len(), 2);

    let env = new_env(1);
    let rows = env.from_source(
        FileSource::<Person>::csv(&path).with_dead_letters(),
        WatermarkStrategy::no_watermarks(),
        "people",
    );
    let good = rows
        .flat_map_iter(|r: Result<Person, MalformedRecord>| r.ok())
        .collect();
    let dead = rows
        .flat_map_iter(|r: Result<Person, MalformedRecord>| r.err())
        .collect();
    let result = env.execute("dead letters").unwrap();
    assert_eq!(good.take().len(), 2);
    let dead = dead.take();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].raw.as_str(), "bob,old");
    assert!(
        matches!(&dead[0].origin, RecordOrigin::File { file, line: 3 } if file.ends_with("people.csv")),
        "{:?}",
        dead[0]
    );
    let source = result.operator("Source: people").unwrap();
    assert_eq!(
        (source.records_skipped, source.records_dead_lettered),
        (0, 1)
    );
}

#[test]
fn a_missing_path_is_a_clear_error() {
    let env = new_env(1);
    env.from_source(
        FileSource::lines("/definitely/not/here.txt"),
        WatermarkStrategy::no_watermarks(),
        "files",
    )
    .collect();
    let err = env.execute("missing").unwrap_err();
    assert!(matches!(err, WeirError::Setup { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("`/definitely/not/here.txt` does not exist"),
        "{err}"
    );
}

#[test]
fn offsets_are_restored_exactly_after_failures() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = Vec::new();
    for f in 0..4 {
        let mut text = String::from("id,value\n");
        for i in 0..2_500 {
            // File 2 turns to quoted ids half way, one of them over two lines, and fails
            // after them (2-1800): the restore resumes inside the quoted part.
            let id = match (f, i) {
                (2, 1500) => format!("{f}-{i}\nsecond line"),
                _ => format!("{f}-{i}"),
            };
            if f == 2 && i >= 1000 {
                text.push_str(&format!("\"{id}\",{}\n", i * 3));
            } else {
                text.push_str(&format!("{id},{}\n", i * 3));
            }
            expected.push(id);
        }
        write(&dir.path().join(format!("part-{f}.csv")), &text);
    }
    #[derive(Debug, Clone, Serialize, Deserialize)]
    struct Row {
        id: String,
        value: u64,
    }
    let config = failover_config(2, Duration::from_millis(25));
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let (sink, store) = CommittingSink::new();
    let failures = Arc::new([
        ("1-1200", AtomicBool::new(false)),
        ("2-1800", AtomicBool::new(false)),
        ("3-2100", AtomicBool::new(false)),
    ]);
    env.from_source(
        FileSource::<Row>::csv(format!("{}/*.csv", dir.path().display())).with_rate_limit(20_000.0),
        WatermarkStrategy::no_watermarks(),
        "rows",
    )
    .map(move |row: Row| {
        for (id, done) in failures.iter() {
            if row.id == *id && !done.swap(true, Ordering::SeqCst) {
                panic!("injected failure at {id}");
            }
        }
        row.id
    })
    .sink_to(sink, "committed");
    let result = env.execute("replay").unwrap();
    if let Some(d) = diff(&multiset(&expected), &multiset(&committed(&store))) {
        panic!("{d}");
    }
    // The failures are in files read by different subtasks: they may strike the same run.
    assert!(
        (1..=3).contains(&result.restarts),
        "{} restarts",
        result.restarts
    );
}

#[test]
fn monitoring_picks_up_new_files() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("first.txt"), "a\nb\n");
    let env = new_env(1);
    let out = env
        .from_source(
            FileSource::lines(dir.path().display().to_string()).monitor(Duration::from_millis(20)),
            WatermarkStrategy::no_watermarks(),
            "watched",
        )
        .collect();
    let client = env.execute_async("monitor").unwrap();
    // The second file appears once the job has read the first, however slow the machine.
    let mut seen = Vec::new();
    common::wait_until("the first file's lines", || {
        seen.extend(out.take());
        seen.len() >= 2
    });
    // Written under a hidden name, then renamed, so the source never sees a partial file.
    write(&dir.path().join(".second.tmp"), "c\n");
    std::fs::rename(
        dir.path().join(".second.tmp"),
        dir.path().join("second.txt"),
    )
    .unwrap();
    common::wait_until("the second file's line", || {
        seen.extend(out.take());
        seen.len() >= 3
    });
    client.cancel().unwrap();
    seen.extend(out.take());
    assert_eq!(sorted(seen), vec!["a", "b", "c"]);
}
