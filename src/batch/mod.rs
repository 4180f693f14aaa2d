//! Layer 5: batch jobs — one run of a plan per input row (or per group of rows), many runs in
//! flight, every row written once, and nothing lost on a crash.
//!
//! [`run`] is the one entry for every batch [`shape`]: a map ([`map`]: the plan once per row), a
//! reduce ([`group`]: once per group of rows, `--group-by`), or a map then a reduce (a plan with
//! `reduce:`, whose reduce plan was built with it). Rows are streamed from the input ([`input`])
//! and every run goes through the session's [`Runner::run_many`] on one built pipeline, so every
//! row shares the same loaded models. Each finished row or group becomes one JSON line
//! ([`line`]), written and flushed at once ([`output`]); `--resume` skips the rows an earlier run
//! wrote, except those whose failure may pass, and refuses an output another shard, input or
//! plan wrote ([`part`]). A failing row is recorded and the others go on, unless `--fail-fast`.
//! Array jobs run one [`shard`] each into parts of their own, which [`merge`] joins. Every row is
//! a run of its own (its run id is in its output line) whose events go to the session's events
//! file, and whose record carries what its calls spent and waited, which the progress and the
//! summary add up ([`tally`]).

pub mod group;
pub mod input;
pub mod line;
pub mod map;
pub mod merge;
pub mod output;
pub mod part;
pub mod shape;
pub mod shard;
mod tally;

pub use map::RowPreview;
pub use shape::{Batch, paced_estimates};
pub use shard::{Shard, ShardError, parse_shard};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::core::{Cost, Failure, FailureCode, TokenUsage};
use crate::inference::Pacing;
use crate::orchestrate::{CacheTally, Session};
use serde::Serialize;

use output::Sink;
use shape::Shape;
use tally::Tally;

/// How to run a batch.
#[derive(Clone)]
pub struct BatchOptions {
    /// `-`, a JSONL or CSV file, a directory, or a glob.
    pub input: String,
    /// The column holding each row's id (default: its line / record number or file path).
    pub id_column: Option<String>,
    /// Most bytes one row may have; a longer one fails on its own.
    pub max_row_bytes: u64,
    /// The output file; None writes to stdout.
    pub out: Option<PathBuf>,
    /// Rows in flight at once.
    pub concurrency: usize,
    pub resume: bool,
    pub retry_errors: bool,
    pub fail_fast: bool,
    /// Run at most this many rows.
    pub limit: Option<usize>,
    /// Only the rows of this shard.
    pub shard: Option<Shard>,
    /// With `resume`: take an output another shard wrote as this shard's.
    pub reshard: bool,
    /// Plan input ← row column, where the names differ.
    pub map: Vec<(String, String)>,
    /// Write rows in input order instead of as they finish.
    pub ordered: bool,
}

/// Live counts, for a progress display.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Progress {
    pub ok: usize,
    pub failed: usize,
    pub skipped: usize,
    pub tokens: u64,
    /// Model calls made so far (every attempt, vote and tool round).
    pub model_calls: u64,
    pub elapsed: Duration,
    /// Rows this run will see (shard and limit applied), once counted: the input is counted on a
    /// separate thread while the rows run, so this stays None for a while (and for stdin).
    pub total: Option<usize>,
    /// What the finished runs' model calls waited for their pace (rate limits, a server's
    /// `Retry-After`), and the 429s they were answered, as their records book them.
    pub rate_limit: Pacing,
}

impl Progress {
    /// Seconds left at the rate so far, once the total is known and a row has finished.
    pub fn eta(&self) -> Option<Duration> {
        let finished = self.ok + self.failed;
        let left = self.total?.checked_sub(finished + self.skipped)?;
        (finished > 0).then(|| self.elapsed.mul_f64(left as f64 / finished as f64))
    }
}

/// Percentiles of a step's duration over the batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepTimes {
    pub p50_ms: f64,
    pub p95_ms: f64,
}

/// How a batch ended, worst first: what a scheduler acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// A signal (Ctrl-C, SIGTERM: a preemption, a time limit) stopped it before every row ran.
    Preempted,
    /// A row failed for a reason that may pass (a rate limit, a server error): `--resume` runs
    /// those rows again.
    Retry,
    /// Rows failed for good: running them again changes nothing.
    Failed,
    /// Every row succeeded.
    Complete,
}

