//! Weir's pipelines of the Nexmark window and join queries (q3–q12) give the results of
//! their SQL, computed here in batch by plain loops over the same generated events: from the
//! in-memory generator at parallelism 2 and, for some, from the JSON files at parallelism 1.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};
use weir_bench::compare::{compare, read_json_lines};
use weir_bench::nexmark::generator::{
    write_nexmark_input, LeanAuction, LeanBid, LeanEvent, LeanPerson, NexmarkGenerator,
    NexmarkInputSpec, GENERATOR_VERSION,
};
use weir_bench::nexmark::sql_timestamp::SqlTimestamp;
use weir_bench::weir_jobs::{self, EventSource, Output};
use weir_bench::Workload;

/// 12 s of event time: two 10 s tumbling windows, a few sliding ones, sessions.
const EVENTS: u64 = 120_000;
const SEED: u64 = 3;

struct Events {
    persons: Vec<LeanPerson>,
    auctions: Vec<LeanAuction>,
    bids: Vec<LeanBid>,
}

fn events() -> Events {
    let generator = NexmarkGenerator::new(SEED);
    let (mut persons, mut auctions, mut bids) = (Vec::new(), Vec::new(), Vec::new());
    for n in 0..EVENTS {
        let event: LeanEvent = generator.lean_event(n);
        persons.extend(event.person);
        auctions.extend(event.auction);
        bids.extend(event.bid);
    }
    Events {
        persons,
        auctions,
        bids,
    }
}

fn ts(millis: i64) -> String {
    SqlTimestamp(millis).to_string()
}

/// Per auction, its highest bid made while it was open (the earliest of equal ones):
/// `(auction, price, bid time)`.
fn winners(e: &Events) -> Vec<(&LeanAuction, i64, i64)> {
    let mut bids_of: HashMap<i64, Vec<&LeanBid>> = HashMap::new();
    for b in &e.bids {
        bids_of.entry(b.auction).or_default().push(b);
    }
    e.auctions
        .iter()
        .filter_map(|a| {
            bids_of
                .get(&a.id)?
                .iter()
                .filter(|b| a.date_time <= b.date_time && b.date_time <= a.expires)
                .max_by_key(|b| (b.price, -b.date_time.0))
                .map(|b| (a, b.price, b.date_time.0))
        })
        .collect()
}

