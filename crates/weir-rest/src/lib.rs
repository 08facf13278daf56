#![doc = include_str!("../README.md")]

mod api;
mod auth;
mod config;
mod dashboard;
mod dispatcher;
mod error;
pub mod model;
mod server;
mod tls;

pub use api::ApiDoc;
pub use config::{RestConfig, TlsFiles};
pub use dispatcher::{ClusterInfo, Dispatcher, LocalClusterInfo};
pub use error::RestError;
pub use server::{router, RestServer};
