//! The workloads as Weir pipelines, run in this process, with their figures.
//!
//! Each reads the input directory with the file source (one part file per split), so a
//! parallelism of p reads p files at once, as Flink's filesystem source does, or (Nexmark
//! queries, `--source generator`) makes the same events in memory with a `GeneratorSource`.
//!
//! The window and join queries (q3–q12) take event time from `dateTime` with watermarks 4 s
//! behind, as the Flink Nexmark suite's DDL does, and use Weir's window, window-join and
//! interval-join operators; q3's regular join and the per-auction and per-seller steps of q4
//! and q6 are keyed (co-)process functions with state and timers, as Weir has no regular
//! (unwindowed) join or OVER aggregation.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use weir::connectors::discard::DiscardingSink;
use weir::connectors::file_reader::RawRecord;
use weir::connectors::file_sink::FileSink;
use weir::connectors::file_source::{FileFormat, FileSource};
use weir::connectors::generator::GeneratorSource;
use weir::connectors::malformed::DecodeError;
use weir::windowing::{
    EventTimeSessionWindows, SlidingEventTimeWindows, TimeWindow, TumblingEventTimeWindows,
    TumblingProcessingTimeWindows, WindowContext,
};
use weir::WatermarkStrategy;
use weir::{
    AggregateFunction, BoxError, CheckpointConfig, CheckpointStorageConfig, Collector, DataStream,
    ExecutionConfig, KeyedCoProcessFunction, KeyedContext, KeyedProcessFunction, ListState, Record,
    StreamExecutionEnvironment, ValueState,
};

use crate::error::BenchError;
use crate::nexmark::generator::{
    LeanAuction, LeanBid, LeanEvent, LeanPerson, NexmarkGenerator, MAX_AUCTION_MILLIS,
};
use crate::nexmark::queries::{
    q2_selects, q3_state, AuctionPrice, BidEvent, BidRow, BidderCountRow, EuroBidRow, Q3Row, Q4Row,
    Q5Row, Q6Row, Q7Row, Q8Row, Q3_CATEGORY,
};
use crate::nexmark::sql_timestamp::SqlTimestamp;
use crate::process_usage;
use crate::report::{Engine, RunFigures};
use crate::workload::Workload;

/// Name of every pipeline's sink, to read its record count back.
const SINK: &str = "sink";

/// SUM(value) and COUNT(*) per key, emitting `(key, (sum, count))` after each row, as
/// Flink's non-mini-batch group aggregation emits an update per row.
#[derive(Debug, Clone, Copy, Default)]
pub struct SumAndCount;

impl AggregateFunction<(i64, i64), (i64, i64), (i64, i64)> for SumAndCount {
    fn create_accumulator(&self) -> (i64, i64) {
        (0, 0)
    }
    fn add(&self, (_, value): (i64, i64), acc: &mut (i64, i64)) {
        acc.0 += value;
        acc.1 += 1;
    }
    fn get_result(&self, acc: &(i64, i64)) -> (i64, i64) {
        *acc
    }
    fn merge(&self, a: (i64, i64), b: (i64, i64)) -> (i64, i64) {
        (a.0 + b.0, a.1 + b.1)
    }
}

/// JSON lines decoded into `T` by the file source.
fn json_lines<T: Record + serde::de::DeserializeOwned>(dir: &str) -> FileSource<T> {
    FileSource::with_decoder(
        dir,
        FileFormat::Lines,
        Arc::new(|raw, _location| match raw {
            RawRecord::Line(line) => std::str::from_utf8(line)
                .map_err(|e| DecodeError::new(e.to_string()))
                .and_then(|text| {
                    serde_json::from_str(text).map_err(|e| DecodeError::new(e.to_string()))
                }),
            RawRecord::Csv { .. } => Err(DecodeError::new("a JSON decoder was given a CSV row")),
        }),
    )
}

