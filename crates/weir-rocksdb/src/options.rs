//! The RocksDB backend's settings (`state.backend.rocksdb.*`) and the RocksDB options they
//! make, set up as Flink's RocksDB backend sets RocksDB up when its memory is bounded: no
//! write-ahead log (checkpoints make state durable), one LRU block cache that holds the
//! index and filter blocks too, partitioned indexes and filters so that a small cache is not
//! thrashed by whole-file index blocks, and write buffers bounded in total.

use weir::configuration::parse_memory_size;
use weir::error::StateError;
use weir::state::backend::merge_list_bytes;
use weir::state::backend_factory::StateBackendConfig;

use rocksdb::{
    BlockBasedIndexType, BlockBasedOptions, Cache, DBCompressionType, MergeOperands, Options,
};

/// The key of the memory budget of one instance.
pub const MEMORY_KEY: &str = "state.backend.rocksdb.memory.fixed-per-slot";
/// The key of the write buffers' share of it.
pub const WRITE_BUFFER_RATIO_KEY: &str = "state.backend.rocksdb.memory.write-buffer-ratio";
/// The key of the number of background threads.
pub const THREADS_KEY: &str = "state.backend.rocksdb.thread.num";

/// Settings of the RocksDB instance of one keyed operator subtask.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RocksDbOptions {
    /// Bytes its block cache and write buffers may take together.
    pub memory_budget: u64,
    /// The share of `memory_budget` for write buffers (memtables), in `(0, 1)`.
    pub write_buffer_ratio: f64,
    /// Threads for flushes and compactions.
    pub background_threads: i32,
}

impl Default for RocksDbOptions {
    fn default() -> Self {
        Self {
            memory_budget: 128 << 20,
            write_buffer_ratio: 0.5,
            background_threads: 2,
        }
    }
}

fn invalid(key: &str, value: &str, expected: &str) -> StateError {
    StateError::Backend {
        backend: crate::BACKEND_NAME,
        operation: "read its configuration",
        reason: format!("`{key}: {value}` is not {expected}"),
    }
}

impl RocksDbOptions {
    /// The settings `config` gives (its `state.backend.rocksdb.*` keys), checked.
    pub fn from_config(config: &StateBackendConfig) -> Result<Self, StateError> {
        let mut options = Self::default();
        for (key, value) in &config.options {
            match key.as_str() {
                MEMORY_KEY => {
                    options.memory_budget = parse_memory_size(value)
                        .filter(|bytes| *bytes >= 8 << 20)
                        .ok_or_else(|| invalid(key, value, "a memory size of at least 8 mb"))?;
                }
                WRITE_BUFFER_RATIO_KEY => {
                    options.write_buffer_ratio = value
                        .parse::<f64>()
                        .ok()
                        .filter(|r| *r > 0.0 && *r < 1.0)
                        .ok_or_else(|| invalid(key, value, "a number between 0 and 1"))?;
                }
                THREADS_KEY => {
                    options.background_threads = value
                        .parse::<i32>()
                        .ok()
                        .filter(|n| (1..=64).contains(n))
                        .ok_or_else(|| invalid(key, value, "a whole number from 1 to 64"))?;
                }
                other if other.starts_with("state.backend.rocksdb.") => {
                    return Err(invalid(
                        other,
                        value,
                        &format!(
                            "a setting of this backend (it has {MEMORY_KEY}, \
                             {WRITE_BUFFER_RATIO_KEY} and {THREADS_KEY})"
                        ),
                    ))
                }
                _ => {}
            }
        }
        Ok(options)
    }

    /// Bytes for write buffers.
    pub fn write_buffer_bytes(&self) -> usize {
        (self.memory_budget as f64 * self.write_buffer_ratio) as usize
    }

    /// Bytes for the block cache.
    pub fn cache_bytes(&self) -> usize {
        (self.memory_budget as usize).saturating_sub(self.write_buffer_bytes())
    }

    /// The options of a database whose blocks are cached in `cache`.
    pub(crate) fn db_options(&self, cache: &Cache) -> Options {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.set_merge_operator_associative("weir-list-append", append_lists);
        options.increase_parallelism(self.background_threads);
        options.set_max_background_jobs(self.background_threads);
        let write_buffers = self.write_buffer_bytes().max(2 << 20);
        // Two memtables at most: one being filled while the other is flushed.
        options.set_db_write_buffer_size(write_buffers);
        options.set_write_buffer_size(write_buffers / 2);
        options.set_max_write_buffer_number(2);
        options.set_compression_type(DBCompressionType::Lz4);
        options.set_level_compaction_dynamic_level_bytes(true);
        options.set_keep_log_file_num(2);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(cache);
        table.set_cache_index_and_filter_blocks(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        table.set_pin_top_level_index_and_filter(true);
        table.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
        table.set_partition_filters(true);
        table.set_metadata_block_size(4096);
        table.set_bloom_filter(10.0, false);
        table.set_format_version(5);
        options.set_block_based_table_factory(&table);
        options
    }
}

/// RocksDB's merge of list states: the operands (lists in postcard's `Vec` encoding) are
/// appended to the existing list. A damaged value makes the merge fail, which RocksDB
/// reports as an error on the read that needed it.
fn append_lists(_key: &[u8], existing: Option<&[u8]>, operands: &MergeOperands) -> Option<Vec<u8>> {
    let mut list = match existing {
        Some(existing) => existing.to_vec(),
        None => vec![0],
    };
    for operand in operands {
        if merge_list_bytes(&mut list, operand).is_err() {
            tracing::error!("a list state value in RocksDB is damaged; the merge fails");
            return None;
        }
    }
    Some(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> StateBackendConfig {
        let mut config = StateBackendConfig::default();
        for (k, v) in pairs {
            config.options.insert(k.to_string(), v.to_string());
        }
        config
    }

    #[test]
    fn settings_are_read_and_checked() {
        let options = RocksDbOptions::from_config(&config(&[
            (MEMORY_KEY, "64 mb"),
            (WRITE_BUFFER_RATIO_KEY, "0.25"),
            (THREADS_KEY, "1"),
        ]))
        .unwrap();
        assert_eq!(options.memory_budget, 64 << 20);
        assert_eq!(options.write_buffer_bytes(), 16 << 20);
        assert_eq!(options.cache_bytes(), 48 << 20);
        for (key, value, says) in [
            (MEMORY_KEY, "1 mb", "at least 8 mb"),
            (WRITE_BUFFER_RATIO_KEY, "1.5", "between 0 and 1"),
            (THREADS_KEY, "0", "from 1 to 64"),
            (
                "state.backend.rocksdb.compaction.style",
                "level",
                "a setting of this backend",
            ),
        ] {
            let err = RocksDbOptions::from_config(&config(&[(key, value)]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key) && err.contains(says), "{err}");
        }
    }
}
