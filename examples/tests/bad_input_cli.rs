//! The census binary on bad input: a clear error with the exit status 1, naming what and
//! where once, and no backtrace even with `RUST_BACKTRACE=1` (backtraces are for bugs).

use std::path::Path;
use std::process::{Command, Output};

fn census(data: &Path, work_dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_census"))
        .arg("--data")
        .arg(data)
        .arg("--work-dir")
        .arg(work_dir)
        .args(["--quiet", "--rate", "1000000", "--fail-after-rows", "0"])
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LIB_BACKTRACE", "1")
        .output()
        .expect("the census binary runs")
}

fn assert_clean_failure(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        !stderr.to_lowercase().contains("backtrace"),
        "a backtrace was printed:\n{stderr}"
    );
    assert!(stderr.contains("error: "), "{stderr}");
    stderr
}

#[test]
fn a_data_directory_that_does_not_exist_is_an_error_not_an_empty_success() {
    let work = tempfile::tempdir().unwrap();
    let output = census(Path::new("/no/such/dir"), work.path());
    let stderr = assert_clean_failure(&output);
    assert!(
        stderr.contains("/no/such/dir/*.csv") && stderr.contains("matches no file"),
        "{stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains("Verified"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn a_malformed_row_names_its_file_line_and_column_once() {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut text = String::from("age,workclass,education,occupation,hours_per_week,income\n");
    for i in 0..5000 {
        text.push_str(&format!("{},Private,HS-grad,Sales,40,<=50K\n", 20 + i % 50));
    }
    text.push_str("39,Private,HS-grad,Sales,notanumber,<=50K\n");
    std::fs::write(data.path().join("census-0.csv"), text).unwrap();
    let output = census(data.path(), work.path());
    let stderr = assert_clean_failure(&output);
    assert!(
        stderr.contains(
            "census-0.csv:5002, column hours_per_week: invalid digit found in string \"notanumber\""
        ),
        "{stderr}"
    );
    // Every place the row is named gives one line number (a bare "5001" search would match
    // log timestamps).
    let lines = numbers_after(&stderr, "census-0.csv:")
        .chain(numbers_after(&stderr, "\"line\":"))
        .collect::<Vec<_>>();
    assert!(!lines.is_empty(), "no line number: {stderr}");
    assert!(
        lines.iter().all(|&line| line == 5002),
        "line numbers {lines:?}: {stderr}"
    );
}

/// The numbers written right after each occurrence of `marker` in `text`.
fn numbers_after<'a>(text: &'a str, marker: &'a str) -> impl Iterator<Item = u64> + 'a {
    text.match_indices(marker).filter_map(move |(at, _)| {
        let rest = &text[at + marker.len()..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    })
}