fn key_values(env: &StreamExecutionEnvironment, dir: &str) -> DataStream<(i64, i64)> {
    env.from_source(
        FileSource::<(i64, i64)>::csv(dir).has_header(false),
        WatermarkStrategy::no_watermarks(),
        "kv source",
    )
}

/// Where a pipeline's events come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventSource {
    /// The part files of a directory.
    Files(PathBuf),
    /// Nexmark events made in memory by [`NexmarkGenerator`]: `events` of `seed`.
    Generator {
        /// How many.
        events: u64,
        /// The seed.
        seed: u64,
    },
}

/// Where a pipeline's results go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Nowhere (the timed runs; Flink's are into a blackhole).
    Discard,
    /// JSON lines into part files of this directory, to compare with Flink's.
    JsonFiles(PathBuf),
}

fn sink<T: Record + Serialize>(stream: &DataStream<T>, output: &Output) {
    match output {
        Output::Discard => {
            stream.sink_to(DiscardingSink, SINK);
        }
        Output::JsonFiles(dir) => {
            let encoder = Arc::new(|record: &T, out: &mut Vec<u8>| {
                serde_json::to_writer(&mut *out, record)?;
                out.push(b'\n');
                Ok(())
            });
            stream.sink_to(FileSink::new(dir, encoder).with_suffix(".json"), SINK);
        }
    }
}

/// The watermark strategy of the Nexmark DDL: `dateTime`, 4 s out of order.
fn nexmark_watermarks() -> WatermarkStrategy<LeanEvent> {
    WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_secs(4)).with_timestamp_assigner(
        // An event without its part has no time; it is dropped by every view after this.
        |event: &LeanEvent, _| event.date_time_millis().unwrap_or(i64::MIN),
    )
}

/// The Nexmark events with event time, from the files or the generator.
fn nexmark_events(env: &StreamExecutionEnvironment, source: &EventSource) -> DataStream<LeanEvent> {
    match source {
        EventSource::Files(dir) => env.from_source(
            json_lines::<LeanEvent>(&dir.to_string_lossy()),
            nexmark_watermarks(),
            "nexmark source",
        ),
        EventSource::Generator { events, seed } => {
            let generator = NexmarkGenerator::new(*seed);
            env.from_source(
                GeneratorSource::new(*events, move |n| generator.lean_event(n)),
                nexmark_watermarks(),
                "nexmark generator",
            )
        }
    }
}

/// The bids of q0–q2 without event time: from the files, read for the fields the query
/// needs, or from the generator.
fn plain_bids<B: Record + serde::de::DeserializeOwned>(
    env: &StreamExecutionEnvironment,
    source: &EventSource,
    from_lean: fn(LeanBid) -> B,
) -> DataStream<B> {
    match source {
        EventSource::Files(dir) => env
            .from_source(
                json_lines::<BidEvent<B>>(&dir.to_string_lossy()),
                WatermarkStrategy::no_watermarks(),
                "nexmark source",
            )
            .flat_map_iter(BidEvent::into_bid),
        EventSource::Generator { events, seed } => {
            let generator = NexmarkGenerator::new(*seed);
            env.from_source(
                GeneratorSource::new(*events, move |n| generator.lean_event(n)),
                WatermarkStrategy::no_watermarks(),
                "nexmark generator",
            )
            .flat_map_iter(move |e: LeanEvent| e.into_bid().map(from_lean))
        }
    }
}

fn bid_row(bid: LeanBid) -> BidRow {
    BidRow {
        auction: bid.auction,
        bidder: bid.bidder,
        price: bid.price,
        date_time: bid.date_time,
        extra: bid.extra,
    }
}

fn auction_price(bid: LeanBid) -> AuctionPrice {
    AuctionPrice {
        auction: bid.auction,
        price: bid.price,
    }
}