/// The end-of-run summary (stderr, and `--summary FILE` as JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub end: End,
    pub rows_ok: usize,
    /// Every failed row, those that failed retryably among them.
    pub rows_failed: usize,
    /// Rows whose failure may pass (see [`Failure::transient`]): a resume runs them again.
    pub rows_failed_retryably: usize,
    pub rows_skipped: usize,
    /// Skipped rows that an earlier run recorded as failed for good: they still make the batch
    /// end failed.
    pub rows_skipped_failed: usize,
    pub cancelled: bool,
    /// The shard, the input's SHA-256 and the plan's.
    #[serde(flatten)]
    pub origin: part::Origin,
    pub usage: TokenUsage,
    /// What the rows' model calls cost at the models' declared prices; null when none was priced.
    pub cost: Option<Cost>,
    /// Model calls over all rows (in a `--dry-run`, what the real run would make, before retries);
    /// calls the call cache answered are not among them.
    pub model_calls: u64,
    /// What the call cache did: calls it answered and did not have, and the tokens and model
    /// time the answered calls had cost when they were made.
    pub cache: CacheTally,
    pub wall_ms: f64,
    pub rows_per_s: f64,
    pub steps: BTreeMap<String, StepTimes>,
    /// Time the models spent waiting for their pace (rate limits, a server's `Retry-After`;
    /// every waiting call counted, so it can exceed the wall time), and the 429s they were
    /// answered.
    pub rate_limit_wait_ms: f64,
    pub rate_limited: u64,
    /// A reduce: the input rows it grouped and the runs its groups took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grouped: Option<group::Grouped>,
    /// A plan with `reduce:`: the summary of its map, which ran first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map: Option<Box<Summary>>,
    /// When traces were exported: the spans the collector did not take (unreachable, too slow,
    /// refusing, or the export queue full).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_spans_dropped: Option<u64>,
}

/// Runs `batch`, each run a run of `session` (its cancellation stops the batch: runs in flight
/// end cancelled and are not written, so `--resume` runs them again), telling `progress` the
/// counts as each row or group ends.
pub async fn run(
    session: &Session,
    batch: Batch,
    progress: &dyn Fn(&Progress),
) -> Result<Summary, Failure> {
    match batch.shape {
        Shape::Map => {
            map::run(
                session,
                batch.pipeline,
                batch.options,
                batch.plan_sha256,
                progress,
            )
            .await
        }
        Shape::Reduce(grouping) => group::run(session, batch.pipeline, grouping, progress).await,
        Shape::MapThenReduce { reduce, grouping } => {
            let (mapper, map_sha256) = (batch.pipeline, batch.plan_sha256);
            group::map_then_reduce(session, mapper, map_sha256, reduce, grouping, progress).await
        }
    }
}

/// What writes this batch's output (its shard, input and the plan of `plan_sha256`), once the
/// output is known not to be part of the input.
fn origin_of(options: &BatchOptions, plan_sha256: String) -> Result<part::Origin, Failure> {
    if let Some(out) = &options.out
        && input::would_read(&options.input, out)
    {
        return Err(Failure::new(
            FailureCode::ConfigInvalidInput,
            format!(
                "--out {} is part of the input {}: the batch would read its own output",
                out.display(),
                options.input
            ),
        )
        .with_help("write the output somewhere the input does not cover"));
    }
    Ok(part::Origin {
        shard: options.shard.clone(),
        input_sha256: input::sha256(&options.input)?,
        plan_sha256,
    })
}

/// Opens the output `path` for this run and records what writes it: resuming, only an output
/// this shard, input and plan wrote (`--reshard`: any shard's).
fn open_part(
    path: &std::path::Path,
    origin: &part::Origin,
    options: &BatchOptions,
) -> Result<(Sink, output::Previous), Failure> {
    if options.resume {
        part::adopt(path, origin, options.reshard)?;
    }
    let opened = output::open(path, options.resume, options.retry_errors)?;
    if !options.resume {
        part::write(path, origin)?;
    }
    Ok(opened)
}

/// `h:mm:ss` (or `m:ss`), for an ETA or a least duration.
pub fn clock(duration: Duration) -> String {
    let seconds = duration.as_secs();
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_needs_a_total_and_a_finished_row() {
        let mut progress = Progress {
            ok: 3,
            failed: 1,
            skipped: 2,
            elapsed: Duration::from_secs(8),
            ..Progress::default()
        };
        assert_eq!(progress.eta(), None);
        progress.total = Some(10);
        // 4 rows took 8 s; 4 of the 10 are left (2 were skipped).
        assert_eq!(progress.eta(), Some(Duration::from_secs(8)));
        progress.ok = 0;
        progress.failed = 0;
        assert_eq!(progress.eta(), None);
    }

    #[test]
    fn a_clock_shows_hours_only_when_there_are_some() {
        assert_eq!(clock(Duration::from_secs(4)), "0:04");
        assert_eq!(clock(Duration::from_secs(3599)), "59:59");
        assert_eq!(clock(Duration::from_secs(3600 + 62)), "1:01:02");
    }
}
