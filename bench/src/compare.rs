//! The value check of the window and join queries: Weir's results against Flink's batch
//! results over the same events, both written as JSON lines, compared as multisets of rows.
//!
//! Each row is reduced to its columns in a fixed order, timestamps in one text form. Where
//! a query's streaming output is a changelog or not deterministic, what is compared is what
//! is deterministic:
//! - q4 emits an updated average per category as each auction closes: the last update of
//!   each category (the one over the most auctions) is compared with Flink's final average;
//! - q12's windows are processing time: what a window holds depends on the machine's speed,
//!   and windows still open when the input ends are not fired (on either engine). So every
//!   Weir window must be 10 s long on a 10 s boundary, and each bidder's bids over Weir's
//!   windows must not exceed Flink's count of that bidder's bids (batch: `GROUP BY bidder`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::BenchError;
use crate::nexmark::sql_timestamp::SqlTimestamp;
use crate::workload::Workload;

/// The columns compared, in order, as both engines name them.
fn columns(workload: Workload) -> &'static [&'static str] {
    match workload {
        Workload::Q3 => &["name", "city", "state", "id"],
        Workload::Q4 => &["id", "final"],
        Workload::Q5 => &["auction", "num"],
        Workload::Q6 => &["seller", "avg_price"],
        Workload::Q7 => &["auction", "price", "bidder", "dateTime", "extra"],
        Workload::Q8 => &["id", "name", "stime"],
        Workload::Q11 => &["bidder", "bid_count", "starttime", "endtime"],
        _ => &["bidder", "bid_count"],
    }
}

/// Every line of the files under `dir` (recursively), skipping hidden files (`.`, `_`).
pub fn read_json_lines(dir: &Path) -> Result<Vec<Value>, BenchError> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).map_err(BenchError::io("listing", &d))? {
            let path = entry.map_err(BenchError::io("listing", &d))?.path();
            let hidden = path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(['.', '_']));
            if hidden {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut rows = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(BenchError::io("reading", &file))?;
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
            rows.push(
                serde_json::from_str(line).map_err(|e| BenchError::Malformed {
                    file: file.display().to_string(),
                    line: i as u64 + 1,
                    reason: e.to_string(),
                })?,
            );
        }
    }
    Ok(rows)
}

/// A value as compared: integers as integers, timestamps in one form, other text as is.
fn canonical(value: &Value) -> String {
    match value {
        Value::String(text) => match SqlTimestamp::parse(&text.replace('T', " ")) {
            Ok(ts) => ts.to_string(),
            Err(_) => text.clone(),
        },
        other => other.to_string(),
    }
}

/// A row as its compared columns.
fn row_key(workload: Workload, row: &Value) -> Result<Vec<String>, BenchError> {
    columns(workload)
        .iter()
        .map(|c| {
            row.get(c).map(canonical).ok_or_else(|| {
                BenchError::Run(format!("a {workload} row has no column `{c}`: {row}"))
            })
        })
        .collect()
}

fn int(row: &Value, column: &str) -> i64 {
    row.get(column).and_then(Value::as_i64).unwrap_or(i64::MIN)
}

/// What the check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreement {
    /// Rows compared (Weir's, after reducing a changelog).
    pub rows: usize,
    /// What was compared, in words.
    pub what: String,
}

/// Compares Weir's rows of `workload` with Flink's; a disagreement is an error naming the
/// first rows that differ.
pub fn compare(
    workload: Workload,
    flink: &[Value],
    weir: &[Value],
) -> Result<Agreement, BenchError> {
    if workload == Workload::Q12 {
        return compare_q12(flink, weir);
    }
    let weir: Vec<&Value> = if workload == Workload::Q4 {
        // The last update of each category: the one over the most auctions.
        let mut last: BTreeMap<i64, &Value> = BTreeMap::new();
        for row in weir {
            let entry = last.entry(int(row, "id")).or_insert(row);
            if int(row, "auctions") > int(entry, "auctions") {
                *entry = row;
            }
        }
        last.into_values().collect()
    } else {
        weir.iter().collect()
    };
    let mut counts: BTreeMap<Vec<String>, i64> = BTreeMap::new();
    for row in flink {
        *counts.entry(row_key(workload, row)?).or_default() += 1;
    }
    for row in &weir {
        *counts.entry(row_key(workload, row)?).or_default() -= 1;
    }
    let differing: Vec<_> = counts.iter().filter(|(_, n)| **n != 0).collect();
    if !differing.is_empty() {
        let only_flink = differing.iter().filter(|(_, n)| **n > 0).count();
        let examples: Vec<String> = differing
            .iter()
            .take(5)
            .map(|(row, n)| {
                let side = if **n > 0 { "Flink" } else { "Weir" };
                format!("{} more in {side}: ({})", n.abs(), row.join(", "))
            })
            .collect();
        return Err(BenchError::Run(format!(
            "{workload}: Weir's {} rows and Flink's {} differ in {} rows ({} with more in Flink, \
             {} with more in Weir); e.g. {}",
            weir.len(),
            flink.len(),
            differing.len(),
            only_flink,
            differing.len() - only_flink,
            examples.join("; ")
        )));
    }
    Ok(Agreement {
        rows: weir.len(),
        what: match workload {
            Workload::Q4 => "the last average of each category".into(),
            _ => "every row".into(),
        },
    })
}

