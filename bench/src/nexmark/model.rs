//! The Nexmark data model: Person, Auction and Bid, and the event that carries one of them,
//! with the field names of the Flink Nexmark suite's `datagen` table, so that one JSON line
//! is one row of that table.

use serde::{Deserialize, Serialize};

use crate::nexmark::sql_timestamp::SqlTimestamp;

/// A person who can sell and bid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Person {
    /// Id, from 1000 up.
    pub id: i64,
    /// First and last name.
    pub name: String,
    /// E-mail address.
    pub email_address: String,
    /// Credit card number, four groups of four digits.
    pub credit_card: String,
    /// City.
    pub city: String,
    /// US state.
    pub state: String,
    /// When the person registered.
    pub date_time: SqlTimestamp,
    /// Padding to the average person size.
    pub extra: String,
}

/// An item put up for auction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Auction {
    /// Id, from 1000 up.
    pub id: i64,
    /// Item name.
    pub item_name: String,
    /// Item description.
    pub description: String,
    /// Initial bid, in cents.
    pub initial_bid: i64,
    /// Reserve price, in cents.
    pub reserve: i64,
    /// When the auction opened.
    pub date_time: SqlTimestamp,
    /// When it closes.
    pub expires: SqlTimestamp,
    /// The selling person's id.
    pub seller: i64,
    /// Category id, 10 to 14.
    pub category: i64,
    /// Padding to the average auction size.
    pub extra: String,
}

/// A bid on an auction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bid {
    /// The auction's id.
    pub auction: i64,
    /// The bidding person's id.
    pub bidder: i64,
    /// Price, in cents.
    pub price: i64,
    /// Where the bid came from.
    pub channel: String,
    /// The page it was made on.
    pub url: String,
    /// When it was made.
    pub date_time: SqlTimestamp,
    /// Padding to the average bid size.
    pub extra: String,
}

/// `event_type` of a person.
pub const PERSON: u8 = 0;
/// `event_type` of an auction.
pub const AUCTION: u8 = 1;
/// `event_type` of a bid.
pub const BID: u8 = 2;

/// One event: its type and the one matching part (the others are left out of the JSON,
/// which Flink's JSON format reads as NULL).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NexmarkEvent {
    /// [`PERSON`], [`AUCTION`] or [`BID`].
    pub event_type: u8,
    /// Set when `event_type` is [`PERSON`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person: Option<Person>,
    /// Set when `event_type` is [`AUCTION`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auction: Option<Auction>,
    /// Set when `event_type` is [`BID`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bid: Option<Bid>,
}