fn reference(workload: Workload, e: &Events) -> Vec<Value> {
    match workload {
        Workload::Q3 => {
            let sellers: HashMap<i64, &LeanPerson> = e
                .persons
                .iter()
                .filter(|p| matches!(p.state.as_str(), "OR" | "ID" | "CA"))
                .map(|p| (p.id, p))
                .collect();
            e.auctions
                .iter()
                .filter(|a| a.category == 10)
                .filter_map(|a| {
                    let p = sellers.get(&a.seller)?;
                    Some(json!({"name": p.name, "city": p.city, "state": p.state, "id": a.id}))
                })
                .collect()
        }
        Workload::Q4 => {
            let mut per_category: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
            for (a, price, _) in winners(e) {
                let entry = per_category.entry(a.category).or_default();
                entry.0 += price;
                entry.1 += 1;
            }
            per_category
                .into_iter()
                .map(|(c, (sum, n))| json!({"id": c, "final": sum / n}))
                .collect()
        }
        Workload::Q5 => {
            let mut counts: BTreeMap<i64, BTreeMap<i64, i64>> = BTreeMap::new();
            for b in &e.bids {
                let t = b.date_time.0;
                let mut start = t - t.rem_euclid(2_000);
                while start > t - 10_000 {
                    *counts
                        .entry(start)
                        .or_default()
                        .entry(b.auction)
                        .or_default() += 1;
                    start -= 2_000;
                }
            }
            counts
                .values()
                .flat_map(|per_auction| {
                    let max = per_auction.values().copied().max().unwrap_or(0);
                    per_auction
                        .iter()
                        .filter(move |(_, n)| **n == max)
                        .map(|(auction, n)| json!({"auction": auction, "num": n}))
                })
                .collect()
        }
        Workload::Q6 => {
            let mut per_seller: BTreeMap<i64, Vec<(i64, i64, i64)>> = BTreeMap::new();
            for (a, price, time) in winners(e) {
                per_seller
                    .entry(a.seller)
                    .or_default()
                    .push((time, a.id, price));
            }
            let mut rows = Vec::new();
            for (seller, mut wins) in per_seller {
                wins.sort_unstable();
                for i in 0..wins.len() {
                    let last = &wins[i.saturating_sub(10)..=i];
                    let avg = last.iter().map(|w| w.2).sum::<i64>() / last.len() as i64;
                    rows.push(json!({"seller": seller, "avg_price": avg}));
                }
            }
            rows
        }
        Workload::Q7 => {
            // The suite's SQL: bids priced at a window's maximum, made from the window's
            // start to its end, both included.
            let mut max: BTreeMap<i64, i64> = BTreeMap::new();
            for b in &e.bids {
                let end = b.date_time.0 - b.date_time.0.rem_euclid(10_000) + 10_000;
                let m = max.entry(end).or_insert(b.price);
                *m = (*m).max(b.price);
            }
            let mut rows = Vec::new();
            for (end, price) in max {
                for b in e.bids.iter().filter(|b| {
                    b.price == price && end - 10_000 <= b.date_time.0 && b.date_time.0 <= end
                }) {
                    rows.push(
                        json!({"auction": b.auction, "price": b.price, "bidder": b.bidder,
                        "dateTime": ts(b.date_time.0), "extra": b.extra}),
                    );
                }
            }
            rows
        }
        Workload::Q8 => {
            let window = |t: i64| t - t.rem_euclid(10_000);
            let sellers: std::collections::HashSet<(i64, i64)> = e
                .auctions
                .iter()
                .map(|a| (a.seller, window(a.date_time.0)))
                .collect();
            e.persons
                .iter()
                .filter(|p| sellers.contains(&(p.id, window(p.date_time.0))))
                .map(|p| json!({"id": p.id, "name": p.name, "stime": ts(window(p.date_time.0))}))
                .collect()
        }
        Workload::Q11 => {
            let mut times: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
            for b in &e.bids {
                times.entry(b.bidder).or_default().push(b.date_time.0);
            }
            let mut rows = Vec::new();
            for (bidder, mut ts_) in times {
                ts_.sort_unstable();
                let mut start = 0;
                for i in 1..=ts_.len() {
                    if i == ts_.len() || ts_[i] - ts_[i - 1] >= 10_000 {
                        rows.push(json!({"bidder": bidder, "bid_count": i - start,
                            "starttime": ts(ts_[start]), "endtime": ts(ts_[i - 1] + 10_000)}));
                        start = i;
                    }
                }
            }
            rows
        }
        Workload::Q12 => {
            let mut totals: BTreeMap<i64, i64> = BTreeMap::new();
            for b in &e.bids {
                *totals.entry(b.bidder).or_default() += 1;
            }
            totals
                .into_iter()
                .map(|(bidder, n)| json!({"bidder": bidder, "bid_count": n}))
                .collect()
        }
        other => panic!("{other} is not a window or join query"),
    }
}

fn weir_rows(workload: Workload, source: &EventSource, parallelism: u32) -> Vec<Value> {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join(workload.name());
    let (figures, details) = weir_jobs::run(
        workload,
        source,
        parallelism,
        None,
        &Output::JsonFiles(dir.clone()),
        false,
    )
    .unwrap();
    assert_eq!(figures.records, EVENTS, "{workload}");
    assert_eq!(details.late_records_dropped, 0, "{workload}");
    read_json_lines(&dir).unwrap()
}

#[test]
fn window_and_join_queries_match_a_batch_reference() {
    let events = events();
    let files = tempfile::tempdir().unwrap();
    write_nexmark_input(
        files.path(),
        &NexmarkInputSpec {
            events: EVENTS,
            seed: SEED,
            files: 3,
            generator_version: GENERATOR_VERSION,
        },
    )
    .unwrap();
    let generated = EventSource::Generator {
        events: EVENTS,
        seed: SEED,
    };
    let from_files = EventSource::Files(files.path().to_path_buf());
    for workload in Workload::WINDOWS_AND_JOINS {
        let expected = reference(workload, &events);
        assert!(
            !expected.is_empty() || workload == Workload::Q12,
            "{workload}: the reference is empty; the input is too small to test it"
        );
        // Every query from the generator; a join, a window and the sessions from the files
        // too (the same events, decoded from JSON), so that the test stays quick.
        let mut runs = vec![(&generated, 2)];
        if matches!(workload, Workload::Q3 | Workload::Q7 | Workload::Q11) {
            runs.push((&from_files, 1));
        }
        for (source, parallelism) in runs {
            let got = weir_rows(workload, source, parallelism);
            if let Err(e) = compare(workload, &expected, &got) {
                panic!("{workload} p{parallelism} {source:?}: {e}");
            }
        }
    }
}
