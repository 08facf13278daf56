//! Runs the keyed-state workload of Weir's disk backend on one embedded engine and prints
//! what decides the choice: throughput of read-modify-write updates and point reads, CPU,
//! resident memory against the configured budget, disk use, and the cost of a checkpoint —
//! its synchronous part (what blocks the task thread) and the bytes a checkpoint must
//! upload, in full and after a fraction of the keys changed (incremental).
//!
//! Keys are laid out as the backend lays them out: a 2-byte key group, a state id, then the
//! key's postcard bytes (`k123456`); values are postcard `(i64, i64)`, as `SUM/COUNT GROUP BY
//! key` keeps.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;

mod engines;

#[derive(Parser, Debug)]
#[command(about = "Keyed-state workload on one embedded engine")]
struct Args {
    /// The engine: rocksdb or fjall (each needs its cargo feature).
    #[arg(long)]
    engine: String,
    /// Distinct keys.
    #[arg(long, default_value_t = 5_000_000)]
    keys: u64,
    /// Fraction of the keys updated between the two checkpoints.
    #[arg(long, default_value_t = 0.01)]
    update_fraction: f64,
    /// Random point reads after the updates.
    #[arg(long, default_value_t = 1_000_000)]
    reads: u64,
    /// Block cache, MiB.
    #[arg(long, default_value_t = 64)]
    cache_mb: u64,
    /// Memtable (write buffer) size, MiB.
    #[arg(long, default_value_t = 64)]
    write_buffer_mb: u64,
    /// Where the database, its checkpoints and the "uploaded" files go (emptied first).
    #[arg(long, default_value = "target/state-engines-data")]
    dir: PathBuf,
}

/// What a benchmark engine does.
pub trait Engine {
    /// Reads `key` into `out`; whether it was there.
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// Writes `key`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// The synchronous part of a checkpoint: makes the state durable as immutable files in
    /// `dir` (hard links where the engine can), and lists them.
    fn checkpoint(&mut self, dir: &Path) -> Result<Vec<CheckpointFile>>;
}

/// A file of a checkpoint.
pub struct CheckpointFile {
    /// Its name in the checkpoint's directory.
    pub name: String,
    /// Its size.
    pub size: u64,
    /// Whether it is immutable and may be shared with later checkpoints (uploaded once).
    pub shared: bool,
}

/// Key groups, as Weir's default max parallelism.
const KEY_GROUPS: u64 = 128;

fn key(i: u64, out: &mut Vec<u8>) {
    out.clear();
    let name = format!("k{i}");
    let encoded = postcard::to_allocvec(&name).unwrap_or_default();
    let group = xxhash_rust::xxh3::xxh3_64(&encoded) % KEY_GROUPS;
    out.extend_from_slice(&(group as u16).to_be_bytes());
    out.push(1);
    out.extend_from_slice(&encoded);
}

/// A deterministic pseudo-random sequence (xorshift), the same for every engine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Reads a `kB` line of `/proc/self/status`, in MiB.
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

struct Phase {
    started: Instant,
    cpu: f64,
}

impl Phase {
    fn start() -> Self {
        Self {
            started: Instant::now(),
            cpu: cpu_seconds(),
        }
    }

    fn report(self, engine: &str, name: &str, ops: u64, db: &Path) {
        let wall = self.started.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - self.cpu;
        println!(
            "{engine:<8} {name:<22} {:>12.0} ops/s {:>12.0} ops/CPU-s   RSS {:>7.0} MiB (peak {:>7.0})   disk {:>8.0} MiB",
            ops as f64 / wall,
            ops as f64 / cpu.max(1e-9),
            status_mib("VmRSS:"),
            status_mib("VmHWM:"),
            dir_bytes(db) as f64 / (1024.0 * 1024.0),
        );
    }
}

