//! Layer 5: batch jobs — one run of a plan per input row, many rows in flight, every row written
//! once, and nothing lost on a crash.
//!
//! Rows are streamed from the input ([`input`]), bound to the pipeline's inputs (by name, or
//! through `--map input=column`), and run through the session's [`Runner::run_many`] on one
//! built pipeline, so every row shares the same loaded models. Each finished row becomes one JSON
//! line ([`output`]), written and flushed at once; `--resume` skips the rows an earlier run
//! wrote, except those whose failure may pass, and refuses an output another shard, input or
//! plan wrote ([`part`]). A failing row is recorded and the others go on, unless `--fail-fast`.
//! Array jobs run one [`shard`] each into parts of their own, which [`merge`] joins. Templates
//! see the row itself as `row`. Every row is a run of its own (its run id is in its output line)
//! whose events go to the session's events file, and whose record carries its model calls and
//! cache tally for the summary.

pub mod group;
pub mod input;
pub mod merge;
pub mod output;
pub mod part;
pub mod shard;

pub use shard::{Shard, ShardError, parse_shard};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::core::{Cost, Failure, FailureCode, TokenUsage};
use crate::inference::Pacing;
use crate::orchestrate::{
    CacheTally, FanOut, Job, Pipeline, Rendered, RunRecord, RunRequest, RunStatus, Runner, Session,
    StepStatus,
};
use serde::Serialize;
use serde_json::{Map, Value, json};

use input::Row;
use output::Sink;

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
    /// The SHA-256 of the plan and what its lockfile pins, recorded with the output.
    pub plan_sha256: String,
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
    /// Time the models spent waiting for their pace (rate limits, a server's `Retry-After`),
    /// and the 429s they were answered.
    pub rate_limit_wait: Duration,
    pub rate_limited: u64,
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
    /// A reduce (`--group-by`): the input rows it grouped and the runs its groups took.
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

/// Runs `pipeline` over every row, each row a run of `session` (its cancellation stops the
/// batch: rows in flight end cancelled and are not written, so `--resume` runs them again).
pub async fn run(
    session: &Session,
    pipeline: Arc<Pipeline>,
    options: BatchOptions,
    progress: &dyn Fn(&Progress),
) -> Result<Summary, Failure> {
    let started = Instant::now();
    let paced_from = crate::inference::pacing();
    let origin = origin_of(&options)?;
    let (sink, previous) = match &options.out {
        Some(path) => open_part(path, &origin, &options)?,
        None => (Sink::Stdout, output::Previous::default()),
    };
    let rows = input::open(
        &options.input,
        options.id_column.as_deref(),
        options.max_row_bytes,
    )?;
    let runner = session.runner();
    let mut work = RowRuns {
        pipeline,
        total: count_rows_in_background(&options),
        options,
        rows,
        done: previous.done,
        done_failed: previous.failed,
        seen: HashMap::new(),
        lines: Lines::new(sink),
        started_rows: 0,
        stop: false,
        tally: Tally::default(),
        started,
        paced_from,
        progress,
        runner: runner.clone(),
    };
    let concurrency = work.options.concurrency;
    let cancelled = runner
        .run_many(&mut work, concurrency, runner.cancellation())
        .await?;
    let mut summary = work.tally.summary(cancelled, origin, started.elapsed());
    let paced = crate::inference::pacing().since(paced_from);
    summary.rate_limit_wait_ms = paced.waited.as_secs_f64() * 1000.0;
    summary.rate_limited = paced.rate_limited;
    Ok(summary)
}

/// What writes this batch's output (its shard, input and plan), once the output is known not to
/// be part of the input.
fn origin_of(options: &BatchOptions) -> Result<part::Origin, Failure> {
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
        plan_sha256: options.plan_sha256.clone(),
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

/// A batch as the fan-out sees it: rows handed out as runs, their lines written as they end.
struct RowRuns<'p> {
    pipeline: Arc<Pipeline>,
    options: BatchOptions,
    rows: input::Rows,
    /// Rows an earlier run wrote (`--resume`): skipped.
    done: HashSet<String>,
    /// Those of them that failed for good.
    done_failed: HashSet<String>,
    /// How often each `--id` value has been seen.
    seen: HashMap<String, usize>,
    lines: Lines,
    started_rows: usize,
    /// No more rows start (`--fail-fast` after a failure).
    stop: bool,
    tally: Tally,
    started: Instant,
    /// The process's pacing when the batch started.
    paced_from: crate::inference::Pacing,
    total: Arc<OnceLock<usize>>,
    progress: &'p dyn Fn(&Progress),
    /// Told of rows that fail without a run, so the session ends in ERROR.
    runner: Runner,
}