fn compare_q12(flink: &[Value], weir: &[Value]) -> Result<Agreement, BenchError> {
    let totals: BTreeMap<i64, i64> = flink
        .iter()
        .map(|r| (int(r, "bidder"), int(r, "bid_count")))
        .collect();
    let mut counted: BTreeMap<i64, i64> = BTreeMap::new();
    for row in weir {
        let start = row
            .get("starttime")
            .and_then(Value::as_str)
            .and_then(|t| SqlTimestamp::parse(t).ok());
        let end = row
            .get("endtime")
            .and_then(Value::as_str)
            .and_then(|t| SqlTimestamp::parse(t).ok());
        match (start, end) {
            (Some(s), Some(e)) if s.0 % 10_000 == 0 && e.0 - s.0 == 10_000 => {}
            _ => {
                return Err(BenchError::Run(format!(
                    "q12: a Weir window is not 10 s on a 10 s boundary: {row}"
                )))
            }
        }
        *counted.entry(int(row, "bidder")).or_default() += int(row, "bid_count");
    }
    for (bidder, n) in &counted {
        let total = totals.get(bidder).copied().unwrap_or(0);
        if *n > total || *n <= 0 {
            return Err(BenchError::Run(format!(
                "q12: Weir counted {n} bids of bidder {bidder} where the input has {total}"
            )));
        }
    }
    let (seen, all): (i64, i64) = (counted.values().sum(), totals.values().sum());
    Ok(Agreement {
        rows: weir.len(),
        what: format!(
            "windows well formed and within each bidder's bids ({seen} of {all} bids in fired \
             windows; open windows are not fired at the end of input)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn multisets_of_rows_with_timestamps_in_either_form() {
        let flink = vec![
            json!({"id": 1, "name": "Kate Smith", "stime": "2015-07-15 00:00:10"}),
            json!({"id": 1, "name": "Kate Smith", "stime": "2015-07-15 00:00:10"}),
        ];
        let weir = vec![
            json!({"id": 1, "name": "Kate Smith", "stime": "2015-07-15 00:00:10.000"}),
            json!({"id": 1, "name": "Kate Smith", "stime": "2015-07-15 00:00:10.000"}),
        ];
        assert_eq!(compare(Workload::Q8, &flink, &weir).unwrap().rows, 2);
        let err = compare(Workload::Q8, &flink, &weir[..1])
            .unwrap_err()
            .to_string();
        assert!(err.contains("1 more in Flink"), "{err}");
    }

    #[test]
    fn q4_keeps_the_last_update_of_each_category() {
        let flink = vec![json!({"id": 10, "final": 7})];
        let weir = vec![
            json!({"id": 10, "final": 9, "auctions": 1}),
            json!({"id": 10, "final": 7, "auctions": 2}),
        ];
        compare(Workload::Q4, &flink, &weir).unwrap();
        assert!(compare(Workload::Q4, &flink, &weir[..1]).is_err());
    }

    #[test]
    fn q12_counts_stay_within_the_totals() {
        let flink = vec![json!({"bidder": 5, "bid_count": 3})];
        let window = |n: i64| {
            json!({"bidder": 5, "bid_count": n, "starttime": "2026-01-01 00:00:10.000",
                   "endtime": "2026-01-01 00:00:20.000"})
        };
        compare(Workload::Q12, &flink, &[window(2)]).unwrap();
        assert!(compare(Workload::Q12, &flink, &[window(2), window(2)]).is_err());
    }
}
