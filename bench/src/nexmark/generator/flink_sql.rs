//! The generator as Flink SQL: the same arithmetic as [`NexmarkGenerator`], written over a
//! `datagen` sequence, so that Flink generates the very events Weir's `GeneratorSource`
//! makes.

use super::*;

impl NexmarkGenerator {
    fn sql_draw(&self, choice: Choice, m: &str) -> String {
        let x = format!("(n * ({MULTIPLIER}) + ({}))", self.salts[choice as usize]);
        format!("MOD(ABS(({x} * ({x} / 536870912)) / 4294967296), {m})")
    }

    fn sql_pick(&self, choice: Choice, names: &[&str]) -> String {
        format!(
            "SPLIT_INDEX('{}', ',', CAST({} AS INT))",
            names.join(","),
            self.sql_draw(choice, &names.len().to_string())
        )
    }

    fn sql_slice(&self, at: Choice, len: &str) -> String {
        format!(
            "SUBSTRING('{}' FROM CAST(1 + {} AS INT) FOR CAST({len} AS INT))",
            self.text,
            self.sql_draw(at, &TEXT_OFFSETS.to_string())
        )
    }

    fn sql_price(&self, mantissa: Choice, decade: Choice) -> String {
        format!(
            "(100 + {}) * CAST(POWER(10, {}) AS BIGINT)",
            self.sql_draw(mantissa, "900"),
            self.sql_draw(decade, "6")
        )
    }

    fn sql_extra(&self, length: Choice, at: Choice, middle: i64) -> String {
        let delta = middle / 5;
        self.sql_slice(
            at,
            &format!(
                "({} + {})",
                middle - delta,
                self.sql_draw(length, &(2 * delta + 1).to_string())
            ),
        )
    }

    fn sql_person_id_near(&self, choice: Choice) -> String {
        // people = n / 50 + 1; active = LEAST(people, 1000)
        let people = format!("(n / {TOTAL_PROPORTION} + 1)");
        let active = format!("LEAST({people}, {NUM_ACTIVE_PEOPLE})");
        format!(
            "({people} - {active} + {})",
            self.sql_draw(choice, &format!("({active} + {PERSON_ID_LEAD})"))
        )
    }
}

