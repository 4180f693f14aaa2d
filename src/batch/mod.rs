//! Layer 5: batch jobs — one run of a plan per input row, many rows in flight, every row written
//! once, and nothing lost on a crash.
//!
//! Rows are streamed from the input ([`input`]), bound to the pipeline's inputs (by name, or
//! through `--map input=column`), and run through the session's [`Runner::run_many`] on one
//! built pipeline, so every row shares the same loaded models. Each finished row becomes one JSON
//! line ([`output`]), written and flushed at once; `--resume` skips the rows an earlier run
//! wrote. A failing row is recorded and the others go on, unless `--fail-fast`. Templates see the
//! row itself as `row`. Every row is a run of its own (its run id is in its output line) whose
//! events go to the session's events file, and whose record carries its model calls and cache
//! tally for the summary.

pub mod input;
pub mod output;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::core::{Cost, Failure, FailureCode, TokenUsage};
use crate::orchestrate::{
    CacheTally, FanOut, Job, Pipeline, Rendered, RunRecord, RunRequest, RunStatus, Runner, Session,
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
    /// Only rows whose index ≡ shard mod count: (shard, count).
    pub shard: Option<(usize, usize)>,
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

/// The end-of-run summary (stderr, and `--summary FILE` as JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub rows_ok: usize,
    pub rows_failed: usize,
    pub rows_skipped: usize,
    pub cancelled: bool,
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
    let (sink, previous) = match &options.out {
        Some(path) => output::open(path, options.resume, options.retry_errors)?,
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
        seen: HashMap::new(),
        lines: Lines {
            sink,
            waiting: BTreeMap::new(),
            next_sequence: 0,
            next_to_write: 0,
        },
        started_rows: 0,
        stop: false,
        tally: Tally::default(),
        started,
        progress,
        runner: runner.clone(),
    };
    let concurrency = work.options.concurrency;
    let cancelled = runner
        .run_many(&mut work, concurrency, runner.cancellation())
        .await?;
    Ok(work.tally.summary(cancelled, started.elapsed()))
}

/// A batch as the fan-out sees it: rows handed out as runs, their lines written as they end.
struct RowRuns<'p> {
    pipeline: Arc<Pipeline>,
    options: BatchOptions,
    rows: input::Rows,
    /// Rows an earlier run wrote (`--resume`): skipped.
    done: HashSet<String>,
    /// How often each `--id` value has been seen.
    seen: HashMap<String, usize>,
    lines: Lines,
    started_rows: usize,
    /// No more rows start (`--fail-fast` after a failure).
    stop: bool,
    tally: Tally,
    started: Instant,
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
}

impl Tally {
    /// Counts a row's run.
    fn add(&mut self, record: &RunRecord) {
        self.counts.model_calls += record.model_calls;
        self.cache += record.cache;
        for step in &record.steps {
            self.durations
                .entry(step.name.clone())
                .or_default()
                .push(step.duration_ms);
        }
        self.counts.tokens += record.usage.total();
        self.usage += record.usage;
        self.cost = Cost::sum(self.cost, record.cost);
        if record.status == RunStatus::Complete {
            self.counts.ok += 1;
        } else {
            self.counts.failed += 1;
        }
    }