/// What the batch has done so far, for the progress line and the summary.
#[derive(Default)]
struct Tally {
    counts: Progress,
    durations: BTreeMap<String, Vec<f64>>,
    usage: TokenUsage,
    cost: Option<Cost>,
    cache: CacheTally,
    /// Failed rows whose failure may pass.
    failed_retryably: usize,
    /// Skipped rows an earlier run recorded as failed.
    skipped_failed: usize,
}

impl Tally {
    /// Counts a row's run.
    fn add(&mut self, record: &RunRecord) {
        self.spend(record);
        self.outcome(record.status, record.error.as_ref());
    }

    /// Counts what a run spent: model calls, cache, step times, tokens and cost.
    fn spend(&mut self, record: &RunRecord) {
        self.counts.model_calls += record.model_calls;
        self.cache += record.cache;
        for step in &record.steps {
            self.durations
                .entry(step.name.clone())
                .or_default()
                .push(step.duration_ms);
        }
        self.counts.tokens = self.counts.tokens.saturating_add(record.usage.total());
        self.usage += record.usage;
        self.cost = Cost::sum(self.cost, record.cost);
    }

    /// Counts an item (a row, a group) that ended with `status`.
    fn outcome(&mut self, status: RunStatus, error: Option<&Failure>) {
        if status == RunStatus::Complete {
            self.counts.ok += 1;
        } else {
            self.counts.failed += 1;
            self.failed_retryably += usize::from(error.is_some_and(Failure::transient));
        }
    }

    fn summary(self, cancelled: bool, origin: part::Origin, wall: Duration) -> Summary {
        let counts = self.counts;
        let end = if cancelled {
            End::Preempted
        } else if self.failed_retryably > 0 {
            End::Retry
        } else if counts.failed + self.skipped_failed > 0 {
            End::Failed
        } else {
            End::Complete
        };
        Summary {
            end,
            rows_ok: counts.ok,
            rows_failed: counts.failed,
            rows_failed_retryably: self.failed_retryably,
            rows_skipped: counts.skipped,
            rows_skipped_failed: self.skipped_failed,
            cancelled,
            origin,
            usage: self.usage,
            cost: self.cost,
            model_calls: counts.model_calls,
            cache: self.cache,
            wall_ms: wall.as_secs_f64() * 1000.0,
            rows_per_s: (counts.ok + counts.failed) as f64 / wall.as_secs_f64().max(1e-9),
            steps: self
                .durations
                .into_iter()
                .map(|(name, times)| (name, percentiles(times)))
                .collect(),
            rate_limit_wait_ms: 0.0,
            rate_limited: 0,
            grouped: None,
            map: None,
            trace_spans_dropped: None,
        }
    }
}

/// The output lines: written as rows end, or (`--ordered`) in input order.
struct Lines {
    sink: Sink,
    /// With `--ordered`: lines that wait for an earlier one.
    waiting: BTreeMap<usize, String>,
    next_sequence: usize,
    next_to_write: usize,
}

impl Lines {
    fn new(sink: Sink) -> Self {
        Lines {
            sink,
            waiting: BTreeMap::new(),
            next_sequence: 0,
            next_to_write: 0,
        }
    }

    /// The place of the next row started.
    fn sequence(&mut self) -> usize {
        self.next_sequence += 1;
        self.next_sequence - 1
    }

    /// Writes a line now, or (with `ordered`) once every earlier line is written.
    fn write(&mut self, sequence: usize, line: String, ordered: bool) -> Result<(), Failure> {
        if !ordered {
            return self.sink.write_line(line);
        }
        self.waiting.insert(sequence, line);
        while let Some(line) = self.waiting.remove(&self.next_to_write) {
            self.sink.write_line(line)?;
            self.next_to_write += 1;
        }
        Ok(())
    }
}

