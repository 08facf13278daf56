//! Nexmark: the auction-site benchmark of Tucker et al., as the Apache Beam and Flink
//! Nexmark suites model it. People open auctions and bid on them; the event stream mixes
//! Person, Auction and Bid in proportion 1:3:46.

pub mod generator;
pub mod model;
pub mod queries;
pub mod sql_timestamp;
pub mod weir_queries;
