//! Reduce: `run --batch INPUT --group-by KEY` runs the plan once per group of rows instead of once
//! per row — the step after a map (classify every review, then summarise each product's).
//!
//! The rows are grouped without holding the input in memory ([`spill`]: a temporary on-disk
//! store), then each group becomes one or more runs of the plan with the inputs `rows` (the
//! group's rows, in input order), `group` (its key) and `fold_level`: a group over `--fold N`
//! rows is reduced in chunks, and the partial results again, until one run is left ([`fold`]).
//! Every run goes through the session's [`Runner::run_many`], on the same fan-out as a map's rows
//! (`-j` runs in flight, from any open group), and each group ends as one line in the batch
//! output format (its `row` the key's canonical JSON text, see [`key`]), so `--resume`, shards
//! (by a stable hash of the key: each group in exactly one shard), `batch merge`, `diff`, the
//! summary and exit codes work as they do for a map. Finished chunks of unfinished groups are
//! kept beside the output ([`saved`]), so a resume loses at most the runs in flight.

pub mod fold;
pub mod key;
pub mod saved;
pub mod spill;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::line::{GroupLine, Lines, Spent};
use super::{BatchOptions, End, Progress, Summary, Tally, input, map, open_part, origin_of};
use crate::batch::output::{Previous, Sink};
use crate::core::{Cost, Failure, FailureCode};
use crate::orchestrate::inputs::InputType;
use crate::orchestrate::{FanOut, Job, Pipeline, RunRecord, RunStatus, Runner, Session};
use fold::{Chunk, Fold, runs_per_level};
use key::GroupKey;
use saved::{ChunkLog, SavedChunk};
use spill::{Grouping, Spill};

/// How to run a reduce: a batch's options (input, output, resume, shard, `-j`…) and the grouping.
#[derive(Clone)]
pub struct GroupOptions {
    pub batch: BatchOptions,
    pub key: GroupKey,
    /// Leave rows without a key out instead of grouping them under `null`.
    pub skip_missing_key: bool,
    /// Reduce groups of more rows than this in chunks of this many (at least 2).
    pub fold: Option<u64>,
    /// What the output records of the plan that wrote it: the plan's SHA-256 with the grouping
    /// folded in.
    pub plan_sha256: String,
}

/// What a reduce adds to the summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Grouped {
    /// Rows read from the input (those of other shards and those without a key included).
    pub input_rows: u64,
    /// Rows left out for having no key (`--skip-missing-key`).
    pub rows_without_key: u64,
    /// Groups of this shard, those skipped on resume included.
    pub groups: usize,
    /// Runs of the plan the groups take, folds included (`--dry-run` prints it).
    pub planned_runs: u64,
    /// Runs made by this invocation (a resume makes only those not finished before).
    pub runs: u64,
    pub input_rows_per_s: f64,
}

/// The runs a reduce of `groups` takes with `fold`, and the most levels a group's fold has.
pub fn planned_runs(groups: &[spill::Group], fold: Option<u64>) -> (u64, usize) {
    groups.iter().fold((0, 0), |(runs, levels), group| {
        let per_level = runs_per_level(group.rows, fold);
        (
            runs + per_level.iter().sum::<u64>(),
            levels.max(per_level.len()),
        )
    })
}

/// The plan's inputs a reduce binds: `rows` must be declared (a list), `group` and `fold_level`
/// may be.
fn check_reduce_inputs(pipeline: &Pipeline) -> Result<(), Failure> {
    match pipeline.inputs.get("rows") {
        Some(spec) if spec.kind == InputType::Array => Ok(()),
        Some(spec) => Err(Failure::new(
            FailureCode::ConfigInvalidInput,
            format!(
                "the plan `{}` declares `rows` as {}; a reduce passes it the group's rows as a list",
                pipeline.name,
                spec.kind.name()
            ),
        )
        .with_help("declare `rows: { type: array }`")),
        None => Err(Failure::new(
            FailureCode::ConfigInvalidInput,
            format!(
                "the plan `{}` has no input `rows`: --group-by runs it once per group with the group's rows as `rows`",
                pipeline.name
            ),
        )
        .with_help("declare `inputs: { rows: { type: array }, group: { type: string } }` (and `fold_level: { type: integer, default: 0 }` to tell partial results apart)")),
    }
}

