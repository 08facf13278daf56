//! The workloads of the Weir-vs-Flink suite: what each computes, in Flink SQL terms, and which
//! input it reads. The same definitions are in `bench/flink/flink_job.py` (Flink SQL),
//! `weir_jobs.rs` (Weir pipelines) and `floor.rs` (hand-written single pass).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// Parse → filter → project → sink over the `key,value` CSV.
    Stateless,
    /// SUM and COUNT by key over the `key,value` CSV, one updated result per row.
    Keyed,
    /// Nexmark q0: pass the bids through.
    Q0,
    /// Nexmark q1: bid prices converted from dollars to euros.
    Q1,
    /// Nexmark q2: the bids on every 123rd auction.
    Q2,
}

/// The input a workload reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// Headerless CSV `key,value` part files.
    KeyValue,
    /// Nexmark events as JSON lines.
    Nexmark,
}

impl Workload {
    /// Every workload, in report order.
    pub const ALL: [Workload; 5] = [
        Workload::Stateless,
        Workload::Keyed,
        Workload::Q0,
        Workload::Q1,
        Workload::Q2,
    ];

    /// Its short name, as on the command line and in `flink_job.py`.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Stateless => "stateless",
            Workload::Keyed => "keyed",
            Workload::Q0 => "q0",
            Workload::Q1 => "q1",
            Workload::Q2 => "q2",
        }
    }

    /// The input it reads.
    pub fn input(self) -> InputKind {
        match self {
            Workload::Stateless | Workload::Keyed => InputKind::KeyValue,
            _ => InputKind::Nexmark,
        }
    }

    /// What it computes, as the Flink SQL statement.
    pub fn sql(self) -> &'static str {
        match self {
            Workload::Stateless => "SELECT key, value * 10 FROM kv WHERE MOD(value, 2) = 0",
            Workload::Keyed => "SELECT key, SUM(value), COUNT(*) FROM kv GROUP BY key",
            Workload::Q0 => "SELECT auction, bidder, price, dateTime, extra FROM bid",
            Workload::Q1 => "SELECT auction, bidder, 0.908 * price, dateTime, extra FROM bid",
            Workload::Q2 => "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Workload::ALL.iter().map(|w| w.name()).collect();
                format!(
                    "unknown workload `{s}`; the workloads are {}",
                    names.join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_listed() {
        for w in Workload::ALL {
            assert_eq!(w.name().parse::<Workload>(), Ok(w));
        }
        let err = "q7".parse::<Workload>().unwrap_err();
        assert!(err.contains("q7") && err.contains("stateless, keyed, q0, q1, q2"));
    }
}