/// Builds `workload`'s pipeline over the key,value input in `dir` or the Nexmark events of
/// `source`, with its results going to `output`.
pub fn build(
    env: &StreamExecutionEnvironment,
    workload: Workload,
    source: &EventSource,
    output: &Output,
) -> Result<(), BenchError> {
    let kv_dir = || match source {
        EventSource::Files(dir) => Ok(dir.to_string_lossy().into_owned()),
        EventSource::Generator { .. } => Err(BenchError::Run(format!(
            "{workload} reads the key,value files; it has no generator source"
        ))),
    };
    match workload {
        Workload::Stateless => sink(
            &key_values(env, &kv_dir()?)
                .filter(|(_, value)| value % 2 == 0)
                .map(|(key, value)| (key, value * 10)),
            output,
        ),
        Workload::Keyed => sink(
            &key_values(env, &kv_dir()?)
                .key_by(|(key, _): &(i64, i64)| *key)
                .aggregate(SumAndCount)
                .name("sum and count"),
            output,
        ),
        Workload::Q0 => sink(&plain_bids(env, source, bid_row), output),
        Workload::Q1 => sink(
            &plain_bids(env, source, bid_row).map(EuroBidRow::from),
            output,
        ),
        Workload::Q2 => sink(
            &plain_bids(env, source, auction_price).filter(|bid| q2_selects(bid.auction)),
            output,
        ),
        Workload::Q3 => sink(&q3(&nexmark_events(env, source)), output),
        Workload::Q4 => sink(&q4(&nexmark_events(env, source)), output),
        Workload::Q5 => sink(&q5(&nexmark_events(env, source)), output),
        Workload::Q6 => sink(&q6(&nexmark_events(env, source)), output),
        Workload::Q7 => sink(&q7(&nexmark_events(env, source)), output),
        Workload::Q8 => sink(&q8(&nexmark_events(env, source)), output),
        Workload::Q11 => sink(&q11(&nexmark_events(env, source)), output),
        Workload::Q12 => sink(&q12(&nexmark_events(env, source)), output),
    }
    Ok(())
}

fn persons(events: &DataStream<LeanEvent>) -> DataStream<LeanPerson> {
    events.flat_map_iter(LeanEvent::into_person).name("person")
}

fn auctions(events: &DataStream<LeanEvent>) -> DataStream<LeanAuction> {
    events
        .flat_map_iter(LeanEvent::into_auction)
        .name("auction")
}

fn bids(events: &DataStream<LeanEvent>) -> DataStream<LeanBid> {
    events.flat_map_iter(LeanEvent::into_bid).name("bid")
}

/// COUNT(*) as an aggregate function.
#[derive(Debug, Clone, Copy, Default)]
pub struct Count;

impl<T> AggregateFunction<T, i64, i64> for Count {
    fn create_accumulator(&self) -> i64 {
        0
    }
    fn add(&self, _value: T, acc: &mut i64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &i64) -> i64 {
        *acc
    }
    fn merge(&self, a: i64, b: i64) -> i64 {
        a + b
    }
}

/// q3, the regular inner join `auction JOIN person ON seller = id`: a person is kept once
/// seen (ids are unique), an auction waits for its seller until the seller comes (Flink's
/// regular join keeps both sides for ever; here an auction is dropped from state once
/// joined, which changes nothing, as a person comes once).
#[derive(Clone)]
struct Q3Join {
    seller: ValueState<LeanPerson>,
    waiting: ListState<i64>,
}

impl KeyedCoProcessFunction<i64, LeanAuction, LeanPerson, Q3Row> for Q3Join {
    fn process_element1(
        &mut self,
        auction: LeanAuction,
        ctx: &mut KeyedContext<'_, i64>,
        out: &mut Collector<'_, Q3Row>,
    ) -> Result<(), BoxError> {
        match self.seller.value(ctx)? {
            Some(person) => out.collect(q3_row(&person, auction.id)),
            None => self.waiting.add(ctx, auction.id)?,
        }
        Ok(())
    }

