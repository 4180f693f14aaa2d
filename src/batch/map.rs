//! The map: the plan once per input row, many rows in flight, each row's line written as it ends.
//!
//! Rows are streamed from the input, those of other shards and those an earlier run wrote
//! (`--resume`) passed over, and bound to the pipeline's inputs (by name, or through `--map
//! input=column`); a row that cannot be read or bound gets its line without a run. Templates see
//! the row itself as `row`. `--dry-run` first shows what the first rows' model steps would be
//! sent ([`preview`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use serde_json::{Map, Value};

use super::input::{self, Row};
use super::line::{Lines, RunLine, UnboundLine};
use super::output::{Previous, Sink};
use super::{BatchOptions, Progress, Shard, Summary, Tally, open_part, origin_of};
use crate::core::{Failure, FailureCode};
use crate::orchestrate::{
    FanOut, Job, Pipeline, Rendered, RunRecord, RunRequest, RunStatus, Runner, Session,
};

/// Runs `pipeline` over every row, each row a run of `session` (its cancellation stops the
/// batch: rows in flight end cancelled and are not written, so `--resume` runs them again);
/// `plan_sha256` is what the output records of the plan that wrote it.
pub async fn run(
    session: &Session,
    pipeline: Arc<Pipeline>,
    options: BatchOptions,
    plan_sha256: String,
    progress: &dyn Fn(&Progress),
) -> Result<Summary, Failure> {
    let started = Instant::now();
    let origin = origin_of(&options, plan_sha256)?;
    let (sink, previous) = match &options.out {
        Some(path) => open_part(path, &origin, &options)?,
        None => (Sink::Stdout, Previous::default()),
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
        lines: Lines::new(sink, options.ordered),
        options,
        rows,
        done: previous.done,
        done_failed: previous.failed,
        seen: HashMap::new(),
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
    Ok(work.tally.summary(cancelled, origin, started.elapsed()))
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
    total: Arc<OnceLock<usize>>,
    progress: &'p dyn Fn(&Progress),
    /// Told of rows that fail without a run, so the session ends in ERROR.
    runner: Runner,
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
    fn write(&mut self, sequence: usize, line: &super::line::Line<'_>) -> Result<(), Failure> {
        self.lines.write(sequence, line)?;
        self.tally.show(self.started, &self.total, self.progress);
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
                    self.tally.counts.failed += 1;
                    self.runner.note_failure();
                    self.stop = self.options.fail_fast;
                    self.write(sequence, &UnboundLine::of(&row, &failure))?;
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
        self.write(sequence, &RunLine::of(&row, &record))
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
