//! The executor: runs a pipeline's steps in dependency order, concurrently where the graph allows.
//! Only the [`Runner`](super::Runner) calls it: every run, nested or not, starts there.
//!
//! Every step whose dependencies are done is started, up to `max_parallel` at once (ready steps
//! start in plan order), as a task of its own ([`attempt`](super::attempt): `when`, timeouts,
//! retries). The first step that fails for good stops the scheduling of new steps (the ones in
//! flight finish), unless it may be continued past (`on_error: continue`: its output is null, its
//! error readable by later steps). A failed check with `feedback` sends the run back to an
//! upstream model step instead ([`schedule`](super::schedule)). A cancellation request aborts
//! the steps in flight, each still ending with a `cancelled` step_end event; a step whose handler
//! panics fails on its own (`ORCHESTRATION_STEP_PANICKED`) and the run ends as usual. Either way
//! the record keeps every completed step's output, and every earlier run of a step.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio::task::{JoinError, JoinSet};

use super::attempt::{Finished, StepTask};
use super::emit::Events;
use super::ledger::{RunLedger, StepLedger};
use super::pipeline::{NestedRuns, Pipeline, Rendered, StepContext};
use super::record::{Lifecycle, RunRecord, RunStatus, StepRecord, StepStatus};
use super::schedule::Schedule;
use super::scope::{RunScope, final_output};
use crate::core::step_clock::StepClock;
use crate::core::{Cost, Failure, FailureCategory, FailureCode, Timestamp, TokenUsage};

/// How to run a pipeline.
#[derive(Clone)]
pub(super) struct RunOptions {
    /// Most steps running at once (at least 1).
    pub max_parallel: usize,
    /// Flips to true to cancel the run.
    pub cancel: watch::Receiver<bool>,
    /// Run only these steps (for `render`: the target's upstream steps); None runs all.
    pub only: Option<BTreeSet<usize>>,
    /// More names every template sees: a batch's `row`, a chat's `history` (empty by default).
    pub globals: Map<String, Value>,
    /// Which repeat of the same run this is (see [`super::RunRequest::sample`]).
    pub sample: Option<u32>,
}

impl RunOptions {
    /// Options with the given parallelism, cancelled by `cancel`.
    pub fn new(max_parallel: usize, cancel: watch::Receiver<bool>) -> Self {
        RunOptions {
            max_parallel: max_parallel.max(1),
            cancel,
            only: None,
            globals: Map::from_iter([("history".to_string(), Value::Array(Vec::new()))]),
            sample: None,
        }
    }
}

/// The run an execution belongs to: where its events go, what it spends, and what starts the
/// runs nested in its steps.
pub(super) struct RunHandle {
    pub events: Events,
    pub ledger: Arc<RunLedger>,
    pub nesting: Arc<dyn NestedRuns>,
}

/// Runs `pipeline` with `inputs` (already checked against the plan's declarations).
pub(super) async fn execute(
    pipeline: &Pipeline,
    inputs: Value,
    mut options: RunOptions,
    run: &RunHandle,
) -> RunRecord {
    let started = Instant::now();
    run.events.lifecycle(Lifecycle::Execute);
    let globals = std::mem::take(&mut options.globals);
    let mut cancel = options.cancel.clone();
    let mut execution = Execution::new(pipeline, &inputs, globals, options, run);
    execution.cancelled = *cancel.borrow();
    let mut cancel_closed = false;
    loop {
        execution.start_ready();
        if execution.in_flight.is_empty() {
            break;
        }
        tokio::select! {
            joined = execution.running.join_next() => {
                let Some(joined) = joined else { break };
                execution.finished(joined);
            }
            changed = cancel.changed(), if !execution.cancelled && !cancel_closed => {
                match changed {
                    // The sender is gone: nothing can cancel this run any more.
                    Err(_) => cancel_closed = true,
                    Ok(()) if *cancel.borrow() => execution.cancel().await,
                    Ok(()) => {}
                }
            }
        }
    }
    execution.into_record(started)
}

/// One run's steps as they go: what is ready, running and done, and each step's record.
struct Execution<'r> {
    pipeline: &'r Pipeline,
    run: &'r RunHandle,
    options: RunOptions,
    scope: RunScope,
    records: Vec<StepRecord>,
    /// Kept here, not in the step's task, so a step cancelled mid-call still shows what it spent.
    ledgers: Vec<Arc<StepLedger>>,
    schedule: Schedule,
    ready: BTreeSet<usize>,
    running: JoinSet<Finished>,
    in_flight: BTreeSet<usize>,
    /// For each step in flight: when its task started, and the attempts its ledger counted by
    /// then (a step cancelled mid-flight is recorded with what it ran).
    started: HashMap<usize, (Instant, u32)>,
    /// Which step each task runs (a panicked task reports only its id).
    task_steps: HashMap<tokio::task::Id, usize>,
    /// The failure that stops the run.
    failure: Option<Failure>,
    cancelled: bool,
}