impl RowRuns<'_> {
    /// The next row of this shard that an earlier run did not write, its id made unique, with
    /// why it cannot run if it cannot; None once the input (or `--limit`) is exhausted.
    fn next_row(&mut self) -> Option<(Row, Option<Failure>)> {
        loop {
            if self.options.limit.is_some_and(|l| self.started_rows >= l) {
                return None;
            }
            // An unreadable row is recorded like a failed one (under its line or record number),
            // and the rest go on.
            let (mut row, problem) = match self.rows.next()? {
                Ok(row) => (row, None),
                Err(bad) => (
                    Row {
                        index: bad.index,
                        id: bad.id,
                        data: Map::new(),
                    },
                    Some(bad.failure),
                ),
            };
            if !in_shard(row.index, self.options.shard.as_ref()) {
                continue;
            }
            let occurrence = self.occurrence(&row.id);
            let problem = problem.or_else(|| repeated_id(&row, occurrence));
            if occurrence > 1 {
                row.id = format!("{}#{occurrence}", row.id);
            }
            if self.done.contains(&row.id) {
                self.tally.counts.skipped += 1;
                self.tally.skipped_failed += usize::from(self.done_failed.contains(&row.id));
                continue;
            }
            self.started_rows += 1;
            return Some((row, problem));
        }
    }

    /// How many rows so far had this id, this one included. Only `--id` values can repeat: line
    /// and record numbers and paths are unique, so without it nothing is remembered.
    fn occurrence(&mut self, id: &str) -> usize {
        if self.options.id_column.is_none() {
            return 1;
        }
        let count = self.seen.entry(id.to_string()).or_insert(0);
        *count += 1;
        *count
    }

    /// Writes a row's line and shows the progress so far.
    fn write(&mut self, sequence: usize, line: String) -> Result<(), Failure> {
        self.lines.write(sequence, line, self.options.ordered)?;
        let counts = &mut self.tally.counts;
        counts.elapsed = self.started.elapsed();
        counts.total = self.total.get().copied();
        let paced = crate::inference::pacing().since(self.paced_from);
        counts.rate_limit_wait = paced.waited;
        counts.rate_limited = paced.rate_limited;
        (self.progress)(counts);
        Ok(())
    }
}

/// A second row with an id already used is keyed `id#2` and fails, saying so: a resume then
/// skips exactly the rows that were written, none silently lost.
fn repeated_id(row: &Row, occurrence: usize) -> Option<Failure> {
    (occurrence > 1).then(|| {
        Failure::new(
            FailureCode::ConfigInvalidInput,
            format!(
                "row {} has the id `{}` of an earlier row (this is its occurrence {occurrence})",
                row.index + 1,
                row.id
            ),
        )
        .with_help(
            "ids must be unique: choose another --id column, or leave --id out to number rows",
        )
    })
}

impl FanOut for RowRuns<'_> {
    /// The row's place among the rows started, and the row.
    type Tag = (usize, Row);

    fn trace_attributes(&self, (_, row): &Self::Tag) -> Vec<(&'static str, String)> {
        vec![("pagantic.batch.row", row.id.clone())]
    }

    fn next(&mut self) -> Result<Option<Job<Self::Tag>>, Failure> {
        while !self.stop {
            let Some((row, problem)) = self.next_row() else {
                return Ok(None);
            };
            let sequence = self.lines.sequence();
            let bound = match problem {
                Some(problem) => Err(problem),
                None => self.pipeline.bind_row(&row.data, &self.options.map),
            };
            match bound {
                Ok(inputs) => {
                    let globals = Map::from_iter([("row".into(), Value::Object(row.data.clone()))]);
                    return Ok(Some(Job {
                        pipeline: Arc::clone(&self.pipeline),
                        inputs,
                        globals,
                        sample: None,
                        tag: (sequence, row),
                    }));
                }
                Err(failure) => {
                    let line = json!({ "row": row.id, "index": row.index, "status": "error", "input": row.data, "error": failure }).to_string();
                    self.tally.counts.failed += 1;
                    self.runner.note_failure();
                    self.stop = self.options.fail_fast;
                    self.write(sequence, line)?;
                }
            }
        }
        Ok(None)
    }

    async fn finished(
        &mut self,
        (sequence, row): Self::Tag,
        record: RunRecord,
    ) -> Result<(), Failure> {
        if record.status == RunStatus::Cancelled {
            // Abandoned, not written: a resume runs the row again.
            self.stop = true;
            return Ok(());
        }
        self.tally.add(&record);
        self.stop |= record.status != RunStatus::Complete && self.options.fail_fast;
        let line = line_for(&row, &record)?;
        self.write(sequence, line)
    }
}

/// Whether the row at `index` belongs to this shard (every row does without one).
fn in_shard(index: usize, shard: Option<&Shard>) -> bool {
    shard.is_none_or(|shard| shard.holds(index))
}

