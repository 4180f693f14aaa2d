//! `pagantic batch merge PARTS… --out FILE` — join the parts a sharded batch wrote (one per
//! array task) into one output by row id, and say whether the batch is complete.

use std::io::{self, Write};
use std::path::PathBuf;

use crate::batch::input::DEFAULT_MAX_ROW_BYTES;
use crate::batch::merge::{MergeOptions, Merged, merge};
use crate::core::text::terminal_safe;

use super::common::{Outcome, invalid};
use super::{EXIT_FAILED, EXIT_OK};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Join parts by row id: a row written twice with the same result is kept once, a failed
    /// line gives way to a success, two different results for one id are a conflict. Exit 0
    /// when every row is there once, 1 when rows or shards are missing, a line is not a row (cut
    /// by a kill) and no --input shows its row elsewhere, or results conflict; 2 when a part is
    /// unreadable or not a regular file, has no record (unless --unchecked), or the parts come
    /// from different inputs or plans.
    #[command(
        after_help = "Example:\n  pagantic batch merge out/part-*-of-4.jsonl --input input.jsonl --out merged.jsonl"
    )]
    Merge(MergeArgs),
}

#[derive(Debug, clap::Args)]
struct MergeArgs {
    /// The parts (`run --batch … --out`), each with its OUTPUT.meta.json when it has one.
    #[arg(required = true, value_name = "PART")]
    parts: Vec<PathBuf>,
    /// The merged output (written atomically).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// The batch's input: missing rows are named by id (and the parts checked against it).
    #[arg(long, value_name = "INPUT")]
    input: Option<String>,
    /// The input's id column, as the batch's `--id`.
    #[arg(long = "id", value_name = "COLUMN", requires = "input")]
    id_column: Option<String>,
    /// Without --input: how many rows the whole batch has, to count the missing ones.
    #[arg(long, value_name = "N", conflicts_with = "input")]
    expect: Option<usize>,
    /// Also write the merged summary as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    summary: Option<PathBuf>,
    /// Merge parts that have no record (PART.meta.json) anyway: nothing then checks that they
    /// come from one input, plan and shard count.
    #[arg(long)]
    unchecked: bool,
}

pub fn run(args: &Args) -> Outcome {
    let Action::Merge(args) = &args.action;
    let options = MergeOptions {
        parts: args.parts.clone(),
        out: args.out.clone(),
        expect: args.expect,
        input: args.input.clone(),
        id_column: args.id_column.clone(),
        max_row_bytes: DEFAULT_MAX_ROW_BYTES,
        unchecked: args.unchecked,
    };
    let merged = match merge(&options) {
        Ok(merged) => merged,
        Err(failure) => return invalid(&failure),
    };
    report(&merged)?;
    if let Some(path) = &args.summary {
        let text = serde_json::to_string_pretty(&merged).map_err(io::Error::other)?;
        crate::core::file::write_atomic(path, format!("{text}\n").as_bytes())?;
    }
    Ok(if merged.complete {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}

/// Most missing ids named on stderr (the summary file lists them all).
const SHOWN_IDS: usize = 20;

/// What the merge found, on stderr.
fn report(merged: &Merged) -> io::Result<()> {
    let mut stderr = io::stderr().lock();
    writeln!(
        stderr,
        "{} rows from {} parts: {} ok, {} failed ({} retryably); {} duplicates kept once, {} failed lines superseded",
        merged.rows,
        merged.parts.len(),
        merged.rows_ok,
        merged.rows_failed,
        merged.rows_failed_retryably,
        merged.duplicates,
        merged.superseded
    )?;
    if !merged.unchecked_parts.is_empty() {
        writeln!(
            stderr,
            "warning: {} parts have no record and were merged unchecked (--unchecked)",
            merged.unchecked_parts.len()
        )?;
    }
    if merged.unreadable_lines > 0 {
        writeln!(
            stderr,
            "{} lines are not rows (cut by a kill, or past the bounds on a line); without --input \
             their rows count as missing",
            merged.unreadable_lines
        )?;
    }
    if !merged.conflicts.is_empty() {
        writeln!(
            stderr,
            "error: {} rows have two different results: {}",
            merged.conflicts.len(),
            terminal_safe(&shown(&merged.conflicts))
        )?;
    }
    if merged.missing > 0 {
        let which = match merged.missing_ids.is_empty() {
            true => String::new(),
            false => format!(": {}", terminal_safe(&shown(&merged.missing_ids))),
        };
        writeln!(stderr, "error: {} rows are missing{which}", merged.missing)?;
    }
    if !merged.missing_shards.is_empty() {
        writeln!(
            stderr,
            "error: no part of shards {:?}",
            merged.missing_shards
        )?;
    }
    Ok(())
}

/// The first ids, and how many more.
fn shown(ids: &[String]) -> String {
    let mut text = ids
        .iter()
        .take(SHOWN_IDS)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if ids.len() > SHOWN_IDS {
        text.push_str(&format!(" and {} more", ids.len() - SHOWN_IDS));
    }
    text
}
