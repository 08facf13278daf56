//! RocksDB through the `rocksdb` crate, set up as Flink's RocksDB state backend sets it up:
//! no write-ahead log (checkpoints give durability), a shared LRU block cache with index and
//! filter blocks in it, bloom filters, LZ4; a checkpoint hard-links the SST files.

use std::path::Path;

use anyhow::Result;
use rocksdb::checkpoint::Checkpoint;
use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options, WriteOptions, DB};

use crate::{CheckpointFile, Engine};

/// An open database.
pub struct Rocks {
    db: DB,
    write: WriteOptions,
}

impl Rocks {
    /// Opens a fresh database at `path` with the given memory budget.
    pub fn open(path: &Path, cache_mb: u64, write_buffer_mb: u64) -> Result<Self> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(DBCompressionType::Lz4);
        opts.set_write_buffer_size((write_buffer_mb as usize) << 20);
        opts.set_max_write_buffer_number(2);
        opts.set_db_write_buffer_size((write_buffer_mb as usize * 2) << 20);
        opts.set_max_background_jobs(2);
        let cache = Cache::new_lru_cache((cache_mb as usize) << 20)?;
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_cache_index_and_filter_blocks(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        table.set_bloom_filter(10.0, false);
        opts.set_block_based_table_factory(&table);
        let db = DB::open(&opts, path)?;
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        Ok(Self { db, write })
    }
}

impl Engine for Rocks {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        match self.db.get_pinned(key)? {
            Some(value) => {
                out.extend_from_slice(&value);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.db.put_opt(key, value, &self.write)?)
    }

    fn checkpoint(&mut self, dir: &Path) -> Result<Vec<CheckpointFile>> {
        Checkpoint::new(&self.db)?.create_checkpoint(dir)?;
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // SST files are immutable and named once: a name seen before is the same file.
            // The small MANIFEST/OPTIONS/CURRENT files are private to each checkpoint.
            files.push(CheckpointFile {
                shared: name.ends_with(".sst"),
                size: entry.metadata()?.len(),
                name,
            });
        }
        Ok(files)
    }
}