    fn process_element2(
        &mut self,
        person: LeanPerson,
        ctx: &mut KeyedContext<'_, i64>,
        out: &mut Collector<'_, Q3Row>,
    ) -> Result<(), BoxError> {
        for id in self.waiting.get(ctx)? {
            out.collect(q3_row(&person, id));
        }
        self.waiting.clear(ctx)?;
        self.seller.update(ctx, person)?;
        Ok(())
    }
}

fn q3_row(person: &LeanPerson, id: i64) -> Q3Row {
    Q3Row {
        name: person.name.clone(),
        city: person.city.clone(),
        state: person.state.clone(),
        id,
    }
}

/// q3: sellers in OR, ID or CA and their auctions in category 10.
pub fn q3(events: &DataStream<LeanEvent>) -> DataStream<Q3Row> {
    let sellers = persons(events).filter(|p| q3_state(&p.state));
    auctions(events)
        .filter(|a| a.category == Q3_CATEGORY)
        .connect(&sellers)
        .key_by(|a: &LeanAuction| a.seller, |p: &LeanPerson| p.id)
        .process(Q3Join {
            seller: ValueState::new("q3.seller"),
            waiting: ListState::new("q3.waiting"),
        })
        .name("q3 join")
}

/// A bid within its auction's lifetime, from the interval join of auctions and bids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct AuctionBid {
    /// The auction.
    pub auction: i64,
    /// Its seller.
    pub seller: i64,
    /// Its category.
    pub category: i64,
    /// When it closes, ms.
    pub expires: i64,
    /// The bid's price.
    pub price: i64,
    /// When the bid was made, ms.
    pub bid_time: i64,
}

/// The bids made while their auction was open: `B.dateTime BETWEEN A.dateTime AND
/// A.expires`, as an interval join on the auction id from the auction's time to its longest
/// possible life, then the auction's own expiry.
fn bids_in_auctions(events: &DataStream<LeanEvent>) -> DataStream<AuctionBid> {
    let bids = bids(events).map(|b: LeanBid| (b.auction, b.price, b.date_time.0));
    auctions(events)
        .key_by(|a: &LeanAuction| a.id)
        .interval_join(&bids.key_by(|b: &(i64, i64, i64)| b.0))
        .between(0, MAX_AUCTION_MILLIS)
        .process(
            |a: LeanAuction, (_, price, bid_time): (i64, i64, i64)| AuctionBid {
                auction: a.id,
                seller: a.seller,
                category: a.category,
                expires: a.expires.0,
                price,
                bid_time,
            },
        )
        .filter(|ab| ab.bid_time <= ab.expires)
}

/// Keeps an auction's highest bid (the earliest of equal ones) until the auction closes,
/// then emits it: q4's `MAX(B.price) GROUP BY A.id` and q6's `ROW_NUMBER() ... <= 1`, final
/// once the watermark passes the expiry (no bid after it can count).
#[derive(Clone)]
struct WinningBid {
    best: ValueState<AuctionBid>,
}

