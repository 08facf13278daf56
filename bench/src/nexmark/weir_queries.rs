//! The Nexmark window and join queries (q3–q8, q11, q12) as Weir pipelines over the event
//! stream: event time from `dateTime` with watermarks 4 s behind, as the Flink Nexmark
//! suite's DDL declares; Weir's window, window-join and interval-join operators; q3's regular
//! join and the per-auction and per-seller steps of q4 and q6 as keyed (co-)process
//! functions with state and timers, as Weir has no regular (unwindowed) join or OVER
//! aggregation.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use weir::windowing::{
    EventTimeSessionWindows, SlidingEventTimeWindows, TimeWindow, TumblingEventTimeWindows,
    TumblingProcessingTimeWindows, WindowContext,
};
use weir::{
    AggregateFunction, BoxError, Collector, DataStream, KeyedCoProcessFunction, KeyedContext,
    KeyedProcessFunction, ListState, ValueState,
};

use crate::nexmark::generator::{LeanAuction, LeanBid, LeanEvent, LeanPerson, MAX_AUCTION_MILLIS};
use crate::nexmark::queries::{
    q3_state, BidderCountRow, Q3Row, Q4Row, Q5Row, Q6Row, Q7Row, Q8Row, Q3_CATEGORY,
};
use crate::nexmark::sql_timestamp::SqlTimestamp;

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
        // The first bid of an auction comes back out to be stored with its timer.
        let first = self.best.update_with(ctx, |best| match best {
            Some(best) => {
                if (bid.price, -bid.bid_time) > (best.price, -best.bid_time) {
                    *best = bid;
                }
                None
            }
            None => Some(bid),
        })?;
        if let Some(bid) = first {
            ctx.timer_service().register_event_time_timer(bid.expires)?;
            self.best.update(ctx, bid)?;
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
