//! Sources and sinks that need nothing outside the standard library, and the interfaces
//! that every connector implements.

pub mod collect;
pub mod collection;
pub mod commit_metrics;
pub mod csv_fields;
pub mod discard;
pub mod file_reader;
pub mod file_sink;
pub mod file_source;
pub mod generator;
pub mod held_end;
mod line_limit;
pub mod malformed;
pub mod origin;
pub mod output_epochs;
pub mod print;
pub mod rate_limiter;
pub mod sink;
pub mod source;
pub mod split_queue;
pub mod static_enumerator;
pub mod two_phase_commit;
pub mod upsert_sink;
pub mod write_ahead_log;