impl KeyedProcessFunction<i64, AuctionBid, AuctionBid> for WinningBid {
    fn process_element(
        &mut self,
        bid: AuctionBid,
        ctx: &mut KeyedContext<'_, i64>,
        _out: &mut Collector<'_, AuctionBid>,
    ) -> Result<(), BoxError> {
        match self.best.get_mut(ctx)? {
            Some(best) => {
                if (bid.price, -bid.bid_time) > (best.price, -best.bid_time) {
                    *best = bid;
                }
            }
            None => {
                ctx.timer_service().register_event_time_timer(bid.expires)?;
                self.best.update(ctx, bid)?;
            }
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        _timestamp: i64,
        ctx: &mut KeyedContext<'_, i64>,
        out: &mut Collector<'_, AuctionBid>,
    ) -> Result<(), BoxError> {
        if let Some(best) = self.best.value(ctx)? {
            out.collect(best);
        }
        self.best.clear(ctx)?;
        Ok(())
    }
}

fn winning_bids(events: &DataStream<LeanEvent>) -> DataStream<AuctionBid> {
    bids_in_auctions(events)
        .key_by(|ab: &AuctionBid| ab.auction)
        .process(WinningBid {
            best: ValueState::new("winning bid"),
        })
        .name("winning bid")
}

/// AVG(final) of BIGINT, as Flink computes it (truncated), with the count.
#[derive(Debug, Clone, Copy, Default)]
pub struct Average;

impl AggregateFunction<AuctionBid, (i64, i64), (i64, i64)> for Average {
    fn create_accumulator(&self) -> (i64, i64) {
        (0, 0)
    }
    fn add(&self, bid: AuctionBid, acc: &mut (i64, i64)) {
        acc.0 += bid.price;
        acc.1 += 1;
    }
    fn get_result(&self, acc: &(i64, i64)) -> (i64, i64) {
        (acc.0 / acc.1.max(1), acc.1)
    }
    fn merge(&self, a: (i64, i64), b: (i64, i64)) -> (i64, i64) {
        (a.0 + b.0, a.1 + b.1)
    }
}

/// q4: the average closing price per category, updated as each auction closes.
pub fn q4(events: &DataStream<LeanEvent>) -> DataStream<Q4Row> {
    winning_bids(events)
        .key_by(|w: &AuctionBid| w.category)
        .aggregate(Average)
        .name("average per category")
        .map(|(category, (average, auctions))| Q4Row {
            id: category,
            final_price: average,
            auctions,
        })
}

/// q5: the auctions with the most bids in each sliding window of 10 s every 2 s: counts
/// per auction and window, then, keyed by the window's end, the maximum over them.
pub fn q5(events: &DataStream<LeanEvent>) -> DataStream<Q5Row> {
    bids(events)
        .key_by(|b: &LeanBid| b.auction)
        .window(SlidingEventTimeWindows::of(
            Duration::from_secs(10),
            Duration::from_secs(2),
        ))
        .aggregate_with(
            Count,
            |auction: &i64,
             ctx: &WindowContext<'_, TimeWindow>,
             counts: &[i64],
             out: &mut Collector<'_, (i64, i64, i64)>| {
                for count in counts {
                    out.collect((ctx.window().end, *auction, *count));
                }
                Ok(())
            },
        )
        .name("bids per auction")
        // Each count carries its window's last millisecond: a 2 s tumbling window keyed by
        // the sliding window's end holds exactly that window's counts.
        .key_by(|c: &(i64, i64, i64)| c.0)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(2)))
        .process(
            |_end: &i64,
             _ctx: &WindowContext<'_, TimeWindow>,
             counts: &[(i64, i64, i64)],
             out: &mut Collector<'_, Q5Row>| {
                let max = counts.iter().map(|c| c.2).max().unwrap_or(0);
                for &(_, auction, num) in counts.iter().filter(|c| c.2 == max) {
                    out.collect(Q5Row { auction, num });
                }
                Ok(())
            },
        )
        .name("hottest auctions")
}

/// q6's per-seller step: winning bids buffered until no earlier one can still come (the
/// watermark past the bid's time plus the longest auction), then taken in the order of the
/// winning bid's time (ties by auction id), each emitting the average of the seller's last
/// 11 prices (`ROWS BETWEEN 10 PRECEDING AND CURRENT ROW`).
#[derive(Clone)]
struct SellerAverage {
    pending: ValueState<Vec<(i64, i64, i64)>>,
    last: ValueState<VecDeque<i64>>,
}

/// Rows of q6's OVER window: the current one and the 10 before it.
const Q6_ROWS: usize = 11;

