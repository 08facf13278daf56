//! The Nexmark event generator, to the published model of the Beam and Flink Nexmark
//! suites: event `n`'s kind and ids follow from `n` alone (1 person, 3 auctions, 46 bids in
//! every 50 events); sellers, bidders and the auctions bid on favour recent "hot" ids;
//! prices are log-uniform; `extra` pads each kind to its average size (200, 500, 100 bytes).
//! Events are 100 µs apart (10 000 events/s of event time) from 2015-07-15 00:00:00 UTC.
//!
//! Each part file holds a contiguous range of event numbers and has its own seeded random
//! stream, so files are written in parallel and the same seed gives the same bytes.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::error::BenchError;
use crate::kv_input::{part_range, write_parts};
use crate::nexmark::model::{Auction, Bid, NexmarkEvent, Person, AUCTION, BID, PERSON};
use crate::nexmark::sql_timestamp::SqlTimestamp;

const PERSON_PROPORTION: i64 = 1;
const AUCTION_PROPORTION: i64 = 3;
const BID_PROPORTION: i64 = 46;
const TOTAL_PROPORTION: i64 = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION;
const FIRST_PERSON_ID: i64 = 1000;
const FIRST_AUCTION_ID: i64 = 1000;
const FIRST_CATEGORY_ID: i64 = 10;
const NUM_CATEGORIES: i64 = 5;
const NUM_ACTIVE_PEOPLE: i64 = 1000;
const NUM_IN_FLIGHT_AUCTIONS: i64 = 100;
const PERSON_ID_LEAD: i64 = 10;
const AUCTION_ID_LEAD: i64 = 10;
/// One in this many auctions chosen by a bid is any recent one; the others are hot.
const HOT_AUCTION_RATIO: i64 = 2;
/// One in this many sellers is any active person; the others are hot.
const HOT_SELLER_RATIO: i64 = 4;
/// One in this many bidders is any active person; the others are hot.
const HOT_BIDDER_RATIO: i64 = 4;
/// Hot ids are the first of each batch of this many (the Beam and Flink generators'
/// `HOT_AUCTION_RATIO`, `HOT_SELLER_RATIO` and `HOT_BIDDER_RATIO` constants, all 100).
const HOT_BATCH: i64 = 100;
const HOT_CHANNEL_RATIO: i64 = 2;
const CHANNELS: i64 = 10_000;
const AVG_PERSON_BYTES: usize = 200;
const AVG_AUCTION_BYTES: usize = 500;
const AVG_BID_BYTES: usize = 100;
/// Event time between two events, in microseconds (10 000 events per second).
const INTER_EVENT_MICROS: i64 = 100;

const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const US_CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: [&str; 9] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];

/// What a Nexmark input holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NexmarkInputSpec {
    /// Events in all files together.
    pub events: u64,
    /// Seed of the random choices.
    pub seed: u64,
    /// Part files.
    pub files: u32,
    /// The generator's version: a change to what it writes bumps it, so that inputs made
    /// by an older one are regenerated.
    #[serde(default)]
    pub generator_version: u32,
}

/// The current [`NexmarkInputSpec::generator_version`].
pub const GENERATOR_VERSION: u32 = 2;

/// The kind of event number `n`.
pub fn event_type(n: u64) -> u8 {
    let offset = (n % TOTAL_PROPORTION as u64) as i64;
    if offset < PERSON_PROPORTION {
        PERSON
    } else if offset < PERSON_PROPORTION + AUCTION_PROPORTION {
        AUCTION
    } else {
        BID
    }
}

/// The 0-based id of the last person created at or before event `n`.
fn last_base0_person_id(n: i64) -> i64 {
    let (epoch, offset) = (n / TOTAL_PROPORTION, n % TOTAL_PROPORTION);
    epoch * PERSON_PROPORTION + offset.min(PERSON_PROPORTION - 1)
}

/// The 0-based id of the last auction created at or before event `n` (-1 before the first).
fn last_base0_auction_id(n: i64) -> i64 {
    let (mut epoch, mut offset) = (n / TOTAL_PROPORTION, n % TOTAL_PROPORTION);
    if offset < PERSON_PROPORTION {
        epoch -= 1;
        offset = AUCTION_PROPORTION - 1;
    } else if offset >= PERSON_PROPORTION + AUCTION_PROPORTION {
        offset = AUCTION_PROPORTION - 1;
    } else {
        offset -= PERSON_PROPORTION;
    }
    epoch * AUCTION_PROPORTION + offset
}

/// Makes the events of one part file.
pub struct NexmarkGenerator {
    rng: StdRng,
    base_millis: i64,
}