/// Counts the rows the run will see on a thread of its own (reading the input a second time, as
/// a stream), for the progress display's ETA. Stdin cannot be read twice: no total.
fn count_rows_in_background(options: &BatchOptions) -> Arc<OnceLock<usize>> {
    let total = Arc::new(OnceLock::new());
    if options.input != "-" {
        let (source, id_column) = (options.input.clone(), options.id_column.clone());
        let max_row_bytes = options.max_row_bytes;
        let (shard, limit) = (options.shard.clone(), options.limit);
        let slot = Arc::clone(&total);
        std::thread::spawn(move || {
            if let Ok(rows) = input::open(&source, id_column.as_deref(), max_row_bytes) {
                let count = rows.count();
                let in_shard = shard.map_or(count, |shard| shard.rows_of(count));
                let _ = slot.set(limit.map_or(in_shard, |l| in_shard.min(l)));
            }
        });
    }
    total
}

/// What the model would be sent for one row, step by step.
#[derive(Debug, Clone)]
pub struct RowPreview {
    pub row: String,
    /// (step name, its messages) for every step that calls a model.
    pub calls: Vec<(String, Vec<crate::core::Message>)>,
    /// Why the row could not be previewed (a bad row, a failing upstream step).
    pub error: Option<Failure>,
}

/// The prompts of the first `rows` rows (shard applied), as `--dry-run` shows them before it runs
/// the whole batch on stand-ins.
pub async fn preview(
    session: &Session,
    pipeline: &Pipeline,
    options: &BatchOptions,
    rows: usize,
) -> Result<Vec<RowPreview>, Failure> {
    let runner = session.runner();
    let mut previews = Vec::new();
    let rows_in_shard = input::open(
        &options.input,
        options.id_column.as_deref(),
        options.max_row_bytes,
    )?
    .filter(|row| match row {
        Ok(row) => in_shard(row.index, options.shard.as_ref()),
        // An unreadable row stops the preview with its error.
        Err(_) => true,
    });
    for next in rows_in_shard.take(rows) {
        let row = next.map_err(|bad| bad.failure)?;
        let mut preview = RowPreview {
            row: row.id.clone(),
            calls: Vec::new(),
            error: None,
        };
        match pipeline.bind_row(&row.data, &options.map) {
            Ok(bound) => {
                for (index, step) in pipeline.steps.iter().enumerate() {
                    let request = RunRequest {
                        globals: Map::from_iter([("row".into(), Value::Object(row.data.clone()))]),
                        unrecorded: true,
                        ..RunRequest::default()
                    };
                    let rendered = runner.render(pipeline, index, bound.clone(), request);
                    match rendered.await {
                        Ok(Rendered::Messages(messages)) => {
                            preview.calls.push((step.name.clone(), messages));
                        }
                        Ok(Rendered::Text(_)) => {}
                        Err(failure) => {
                            preview.error = Some(failure);
                            break;
                        }
                    }
                }
            }
            Err(failure) => preview.error = Some(failure),
        }
        previews.push(preview);
    }
    Ok(previews)
}

/// One output line: the row, its status, output or error, usage, cost, what it waited for rate
/// limits (when it did), its trace (when traces are exported) and timings per step.
fn line_for(row: &Row, record: &RunRecord) -> Result<String, Failure> {
    let line = Line {
        row: &row.id,
        index: row.index,
        input: &row.data,
        run_id: &record.run_id,
        status: status_name(record.status),
        output: record.output.as_ref(),
        error: record.error.as_ref(),
        // A resume runs the row again when its failure may pass.
        transient: record.error.as_ref().map(Failure::transient),
        usage: &record.usage,
        cost: record.cost,
        duration_ms: record.duration_ms,
        rate_limit: (!record.rate_limit.is_none()).then_some(&record.rate_limit),
        trace_id: record.trace_id.as_deref(),
        steps: steps_of(record),
    };
    // Written straight from the row and the record, which it borrows: nothing is copied into
    // a JSON value first. Strings, numbers and JSON values always serialise; were one not to,
    // the batch stops with the row named rather than write a line that is not one.
    serde_json::to_string(&line).map_err(|error| {
        Failure::new(
            FailureCode::ConfigFileError,
            format!(
                "could not write the output line of row `{}`: {error}",
                row.id
            ),
        )
    })
}

