//! The candidate engines behind [`Engine`](crate::Engine).

#[cfg(feature = "fjall")]
pub mod fjall;
#[cfg(feature = "rocksdb")]
pub mod rocks;
