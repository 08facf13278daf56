//! The PostgreSQL connector's types for a job, beside `weir::prelude`:
//! `use weir_postgres::prelude::*;`.

pub use crate::connection::PostgresConnection;
pub use crate::error::PostgresError;
pub use crate::settings::{PostgresSink, PostgresSinkBuilder};