    fn summary(self, cancelled: bool, wall: Duration) -> Summary {
        let counts = self.counts;
        Summary {
            rows_ok: counts.ok,
            rows_failed: counts.failed,
            rows_skipped: counts.skipped,
            cancelled,
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
            if !in_shard(row.index, self.options.shard) {
                continue;
            }
            let occurrence = self.occurrence(&row.id);
            let problem = problem.or_else(|| repeated_id(&row, occurrence));
            if occurrence > 1 {
                row.id = format!("{}#{occurrence}", row.id);
            }
            if self.done.contains(&row.id) {
                self.tally.counts.skipped += 1;
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
        self.write(sequence, line_for(&row, &record))
    }
}

/// Whether the row at `index` belongs to this shard (every row does without one).
fn in_shard(index: usize, shard: Option<(usize, usize)>) -> bool {
    shard.is_none_or(|(shard, count)| index % count == shard)
}

/// Counts the rows the run will see on a thread of its own (reading the input a second time, as
/// a stream), for the progress display's ETA. Stdin cannot be read twice: no total.
fn count_rows_in_background(options: &BatchOptions) -> Arc<OnceLock<usize>> {
    let total = Arc::new(OnceLock::new());
    if options.input != "-" {
        let (source, id_column) = (options.input.clone(), options.id_column.clone());
        let max_row_bytes = options.max_row_bytes;
        let (shard, limit) = (options.shard, options.limit);
        let slot = Arc::clone(&total);
        std::thread::spawn(move || {
            if let Ok(rows) = input::open(&source, id_column.as_deref(), max_row_bytes) {
                let count = rows.count();
                let in_shard = match shard {
                    Some((index, of)) => (count + of - 1 - index) / of,
                    None => count,
                };
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
        Ok(row) => in_shard(row.index, options.shard),
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

/// One output line: the row, its status, output or error, usage, cost and timings per step.
fn line_for(row: &Row, record: &RunRecord) -> String {
    let status = match record.status {
        RunStatus::Complete => "ok",
        RunStatus::Error => "error",
        RunStatus::Cancelled => "cancelled",
    };
    let steps: Vec<Value> = record
        .steps
        .iter()
        .map(|s| json!({ "name": s.name, "status": s.status, "duration_ms": s.duration_ms, "usage": s.usage, "cost": s.cost }))
        .collect();
    let mut line = Map::new();
    line.insert("row".into(), json!(row.id));
    line.insert("index".into(), json!(row.index));
    line.insert("input".into(), Value::Object(row.data.clone()));
    line.insert("run_id".into(), json!(record.run_id));
    line.insert("status".into(), json!(status));
    line.insert(
        "output".into(),
        record.output.clone().unwrap_or(Value::Null),
    );
    if let Some(error) = &record.error {
        line.insert("error".into(), json!(error));
    }
    line.insert("usage".into(), json!(record.usage));
    line.insert("cost".into(), json!(record.cost));
    line.insert("duration_ms".into(), json!(record.duration_ms));
    line.insert("steps".into(), Value::Array(steps));
    // Written out from a JSON value: serde_json's own writer for it is optimised even where
    // this crate is not (dev builds), so this is cheaper than serialising a struct directly.
    Value::Object(line).to_string()
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

/// Parses `I/N`, or takes the shard from the environment of array jobs: `env` reads Kubernetes
/// Indexed Jobs (`JOB_COMPLETION_INDEX`, with the count in `PAGANTIC_SHARDS`) or Slurm arrays
/// (`SLURM_ARRAY_TASK_ID` and `SLURM_ARRAY_TASK_COUNT`; the array may start anywhere and step,
/// as `--array=1-8` or `0-14:2` do: `SLURM_ARRAY_TASK_MIN` and `SLURM_ARRAY_TASK_STEP` turn the
/// task id into a shard from 0).
pub fn parse_shard(text: &str) -> Result<(usize, usize), ShardError> {
    let (index, count) = if text == "env" {
        shard_from_env(|name| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
        })?
    } else {
        let not_i_over_n = || ShardError::NotIOverN(text.to_string());
        let (i, n) = text.split_once('/').ok_or_else(not_i_over_n)?;
        let parse = |s: &str| s.trim().parse::<usize>().map_err(|_| not_i_over_n());
        (parse(i)?, parse(n)?)
    };
    if count == 0 || index >= count {
        return Err(ShardError::NoSuchShard { index, count });
    }
    Ok((index, count))
}

/// Why `--shard` names no shard.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// Neither `I/N` nor `env`.
    #[error("expected I/N, got `{0}`")]
    NotIOverN(String),
    /// The index is not below the count (or the count is 0).
    #[error("shard {index} of {count} does not exist (shards are 0 to N-1)")]
    NoSuchShard { index: usize, count: usize },
    /// A Slurm array task id below the array's first id.
    #[error("SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}")]
    BelowArrayStart { id: usize, min: usize },
    /// `--shard env` outside an array job.
    #[error(
        "--shard env needs JOB_COMPLETION_INDEX and PAGANTIC_SHARDS, or SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT"
    )]
    NotAnArrayJob,
}

/// The shard of an array job, from its environment (`var` reads one variable as a number).
fn shard_from_env(var: impl Fn(&str) -> Option<usize>) -> Result<(usize, usize), ShardError> {
    if let (Some(index), Some(count)) = (var("JOB_COMPLETION_INDEX"), var("PAGANTIC_SHARDS")) {
        return Ok((index, count));
    }
    if let (Some(id), Some(count)) = (var("SLURM_ARRAY_TASK_ID"), var("SLURM_ARRAY_TASK_COUNT")) {
        let min = var("SLURM_ARRAY_TASK_MIN").unwrap_or(0);
        let step = var("SLURM_ARRAY_TASK_STEP").unwrap_or(1).max(1);
        let offset = id
            .checked_sub(min)
            .ok_or(ShardError::BelowArrayStart { id, min })?;
        return Ok((offset / step, count));
    }
    Err(ShardError::NotAnArrayJob)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Slurm array numbered from 1 (`--array=1-4`), or stepping (`--array=0-6:2`), covers every
    /// shard exactly once; a Kubernetes indexed job numbers from 0.
    #[test]
    fn array_jobs_cover_every_shard_once() {
        let env = |pairs: Vec<(&'static str, usize)>| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
        };
        for (min, step, ids) in [(1, 1, vec![1, 2, 3, 4]), (0, 2, vec![0, 2, 4, 6])] {
            let mut shards: Vec<usize> = ids
                .into_iter()
                .map(|id| {
                    shard_from_env(env(vec![
                        ("SLURM_ARRAY_TASK_ID", id),
                        ("SLURM_ARRAY_TASK_COUNT", 4),
                        ("SLURM_ARRAY_TASK_MIN", min),
                        ("SLURM_ARRAY_TASK_STEP", step),
                    ]))
                    .expect("a shard")
                    .0
                })
                .collect();
            shards.sort_unstable();
            assert_eq!(shards, [0, 1, 2, 3], "min {min}, step {step}");
        }
        assert_eq!(
            shard_from_env(env(vec![
                ("JOB_COMPLETION_INDEX", 2),
                ("PAGANTIC_SHARDS", 3)
            ])),
            Ok((2, 3))
        );
        assert!(shard_from_env(env(vec![])).is_err());
    }

    #[test]
    fn shards_parse_and_are_checked() {
        assert_eq!(parse_shard("1/4"), Ok((1, 4)));
        assert_eq!(
            parse_shard("4/4"),
            Err(ShardError::NoSuchShard { index: 4, count: 4 })
        );
        assert_eq!(parse_shard("x"), Err(ShardError::NotIOverN("x".into())));
        assert_eq!(parse_shard("1/y"), Err(ShardError::NotIOverN("1/y".into())));
        let below = shard_from_env(|name| match name {
            "SLURM_ARRAY_TASK_ID" => Some(0),
            "SLURM_ARRAY_TASK_COUNT" => Some(4),
            "SLURM_ARRAY_TASK_MIN" => Some(1),
            _ => None,
        });
        assert_eq!(below, Err(ShardError::BelowArrayStart { id: 0, min: 1 }));
        assert_eq!(shard_from_env(|_| None), Err(ShardError::NotAnArrayJob));
    }

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
    fn percentiles_of_durations() {
        let times = percentiles((1..=100).map(f64::from).collect());
        assert_eq!((times.p50_ms, times.p95_ms), (51.0, 95.0));
    }
}
