//! # weir-postgres
//!
//! Results into PostgreSQL, exactly once: an at-least-once **upsert** sink whose batched
//! `INSERT … ON CONFLICT DO UPDATE` makes replays harmless, and an **exactly-once** sink
//! through PostgreSQL's own two-phase commit (`PREPARE TRANSACTION` at the checkpoint
//! barrier, `COMMIT PREPARED` when the checkpoint completes).
//!
//! ```no_run
//! use serde::Serialize;
//! use weir::prelude::*;
//! use weir_postgres::prelude::*;
//!
//! #[derive(Clone, Serialize, serde::Deserialize)]
//! struct WordCount {
//!     word: String,
//!     count: u64,
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let env = StreamExecutionEnvironment::new(ExecutionConfig::default())?;
//! env.generate(1000, |i| format!("w{}", i % 10))
//!     .key_by(|w: &String| w.clone())
//!     .count()
//!     .map(|(word, count)| WordCount { word, count })
//!     .sink_to(
//!         PostgresSink::builder("postgresql://weir@127.0.0.1/postgres", "word_counts")
//!             .columns(["word", "count"])
//!             .key_columns(["word"])
//!             .exactly_once("word-count")?,
//!         "counts",
//!     )
//!     .uid("counts");
//! env.execute("word-count")?;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod connection;
pub mod error;
pub mod exactly_once_sink;
pub mod fence;
pub mod prelude;
pub mod row_encoder;
pub mod settings;
pub mod statements;
pub mod tls;
pub mod upsert_sink;
pub mod word_count;

pub use connection::PostgresConnection;
pub use error::PostgresError;
pub use exactly_once_sink::{PostgresTransaction, PostgresTransactionalSink};
pub use settings::{PostgresSink, PostgresSinkBuilder};
pub use upsert_sink::PostgresUpsertSink;
