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
    /// The same over string keys (`k123456`), as most real keys are.
    KeyedStrings,
    /// Nexmark q0: pass the bids through.
    Q0,
    /// Nexmark q1: bid prices converted from dollars to euros.
    Q1,
    /// Nexmark q2: the bids on every 123rd auction.
    Q2,
    /// Nexmark q3: local item suggestion (a regular join of auctions and people).
    Q3,
    /// Nexmark q4: the average closing price per category (auctions joined with the bids
    /// made while they were open).
    Q4,
    /// Nexmark q5: hot items (the auctions with the most bids per sliding window).
    Q5,
    /// Nexmark q6: the average selling price per seller over their last closed auctions.
    Q6,
    /// Nexmark q7: the highest bids per tumbling window.
    Q7,
    /// Nexmark q8: new users (a tumbling-window join of people and sellers).
    Q8,
    /// Nexmark q11: bids per bidder and session.
    Q11,
    /// Nexmark q12: bids per bidder per processing-time window.
    Q12,
}

/// The input a workload reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// Headerless CSV `key,value` part files.
    KeyValue,
    /// The same rows with string keys: `k<key>,value`.
    StringKeyValue,
    /// Nexmark events as JSON lines.
    Nexmark,
}

impl Workload {
    /// Every workload, in report order.
    pub const ALL: [Workload; 14] = [
        Workload::Stateless,
        Workload::Keyed,
        Workload::KeyedStrings,
        Workload::Q0,
        Workload::Q1,
        Workload::Q2,
        Workload::Q3,
        Workload::Q4,
        Workload::Q5,
        Workload::Q6,
        Workload::Q7,
        Workload::Q8,
        Workload::Q11,
        Workload::Q12,
    ];

    /// The window and join queries, whose results are compared value by value.
    pub const WINDOWS_AND_JOINS: [Workload; 8] = [
        Workload::Q3,
        Workload::Q4,
        Workload::Q5,
        Workload::Q6,
        Workload::Q7,
        Workload::Q8,
        Workload::Q11,
        Workload::Q12,
    ];