/// Groups the input's rows and runs `pipeline` over each group (folding the big ones), each run a
/// run of `session`; a cancellation stops it with the groups in flight unwritten and their
/// finished chunks kept for `--resume`.
pub async fn run(
    session: &Session,
    pipeline: Arc<Pipeline>,
    options: GroupOptions,
    progress: &dyn Fn(&Progress),
) -> Result<Summary, Failure> {
    let started = Instant::now();
    check_reduce_inputs(&pipeline)?;
    if options.fold.is_some_and(|n| n < 2) {
        return Err(Failure::new(
            FailureCode::ConfigInvalidInput,
            "--fold must be at least 2: each run must reduce more than one item",
        ));
    }
    let batch = &options.batch;
    let origin = origin_of(batch, options.plan_sha256.clone())?;
    let rows = input::open(
        &batch.input,
        batch.id_column.as_deref(),
        batch.max_row_bytes,
    )?;
    let grouping = Grouping {
        key: &options.key,
        shard: batch.shard.as_ref(),
        skip_missing_key: options.skip_missing_key,
    };
    let spill = Spill::fill(rows, &grouping, None)?;
    let (sink, previous) = match &batch.out {
        Some(path) => open_part(path, &origin, batch)?,
        None => (Sink::Stdout, Previous::default()),
    };
    let (log, saved) = match &batch.out {
        Some(path) => {
            let (log, saved) = ChunkLog::open(path, &origin, batch.resume)?;
            (Some(log), saved)
        }
        None => (None, HashMap::new()),
    };
    let (planned, _) = planned_runs(&spill.groups, options.fold);
    let runner = session.runner();
    let mut work = GroupRuns {
        total: Arc::new(OnceLock::from(spill.groups.len())),
        pipeline,
        spill,
        options: options.clone(),
        next_group: 0,
        open: BTreeMap::new(),
        done: previous.done,
        done_failed: previous.failed,
        saved,
        log,
        lines: Lines::new(sink, batch.ordered),
        started_groups: 0,
        stop: false,
        tally: Tally::default(),
        runs: 0,
        started,
        progress,
        runner: runner.clone(),
    };
    let concurrency = options.batch.concurrency;
    let cancelled = runner
        .run_many(&mut work, concurrency, runner.cancellation())
        .await?;
    let wall = started.elapsed();
    let grouped = Grouped {
        input_rows: work.spill.rows_read,
        rows_without_key: work.spill.rows_without_key,
        groups: work.spill.groups.len(),
        planned_runs: planned,
        runs: work.runs,
        input_rows_per_s: work.spill.rows_read as f64 / wall.as_secs_f64().max(1e-9),
    };
    let mut summary = work.tally.summary(cancelled, origin, wall);
    summary.grouped = Some(grouped);
    Ok(summary)
}

/// A group being reduced.
struct OpenGroup {
    fold: Fold,
    /// Its place among the groups started (for `--ordered`).
    sequence: usize,
    /// What its runs spent, chunks restored from an earlier run included.
    spent: Spent,
    in_flight: usize,
    /// Why the group failed, first: it ends with it once its runs in flight are back.
    failed: Option<GroupFailure>,
}

/// Why a group failed: a run of it failed, or a chunk's inputs did not fit the plan.
enum GroupFailure {
    Run(Box<RunRecord>),
    Unbound(Failure),
}

/// A reduce as the fan-out sees it: chunk runs of the open groups, then new groups as slots free.
struct GroupRuns<'p> {
    pipeline: Arc<Pipeline>,
    spill: Spill,
    options: GroupOptions,
    /// The next group (in order of first appearance) to open.
    next_group: usize,
    /// Groups being reduced, by number.
    open: BTreeMap<usize, OpenGroup>,
    /// Groups an earlier run wrote (`--resume`): skipped.
    done: HashSet<String>,
    done_failed: HashSet<String>,
    /// Chunks an earlier run finished, by group id.
    saved: HashMap<String, Vec<SavedChunk>>,
    log: Option<ChunkLog>,
    lines: Lines,
    started_groups: usize,
    stop: bool,
    tally: Tally,
    runs: u64,
    started: Instant,
    total: Arc<OnceLock<usize>>,
    progress: &'p dyn Fn(&Progress),
    runner: Runner,
}