impl KeyedProcessFunction<i64, AuctionBid, Q6Row> for SellerAverage {
    fn process_element(
        &mut self,
        win: AuctionBid,
        ctx: &mut KeyedContext<'_, i64>,
        _out: &mut Collector<'_, Q6Row>,
    ) -> Result<(), BoxError> {
        ctx.timer_service()
            .register_event_time_timer(win.bid_time + MAX_AUCTION_MILLIS)?;
        let mut pending = self.pending.value(ctx)?.unwrap_or_default();
        pending.push((win.bid_time, win.auction, win.price));
        self.pending.update(ctx, pending)?;
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        ctx: &mut KeyedContext<'_, i64>,
        out: &mut Collector<'_, Q6Row>,
    ) -> Result<(), BoxError> {
        let mut pending = self.pending.value(ctx)?.unwrap_or_default();
        pending.sort_unstable();
        let ready = pending
            .iter()
            .take_while(|p| p.0 + MAX_AUCTION_MILLIS <= timestamp)
            .count();
        let mut last = self.last.value(ctx)?.unwrap_or_default();
        let seller = *ctx.current_key();
        for &(_, _, price) in &pending[..ready] {
            if last.len() == Q6_ROWS {
                last.pop_front();
            }
            last.push_back(price);
            let avg = last.iter().sum::<i64>() / last.len() as i64;
            out.collect(Q6Row {
                seller,
                avg_price: avg,
            });
        }
        pending.drain(..ready);
        if pending.is_empty() {
            self.pending.clear(ctx)?;
        } else {
            self.pending.update(ctx, pending)?;
        }
        self.last.update(ctx, last)?;
        Ok(())
    }
}

/// q6: the average selling price per seller over their last closed auctions.
pub fn q6(events: &DataStream<LeanEvent>) -> DataStream<Q6Row> {
    winning_bids(events)
        .key_by(|w: &AuctionBid| w.seller)
        .process(SellerAverage {
            pending: ValueState::new("q6.pending"),
            last: ValueState::new("q6.last"),
        })
        .name("average per seller")
}

/// A bid in one of q7's windows. `at_end` marks a copy of a bid made exactly at the
/// window's end (so in the next window) that the suite's SQL still returns for this window
/// (`B.dateTime BETWEEN B1.dateTime - INTERVAL '10' SECOND AND B1.dateTime`, window end
/// included) when it has this window's highest price, without counting towards that price.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct WindowBid {
    /// The bid.
    pub bid: LeanBid,
    /// Made at the window's end.
    pub at_end: bool,
}

/// What [`HighestBids`] keeps of a window: its bids at the highest price so far, and every
/// bid made at its end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Highest {
    /// The window's own bids at its highest price.
    pub highest: Vec<LeanBid>,
    /// Bids made exactly at the window's end.
    pub at_end: Vec<LeanBid>,
}

/// The highest-priced bids of a window (all of them when several share the price), with the
/// bids made at its end: all of them per auction (another auction may hold the window's
/// highest price), only those at the highest price over the whole window (`final_step`).
#[derive(Debug, Clone, Copy, Default)]
pub struct HighestBids {
    /// Whether this is the last step, which drops the end bids below the highest price.
    pub final_step: bool,
}

impl AggregateFunction<WindowBid, Highest, Vec<WindowBid>> for HighestBids {
    fn create_accumulator(&self) -> Highest {
        Highest::default()
    }
    fn add(&self, bid: WindowBid, acc: &mut Highest) {
        if bid.at_end {
            acc.at_end.push(bid.bid);
            return;
        }
        match acc.highest.first().map(|b| b.price) {
            Some(best) if bid.bid.price < best => {}
            Some(best) if bid.bid.price == best => acc.highest.push(bid.bid),
            _ => {
                acc.highest.clear();
                acc.highest.push(bid.bid);
            }
        }
    }
    fn get_result(&self, acc: &Highest) -> Vec<WindowBid> {
        let best = acc.highest.first().map(|b| b.price);
        let own = acc.highest.iter().map(|bid| WindowBid {
            bid: bid.clone(),
            at_end: false,
        });
        let at_end = acc
            .at_end
            .iter()
            .filter(|b| !self.final_step || Some(b.price) == best)
            .map(|bid| WindowBid {
                bid: bid.clone(),
                at_end: true,
            });
        own.chain(at_end).collect()
    }
    fn merge(&self, mut a: Highest, b: Highest) -> Highest {
        for bid in b.highest {
            self.add(WindowBid { bid, at_end: false }, &mut a);
        }
        a.at_end.extend(b.at_end);
        a
    }
}