    /// Its short name, as on the command line and in `flink_job.py`.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Stateless => "stateless",
            Workload::Keyed => "keyed",
            Workload::KeyedStrings => "keyed_strings",
            Workload::Q0 => "q0",
            Workload::Q1 => "q1",
            Workload::Q2 => "q2",
            Workload::Q3 => "q3",
            Workload::Q4 => "q4",
            Workload::Q5 => "q5",
            Workload::Q6 => "q6",
            Workload::Q7 => "q7",
            Workload::Q8 => "q8",
            Workload::Q11 => "q11",
            Workload::Q12 => "q12",
        }
    }

    /// Whether the floor (a hand-written single pass) has it: the stateless workloads and
    /// the keyed one, not the window and join queries.
    pub fn has_floor(self) -> bool {
        matches!(
            self,
            Workload::Stateless
                | Workload::Keyed
                | Workload::KeyedStrings
                | Workload::Q0
                | Workload::Q1
                | Workload::Q2
        )
    }

    /// Whether its results are compared value by value with Flink's (else their count).
    pub fn compares_values(self) -> bool {
        Workload::WINDOWS_AND_JOINS.contains(&self)
    }

    /// Whether Flink's streaming SQL runs it. q6's OVER window orders by a timestamp that
    /// the join before it has made a plain column, which streaming SQL refuses (the Flink
    /// Nexmark suite lists q6 as unsupported); batch SQL runs it, and checks Weir's values.
    pub fn flink_streaming(self) -> bool {
        self != Workload::Q6
    }

    /// The input it reads.
    pub fn input(self) -> InputKind {
        match self {
            Workload::Stateless | Workload::Keyed => InputKind::KeyValue,
            Workload::KeyedStrings => InputKind::StringKeyValue,
            _ => InputKind::Nexmark,
        }
    }

    /// What it computes, as the Flink SQL statement.
    pub fn sql(self) -> &'static str {
        match self {
            Workload::Stateless => "SELECT key, value * 10 FROM kv WHERE MOD(value, 2) = 0",
            Workload::Keyed => "SELECT key, SUM(value), COUNT(*) FROM kv GROUP BY key",
            Workload::KeyedStrings => "SELECT key, SUM(value), COUNT(*) FROM kvs GROUP BY key",
            Workload::Q0 => "SELECT auction, bidder, price, dateTime, extra FROM bid",
            Workload::Q1 => "SELECT auction, bidder, 0.908 * price, dateTime, extra FROM bid",
            Workload::Q2 => "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
            Workload::Q3 => {
                "SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P \
                 ON A.seller = P.id WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' \
                 OR P.state = 'CA')"
            }
            Workload::Q4 => {
                "SELECT Q.category, AVG(Q.final) FROM (SELECT MAX(B.price) AS final, A.category \
                 FROM auction A, bid B WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime \
                 AND A.expires GROUP BY A.id, A.category) Q GROUP BY Q.category"
            }
            Workload::Q5 => {
                "SELECT AuctionBids.auction, AuctionBids.num FROM (SELECT auction, COUNT(*) AS num, \
                 window_start AS starttime, window_end AS endtime FROM TABLE(HOP(TABLE bid, \
                 DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) GROUP BY \
                 auction, window_start, window_end) AS AuctionBids JOIN (SELECT MAX(CountBids.num) \
                 AS maxn, CountBids.starttime, CountBids.endtime FROM (SELECT COUNT(*) AS num, \
                 window_start AS starttime, window_end AS endtime FROM TABLE(HOP(TABLE bid, \
                 DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) GROUP BY \
                 auction, window_start, window_end) AS CountBids GROUP BY CountBids.starttime, \
                 CountBids.endtime) AS MaxBids ON AuctionBids.starttime = MaxBids.starttime AND \
                 AuctionBids.endtime = MaxBids.endtime AND AuctionBids.num >= MaxBids.maxn"
            }
            Workload::Q6 => {
                "SELECT Q.seller, AVG(Q.price) OVER (PARTITION BY Q.seller ORDER BY Q.dateTime, \
                 Q.id ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) FROM (SELECT *, ROW_NUMBER() \
                 OVER (PARTITION BY A.id, A.seller ORDER BY B.price DESC, B.dateTime) AS rownum \
                 FROM (SELECT A.id, A.seller, B.price, B.dateTime FROM auction AS A, bid AS B \
                 WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires) WHERE \
                 rownum <= 1) AS Q"
            }
            Workload::Q7 => {
                "SELECT B.auction, B.price, B.bidder, B.dateTime, B.extra FROM bid B JOIN (SELECT \
                 MAX(price) AS maxprice, window_end AS dateTime FROM TABLE(TUMBLE(TABLE bid, \
                 DESCRIPTOR(dateTime), INTERVAL '10' SECOND)) GROUP BY window_start, window_end) B1 \
                 ON B.price = B1.maxprice WHERE B.dateTime BETWEEN B1.dateTime - INTERVAL '10' \
                 SECOND AND B1.dateTime"
            }
            Workload::Q8 => {
                "SELECT P.id, P.name, P.starttime FROM (SELECT id, name, window_start AS starttime, \
                 window_end AS endtime FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(dateTime), \
                 INTERVAL '10' SECOND)) GROUP BY id, name, window_start, window_end) P JOIN (SELECT \
                 seller, window_start AS starttime, window_end AS endtime FROM TABLE(TUMBLE(TABLE \
                 auction, DESCRIPTOR(dateTime), INTERVAL '10' SECOND)) GROUP BY seller, \
                 window_start, window_end) A ON P.id = A.seller AND P.starttime = A.starttime AND \
                 P.endtime = A.endtime"
            }
            Workload::Q11 => {
                "SELECT B.bidder, COUNT(*) AS bid_count, SESSION_START(B.dateTime, INTERVAL '10' \
                 SECOND) AS starttime, SESSION_END(B.dateTime, INTERVAL '10' SECOND) AS endtime \
                 FROM bid B GROUP BY B.bidder, SESSION(B.dateTime, INTERVAL '10' SECOND)"
            }
            Workload::Q12 => {
                "SELECT bidder, COUNT(*) AS bid_count, window_start AS starttime, window_end AS \
                 endtime FROM TABLE(TUMBLE(TABLE (SELECT *, PROCTIME() AS p_time FROM bid), \
                 DESCRIPTOR(p_time), INTERVAL '10' SECOND)) GROUP BY bidder, window_start, window_end"
            }
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
        let err = "q9".parse::<Workload>().unwrap_err();
        assert!(err.contains("q9") && err.contains("stateless, keyed, keyed_strings, q0, q1, q2"));
    }
}