/// An output line as it is written, in this order.
#[derive(Serialize)]
struct Line<'a> {
    row: &'a str,
    index: usize,
    input: &'a Map<String, Value>,
    run_id: &'a str,
    status: &'static str,
    output: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Failure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    transient: Option<bool>,
    usage: &'a TokenUsage,
    cost: Option<Cost>,
    duration_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate_limit: Option<&'a Pacing>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_id: Option<&'a str>,
    steps: Vec<StepLine<'a>>,
}

/// A step as output lines give it: name, status, duration, usage and cost.
#[derive(Serialize)]
struct StepLine<'a> {
    name: &'a str,
    status: StepStatus,
    duration_ms: f64,
    usage: &'a TokenUsage,
    cost: Option<Cost>,
}

/// A run's status as output lines give it.
fn status_name(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Complete => "ok",
        RunStatus::Error => "error",
        RunStatus::Cancelled => "cancelled",
    }
}

/// A run's steps as output lines give them.
fn steps_of(record: &RunRecord) -> Vec<StepLine<'_>> {
    let steps = record.steps.iter();
    steps
        .map(|step| StepLine {
            name: &step.name,
            status: step.status,
            duration_ms: step.duration_ms,
            usage: &step.usage,
            cost: step.cost,
        })
        .collect()
}

fn percentiles(mut times: Vec<f64>) -> StepTimes {
    times.sort_by(f64::total_cmp);
    let at = |q: f64| {
        if times.is_empty() {
            0.0
        } else {
            times[((times.len() - 1) as f64 * q).round() as usize]
        }
    };
    StepTimes {
        p50_ms: at(0.5),
        p95_ms: at(0.95),
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

    /// An output line's keys, in the order users read and diff them: a failed row's error and
    /// whether it may pass, its rate-limit wait and its trace only when it has them.
    #[test]
    fn an_output_line_names_the_row_then_the_run_in_a_fixed_order() {
        let mut step = crate::orchestrate::StepRecord::not_run("ask", "infer");
        step.status = StepStatus::Failed;
        step.duration_ms = 1.5;
        let failure = Failure::new(FailureCode::InferenceTimeout, "too slow");
        let mut record = RunRecord {
            run_id: "run-1".into(),
            request_id: None,
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            plan: "p".into(),
            status: RunStatus::Error,
            output: None,
            steps: vec![step],
            usage: TokenUsage::default(),
            cost: None,
            model_calls: 1,
            cache: CacheTally::default(),
            rate_limit: Pacing {
                waited: Duration::from_millis(250),
                rate_limited: 2,
            },
            duration_ms: 2.5,
            started_at: crate::core::Timestamp::now(),
            ended_at: crate::core::Timestamp::now(),
            error: Some(failure),
        };
        let mut data = Map::new();
        data.insert("text".into(), json!("hi"));
        let row = Row {
            index: 3,
            id: "r3".into(),
            data,
        };
        let line = line_for(&row, &record).expect("a line");
        let keys: Vec<String> = serde_json::from_str::<Map<String, Value>>(&line)
            .expect("JSON")
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            keys,
            [
                "row",
                "index",
                "input",
                "run_id",
                "status",
                "output",
                "error",
                "transient",
                "usage",
                "cost",
                "duration_ms",
                "rate_limit",
                "trace_id",
                "steps"
            ],
            "{line}"
        );
        let parsed: Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(parsed["error"]["code"], "INFERENCE_TIMEOUT", "{line}");
        assert_eq!(parsed["transient"], true, "{line}");
        assert_eq!(
            parsed["rate_limit"],
            json!({ "waited_ms": 250, "refused": 2 })
        );
        assert_eq!(parsed["output"], Value::Null);
        assert_eq!(
            parsed["steps"],
            json!([{ "name": "ask", "status": "failed", "duration_ms": 1.5,
                     "usage": { "prompt_tokens": 0, "completion_tokens": 0 }, "cost": null }])
        );
        record.error = None;
        record.trace_id = None;
        record.rate_limit = Pacing::default();
        let line = line_for(&row, &record).expect("a line");
        let parsed: Map<String, Value> = serde_json::from_str(&line).expect("JSON");
        for absent in ["error", "transient", "rate_limit", "trace_id"] {
            assert!(!parsed.contains_key(absent), "{line}");
        }
    }

    #[test]
    fn percentiles_of_durations() {
        let times = percentiles((1..=100).map(f64::from).collect());
        assert_eq!((times.p50_ms, times.p95_ms), (51.0, 95.0));
    }
}