impl NexmarkGenerator {
    /// A generator whose random choices come from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed),
            base_millis: SqlTimestamp::from_parts(2015, 7, 15, 0, 0, 0, 0).0,
        }
    }

    /// Event number `n`.
    pub fn event(&mut self, n: u64) -> NexmarkEvent {
        let id = n as i64;
        let timestamp = SqlTimestamp(self.base_millis + id * INTER_EVENT_MICROS / 1000);
        let mut event = NexmarkEvent {
            event_type: event_type(n),
            person: None,
            auction: None,
            bid: None,
        };
        match event.event_type {
            PERSON => event.person = Some(self.person(id, timestamp)),
            AUCTION => event.auction = Some(self.auction(id, timestamp)),
            _ => event.bid = Some(self.bid(id, timestamp)),
        }
        event
    }

    fn below(&mut self, n: i64) -> i64 {
        self.rng.random_range(0..n.max(1))
    }

    fn pick<'a>(&mut self, choices: &[&'a str]) -> &'a str {
        choices[self.below(choices.len() as i64) as usize]
    }

    /// Letters with an occasional space, 3 to `max_length - 1` long, trimmed.
    fn next_string(&mut self, max_length: i64) -> String {
        let length = 3 + self.below(max_length - 3);
        let text: String = (0..length)
            .map(|_| {
                if self.below(13) == 0 {
                    ' '
                } else {
                    char::from(b'a' + self.below(26) as u8)
                }
            })
            .collect();
        text.trim().to_string()
    }

    fn next_exact_string(&mut self, length: usize) -> String {
        (0..length)
            .map(|_| char::from(b'a' + self.below(26) as u8))
            .collect()
    }

    /// Padding that brings a record of `current` bytes to `average` bytes, ±20%.
    fn next_extra(&mut self, current: usize, average: usize) -> String {
        if current > average {
            return String::new();
        }
        let wanted = (average - current) as i64;
        let delta = (wanted as f64 * 0.2).round() as i64;
        let length = wanted - delta + self.below(2 * delta + 1);
        self.next_exact_string(length as usize)
    }

    /// Log-uniform between 1 and 1 000 000 dollars, in cents.
    fn next_price(&mut self) -> i64 {
        let exponent: f64 = self.rng.random::<f64>() * 6.0;
        (10f64.powf(exponent) * 100.0).round() as i64
    }

    /// A person id among the recently active ones (or a little ahead of them).
    fn next_base0_person_id(&mut self, n: i64) -> i64 {
        let people = last_base0_person_id(n) + 1;
        let active = people.min(NUM_ACTIVE_PEOPLE);
        people - active + self.below(active + PERSON_ID_LEAD)
    }

    /// An auction id among those in flight (or a little ahead of them).
    fn next_base0_auction_id(&mut self, n: i64) -> i64 {
        let last = last_base0_auction_id(n);
        let min = (last - NUM_IN_FLIGHT_AUCTIONS).max(0);
        min + self.below(last - min + 1 + AUCTION_ID_LEAD)
    }

    fn person(&mut self, n: i64, date_time: SqlTimestamp) -> Person {
        let name = format!("{} {}", self.pick(&FIRST_NAMES), self.pick(&LAST_NAMES));
        let email_address = format!("{}@{}.com", self.next_string(7), self.next_string(5));
        let credit_card = (0..4)
            .map(|_| format!("{:04}", self.below(10_000)))
            .collect::<Vec<_>>()
            .join(" ");
        let city = self.pick(&US_CITIES).to_string();
        let state = self.pick(&US_STATES).to_string();
        let size = 8 + name.len() + email_address.len() + credit_card.len() + city.len() + 8;
        let extra = self.next_extra(size + state.len(), AVG_PERSON_BYTES);
        Person {
            id: last_base0_person_id(n) + FIRST_PERSON_ID,
            name,
            email_address,
            credit_card,
            city,
            state,
            date_time,
            extra,
        }
    }

    fn auction(&mut self, n: i64, date_time: SqlTimestamp) -> Auction {
        let seller = if self.below(HOT_SELLER_RATIO) > 0 {
            (last_base0_person_id(n) / HOT_BATCH) * HOT_BATCH
        } else {
            self.next_base0_person_id(n)
        } + FIRST_PERSON_ID;
        let category = FIRST_CATEGORY_ID + self.below(NUM_CATEGORIES);
        let initial_bid = self.next_price();
        // Auctions stay open for up to twice the event time in which the in-flight
        // auctions are created.
        let horizon_millis = NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION / AUCTION_PROPORTION
            * INTER_EVENT_MICROS
            / 1000;
        let expires = SqlTimestamp(date_time.0 + 1 + self.below(2 * horizon_millis));
        let item_name = self.next_string(20);
        let description = self.next_string(100);
        let reserve = initial_bid + self.next_price();
        let size = 8 + item_name.len() + description.len() + 8 * 6;
        let extra = self.next_extra(size, AVG_AUCTION_BYTES);
        Auction {
            id: last_base0_auction_id(n) + FIRST_AUCTION_ID,
            item_name,
            description,
            initial_bid,
            reserve,
            date_time,
            expires,
            seller,
            category,
            extra,
        }
    }

    fn bid(&mut self, n: i64, date_time: SqlTimestamp) -> Bid {
        let auction = if self.below(HOT_AUCTION_RATIO) > 0 {
            (last_base0_auction_id(n) / HOT_BATCH) * HOT_BATCH
        } else {
            self.next_base0_auction_id(n)
        } + FIRST_AUCTION_ID;
        let bidder = if self.below(HOT_BIDDER_RATIO) > 0 {
            (last_base0_person_id(n) / HOT_BATCH) * HOT_BATCH + 1
        } else {
            self.next_base0_person_id(n)
        } + FIRST_PERSON_ID;
        let price = self.next_price();
        let (channel, url) = if self.below(HOT_CHANNEL_RATIO) > 0 {
            let i = self.below(HOT_CHANNELS.len() as i64) as usize;
            (
                HOT_CHANNELS[i].to_string(),
                format!(
                    "https://www.nexmark.com/{}/item.htm?query=1",
                    HOT_CHANNELS[i]
                ),
            )
        } else {
            let channel = self.below(CHANNELS);
            let url = format!(
                "https://www.nexmark.com/{}/{}/{}/item.htm?query=1&channel_id={channel}",
                self.next_string(5),
                self.next_string(5),
                self.next_string(5)
            );
            (format!("channel-{channel}"), url)
        };
        let extra = self.next_extra(8 * 4, AVG_BID_BYTES);
        Bid {
            auction,
            bidder,
            price,
            channel,
            url,
            date_time,
            extra,
        }
    }
}