impl<'r> Execution<'r> {
    fn new(
        pipeline: &'r Pipeline,
        inputs: &Value,
        globals: Map<String, Value>,
        options: RunOptions,
        run: &'r RunHandle,
    ) -> Self {
        let schedule = Schedule::new(pipeline);
        let count = pipeline.steps.len();
        let ready = (0..count)
            .filter(|&i| schedule.can_start(i) && selected(&options, i))
            .collect();
        Execution {
            pipeline,
            run,
            scope: RunScope::new(pipeline, inputs, globals),
            records: pipeline
                .steps
                .iter()
                .map(|s| StepRecord::not_run(&s.name, s.kind))
                .collect(),
            ledgers: (0..count)
                .map(|_| Arc::new(StepLedger::new(Arc::clone(&run.ledger))))
                .collect(),
            options,
            schedule,
            ready,
            running: JoinSet::new(),
            in_flight: BTreeSet::new(),
            started: HashMap::new(),
            task_steps: HashMap::new(),
            failure: None,
            cancelled: false,
        }
    }

    /// Starts ready steps while there is room, no failure stopped the run and it is not
    /// cancelled.
    fn start_ready(&mut self) {
        while self.failure.is_none()
            && !self.cancelled
            && self.in_flight.len() < self.options.max_parallel
        {
            let Some(index) = self.ready.pop_first() else {
                break;
            };
            let step = &self.pipeline.steps[index];
            let ctx = StepContext {
                scope: self.scope.for_step(self.pipeline, index, &self.records),
                templates: Arc::clone(&self.pipeline.templates),
                events: self.run.events.clone(),
                step: step.name.clone(),
                span: self.run.events.run_span(),
                ledger: Arc::clone(&self.ledgers[index]),
                feedback: self.schedule.feedback[index].clone(),
                nesting: Arc::clone(&self.run.nesting),
                sample: self.options.sample,
                clock: StepClock::default(),
            };
            let task = StepTask::new(index, step, self.pipeline.step_timeout);
            self.in_flight.insert(index);
            let attempts_before = self.ledgers[index].attempts();
            self.started
                .insert(index, (Instant::now(), attempts_before));
            let handle = self.running.spawn(task.run(ctx));
            self.task_steps.insert(handle.id(), index);
        }
    }

    /// Records a step's end, and decides what follows: the steps it releases, a feedback
    /// loop, or the end of scheduling.
    fn finished(&mut self, joined: Result<Finished, JoinError>) {
        let finished = joined.unwrap_or_else(|error| {
            let index = self.task_steps.get(&error.id()).copied().unwrap_or(0);
            Finished::panicked(index, error)
        });
        let index = finished.index;
        self.in_flight.remove(&index);
        self.started.remove(&index);
        let record = &mut self.records[index];
        record.status = finished.status;
        record.attempts = finished.attempts;
        record.ended_after(finished.duration);
        // Every call's tokens, a failed attempt's and a failed step's too.
        record.usage = self.ledgers[index].take_usage();
        match finished.result {
            Ok(output) => {
                record.output = Some(output.output);
                record.detail = output.detail;
            }
            Err(error) => {
                record.error = Some(error.clone());
                if !self.failed_step_goes_on(index, error) {
                    return;
                }
            }
        }
        self.schedule.done[index] = true;
        for &next in &self.schedule.releases[index] {
            if self.records[next].status == StepStatus::NotRun
                && self.schedule.can_start(next)
                && selected(&self.options, next)
            {
                self.ready.insert(next);
            }
        }
    }

    /// Whether the steps after failed step `index` may start (`on_error: continue`); otherwise
    /// its check sends the run back (feedback), or the run stops at it.
    fn failed_step_goes_on(&mut self, index: usize, error: Failure) -> bool {
        if self.failure.is_some() || self.cancelled {
            return false;
        }
        let step = &self.pipeline.steps[index];
        self.schedule.failures[index] += 1;
        match step.feedback {
            Some(back)
                if error.category() == FailureCategory::Validation
                    && self.schedule.failures[index] < back.max_attempts =>
            {
                let events = &self.run.events;
                let (pipeline, records) = (self.pipeline, &mut self.records);
                self.schedule
                    .send_back(pipeline, events, index, back, &error, records);
                if self.schedule.can_start(back.step) {
                    self.ready.insert(back.step);
                }
                false
            }
            _ if step.continue_on_error => {
                self.records[index].continued = true;
                true
            }
            _ => {
                self.failure = Some(error);
                false
            }
        }
    }

    /// Stops the steps in flight: each aborted attempt records its own cancelled `step_end` as
    /// it is dropped, and each step's record says what ran — its attempts, when it started and
    /// for how long.
    async fn cancel(&mut self) {
        self.cancelled = true;
        self.running.abort_all();
        for &index in &self.in_flight {
            let record = &mut self.records[index];
            record.status = StepStatus::Cancelled;
            record.error = Some(Failure::new(
                FailureCode::CancelledSignal,
                "cancelled while running",
            ));
            if let Some((started, attempts_before)) = self.started.remove(&index) {
                record.attempts = self.ledgers[index]
                    .attempts()
                    .saturating_sub(attempts_before);
                record.ended_after(started.elapsed());
            }
        }
        self.in_flight.clear();
        while self.running.join_next().await.is_some() {}
    }