impl GroupRuns<'_> {
    /// Opens the next group an earlier run did not write; false when none is left.
    fn open_next_group(&mut self) -> bool {
        while let Some(group) = self.spill.groups.get(self.next_group) {
            let number = self.next_group;
            self.next_group += 1;
            if self.done.contains(&group.id) {
                self.tally.counts.skipped += 1;
                self.tally.skipped_failed += usize::from(self.done_failed.contains(&group.id));
                continue;
            }
            if self
                .options
                .batch
                .limit
                .is_some_and(|l| self.started_groups >= l)
            {
                return false;
            }
            self.started_groups += 1;
            let mut spent = Spent::default();
            let mut restored = HashMap::new();
            for chunk in self.saved.remove(&group.id).unwrap_or_default() {
                spent.add(chunk.usage, chunk.cost(), chunk.model_calls);
                restored.insert((chunk.level, chunk.chunk), chunk.output);
            }
            let open = OpenGroup {
                fold: Fold::new(group.rows, self.options.fold, restored),
                sequence: self.lines.sequence(),
                spent,
                in_flight: 0,
                failed: None,
            };
            self.open.insert(number, open);
            return true;
        }
        false
    }

    /// The inputs of a chunk run of group `number`.
    fn chunk_inputs(&self, number: usize, chunk: Chunk) -> Result<Value, Failure> {
        let group = &self.spill.groups[number];
        let rows = if chunk.level == 0 {
            self.spill.rows(number, chunk.from, chunk.to)?
        } else {
            self.open
                .get(&number)
                .map(|open| open.fold.partials(chunk))
                .unwrap_or_default()
        };
        // A `group` declared as text gets a number's (or null's) canonical text.
        let group_value = match (&group.key, self.pipeline.inputs.get("group")) {
            (Some(Value::String(_)), _) => group.key.clone().unwrap_or_default(),
            (_, Some(spec)) if spec.kind == InputType::String => Value::String(group.id.clone()),
            (key, _) => key.clone().unwrap_or_default(),
        };
        let given = Map::from_iter([
            ("rows".to_string(), Value::Array(rows)),
            ("group".to_string(), group_value),
            ("fold_level".to_string(), json!(chunk.level)),
        ]);
        self.pipeline.bind_row(&given, &[])
    }

    /// Writes group `number`'s line — from its last run's `record`, or the `failure` that kept
    /// it from running — ending the group, and shows the progress so far.
    fn write_group(
        &mut self,
        number: usize,
        record: Option<&RunRecord>,
        failure: Option<&Failure>,
    ) -> Result<(), Failure> {
        let Some(open) = self.open.remove(&number) else {
            return Ok(());
        };
        let status = record.map_or(RunStatus::Error, |r| r.status);
        let error = failure.or_else(|| record.and_then(|r| r.error.as_ref()));
        self.tally.outcome(status, error);
        if status != RunStatus::Complete {
            self.runner.note_failure();
        }
        self.stop |= status != RunStatus::Complete && self.options.batch.fail_fast;
        let group = &self.spill.groups[number];
        let line = GroupLine::of(group, &open.spent, open.fold.levels(), record, error);
        self.lines.write(open.sequence, &line)?;
        self.tally.show(self.started, &self.total, self.progress);
        Ok(())
    }
}

/// A group's chunk run: the group's number and the chunk.
type ChunkTag = (usize, Chunk);