/// q7's window length, ms.
const Q7_WINDOW_MILLIS: i64 = 10_000;

/// q7: the highest bids of each 10 s tumbling window: the highest per auction and window
/// in parallel, then the highest of those over the whole window.
pub fn q7(events: &DataStream<LeanEvent>) -> DataStream<Q7Row> {
    let tumbling = || TumblingEventTimeWindows::of(Duration::from_millis(Q7_WINDOW_MILLIS as u64));
    bids(events)
        .flat_map(|bid: LeanBid, out: &mut Collector<'_, WindowBid>| {
            let t = bid.date_time.0;
            if t.rem_euclid(Q7_WINDOW_MILLIS) == 0 {
                // Also a candidate of the window that ends at its time.
                out.collect_with_timestamp(
                    WindowBid {
                        bid: bid.clone(),
                        at_end: true,
                    },
                    t - 1,
                );
            }
            out.collect(WindowBid { bid, at_end: false });
        })
        .key_by(|b: &WindowBid| b.bid.auction)
        .window(tumbling())
        .aggregate(HighestBids { final_step: false })
        .name("highest bids per auction")
        .flat_map_iter(|bids: Vec<WindowBid>| bids)
        .window_all(tumbling())
        .aggregate(HighestBids { final_step: true })
        .name("highest bids")
        .flat_map_iter(|bids: Vec<WindowBid>| {
            bids.into_iter().map(|WindowBid { bid: b, .. }| Q7Row {
                auction: b.auction,
                price: b.price,
                bidder: b.bidder,
                date_time: b.date_time,
                extra: b.extra,
            })
        })
}

/// q8: people who opened an auction in the 10 s window in which they registered: the
/// sellers of each window (one per seller and window), window-joined with the people.
pub fn q8(events: &DataStream<LeanEvent>) -> DataStream<Q8Row> {
    let tumbling = || TumblingEventTimeWindows::of(Duration::from_secs(10));
    let sellers = auctions(events)
        .map(|a: LeanAuction| a.seller)
        .key_by(|seller: &i64| *seller)
        .window(tumbling())
        .reduce(|seller, _| seller)
        .name("sellers per window");
    persons(events)
        .join(&sellers)
        .where_(|p: &LeanPerson| p.id)
        .equal_to(|seller: &i64| *seller)
        .window(tumbling())
        .apply(|p: LeanPerson, _seller: i64| Q8Row {
            id: p.id,
            name: p.name,
            stime: SqlTimestamp(p.date_time.0 - p.date_time.0.rem_euclid(10_000)),
        })
}

fn bidder_count(
    bidder: &i64,
    ctx: &WindowContext<'_, TimeWindow>,
    counts: &[i64],
    out: &mut Collector<'_, BidderCountRow>,
) -> Result<(), BoxError> {
    for count in counts {
        out.collect(BidderCountRow {
            bidder: *bidder,
            bid_count: *count,
            starttime: SqlTimestamp(ctx.window().start),
            endtime: SqlTimestamp(ctx.window().end),
        });
    }
    Ok(())
}

/// q11: bids per bidder and session (gap 10 s).
pub fn q11(events: &DataStream<LeanEvent>) -> DataStream<BidderCountRow> {
    bids(events)
        .key_by(|b: &LeanBid| b.bidder)
        .window(EventTimeSessionWindows::with_gap(Duration::from_secs(10)))
        .aggregate_with(Count, bidder_count)
        .name("bids per session")
}

