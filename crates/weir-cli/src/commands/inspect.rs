//! `weir inspect CHECKPOINT_OR_SAVEPOINT [--verify]`.

use std::path::Path;

use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use weir::checkpoint::inspect::{self, CheckpointSummary};

use crate::output::{bytes, iso_time, table};

fn print_summary(summary: &CheckpointSummary) {
    let kind = if summary.savepoint {
        "Savepoint"
    } else {
        "Checkpoint"
    };
    println!(
        "{kind} {} of job `{}`",
        summary.checkpoint_id, summary.job_name
    );
    let location =
        std::path::absolute(&summary.location).unwrap_or_else(|_| summary.location.clone());
    println!("  location:  {}", location.display());
    println!("  epoch:     {}", summary.epoch);
    println!("  taken at:  {}", iso_time(summary.timestamp_millis));
    println!("  state:     {}", bytes(summary.state_size));
    println!();
    let rows: Vec<Vec<String>> = summary
        .operators
        .iter()
        .map(|op| {
            vec![
                op.uid.clone(),
                op.name.clone(),
                op.parallelism.to_string(),
                op.max_parallelism.to_string(),
                bytes(op.state_size),
                op.coordinator_bytes
                    .map(bytes)
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "UID",
                "OPERATOR",
                "PARALLELISM",
                "KEY GROUPS",
                "STATE",
                "ENUMERATOR"
            ],
            &rows
        )
    );
    for op in &summary.operators {
        for subtask in &op.subtasks {
            let groups = &subtask.key_groups;
            let has_lists = !subtask.lists.is_empty();
            if groups.is_empty() && !has_lists && subtask.incremental.is_none() {
                continue;
            }
            println!();
            println!("{} ({}), subtask {}:", op.name, op.uid, subtask.subtask);
            if !groups.is_empty() {
                let total: u64 = groups.iter().map(|(_, b)| b).sum();
                let (min, max) = groups
                    .iter()
                    .fold((u64::MAX, 0), |(lo, hi), (_, b)| (lo.min(*b), hi.max(*b)));
                println!(
                    "  keyed state: {} in {} key groups ({}..={}), {} to {} per group, file {}",
                    bytes(total),
                    groups.len(),
                    groups.first().map_or(0, |g| g.0),
                    groups.last().map_or(0, |g| g.0),
                    bytes(min),
                    bytes(max),
                    subtask.keyed_file.as_deref().unwrap_or("-")
                );
                let per_group: Vec<String> = groups
                    .iter()
                    .map(|(g, b)| format!("{g}:{}", bytes(*b)))
                    .collect();
                println!("  per key group: {}", per_group.join(" "));
            }
            if let Some(files) = &subtask.incremental {
                println!(
                    "  keyed state: {} in the {} backend's own files, key groups {}..={}: {} \
                     shared (in ../shared), {} private; this checkpoint uploaded {}; states: {}",
                    bytes(files.bytes),
                    files.backend,
                    files.key_groups.0,
                    files.key_groups.1,
                    files.shared_files,
                    files.private_files,
                    bytes(files.uploaded_bytes),
                    files.states.join(", ")
                );
            }
            // An unaligned checkpoint's records in flight: one line, not one per key group.
            let (in_flight, lists): (Vec<_>, Vec<_>) = subtask
                .lists
                .iter()
                .partition(|l| weir::runtime::channel_state::is_channel_state(&l.name));
            let chunks: usize = in_flight.iter().map(|l| l.items).sum();
            if chunks > 0 {
                println!(
                    "  in-flight records (channel state of an unaligned checkpoint): {} chunks in {} \
                     key groups or inputs, {}",
                    chunks,
                    in_flight.iter().filter(|l| l.items > 0).count(),
                    bytes(in_flight.iter().map(|l| l.bytes).sum())
                );
            }
            for list in lists {
                println!(
                    "  {} state `{}`: {} items, {}",
                    if list.union { "union list" } else { "list" },
                    list.name,
                    list.items,
                    bytes(list.bytes)
                );
            }
            for txn in &subtask.pending_transactions {
                println!(
                    "  pending transaction of checkpoint {}: {}",
                    txn.checkpoint_id, txn.handle
                );
            }
        }
    }
}

/// Prints what the checkpoint at `path` holds; with `verify`, checks every checksum and
/// fails if something is damaged.
pub fn inspect(path: &Path, verify: bool, json: bool) -> Result<()> {
    let summary = inspect::summarize(path)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(&summary);
    }
    if !verify {
        return Ok(());
    }
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("verifying {bar:30} {pos}/{len} state files")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let damage = inspect::verify_with_progress(path, |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    if damage.is_empty() {
        println!();
        println!(
            "Verified: the metadata, every key group of every state file and every shared file match their checksums."
        );
        return Ok(());
    }
    eprintln!();
    for d in &damage {
        eprintln!(
            "DAMAGED {} ({}, subtask {}): {}",
            d.file.display(),
            d.operator,
            d.subtask,
            d.problem
        );
    }
    bail!(
        "{} of the checkpoint's state files are damaged; recovery would refuse this checkpoint and fall back to an older one (or a local-recovery copy)",
        damage.len()
    )
}