/// Takes checkpoint `n`, "uploads" (copies) the files the previous one did not have, and
/// prints the costs.
fn checkpoint(
    engine_name: &str,
    engine: &mut dyn Engine,
    root: &Path,
    n: u32,
    uploaded: &mut BTreeSet<String>,
) -> Result<()> {
    let dir = root.join(format!("chk-{n}"));
    let started = Instant::now();
    let files = engine.checkpoint(&dir)?;
    let sync = started.elapsed();
    let remote = root.join("remote");
    std::fs::create_dir_all(&remote)?;
    let upload_started = Instant::now();
    let (mut new_files, mut new_bytes, mut total) = (0u64, 0u64, 0u64);
    let private = remote.join(format!("chk-{n}"));
    std::fs::create_dir_all(&private)?;
    for file in &files {
        total += file.size;
        let target = if file.shared {
            if !uploaded.insert(file.name.clone()) {
                continue;
            }
            remote.join(&file.name)
        } else {
            private.join(&file.name)
        };
        std::fs::copy(dir.join(&file.name), target)
            .with_context(|| format!("uploading {}", file.name))?;
        new_files += 1;
        new_bytes += file.size;
    }
    let upload = upload_started.elapsed();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "{engine_name:<8} checkpoint {n:<11} sync part {:>8.1} ms   upload {:>8.1} ms   {:>4} new files {:>8.1} MiB of {:>8.1} MiB",
        ms(sync),
        ms(upload),
        new_files,
        mib(new_bytes),
        mib(total),
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn read_modify_write(engine: &mut dyn Engine, key: &[u8], value: &mut Vec<u8>, add: i64) -> Result<()> {
    let (sum, count): (i64, i64) = if engine.get(key, value)? {
        postcard::from_bytes(value)?
    } else {
        (0, 0)
    };
    let updated = postcard::to_allocvec(&(sum + add, count + 1))?;
    engine.put(key, &updated)
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir)?;
    }
    std::fs::create_dir_all(&args.dir)?;
    let db = args.dir.join("db");
    let mut engine: Box<dyn Engine> = match args.engine.as_str() {
        #[cfg(feature = "rocksdb")]
        "rocksdb" => Box::new(engines::rocks::Rocks::open(&db, args.cache_mb, args.write_buffer_mb)?),
        #[cfg(feature = "fjall")]
        "fjall" => Box::new(engines::fjall::Fjall::open(&db, args.cache_mb, args.write_buffer_mb)?),
        other => bail!("engine {other} is not built in (its cargo feature is off)"),
    };
    let name = args.engine.as_str();
    println!(
        "{name}: {} keys, {} MiB cache, {} MiB write buffer, {:.1} % of keys updated between checkpoints",
        args.keys,
        args.cache_mb,
        args.write_buffer_mb,
        args.update_fraction * 100.0
    );
    let (mut k, mut v) = (Vec::new(), Vec::new());
    let phase = Phase::start();
    for i in 0..args.keys {
        key(i, &mut k);
        read_modify_write(engine.as_mut(), &k, &mut v, i as i64)?;
    }
    phase.report(name, "load (RMW, new keys)", args.keys, &db);
    let mut uploaded = BTreeSet::new();
    checkpoint(name, engine.as_mut(), &args.dir, 1, &mut uploaded)?;

    let updates = (args.keys as f64 * args.update_fraction) as u64;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let phase = Phase::start();
    for _ in 0..updates {
        key(rng.next() % args.keys, &mut k);
        read_modify_write(engine.as_mut(), &k, &mut v, 1)?;
    }
    phase.report(name, "update (RMW, random)", updates, &db);
    checkpoint(name, engine.as_mut(), &args.dir, 2, &mut uploaded)?;

    let phase = Phase::start();
    let mut found = 0;
    for _ in 0..args.reads {
        key(rng.next() % args.keys, &mut k);
        found += u64::from(engine.get(&k, &mut v)?);
    }
    if found != args.reads {
        bail!("{found} of {} reads found their key", args.reads);
    }
    phase.report(name, "point reads (random)", args.reads, &db);

    let phase = Phase::start();
    let more = args.keys / 10;
    for _ in 0..more {
        key(rng.next() % args.keys, &mut k);
        read_modify_write(engine.as_mut(), &k, &mut v, 1)?;
    }
    phase.report(name, "update (10 % of keys)", more, &db);
    checkpoint(name, engine.as_mut(), &args.dir, 3, &mut uploaded)?;
    Ok(())
}