/// Writes `spec`'s events as JSON lines into part files `part-N.json` of `dir`, one thread
/// per file.
pub fn write_nexmark_input(dir: &Path, spec: &NexmarkInputSpec) -> Result<(), BenchError> {
    write_parts(dir, spec.files, "json", |path, file| {
        write_part(path, spec, file)
    })
}

fn write_part(path: &Path, spec: &NexmarkInputSpec, file: u32) -> Result<(), BenchError> {
    let io = BenchError::io("writing", path);
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io)?);
    let mut generator = NexmarkGenerator::new(spec.seed ^ (u64::from(file) << 32));
    for n in part_range(spec.events, spec.files, file) {
        serde_json::to_writer(&mut out, &generator.event(n))
            .map_err(|e| BenchError::io("writing", path)(e.into()))?;
        out.write_all(b"\n")
            .map_err(BenchError::io("writing", path))?;
    }
    out.flush().map_err(BenchError::io("writing", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proportions_are_one_three_forty_six() {
        let mut counts = [0u64; 3];
        for n in 0..5000 {
            counts[usize::from(event_type(n))] += 1;
        }
        assert_eq!(counts, [100, 300, 4600]);
    }

    #[test]
    fn ids_follow_the_event_numbers() {
        // Events 0..50: person 0, auctions 0..3, then bids; event 50 is person 1.
        assert_eq!(last_base0_person_id(0), 0);
        assert_eq!(last_base0_person_id(49), 0);
        assert_eq!(last_base0_person_id(50), 1);
        assert_eq!(last_base0_auction_id(1), 0);
        assert_eq!(last_base0_auction_id(3), 2);
        assert_eq!(last_base0_auction_id(10), 2);
        assert_eq!(last_base0_auction_id(50), 2);
        assert_eq!(last_base0_auction_id(52), 4);
    }

    #[test]
    fn events_are_well_formed_and_sized_like_the_model() {
        let mut generator = NexmarkGenerator::new(7);
        let (mut bid_bytes, mut bids) = (0usize, 0usize);
        for n in 0..50_000u64 {
            let event = generator.event(n);
            let line = serde_json::to_string(&event).unwrap();
            let back: NexmarkEvent = serde_json::from_str(&line).unwrap();
            assert_eq!(back, event);
            let people_so_far = (n as i64) / TOTAL_PROPORTION + 1;
            match (event.person, event.auction, event.bid) {
                (Some(p), None, None) => assert_eq!(p.id, FIRST_PERSON_ID + people_so_far - 1),
                (None, Some(a), None) => {
                    assert!(a.reserve >= a.initial_bid && a.expires > a.date_time);
                    assert!(a.seller < FIRST_PERSON_ID + people_so_far + PERSON_ID_LEAD);
                    assert!((10..15).contains(&a.category));
                }
                (None, None, Some(b)) => {
                    assert!(b.auction >= FIRST_AUCTION_ID && b.bidder >= FIRST_PERSON_ID);
                    assert!((100..=100_000_000).contains(&b.price), "{}", b.price);
                    bid_bytes += b.extra.len() + b.channel.len() + b.url.len() + 32;
                    bids += 1;
                }
                other => panic!("event {n} has not exactly one part: {other:?}"),
            }
        }
        let mean = bid_bytes / bids;
        assert!((100..200).contains(&mean), "mean bid size {mean}");
    }

    #[test]
    fn same_seed_same_files() {
        let spec = NexmarkInputSpec {
            events: 500,
            seed: 1,
            files: 2,
            generator_version: GENERATOR_VERSION,
        };
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        write_nexmark_input(a.path(), &spec).unwrap();
        write_nexmark_input(b.path(), &spec).unwrap();
        let read = |d: &Path, f: &str| std::fs::read_to_string(d.join(f)).unwrap();
        for part in ["part-0.json", "part-1.json"] {
            assert_eq!(read(a.path(), part), read(b.path(), part));
        }
        assert_eq!(read(a.path(), "part-1.json").lines().count(), 250);
    }
}
