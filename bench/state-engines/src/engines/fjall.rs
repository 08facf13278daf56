//! fjall (a pure-Rust LSM). It has no checkpoint of its files: a checkpoint here is what a
//! backend on it would have to do, a full dump of a consistent snapshot into one file.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, Readable};

use crate::{CheckpointFile, Engine};

/// An open database with one keyspace for the state.
pub struct Fjall {
    db: Database,
    state: Keyspace,
}

impl Fjall {
    /// Opens a fresh database at `path` with the given memory budget.
    pub fn open(path: &Path, cache_mb: u64, write_buffer_mb: u64) -> Result<Self> {
        let db = Database::builder(path)
            .cache_size(cache_mb << 20)
            .max_write_buffer_size(Some(write_buffer_mb << 21))
            .open()?;
        let state = db.keyspace("state", || {
            KeyspaceCreateOptions::default().max_memtable_size(write_buffer_mb << 20)
        })?;
        Ok(Self { db, state })
    }
}

impl Engine for Fjall {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        match self.state.get(key)? {
            Some(value) => {
                out.extend_from_slice(&value);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.state.insert(key, value)?)
    }

    fn checkpoint(&mut self, dir: &Path) -> Result<Vec<CheckpointFile>> {
        std::fs::create_dir_all(dir)?;
        let snapshot = self.db.snapshot();
        let name = "state.dump".to_string();
        let mut out = std::io::BufWriter::new(std::fs::File::create(dir.join(&name))?);
        for guard in snapshot.iter(&self.state) {
            let (key, value) = guard.into_inner()?;
            out.write_all(&(key.len() as u32).to_le_bytes())?;
            out.write_all(&key)?;
            out.write_all(&(value.len() as u32).to_le_bytes())?;
            out.write_all(&value)?;
        }
        out.into_inner()?.sync_all()?;
        let size = std::fs::metadata(dir.join(&name))?.len();
        Ok(vec![CheckpointFile {
            name,
            size,
            shared: false,
        }])
    }
}