impl FanOut for GroupRuns<'_> {
    type Tag = ChunkTag;

    fn next(&mut self) -> Result<Option<Job<ChunkTag>>, Failure> {
        while !self.stop {
            let ready = self
                .open
                .iter_mut()
                .filter(|(_, open)| open.failed.is_none())
                .find_map(|(&number, open)| open.fold.next_chunk().map(|chunk| (number, chunk)));
            let Some((number, chunk)) = ready else {
                // No chunk is ready: open another group while slots are free.
                if self.open.len() >= self.options.batch.concurrency.max(1)
                    || !self.open_next_group()
                {
                    return Ok(None);
                }
                continue;
            };
            match self.chunk_inputs(number, chunk) {
                Ok(inputs) => {
                    if let Some(open) = self.open.get_mut(&number) {
                        open.in_flight += 1;
                    }
                    return Ok(Some(Job {
                        pipeline: Arc::clone(&self.pipeline),
                        inputs,
                        globals: Map::new(),
                        sample: None,
                        tag: (number, chunk),
                    }));
                }
                Err(failure) => {
                    match self.open.get_mut(&number) {
                        // Ended once its runs in flight are back.
                        Some(open) if open.in_flight > 0 => {
                            open.failed.get_or_insert(GroupFailure::Unbound(failure));
                        }
                        _ => self.write_group(number, None, Some(&failure))?,
                    }
                }
            }
        }
        Ok(None)
    }

    async fn finished(
        &mut self,
        (number, chunk): ChunkTag,
        record: RunRecord,
    ) -> Result<(), Failure> {
        if record.status == RunStatus::Cancelled {
            // Abandoned, not written: a resume runs the group again, from its kept chunks.
            self.stop = true;
            return Ok(());
        }
        self.tally.spend(&record);
        self.runs += 1;
        let Some(open) = self.open.get_mut(&number) else {
            return Ok(());
        };
        open.in_flight -= 1;
        open.spent
            .add(record.usage, record.cost, record.model_calls);
        if record.status != RunStatus::Complete || open.failed.is_some() {
            open.failed
                .get_or_insert(GroupFailure::Run(Box::new(record)));
            return match open.failed.take_if(|_| open.in_flight == 0) {
                Some(GroupFailure::Run(record)) => self.write_group(number, Some(&record), None),
                Some(GroupFailure::Unbound(failure)) => {
                    self.write_group(number, None, Some(&failure))
                }
                None => Ok(()),
            };
        }
        if open.fold.is_last(chunk.level) {
            return self.write_group(number, Some(&record), None);
        }
        let output = record.output.clone().unwrap_or(Value::Null);
        if let Some(log) = &mut self.log {
            log.keep(&SavedChunk {
                group: self.spill.groups[number].id.clone(),
                level: chunk.level,
                chunk: chunk.index,
                output: output.clone(),
                usage: record.usage,
                cost: record.cost.map(Cost::amount),
                model_calls: record.model_calls,
            })?;
        }
        open.fold.finish(chunk, output);
        Ok(())
    }

    fn refills(&self) -> bool {
        true
    }
}

/// The map output a plan's `reduce:` reads: `OUT.map.jsonl` beside the reduce's output `OUT`.
pub fn map_output(out: &std::path::Path) -> std::path::PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(".map.jsonl");
    std::path::PathBuf::from(name)
}

/// A plan with `reduce:` over a batch: the map (`mapper`, one run per row, written in input order
/// to [`map_output`] of the reduce's output), then the reduce of its lines (`reduce`) — one resume
/// (each half resumes its own output) and one summary (the reduce's, with the map's inside). The
/// reduce runs once the map has run every row (not when it was stopped, or left rows that may
/// pass on a resume); failed rows' lines reach it with their `status`.
pub async fn map_then_reduce(
    session: &Session,
    mapper: Arc<Pipeline>,
    map_plan_sha256: String,
    reduce: Arc<Pipeline>,
    options: GroupOptions,
    progress: &dyn Fn(&Progress),
) -> Result<Summary, Failure> {
    let Some(out) = options.batch.out.clone() else {
        return Err(Failure::new(
            FailureCode::ConfigInvalidInput,
            "a plan with `reduce:` keeps its map's lines beside the reduce's output: give --out",
        )
        .with_help("e.g. --out products.jsonl (the map's lines go to products.jsonl.map.jsonl)"));
    };
    check_reduce_inputs(&reduce)?;
    let map_out = map_output(&out);
    let map_options = BatchOptions {
        out: Some(map_out.clone()),
        ordered: true,
        ..options.batch.clone()
    };
    let mapped = map::run(session, mapper, map_options, map_plan_sha256, progress).await?;
    if matches!(mapped.end, End::Preempted | End::Retry) {
        return Ok(mapped);
    }
    let options = GroupOptions {
        batch: BatchOptions {
            input: map_out.display().to_string(),
            id_column: None,
            map: Vec::new(),
            ..options.batch
        },
        ..options
    };
    let mut summary = run(session, reduce, options, progress).await?;
    if summary.end == End::Complete {
        summary.end = mapped.end;
    }
    summary.map = Some(Box::new(mapped));
    Ok(summary)
}
