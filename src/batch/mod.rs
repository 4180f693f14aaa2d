//! Layer 5: batch jobs — one run of a plan per input row, many rows in flight, every row written
//! once, and nothing lost on a crash.
//!
//! Rows are streamed from the input ([`input`]), bound to the pipeline's inputs (by name, or
//! through `--map input=column`), and run concurrently in one session on one built pipeline, so every row shares the same
//! loaded model (a local engine sees concurrent requests and can batch them). Each finished row
//! becomes one JSON line ([`output`]), written and flushed at once; `--resume` skips the rows an
//! earlier run wrote. A failing row is recorded and the others go on, unless `--fail-fast`.
//! Templates see the row itself as `row`. Every row is a run of its own (its run id is in its
//! output line) whose events go to the session's events file.

pub mod input;
pub mod output;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::task::JoinSet;

use crate::core::{Cost, Failure, FailureCode, TokenUsage};
use crate::orchestrate::{
    CacheTally, Events, Pipeline, Rendered, RunRecord, RunStatus, Session, execute, render_step,
};

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
/// batch: rows in flight are abandoned, not written, so `--resume` runs them again).
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
    let (mut sink, previous) = match &options.out {
        Some(path) => output::open(path, options.resume, options.retry_errors)?,
        None => (Sink::Stdout, output::Previous::default()),
    };
    let mut rows = input::open(
        &options.input,
        options.id_column.as_deref(),
        options.max_row_bytes,
    )?;
    let mut counts = Progress::default();
    let mut durations: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut usage = TokenUsage::default();
    let mut cost = None;
    let mut running: JoinSet<(usize, String, RunRecord, u64, CacheTally)> = JoinSet::new();
    let mut cache = CacheTally::default();
    let mut waiting_lines: BTreeMap<usize, String> = BTreeMap::new();
    let (mut next_sequence, mut next_to_write) = (0usize, 0usize);
    let mut started_rows = 0usize;
    let mut stop = false;
    let mut cancel = session.run_options().cancel;
    let mut cancelled = false;
    let mut exhausted = false;
    let done: &HashSet<String> = &previous.done;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let concurrency = options.concurrency.max(1);
    let total = count_rows_in_background(&options);

    loop {
        while !stop
            && !exhausted
            && running.len() < concurrency
            && options.limit.is_none_or(|l| started_rows < l)
        {
            let Some(next) = rows.next() else {
                exhausted = true;
                break;
            };
            // An unreadable row is recorded like a failed one (under its line or record number),
            // and the rest go on.
            let (mut row, problem) = match next {
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
            if !in_shard(row.index, options.shard) {
                continue;
            }
            // A second row with an id already used is keyed `id#2` (and fails, saying so): a
            // resume then skips exactly the rows that were written, none silently lost. Only
            // `--id` values can repeat: line and record numbers and paths are unique, so without
            // it nothing is remembered.
            let occurrence = match options.id_column {
                Some(_) => {
                    let count = seen.entry(row.id.clone()).or_insert(0);
                    *count += 1;
                    *count
                }
                None => 1,
            };
            let problem = match (problem, occurrence) {
                (Some(problem), _) => Some(problem),
                (None, 1) => None,
                (None, n) => Some(
                    Failure::new(
                        FailureCode::ConfigInvalidInput,
                        format!(
                            "row {} has the id `{}` of an earlier row (this is its occurrence {n})",
                            row.index + 1,
                            row.id
                        ),
                    )
                    .with_help("ids must be unique: choose another --id column, or leave --id out to number rows"),
                ),
            };
            if occurrence > 1 {
                row.id = format!("{}#{occurrence}", row.id);
            }
            if done.contains(&row.id) {
                counts.skipped += 1;
                continue;
            }
            started_rows += 1;
            let sequence = next_sequence;
            next_sequence += 1;
            let bound = match problem {
                Some(problem) => Err(problem),
                None => pipeline.bind_row(&row.data, &options.map),
            };
            match bound {
                Ok(bound) => {
                    let mut run_options = session.run_options();
                    run_options
                        .globals
                        .insert("row".into(), Value::Object(row.data.clone()));
                    let pipeline = Arc::clone(&pipeline);
                    let events = session.events().new_run();
                    running.spawn(async move {
                        let record = execute(&pipeline, bound, run_options, &events).await;
                        // The line is written out here, on the row's own task, so the loop
                        // that writes lines in order only has to copy it out.
                        (
                            sequence,
                            line_for(&row, &record),
                            record,
                            events.model_calls(),
                            events.cache_tally(),
                        )
                    });
                }
                Err(failure) => {
                    let line = json!({ "row": row.id, "index": row.index, "status": "error", "input": row.data, "error": failure }).to_string();
                    write(
                        &mut sink,
                        &mut waiting_lines,
                        &mut next_to_write,
                        sequence,
                        line,
                        options.ordered,
                    )?;
                    counts.failed += 1;
                    stop = options.fail_fast;
                }
            }
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            joined = running.join_next() => {
                let Some(Ok((sequence, line, record, calls, cached))) = joined else { continue };
                if record.status == RunStatus::Cancelled {
                    // The row saw the cancellation before this loop did: abandoned like the rows
                    // still in flight (they end the same way), so a resume runs it again.
                    cancelled = true;
                    stop = true;
                    continue;
                }
                counts.model_calls += calls;
                cache += cached;
                for step in &record.steps {
                    durations.entry(step.name.clone()).or_default().push(step.duration_ms);
                }
                counts.tokens += record.usage.total();
                usage += record.usage;
                cost = Cost::sum(cost, record.cost);
                let ok = record.status == RunStatus::Complete;
                if ok { counts.ok += 1 } else { counts.failed += 1 }
                stop |= !ok && options.fail_fast;
                write(&mut sink, &mut waiting_lines, &mut next_to_write, sequence, line, options.ordered)?;
                counts.elapsed = started.elapsed();
                counts.total = total.get().copied();
                progress(&counts);
            }
            changed = cancel.changed(), if !cancelled => {
                if changed.is_ok() && *cancel.borrow() {
                    // Rows in flight are abandoned, not written: a resume runs them again.
                    cancelled = true;
                    stop = true;
                    running.abort_all();
                    while running.join_next().await.is_some() {}
                } else if changed.is_err() {
                    cancelled = true;
                }
            }
        }
    }
    let wall = started.elapsed();
    Ok(Summary {
        rows_ok: counts.ok,
        rows_failed: counts.failed,
        rows_skipped: counts.skipped,
        cancelled: cancelled && *cancel.borrow(),
        usage,
        cost,
        model_calls: counts.model_calls,
        cache,
        wall_ms: wall.as_secs_f64() * 1000.0,
        rows_per_s: (counts.ok + counts.failed) as f64 / wall.as_secs_f64().max(1e-9),
        steps: durations
            .into_iter()
            .map(|(name, times)| (name, percentiles(times)))
            .collect(),
    })
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
                    let mut run_options = session.run_options();
                    run_options
                        .globals
                        .insert("row".into(), Value::Object(row.data.clone()));
                    let events = Events::new(None);
                    match render_step(pipeline, index, bound.clone(), run_options, &events).await {
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

/// Writes a line now, or (with `ordered`) once every earlier line is written.
fn write(
    sink: &mut Sink,
    waiting: &mut BTreeMap<usize, String>,
    next_to_write: &mut usize,
    sequence: usize,
    line: String,
    ordered: bool,
) -> Result<(), Failure> {
    if !ordered {
        return sink.write_line(line);
    }
    waiting.insert(sequence, line);
    while let Some(line) = waiting.remove(next_to_write) {
        sink.write_line(line)?;
        *next_to_write += 1;
    }
    Ok(())
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
pub fn parse_shard(text: &str) -> Result<(usize, usize), String> {
    let (index, count) = if text == "env" {
        shard_from_env(|name| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
        })?
    } else {
        let (i, n) = text
            .split_once('/')
            .ok_or_else(|| format!("expected I/N, got `{text}`"))?;
        let parse = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("expected I/N, got `{text}`"))
        };
        (parse(i)?, parse(n)?)
    };
    if count == 0 || index >= count {
        return Err(format!(
            "shard {index} of {count} does not exist (shards are 0 to N-1)"
        ));
    }
    Ok((index, count))
}

/// The shard of an array job, from its environment (`var` reads one variable as a number).
fn shard_from_env(var: impl Fn(&str) -> Option<usize>) -> Result<(usize, usize), String> {
    if let (Some(index), Some(count)) = (var("JOB_COMPLETION_INDEX"), var("PAGANTIC_SHARDS")) {
        return Ok((index, count));
    }
    if let (Some(id), Some(count)) = (var("SLURM_ARRAY_TASK_ID"), var("SLURM_ARRAY_TASK_COUNT")) {
        let min = var("SLURM_ARRAY_TASK_MIN").unwrap_or(0);
        let step = var("SLURM_ARRAY_TASK_STEP").unwrap_or(1).max(1);
        let offset = id.checked_sub(min).ok_or_else(|| {
            format!("SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}")
        })?;
        return Ok((offset / step, count));
    }
    Err("--shard env needs JOB_COMPLETION_INDEX and PAGANTIC_SHARDS, or SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT".into())
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
        assert!(parse_shard("4/4").is_err());
        assert!(parse_shard("x").is_err());
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