/// q12: bids per bidder in 10 s processing-time windows.
pub fn q12(events: &DataStream<LeanEvent>) -> DataStream<BidderCountRow> {
    bids(events)
        .key_by(|b: &LeanBid| b.bidder)
        .window(TumblingProcessingTimeWindows::of(Duration::from_secs(10)))
        .aggregate_with(Count, bidder_count)
        .name("bids per processing-time window")
}

/// What a run did, besides its figures: records the windows dropped as late (none, when
/// the input is in order within each split and the watermark 4 s behind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunDetails {
    /// Records dropped as late by every operator together.
    pub late_records_dropped: u64,
}

/// Runs `workload` over `source` at `parallelism`, checkpointing every second to
/// `checkpoints` when given, writing its results to `output`, and measures it. Meant to run
/// alone in its process: the peak memory is the process's.
pub fn run(
    workload: Workload,
    source: &EventSource,
    parallelism: u32,
    checkpoints: Option<&Path>,
    output: &Output,
) -> Result<(RunFigures, RunDetails), BenchError> {
    let mut config = ExecutionConfig::default().with_parallelism(parallelism);
    if let Some(checkpoints) = checkpoints {
        config = config.with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_secs(1))
                .with_storage(CheckpointStorageConfig::FileSystem(
                    checkpoints.to_path_buf(),
                )),
        );
    }
    let env = StreamExecutionEnvironment::new(config).map_err(weir::WeirError::from)?;
    build(&env, workload, source, output)?;
    let before = process_usage::current();
    let result = env.execute(workload.name())?;
    let after = process_usage::current();
    let records = result
        .operators
        .first()
        .map(|source| source.records_out)
        .unwrap_or_default();
    let details = RunDetails {
        late_records_dropped: result
            .operators
            .iter()
            .map(|o| o.late_records_dropped)
            .sum(),
    };
    let figures = RunFigures {
        workload,
        engine: if checkpoints.is_some() {
            Engine::Weir
        } else {
            Engine::WeirNoCheckpoints
        },
        parallelism,
        records,
        records_out: result
            .operator(&format!("Sink: {SINK}"))
            .map(|sink| sink.records_in),
        seconds: result.wall_time.as_secs_f64(),
        cpu_seconds: after.cpu_seconds - before.cpu_seconds,
        cpu_seconds_with_setup: None,
        peak_rss_mib: after.peak_rss_mib,
        checkpoints: result.checkpoints.completed,
        checkpoint_mean_ms: result
            .checkpoints
            .mean_completed_duration()
            .map(|d| d.as_secs_f64() * 1e3),
        machine_busy_before: None,
    };
    Ok((figures, details))
}

#[cfg(test)]
mod tests {
    use weir::connectors::collection::CollectionSource;

    use super::*;
    use crate::nexmark::model::BID;

    fn bid(auction: i64, price: i64, millis: i64) -> LeanEvent {
        LeanEvent {
            event_type: BID,
            person: None,
            auction: None,
            bid: Some(LeanBid {
                auction,
                bidder: 1,
                price,
                date_time: SqlTimestamp(millis),
                extra: String::new(),
            }),
        }
    }

    #[test]
    fn q7_returns_a_bid_at_a_window_end_for_both_windows_as_the_sql_does() {
        let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))
            .unwrap();
        let events = vec![
            bid(1, 5, 0),
            bid(2, 9, 5_000),
            // At the first window's end: its highest price, and the second window's.
            bid(3, 9, 10_000),
            bid(4, 3, 12_000),
            // At the second window's end, above its highest price: only the third window's.
            bid(5, 20, 20_000),
        ];
        let rows =
            q7(&env.from_source(CollectionSource::new(events), nexmark_watermarks(), "bids"))
                .collect();
        env.execute("q7").unwrap();
        let mut got: Vec<(i64, i64)> = rows
            .take()
            .into_iter()
            .map(|r| (r.auction, r.date_time.0))
            .collect();
        got.sort_unstable();
        assert_eq!(got, vec![(2, 5_000), (3, 10_000), (3, 10_000), (5, 20_000)]);
    }
}
