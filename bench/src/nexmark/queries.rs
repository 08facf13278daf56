//! What the Nexmark queries read and write. A reader declares only the bid fields its
//! query uses, as Flink's planner pushes the query's projection into the JSON format: the
//! rest of each line is skipped, not decoded.

use serde::{Deserialize, Serialize};

use crate::nexmark::model::BID;
use crate::nexmark::sql_timestamp::SqlTimestamp;

/// An event line read for its bid only: `B` holds the bid fields a query needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BidEvent<B> {
    /// The event's type.
    pub event_type: u8,
    /// The bid, present on bid events.
    #[serde(default = "Option::default")]
    pub bid: Option<B>,
}

impl<B> BidEvent<B> {
    /// The bid, if this is a bid event (the `bid` view's `WHERE event_type = 2`).
    pub fn into_bid(self) -> Option<B> {
        if self.event_type == BID {
            self.bid
        } else {
            None
        }
    }
}

/// The bid fields of q0 and q1: `auction, bidder, price, dateTime, extra`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BidRow {
    /// The auction's id.
    pub auction: i64,
    /// The bidder's id.
    pub bidder: i64,
    /// Price in cents.
    pub price: i64,
    /// When the bid was made.
    pub date_time: SqlTimestamp,
    /// Padding.
    pub extra: String,
}

/// q1's output: the price converted from dollars to euros at 0.908.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EuroBidRow {
    /// The auction's id.
    pub auction: i64,
    /// The bidder's id.
    pub bidder: i64,
    /// `0.908 * price` in thousandths, exact as Flink's `DECIMAL(23, 3)` result is.
    pub price_thousandths: i64,
    /// When the bid was made.
    pub date_time: SqlTimestamp,
    /// Padding.
    pub extra: String,
}

impl From<BidRow> for EuroBidRow {
    fn from(bid: BidRow) -> Self {
        Self {
            auction: bid.auction,
            bidder: bid.bidder,
            price_thousandths: bid.price * 908,
            date_time: bid.date_time,
            extra: bid.extra,
        }
    }
}

/// The bid fields of q2: `auction, price`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuctionPrice {
    /// The auction's id.
    pub auction: i64,
    /// Price in cents.
    pub price: i64,
}

/// q2's filter: bids on every 123rd auction.
pub fn q2_selects(auction: i64) -> bool {
    auction % 123 == 0
}

/// q3's output: a seller in Oregon, Idaho or California and an auction of theirs in
/// category 10.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q3Row {
    /// The seller's name.
    pub name: String,
    /// The seller's city.
    pub city: String,
    /// The seller's state.
    pub state: String,
    /// The auction's id.
    pub id: i64,
}

/// q4's output: a category and the average closing price of its auctions so far (Flink's
/// `AVG` of `BIGINT`: truncated). `auctions` counts them, so that the last update of a
/// category is the one with the most auctions; the check leaves it out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q4Row {
    /// The category.
    pub id: i64,
    /// The average closing price, in cents.
    #[serde(rename = "final")]
    pub final_price: i64,
    /// Auctions averaged (Weir only).
    pub auctions: i64,
}

/// q5's output: an auction with the most bids in a sliding window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q5Row {
    /// The auction.
    pub auction: i64,
    /// Its bids in the window.
    pub num: i64,
}

/// q6's output: after each closed auction of a seller, the average selling price of the
/// seller's last auctions (this one and up to 10 before it, as the suite's SQL says).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q6Row {
    /// The seller.
    pub seller: i64,
    /// The average winning price, in cents (truncated).
    pub avg_price: i64,
}

/// q7's output: a bid with the highest price of its 10 s window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Q7Row {
    /// The auction.
    pub auction: i64,
    /// The price.
    pub price: i64,
    /// The bidder.
    pub bidder: i64,
    /// When the bid was made.
    pub date_time: SqlTimestamp,
    /// Padding.
    pub extra: String,
}

/// q8's output: a person who opened an auction in the 10 s window in which they registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q8Row {
    /// The person.
    pub id: i64,
    /// Their name.
    pub name: String,
    /// The window's start.
    pub stime: SqlTimestamp,
}

/// q11's and q12's output: a bidder's bids in a window (a session for q11, a 10 s
/// processing-time window for q12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BidderCountRow {
    /// The bidder.
    pub bidder: i64,
    /// Bids in the window.
    pub bid_count: i64,
    /// The window's start.
    pub starttime: SqlTimestamp,
    /// The window's end.
    pub endtime: SqlTimestamp,
}

/// q3's filter of sellers.
pub fn q3_state(state: &str) -> bool {
    matches!(state, "OR" | "ID" | "CA")
}

/// q3's filter of auctions.
pub const Q3_CATEGORY: i64 = 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_skips_fields_and_parts_it_does_not_declare() {
        let line = br#"{"event_type":2,"bid":{"auction":1230,"bidder":1001,"price":512,"channel":"Google","url":"https://x","dateTime":"2015-07-15 00:00:00.100","extra":"pad"}}"#;
        let q2: BidEvent<AuctionPrice> = serde_json::from_slice(line).unwrap();
        assert_eq!(
            q2.into_bid(),
            Some(AuctionPrice {
                auction: 1230,
                price: 512
            })
        );
        let q1: EuroBidRow = serde_json::from_slice::<BidEvent<BidRow>>(line)
            .unwrap()
            .into_bid()
            .unwrap()
            .into();
        assert_eq!(q1.price_thousandths, 464_896);
        assert_eq!(q1.date_time, SqlTimestamp(1_436_918_400_100));
        let person = br#"{"event_type":0,"person":{"id":1000,"name":"Kate Smith"}}"#;
        let skipped: BidEvent<BidRow> = serde_json::from_slice(person).unwrap();
        assert_eq!(skipped.into_bid(), None);
        assert!(q2_selects(1230) && !q2_selects(1231));
    }
}