    /// The run's record: every step's, its totals, and how it ended (recorded as its end state).
    fn into_record(mut self, started: Instant) -> RunRecord {
        let events = &self.run.events;
        mark_not_run(self.pipeline, &mut self.records, self.failure.is_some());
        for (record, ledger) in self.records.iter_mut().zip(&self.ledgers) {
            // A step cancelled mid-call still shows what its calls used.
            record.usage += ledger.take_usage();
            record.cost = ledger.cost();
            record.vote = ledger.last_vote();
            record.cached_calls = ledger.cached_calls();
        }
        let usage = self
            .records
            .iter()
            .fold(TokenUsage::default(), |mut total, r| {
                total += r.total_usage();
                total
            });
        let cost = self
            .records
            .iter()
            .fold(None, |total, r| Cost::sum(total, r.cost));
        let (status, error, output) = if self.cancelled {
            let error = Failure::new(FailureCode::CancelledSignal, "the run was cancelled");
            (RunStatus::Cancelled, Some(error), None)
        } else if let Some(error) = self.failure {
            (RunStatus::Error, Some(error), None)
        } else if self.options.only.is_some() {
            // A partial run (for `render`) has no result of its own.
            (RunStatus::Complete, None, None)
        } else {
            events.lifecycle(Lifecycle::Validate);
            match final_output(self.pipeline, &self.scope, &self.records) {
                Ok(output) => (RunStatus::Complete, None, Some(output)),
                Err(error) => (RunStatus::Error, Some(error), None),
            }
        };
        events.lifecycle(match status {
            RunStatus::Complete => Lifecycle::Complete,
            RunStatus::Error => Lifecycle::Error,
            RunStatus::Cancelled => Lifecycle::Cancelled,
        });
        let (took, ended_at) = (started.elapsed(), Timestamp::now());
        RunRecord {
            run_id: events.run_id().to_string(),
            request_id: None,
            trace_id: events.trace_id(),
            plan: self.pipeline.name.clone(),
            status,
            output,
            steps: self.records,
            usage,
            cost,
            model_calls: self.run.ledger.model_calls(),
            cache: self.run.ledger.cache_tally(),
            rate_limit: self.run.ledger.rate_limit(),
            duration_ms: took.as_secs_f64() * 1000.0,
            started_at: ended_at.before(took),
            ended_at,
            error,
        }
    }
}

/// Whether step `index` is among those the run runs (all, unless `only` picks some).
fn selected(options: &RunOptions, index: usize) -> bool {
    options
        .only
        .as_ref()
        .is_none_or(|only| only.contains(&index))
}

/// Runs the steps upstream of `target`, then returns what `target` would send, without running it.
pub(super) async fn render_step(
    pipeline: &Pipeline,
    target: usize,
    inputs: Value,
    mut options: RunOptions,
    run: &RunHandle,
) -> Result<Rendered, Failure> {
    let step = pipeline.steps.get(target).ok_or_else(|| {
        Failure::new(
            FailureCode::ConfigInvalidInput,
            format!("no step number {target}"),
        )
    })?;
    options.only = Some(step.upstream.iter().copied().collect());
    let (globals, sample) = (options.globals.clone(), options.sample);
    let record = execute(pipeline, inputs.clone(), options, run).await;
    if let Some(error) = record.error {
        return Err(error);
    }
    let ctx = StepContext {
        scope: RunScope::new(pipeline, &inputs, globals).for_step(pipeline, target, &record.steps),
        templates: Arc::clone(&pipeline.templates),
        events: run.events.clone(),
        step: step.name.clone(),
        span: run.events.run_span(),
        ledger: Arc::new(StepLedger::new(Arc::clone(&run.ledger))),
        feedback: Vec::new(),
        nesting: Arc::clone(&run.nesting),
        sample,
        clock: StepClock::default(),
    };
    step.handler.render(&ctx)
}

/// Steps that never started: blocked by a failed dependency, or simply never reached.
fn mark_not_run(pipeline: &Pipeline, records: &mut [StepRecord], after_failure: bool) {
    for index in 0..records.len() {
        if records[index].status != StepStatus::NotRun {
            continue;
        }
        let blocked_by = pipeline.steps[index].upstream.iter().find(|&&u| {
            let stopped = &records[u];
            stopped.status == StepStatus::Cancelled
                || (stopped.status == StepStatus::Failed && !stopped.continued)
        });
        records[index].error = Some(match blocked_by {
            Some(&u) => Failure::new(
                FailureCode::OrchestrationDependencyFailed,
                format!(
                    "not run: step `{}` it depends on did not complete",
                    records[u].name
                ),
            ),
            None if after_failure => Failure::new(
                FailureCode::CancelledNotRun,
                "not run: the run stopped at an earlier failure",
            ),
            None => Failure::new(
                FailureCode::CancelledNotRun,
                "not run: the run was cancelled",
            ),
        });
    }
}

#[cfg(test)]
mod tests;