/// The Flink SQL statements that generate `events` events of `seed` in memory, as the
/// views `person`, `auction` and `bid` of the Flink Nexmark suite (with the watermark on
/// `dateTime`, 4 s behind): a `datagen` sequence `n` and, per kind, the same arithmetic as
/// [`NexmarkGenerator`]. Needs `table.local-time-zone` = UTC.
pub fn flink_generator_sql(seed: u64, events: u64) -> Vec<String> {
    let g = NexmarkGenerator::new(seed);
    let last = events.saturating_sub(1);
    let seq = format!(
        "CREATE TABLE seq (n BIGINT, \
         `dateTime` AS CAST(TO_TIMESTAMP_LTZ({BASE_MILLIS} + n * {INTER_EVENT_MICROS} / 1000, 3) AS TIMESTAMP(3)), \
         WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND) \
         WITH ('connector' = 'datagen', 'fields.n.kind' = 'sequence', 'fields.n.start' = '0', \
         'fields.n.end' = '{last}', 'number-of-rows' = '{events}', 'rows-per-second' = '1000000000000')"
    );
    let people_mod = format!("MOD(n, {TOTAL_PROPORTION})");
    let last_person = format!("(n / {TOTAL_PROPORTION})");
    // For auctions, n mod 50 is 1..3: the auction id is (n / 50) * 3 + n mod 50 - 1.
    let auction_id = format!(
        "((n / {TOTAL_PROPORTION}) * {AUCTION_PROPORTION} + {people_mod} - {PERSON_PROPORTION} + {FIRST_AUCTION_ID})"
    );
    // For bids, the last auction is (n / 50) * 3 + 2.
    let last_auction =
        format!("((n / {TOTAL_PROPORTION}) * {AUCTION_PROPORTION} + {AUCTION_PROPORTION} - 1)");
    let email = format!(
        "{} || '@' || {} || '.com'",
        g.sql_slice(
            Choice::EmailUser,
            &format!("(3 + {})", g.sql_draw(Choice::EmailUserLength, "4"))
        ),
        g.sql_slice(
            Choice::EmailDomain,
            &format!("(3 + {})", g.sql_draw(Choice::EmailDomainLength, "2"))
        )
    );
    let card = [Choice::Card0, Choice::Card1, Choice::Card2, Choice::Card3]
        .map(|c| format!("LPAD(CAST({} AS STRING), 4, '0')", g.sql_draw(c, "10000")))
        .join(" || ' ' || ");
    let person = format!(
        "CREATE VIEW person AS SELECT \
         {last_person} + {FIRST_PERSON_ID} AS id, \
         {} || ' ' || {} AS name, \
         {email} AS emailAddress, \
         {card} AS creditCard, \
         {} AS city, {} AS state, `dateTime`, {} AS extra \
         FROM seq WHERE {people_mod} < {PERSON_PROPORTION}",
        g.sql_pick(Choice::FirstName, &FIRST_NAMES),
        g.sql_pick(Choice::LastName, &LAST_NAMES),
        g.sql_pick(Choice::City, &US_CITIES),
        g.sql_pick(Choice::State, &US_STATES),
        g.sql_extra(Choice::PersonExtra, Choice::PersonExtraAt, PERSON_EXTRA),
    );
    let seller = format!(
        "({FIRST_PERSON_ID} + CASE WHEN {} > 0 THEN ({last_person} / {HOT_BATCH}) * {HOT_BATCH} ELSE {} END)",
        g.sql_draw(Choice::HotSeller, &HOT_SELLER_RATIO.to_string()),
        g.sql_person_id_near(Choice::Seller)
    );
    let initial = g.sql_price(Choice::InitialMantissa, Choice::InitialDecade);
    let auction = format!(
        "CREATE VIEW auction AS SELECT \
         {auction_id} AS id, \
         {} AS itemName, {} AS description, \
         {initial} AS initialBid, \
         {initial} + {} AS reserve, \
         `dateTime`, \
         CAST(TO_TIMESTAMP_LTZ({BASE_MILLIS} + n * {INTER_EVENT_MICROS} / 1000 + 1 + {}, 3) AS TIMESTAMP(3)) AS expires, \
         {seller} AS seller, \
         {FIRST_CATEGORY_ID} + {} AS category, \
         {} AS extra \
         FROM seq \
         WHERE {people_mod} >= {PERSON_PROPORTION} AND {people_mod} < {}",
        g.sql_slice(
            Choice::ItemName,
            &format!("(3 + {})", g.sql_draw(Choice::ItemNameLength, "17"))
        ),
        g.sql_slice(
            Choice::Description,
            &format!("(3 + {})", g.sql_draw(Choice::DescriptionLength, "97"))
        ),
        g.sql_price(Choice::ReserveMantissa, Choice::ReserveDecade),
        g.sql_draw(Choice::Duration, &MAX_AUCTION_MILLIS.to_string()),
        g.sql_draw(Choice::Category, &NUM_CATEGORIES.to_string()),
        g.sql_extra(Choice::AuctionExtra, Choice::AuctionExtraAt, AUCTION_EXTRA),
        PERSON_PROPORTION + AUCTION_PROPORTION,
    );
    let min_auction = format!("GREATEST({last_auction} - {NUM_IN_FLIGHT_AUCTIONS}, 0)");
    let bid_auction = format!(
        "({FIRST_AUCTION_ID} + CASE WHEN {} > 0 THEN ({last_auction} / {HOT_BATCH}) * {HOT_BATCH} \
         ELSE {min_auction} + {} END)",
        g.sql_draw(Choice::HotAuction, &HOT_AUCTION_RATIO.to_string()),
        g.sql_draw(
            Choice::BidAuction,
            &format!("({last_auction} - {min_auction} + 1 + {AUCTION_ID_LEAD})")
        )
    );
    let bidder = format!(
        "({FIRST_PERSON_ID} + CASE WHEN {} > 0 THEN ({last_person} / {HOT_BATCH}) * {HOT_BATCH} + 1 ELSE {} END)",
        g.sql_draw(Choice::HotBidder, &HOT_BIDDER_RATIO.to_string()),
        g.sql_person_id_near(Choice::Bidder)
    );
    let hot_channel = format!(
        "{} > 0",
        g.sql_draw(Choice::HotChannel, &HOT_CHANNEL_RATIO.to_string())
    );
    let hot_name = g.sql_pick(Choice::HotChannelName, &HOT_CHANNELS);
    let channel_id = format!(
        "CAST({} AS STRING)",
        g.sql_draw(Choice::Channel, &CHANNELS.to_string())
    );
    let bid = format!(
        "CREATE VIEW bid AS SELECT \
         {bid_auction} AS auction, \
         {bidder} AS bidder, \
         {} AS price, \
         CASE WHEN {hot_channel} THEN {hot_name} ELSE 'channel-' || {channel_id} END AS channel, \
         CASE WHEN {hot_channel} THEN 'https://www.nexmark.com/' || {hot_name} || '/item.htm?query=1' \
         ELSE 'https://www.nexmark.com/' || {} || '/' || {} || '/item.htm?query=1&channel_id=' || {channel_id} END AS url, \
         `dateTime`, \
         {} AS extra \
         FROM seq WHERE {people_mod} >= {}",
        g.sql_price(Choice::PriceMantissa, Choice::PriceDecade),
        g.sql_slice(Choice::UrlPart1, "5"),
        g.sql_slice(Choice::UrlPart2, "5"),
        g.sql_extra(Choice::BidExtra, Choice::BidExtraAt, BID_EXTRA),
        PERSON_PROPORTION + AUCTION_PROPORTION,
    );
    vec![seq, person, auction, bid]
}
