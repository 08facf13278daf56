//! The README's first job: a parallel keyed count over generated page views.
//!
//! Generated page views are filtered (bots dropped), keyed by page and counted; a small
//! upsert sink keeps the latest count per page, as a table keyed by page would. The job
//! prints its plan, runs, prints the top pages and per-operator record counts, and checks
//! every page's count against a sequential computation over the same input.

use std::collections::HashMap;
use std::sync::mpsc;

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde::{Deserialize, Serialize};
use weir::connectors::sink::{Sink, SinkWriter};
use weir::{BoxError, ExecutionConfig, RuntimeContext, StreamExecutionEnvironment};

/// Command-line options.
#[derive(Parser, Debug)]
#[command(about = "Parallel keyed count over generated page views")]
struct Args {
    /// Page views to generate.
    #[arg(long, default_value_t = 5_000_000)]
    records: u64,
    /// Distinct pages.
    #[arg(long, default_value_t = 10_000)]
    pages: u64,
    /// Parallelism (default: number of cores).
    #[arg(long)]
    parallelism: Option<u32>,
    /// Print the plan as JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// One page view.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PageView {
    user: u64,
    page: u64,
    is_bot: bool,
}

/// SplitMix64: a deterministic, well-mixed function of the sequence number.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn page_view(i: u64, pages: u64) -> PageView {
    let h = mix(i);
    // Skewed popularity: half the views go to the first tenth of the pages.
    let page = if h & 1 == 0 {
        (h >> 8) % (pages / 10).max(1)
    } else {
        (h >> 8) % pages
    };
    PageView {
        user: (h >> 32) % 100_000,
        page,
        is_bot: h.is_multiple_of(20),
    }
}

/// Keeps the latest value per key, like an upsert into a table with a primary key; sends
/// its table to the program when the input ends.
struct LatestPerKeySink {
    results: mpsc::Sender<HashMap<u64, u64>>,
}

struct LatestPerKeyWriter {
    table: HashMap<u64, u64>,
    results: mpsc::Sender<HashMap<u64, u64>>,
}

impl Sink<(u64, u64)> for LatestPerKeySink {
    type Writer = LatestPerKeyWriter;
    /// Keeps the latest count per key: a replay overwrites with the same values.
    fn commits_on_checkpoint_completion(&self) -> bool {
        false
    }
    fn create_writer(&self, _context: &RuntimeContext) -> Result<LatestPerKeyWriter, BoxError> {
        Ok(LatestPerKeyWriter {
            table: HashMap::new(),
            results: self.results.clone(),
        })
    }
}

impl SinkWriter<(u64, u64)> for LatestPerKeyWriter {
    fn write(&mut self, (page, count): (u64, u64)) -> Result<(), BoxError> {
        self.table.insert(page, count);
        Ok(())
    }
    fn flush(&mut self, end_of_input: bool) -> Result<(), BoxError> {
        if end_of_input {
            self.results
                .send(std::mem::take(&mut self.table))
                .map_err(|_| "the program stopped listening")?;
        }
        Ok(())
    }
}

/// Errors print as one line with their causes, never with a backtrace.
fn main() -> std::process::ExitCode {
    weir::cli::exit_code(run())
}

fn run() -> Result<()> {
    weir::cli::init_logging();
    let args = Args::parse();
    if args.pages == 0 {
        bail!("--pages must be at least 1");
    }
    let mut config = ExecutionConfig::default();
    if let Some(p) = args.parallelism {
        config = config.with_parallelism(p);
    }
    let env = StreamExecutionEnvironment::new(config).context("invalid configuration")?;
    let pages = args.pages;
    let (tx, rx) = mpsc::channel();
    env.generate(args.records, move |i| page_view(i, pages))
        .name("Source: page views")
        .uid("page-views")
        .filter(|v: &PageView| !v.is_bot)
        .name("drop bots")
        .key_by(|v: &PageView| v.page)
        .count()
        .name("views per page")
        .uid("views-per-page")
        .sink_to(LatestPerKeySink { results: tx }, "latest count per page")
        .uid("page-count-table");

    let plan = env.plan("page view count")?;
    if args.json {
        println!("{}", plan.to_json());
    } else {
        println!("{}", plan.to_text());
    }
    let result = env.execute("page view count")?;
    let mut counts: HashMap<u64, u64> = HashMap::new();
    for table in rx.try_iter() {
        for (page, count) in table {
            if counts.insert(page, count).is_some() {
                bail!("page {page} was counted by two subtasks");
            }
        }
    }

    let mut top: Vec<(u64, u64)> = counts.iter().map(|(p, c)| (*p, *c)).collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    println!("Top pages:");
    for (page, count) in top.iter().take(10) {
        println!("  page {page:>6}  {count:>9} views");
    }
    println!();
    print!("{result}");
    let sources = result
        .operator("Source: page views")
        .map_or(0, |o| o.records_out);
    println!(
        "Throughput: {:.2} million page views/s",
        result.records_per_second(sources) / 1e6
    );

    let mut expected: HashMap<u64, u64> = HashMap::new();
    for i in 0..args.records {
        let v = page_view(i, pages);
        if !v.is_bot {
            *expected.entry(v.page).or_insert(0) += 1;
        }
    }
    if counts != expected {
        let wrong = expected
            .iter()
            .filter(|(p, c)| counts.get(p) != Some(c))
            .count();
        bail!(
            "verification FAILED: {wrong} of {} pages differ from a sequential count",
            expected.len()
        );
    }
    println!(
        "Verified: all {} page counts equal a sequential computation over the same {} views.",
        expected.len(),
        args.records
    );
    Ok(())
}
