//! The executor: runs a pipeline's steps in dependency order, concurrently where the graph allows.
//!
//! Every step whose dependencies are done is started, up to `max_parallel` at once (ready steps
//! start in plan order). A step's attempt is bounded by its timeout; a failed attempt is retried
//! when the retry policy and the failure's taxonomy allow it. The first step that fails for good
//! stops the scheduling of new steps (the ones in flight finish), unless it may be continued past
//! (`on_error: continue`: its output is null, its error readable by later steps). A failed check
//! with `feedback` sends the run back to an upstream model step instead: that step runs again with
//! what was wrong appended to its messages, then the steps between, then the check. A cancellation
//! request aborts the steps in flight, each still ending with a `cancelled` step_end event. Either
//! way the record keeps every completed step's output, and every earlier run of a step.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::events::{EventData, Events, OnDrop, SkipReason, StepOutcome};
use super::pipeline::{Feedback, Pipeline, Rendered, StepContext, StepLedger, StepOutput};
use super::record::{Lifecycle, RunRecord, RunStatus, StepRecord, StepStatus};
use crate::core::{Cost, Failure, FailureCategory, FailureCode, Message, TokenUsage, step_clock};

/// How to run a pipeline.
#[derive(Clone)]
pub struct RunOptions {
    /// Most steps running at once (at least 1).
    pub max_parallel: usize,
    /// Flips to true to cancel the run.
    pub cancel: watch::Receiver<bool>,
    /// Run only these steps (for `render`: the target's upstream steps); None runs all.
    pub only: Option<BTreeSet<usize>>,
    /// More names every template sees: a batch's `row`, a chat's `history` (empty by default).
    pub globals: Map<String, Value>,
}

impl RunOptions {
    /// Options with no cancellation source and the given parallelism.
    pub fn new(max_parallel: usize) -> Self {
        let (_, cancel) = watch::channel(false);
        RunOptions {
            max_parallel: max_parallel.max(1),
            cancel,
            only: None,
            globals: Map::from_iter([("history".to_string(), Value::Array(Vec::new()))]),
        }
    }
}

/// What one step task reports back.
struct Finished {
    index: usize,
    status: StepStatus,
    attempts: u32,
    duration: Duration,
    result: Result<StepOutput, Failure>,
}

/// Which steps wait for which, which are done, and what feedback checks have given: the
/// executor's view of the graph as the run goes (a check's feedback starts part of it over).
struct Schedule {
    /// Per step, the steps that must be done before it starts: its `needs`, and for a step
    /// downstream of a feedback target but outside the loop, the check (so it reads the
    /// target's answer only once the check has passed it).
    waits_for: Vec<Vec<usize>>,
    /// The reverse of `waits_for`.
    releases: Vec<Vec<usize>>,
    /// Whether the step is done in a way that lets the steps waiting for it start (it
    /// succeeded, was skipped, or failed under `on_error: continue`).
    done: Vec<bool>,
    /// Per step, the feedback messages it runs with (its earlier answers and what was wrong).
    feedback: Vec<Vec<Message>>,
    /// Per step, how many times it has failed (for a check: how many checks it has made).
    failures: Vec<u32>,
}

impl Schedule {
    fn new(pipeline: &Pipeline) -> Self {
        let count = pipeline.steps.len();
        let mut waits_for: Vec<Vec<usize>> =
            pipeline.steps.iter().map(|s| s.needs.clone()).collect();
        for (check, step) in pipeline.steps.iter().enumerate() {
            let Some(feedback) = step.feedback else {
                continue;
            };
            for (index, other) in pipeline.steps.iter().enumerate() {
                let beside_the_loop = other.upstream.contains(&feedback.step)
                    && index != check
                    && !step.upstream.contains(&index)
                    && !other.upstream.contains(&check);
                if beside_the_loop {
                    waits_for[index].push(check);
                }
            }
        }
        let mut releases = vec![Vec::new(); count];
        for (index, waits) in waits_for.iter().enumerate() {
            for &first in waits {
                releases[first].push(index);
            }
        }
        Schedule {
            waits_for,
            releases,
            done: vec![false; count],
            feedback: vec![Vec::new(); count],
            failures: vec![0; count],
        }
    }

    fn can_start(&self, index: usize) -> bool {
        self.waits_for[index].iter().all(|&w| self.done[w])
    }

    /// A failed check sends the run back to its feedback target: VALIDATE, then EXECUTE again;
    /// the target's earlier answer and what was wrong with it join its feedback messages, and
    /// every step of the loop (the target, the steps between, the check) starts over, its run so
    /// far kept in the record as an earlier run.
    fn send_back(
        &mut self,
        pipeline: &Pipeline,
        events: &Events,
        check: usize,
        back: Feedback,
        error: &Failure,
        records: &mut [StepRecord],
    ) {
        let target = back.step;
        events.lifecycle(Lifecycle::Validate);
        events.emit(
            Some(&pipeline.steps[check].name),
            events.new_span(),
            Some(events.run_span()),
            EventData::StepFeedback {
                to: pipeline.steps[target].name.clone(),
                next_attempt: self.failures[check] + 1,
                max_attempts: back.max_attempts,
                code: error.code,
            },
        );
        events.lifecycle(Lifecycle::Execute);
        if let Some(answer) = &records[target].output {
            let text = match answer {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            self.feedback[target].push(Message::assistant(text));
        }
        self.feedback[target].push(Message::user(format!(
            "Your answer did not pass the checks: {}. Answer again, and fix this.",
            error.message
        )));
        let in_loop = |i: usize| {
            i == target
                || i == check
                || (pipeline.steps[i].upstream.contains(&target)
                    && pipeline.steps[check].upstream.contains(&i))
        };
        for index in (0..records.len()).filter(|&i| in_loop(i)) {
            records[index].start_over();
            self.done[index] = false;
        }
    }
}

/// Runs `pipeline` with `inputs` (already checked against the plan's declarations).
pub async fn execute(
    pipeline: &Pipeline,
    inputs: Value,
    mut options: RunOptions,
    events: &Events,
) -> RunRecord {
    let started = Instant::now();
    let run_span = events.run_span();
    events.lifecycle(Lifecycle::Execute);
    let count = pipeline.steps.len();
    let mut records: Vec<StepRecord> = pipeline
        .steps
        .iter()
        .map(|s| StepRecord::not_run(&s.name, s.kind))
        .collect();
    // Kept here, not in the step's task, so a step cancelled mid-call still shows what it spent.
    let ledgers: Vec<Arc<StepLedger>> = (0..count)
        .map(|_| Arc::new(StepLedger::new(pipeline.max_cost)))
        .collect();
    let mut schedule = Schedule::new(pipeline);
    let selected = |i: &usize| options.only.as_ref().is_none_or(|only| only.contains(i));
    let mut ready: BTreeSet<usize> = (0..count)
        .filter(|&i| schedule.can_start(i))
        .filter(selected)
        .collect();
    let mut running: JoinSet<Finished> = JoinSet::new();
    let mut in_flight: BTreeSet<usize> = BTreeSet::new();
    let mut task_steps: std::collections::HashMap<tokio::task::Id, usize> =
        std::collections::HashMap::new();
    let mut failure: Option<Failure> = None;
    let mut cancel = options.cancel.clone();
    let mut cancelled = *cancel.borrow();
    let mut cancel_closed = false;
    let inputs = Arc::new(inputs);
    let run_scope = RunScope::new(pipeline, &inputs, std::mem::take(&mut options.globals));

    loop {
        while failure.is_none() && !cancelled && in_flight.len() < options.max_parallel {
            let Some(index) = ready.pop_first() else {
                break;
            };
            let step = &pipeline.steps[index];
            let ctx = StepContext {
                scope: run_scope.for_step(pipeline, index, &records),
                templates: Arc::clone(&pipeline.templates),
                events: events.clone(),
                step: step.name.clone(),
                span: run_span,
                ledger: Arc::clone(&ledgers[index]),
                feedback: schedule.feedback[index].clone(),
            };
            let timeout = step.timeout.or(pipeline.step_timeout);
            let task = StepTask {
                index,
                standby_for: step.standby_for.clone(),
                when: step.when.clone(),
                retry: step.retry,
                timeout,
                handler: Arc::clone(&step.handler),
            };
            in_flight.insert(index);
            let handle = running.spawn(task.run(ctx));
            task_steps.insert(handle.id(), index);
        }
        if in_flight.is_empty() {
            break;
        }
        tokio::select! {
            joined = running.join_next() => {
                let Some(joined) = joined else { break };
                let finished = match joined {
                    Ok(finished) => finished,
                    // A handler panicked: a bug, but the run must still end with a record.
                    Err(join_error) => {
                        let index = task_steps.get(&join_error.id()).copied().unwrap_or(0);
                        Finished {
                            index,
                            status: StepStatus::Failed,
                            attempts: 1,
                            duration: Duration::ZERO,
                            result: Err(Failure::new(FailureCode::InferenceEngineError, format!("step task ended abnormally: {join_error}")).retryable(false)),
                        }
                    }
                };
                let index = finished.index;
                in_flight.remove(&index);
                let step = &pipeline.steps[index];
                let record = &mut records[index];
                record.status = finished.status;
                record.attempts = finished.attempts;
                record.duration_ms = finished.duration.as_secs_f64() * 1000.0;
                match finished.result {
                    Ok(output) => {
                        record.output = Some(output.output);
                        record.usage = output.usage;
                        record.detail = output.detail;
                    }
                    Err(error) => {
                        record.error = Some(error.clone());
                        if failure.is_some() || cancelled {
                            continue;
                        }
                        schedule.failures[index] += 1;
                        match step.feedback {
                            Some(back) if error.category() == FailureCategory::Validation
                                && schedule.failures[index] < back.max_attempts =>
                            {
                                schedule.send_back(pipeline, events, index, back, &error, &mut records);
                                if schedule.can_start(back.step) {
                                    ready.insert(back.step);
                                }
                                continue;
                            }
                            _ if step.continue_on_error => record.continued = true,
                            _ => {
                                failure = Some(error);
                                continue;
                            }
                        }
                    }
                }
                schedule.done[index] = true;
                for &next in &schedule.releases[index] {
                    if records[next].status == StepStatus::NotRun
                        && schedule.can_start(next)
                        && selected(&next)
                    {
                        ready.insert(next);
                    }
                }
            }
            changed = cancel.changed(), if !cancelled && !cancel_closed => {
                if changed.is_err() {
                    // The sender is gone: nothing can cancel this run any more.
                    cancel_closed = true;
                    continue;
                }
                if !*cancel.borrow() {
                    continue;
                }
                cancelled = true;
                // Each aborted attempt records its own cancelled `step_end` as it is dropped.
                running.abort_all();
                for &index in &in_flight {
                    records[index].status = StepStatus::Cancelled;
                    records[index].error = Some(Failure::new(FailureCode::CancelledSignal, "cancelled while running"));
                }
                in_flight.clear();
                while running.join_next().await.is_some() {}
            }
        }
    }

    mark_not_run(pipeline, &mut records, failure.is_some());
    for (record, ledger) in records.iter_mut().zip(&ledgers) {
        record.cost = ledger.cost();
        record.vote = ledger.last_vote();
        record.cached_calls = ledger.cached_calls();
    }
    let usage = records.iter().fold(TokenUsage::default(), |mut total, r| {
        total += r.total_usage();
        total
    });
    let cost = records
        .iter()
        .fold(None, |total, r| Cost::sum(total, r.cost));
    let (status, error, output) = if cancelled {
        let error = Failure::new(FailureCode::CancelledSignal, "the run was cancelled");
        (RunStatus::Cancelled, Some(error), None)
    } else if let Some(error) = failure {
        (RunStatus::Error, Some(error), None)
    } else if options.only.is_some() {
        // A partial run (for `render`) has no result of its own.
        (RunStatus::Complete, None, None)
    } else {
        events.lifecycle(Lifecycle::Validate);
        match final_output(pipeline, &inputs, &records) {
            Ok(output) => (RunStatus::Complete, None, Some(output)),
            Err(error) => (RunStatus::Error, Some(error), None),
        }
    };
    let end_state = match status {
        RunStatus::Complete => Lifecycle::Complete,
        RunStatus::Error => Lifecycle::Error,
        RunStatus::Cancelled => Lifecycle::Cancelled,
    };
    events.lifecycle(end_state);
    RunRecord {
        run_id: events.run_id().to_string(),
        plan: pipeline.name.clone(),
        status,
        output,
        steps: records,
        usage,
        cost,
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        error,
    }
}

/// Runs the steps upstream of `target`, then returns what `target` would send, without running it.
pub async fn render_step(
    pipeline: &Pipeline,
    target: usize,
    inputs: Value,
    mut options: RunOptions,
    events: &Events,
) -> Result<Rendered, Failure> {
    let step = pipeline.steps.get(target).ok_or_else(|| {
        Failure::new(
            FailureCode::ConfigInvalidInput,
            format!("no step number {target}"),
        )
    })?;
    options.only = Some(step.upstream.iter().copied().collect());
    let globals = options.globals.clone();
    let record = execute(pipeline, inputs.clone(), options, events).await;
    if let Some(error) = record.error {
        return Err(error);
    }
    let ctx = StepContext {
        scope: RunScope::new(pipeline, &inputs, globals).for_step(pipeline, target, &record.steps),
        templates: Arc::clone(&pipeline.templates),
        events: events.clone(),
        step: step.name.clone(),
        span: events.run_span(),
        ledger: Arc::default(),
        feedback: Vec::new(),
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

/// What the template context of every step of a run shares: inputs, vars and the run's globals,
/// in the order a step's context has them, `steps` holding its place. Built once per run; a
/// step's context is a copy with its own upstream steps put in.
struct RunScope {
    base: Map<String, Value>,
    /// Whether a global named `steps` took the place of the steps (it then stays).
    steps_from_globals: bool,
}

impl RunScope {
    fn new(pipeline: &Pipeline, inputs: &Value, globals: Map<String, Value>) -> Self {
        let steps_from_globals = globals.contains_key("steps");
        let mut base = Map::new();
        base.insert("inputs".into(), inputs.clone());
        base.insert("vars".into(), pipeline.vars.clone());
        base.insert("steps".into(), Value::Object(Map::new()));
        base.extend(globals);
        RunScope {
            base,
            steps_from_globals,
        }
    }

    /// The template context of a step: inputs, vars, its upstream steps, the run's globals, and
    /// `input` when it has predecessors (one predecessor: its output; several: an object of
    /// their outputs by name).
    fn for_step(&self, pipeline: &Pipeline, index: usize, records: &[StepRecord]) -> Value {
        let step = &pipeline.steps[index];
        let mut scope = self.base.clone();
        if !self.steps_from_globals {
            let mut steps = Map::new();
            for &u in &step.reads {
                steps.insert(records[u].name.clone(), step_view(&records[u]));
            }
            scope.insert("steps".into(), Value::Object(steps));
        }
        match step.needs.as_slice() {
            [] => {}
            [only] => {
                scope.insert(
                    "input".into(),
                    records[*only].output.clone().unwrap_or(Value::Null),
                );
            }
            many => {
                let joined: Map<String, Value> = many
                    .iter()
                    .map(|&n| {
                        (
                            records[n].name.clone(),
                            records[n].output.clone().unwrap_or(Value::Null),
                        )
                    })
                    .collect();
                scope.insert("input".into(), Value::Object(joined));
            }
        }
        Value::Object(scope)
    }
}

/// What templates see of a finished step: its output, usage, and error (null unless it failed
/// and the run went on past it).
fn step_view(record: &StepRecord) -> Value {
    json!({
        "output": record.output.clone().unwrap_or(Value::Null),
        "usage": record.usage,
        "error": record.error,
    })
}

/// The run's result: the output template rendered over every step, or the last step's output.
fn final_output(
    pipeline: &Pipeline,
    inputs: &Value,
    records: &[StepRecord],
) -> Result<Value, Failure> {
    match &pipeline.output {
        Some(template) => {
            let steps: Map<String, Value> = records
                .iter()
                .map(|r| (r.name.clone(), step_view(r)))
                .collect();
            let scope = json!({ "inputs": inputs, "vars": pipeline.vars, "steps": steps });
            pipeline
                .templates
                .render_str(template, &scope)
                .map(Value::String)
        }
        None => Ok(records
            .last()
            .and_then(|r| r.output.clone())
            .unwrap_or(Value::Null)),
    }
}

/// One step's run: `when`, attempts, timeouts, retries, and its events.
struct StepTask {
    index: usize,
    standby_for: Option<String>,
    when: Option<String>,
    retry: crate::validate::RetryPolicy,
    timeout: Option<Duration>,
    handler: Arc<dyn super::pipeline::StepHandler>,
}

impl StepTask {
    async fn run(self, mut ctx: StepContext) -> Finished {
        let started = Instant::now();
        let events = ctx.events.clone();
        let step = ctx.step.clone();
        let parent = ctx.span;
        let finish = |status, attempts, result| Finished {
            index: self.index,
            status,
            attempts,
            duration: started.elapsed(),
            result,
        };
        let skip = |why: SkipReason| {
            events.emit(
                Some(&step),
                events.new_span(),
                Some(parent),
                EventData::StepSkipped(why),
            );
            finish(StepStatus::Skipped, 0, Ok(StepOutput::default()))
        };
        if let Some(owner) = &self.standby_for {
            return skip(SkipReason::StandbyFor(owner.clone()));
        }
        if let Some(when) = &self.when {
            match ctx.templates.is_true(when, &ctx.scope) {
                Ok(true) => {}
                Ok(false) => return skip(SkipReason::When(when.clone())),
                Err(error) => return finish(StepStatus::Failed, 0, Err(error)),
            }
        }
        let mut attempt = 1;
        loop {
            let span = events.new_span();
            ctx.span = span;
            events.emit(
                Some(&step),
                span,
                Some(parent),
                EventData::StepStart { attempt },
            );
            let attempt_started = Instant::now();
            let cancelled = OnDrop::new(|| {
                events.emit(
                    Some(&step),
                    span,
                    Some(parent),
                    EventData::StepEnd {
                        outcome: StepOutcome::Cancelled,
                        attempt,
                        duration_ms: attempt_started.elapsed().as_secs_f64() * 1000.0,
                    },
                )
            });
            let result = match self.timeout {
                Some(limit) => match step_clock::timeout(limit, self.handler.run(&ctx)).await {
                    Some(result) => result,
                    None => Err(Failure::new(
                        FailureCode::OrchestrationStepTimeout,
                        format!("step `{step}` ran past its timeout of {limit:?}"),
                    )),
                },
                None => self.handler.run(&ctx).await,
            };
            cancelled.disarm();
            let millis = attempt_started.elapsed().as_secs_f64() * 1000.0;
            match result {
                Ok(output) => {
                    let outcome = StepOutcome::Ok {
                        usage: output.usage,
                    };
                    events.emit(
                        Some(&step),
                        span,
                        Some(parent),
                        EventData::StepEnd {
                            outcome,
                            attempt,
                            duration_ms: millis,
                        },
                    );
                    return finish(StepStatus::Ok, attempt, Ok(output));
                }
                Err(failure) => {
                    let outcome = StepOutcome::Failed {
                        error: failure.clone(),
                    };
                    events.emit(
                        Some(&step),
                        span,
                        Some(parent),
                        EventData::StepEnd {
                            outcome,
                            attempt,
                            duration_ms: millis,
                        },
                    );
                    match self.retry.retry_after(&failure, attempt + 1) {
                        Some(delay) => {
                            events.emit(
                                Some(&step),
                                span,
                                Some(parent),
                                EventData::StepRetry {
                                    next_attempt: attempt + 1,
                                    delay_ms: delay.as_millis() as u64,
                                    code: failure.code,
                                },
                            );
                            tokio::time::sleep(delay).await;
                            attempt += 1;
                        }
                        None => return finish(StepStatus::Failed, attempt, Err(failure)),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// The lifecycle states among `events`, in order.
    fn lifecycle_states(events: &[crate::orchestrate::Event]) -> Vec<Lifecycle> {
        events
            .iter()
            .filter_map(|e| match e.data {
                EventData::Lifecycle { state } => Some(state),
                _ => None,
            })
            .collect()
    }

    use indexmap::IndexMap;

    use super::*;
    use crate::orchestrate::pipeline::{StepFuture, StepHandler, StepNode};
    use crate::orchestrate::steps::{PromptSource, Template};
    use crate::prompt::Templates;
    use crate::validate::RetryPolicy;

    /// A handler that sleeps, may fail its first attempts, and records when it ran.
    struct Probe {
        sleep: Duration,
        fail_first: u32,
        failure: FailureCode,
        calls: AtomicU32,
        output: Value,
        log: Arc<Mutex<Vec<(String, tokio::time::Instant, tokio::time::Instant)>>>,
    }

    impl StepHandler for Probe {
        fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
            Box::pin(async move {
                let start = tokio::time::Instant::now();
                tokio::time::sleep(self.sleep).await;
                self.log.lock().expect("log").push((
                    ctx.step.clone(),
                    start,
                    tokio::time::Instant::now(),
                ));
                if self.calls.fetch_add(1, Ordering::SeqCst) < self.fail_first {
                    return Err(Failure::new(self.failure, "probe failure"));
                }
                Ok(StepOutput {
                    output: self.output.clone(),
                    usage: TokenUsage {
                        prompt_tokens: 1,
                        completion_tokens: 2,
                    },
                    detail: None,
                })
            })
        }

        fn render(&self, _: &StepContext) -> Result<Rendered, Failure> {
            Ok(Rendered::Text(String::new()))
        }
    }

    type Log = Arc<Mutex<Vec<(String, tokio::time::Instant, tokio::time::Instant)>>>;

    struct Spec {
        name: &'static str,
        needs: Vec<usize>,
        sleep_ms: u64,
        fail_first: u32,
        failure: FailureCode,
        retry: RetryPolicy,
        timeout: Option<Duration>,
        when: Option<&'static str>,
        continue_on_error: bool,
        feedback: Option<Feedback>,
    }

    fn spec(name: &'static str, needs: &[usize], sleep_ms: u64) -> Spec {
        Spec {
            name,
            needs: needs.to_vec(),
            sleep_ms,
            fail_first: 0,
            failure: FailureCode::ValidationRuleFailed,
            retry: RetryPolicy::default(),
            timeout: None,
            when: None,
            continue_on_error: false,
            feedback: None,
        }
    }

    fn pipeline(specs: Vec<Spec>, log: &Log) -> Pipeline {
        let mut steps: Vec<StepNode> = Vec::new();
        for s in specs {
            let mut upstream: BTreeSet<usize> = s.needs.iter().copied().collect();
            for &n in &s.needs {
                upstream.extend(steps[n].upstream.iter().copied());
            }
            steps.push(StepNode {
                name: s.name.into(),
                kind: "probe",
                needs: s.needs,
                reads: upstream.iter().copied().collect(),
                upstream: upstream.into_iter().collect(),
                when: s.when.map(str::to_string),
                standby_for: None,
                continue_on_error: s.continue_on_error,
                feedback: s.feedback,
                retry: s.retry,
                timeout: s.timeout,
                handler: Arc::new(Probe {
                    sleep: Duration::from_millis(s.sleep_ms),
                    fail_first: s.fail_first,
                    failure: s.failure,
                    calls: AtomicU32::new(0),
                    output: json!(format!("{} done", s.name)),
                    log: Arc::clone(log),
                }),
            });
        }
        Pipeline {
            name: "test".into(),
            steps,
            output: None,
            vars: json!({}),
            templates: Arc::new(Templates::new(None)),
            inputs: IndexMap::new(),
            step_timeout: None,
            max_cost: None,
        }
    }

    fn statuses(record: &RunRecord) -> Vec<(String, StepStatus)> {
        record
            .steps
            .iter()
            .map(|s| (s.name.clone(), s.status))
            .collect()
    }

    #[tokio::test]
    async fn a_chain_passes_each_output_on_as_input() {
        let templates = Arc::new(Templates::new(None));
        let step = |name: &str, text: &str, needs: Vec<usize>, upstream: Vec<usize>| StepNode {
            name: name.into(),
            kind: "template",
            needs,
            reads: upstream.clone(),
            upstream,
            when: None,
            standby_for: None,
            continue_on_error: false,
            feedback: None,
            retry: RetryPolicy::default(),
            timeout: None,
            handler: Arc::new(Template {
                source: PromptSource::Inline(text.into()),
            }),
        };
        let pipeline = Pipeline {
            name: "chain".into(),
            steps: vec![
                step("a", "{{ inputs.word }}", vec![], vec![]),
                step("b", "{{ input }}-b", vec![0], vec![0]),
                step(
                    "c",
                    "{{ input }}-c ({{ steps.a.output }})",
                    vec![1],
                    vec![0, 1],
                ),
            ],
            output: Some("{{ steps.c.output | upper }}".into()),
            vars: json!({}),
            templates,
            inputs: IndexMap::new(),
            step_timeout: None,
            max_cost: None,
        };
        let record = execute(
            &pipeline,
            json!({ "word": "x" }),
            RunOptions::new(4),
            &Events::recording(),
        )
        .await;
        assert_eq!(record.status, RunStatus::Complete, "{:?}", record.error);
        assert_eq!(record.steps[2].output, Some(json!("x-b-c (x)")));
        assert_eq!(record.output, Some(json!("X-B-C (X)")));
    }

    #[tokio::test(start_paused = true)]
    async fn independent_steps_overlap_and_max_parallel_bounds_them() {
        for (max_parallel, expected_ms) in [(4, 300), (1, 400)] {
            let log = Log::default();
            let p = pipeline(
                vec![
                    spec("a", &[], 100),
                    spec("b", &[0], 100),
                    spec("c", &[0], 100),
                    spec("d", &[1, 2], 100),
                ],
                &log,
            );
            let started = tokio::time::Instant::now();
            let record = execute(
                &p,
                json!({}),
                RunOptions::new(max_parallel),
                &Events::recording(),
            )
            .await;
            assert_eq!(record.status, RunStatus::Complete);
            assert_eq!(
                started.elapsed(),
                Duration::from_millis(expected_ms),
                "max_parallel {max_parallel}"
            );
            let log = log.lock().expect("log");
            let window = |name: &str| {
                log.iter()
                    .find(|(n, _, _)| n == name)
                    .map(|(_, s, e)| (*s, *e))
                    .expect("ran")
            };
            let (b_start, b_end) = window("b");
            let (c_start, c_end) = window("c");
            let overlap = b_start < c_end && c_start < b_end;
            assert_eq!(
                overlap,
                max_parallel > 1,
                "b and c overlap only when allowed"
            );
            let (d_start, _) = window("d");
            assert!(d_start >= b_end.max(c_end), "the join waits for both");
        }
    }

    #[tokio::test]
    async fn a_false_when_skips_the_step_and_its_successor_sees_null() {
        let log = Log::default();
        let mut skipped = spec("b", &[0], 0);
        skipped.when = Some("inputs.enabled");
        let p = pipeline(vec![spec("a", &[], 0), skipped, spec("c", &[1], 0)], &log);
        let record = execute(
            &p,
            json!({ "enabled": false }),
            RunOptions::new(2),
            &Events::recording(),
        )
        .await;
        assert_eq!(record.status, RunStatus::Complete);
        assert_eq!(record.steps[1].status, StepStatus::Skipped);
        assert_eq!(record.steps[2].status, StepStatus::Ok);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_follow_the_taxonomy_with_doubling_backoff() {
        let retry = RetryPolicy {
            max_attempts: 3,
            backoff: Duration::from_millis(100),
        };
        // A validation failure twice, then success: three attempts, 100 + 200 ms of backoff.
        let log = Log::default();
        let mut flaky = spec("flaky", &[], 0);
        flaky.fail_first = 2;
        flaky.retry = retry;
        let started = tokio::time::Instant::now();
        let record = execute(
            &pipeline(vec![flaky], &log),
            json!({}),
            RunOptions::new(1),
            &Events::recording(),
        )
        .await;
        assert_eq!(record.status, RunStatus::Complete);
        assert_eq!(record.steps[0].attempts, 3);
        assert_eq!(started.elapsed(), Duration::from_millis(300));
        // A configuration failure is never retried.
        let mut broken = spec("broken", &[], 0);
        broken.fail_first = 5;
        broken.failure = FailureCode::ConfigTemplateError;
        broken.retry = retry;
        let record = execute(
            &pipeline(vec![broken], &log),
            json!({}),
            RunOptions::new(1),
            &Events::recording(),
        )
        .await;
        assert_eq!(record.status, RunStatus::Error);
        assert_eq!(record.steps[0].attempts, 1);
        assert_eq!(
            record.error.map(|e| e.code),
            Some(FailureCode::ConfigTemplateError)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_past_its_timeout_fails_and_is_retried_as_transient() {
        let log = Log::default();
        let mut slow = spec("slow", &[], 10_000);
        slow.timeout = Some(Duration::from_secs(1));
        slow.retry = RetryPolicy {
            max_attempts: 2,
            backoff: Duration::ZERO,
        };
        let started = tokio::time::Instant::now();
        let record = execute(
            &pipeline(vec![slow], &log),
            json!({}),
            RunOptions::new(1),
            &Events::recording(),
        )
        .await;
        assert_eq!(record.status, RunStatus::Error);
        assert_eq!(record.steps[0].attempts, 2);
        assert_eq!(
            record.error.map(|e| e.code),
            Some(FailureCode::OrchestrationStepTimeout)
        );
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn the_pipeline_step_timeout_bounds_steps_that_set_none() {
        let log = Log::default();
        let mut own = spec("own", &[], 3_000);
        own.timeout = Some(Duration::from_secs(5));
        let mut pipeline = pipeline(vec![own, spec("default", &[0], 3_000)], &log);
        pipeline.step_timeout = Some(Duration::from_secs(2));
        let started = tokio::time::Instant::now();
        let record = execute(
            &pipeline,
            json!({}),
            RunOptions::new(1),
            &Events::recording(),
        )
        .await;
        // `own` sets 5 s and finishes in 3; `default` gets the pipeline's 2 s and times out.
        assert_eq!(record.steps[0].status, StepStatus::Ok);
        assert_eq!(record.steps[1].status, StepStatus::Failed);
        assert_eq!(
            record.error.map(|e| e.code),
            Some(FailureCode::OrchestrationStepTimeout)
        );
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_stops_scheduling_but_keeps_what_completed() {
        let log = Log::default();
        let mut failing = spec("b", &[0], 10);
        failing.fail_first = 1;
        failing.failure = FailureCode::ToolExecutionFailed;
        let p = pipeline(
            vec![
                spec("a", &[], 0),
                failing,
                spec("c", &[1], 0),
                spec("slow_branch", &[0], 50),
                spec("after", &[3], 0),
            ],
            &log,
        );
        let record = execute(&p, json!({}), RunOptions::new(4), &Events::recording()).await;
        assert_eq!(record.status, RunStatus::Error);
        assert_eq!(
            statuses(&record),
            vec![
                ("a".into(), StepStatus::Ok),
                ("b".into(), StepStatus::Failed),
                ("c".into(), StepStatus::NotRun),
                ("slow_branch".into(), StepStatus::Ok),
                ("after".into(), StepStatus::NotRun),
            ]
        );
        assert_eq!(record.steps[0].output, Some(json!("a done")));
        assert_eq!(
            record.steps[2].error.as_ref().map(|e| e.code),
            Some(FailureCode::OrchestrationDependencyFailed)
        );
        assert_eq!(
            record.steps[4].error.as_ref().map(|e| e.code),
            Some(FailureCode::CancelledNotRun)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn cancelling_aborts_steps_in_flight_and_keeps_finished_ones() {
        let log = Log::default();
        let p = pipeline(
            vec![
                spec("quick", &[], 10),
                spec("long", &[0], 60_000),
                spec("never", &[1], 0),
            ],
            &log,
        );
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let mut options = RunOptions::new(2);
        options.cancel = cancel_rx;
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let _ = cancel_tx.send(true);
        });
        let started = tokio::time::Instant::now();
        let events = Events::recording();
        let record = execute(&p, json!({}), options, &events).await;
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "did not wait for the long step"
        );
        // The aborted attempt still ends: its step_end says it was cancelled.
        let ends: Vec<(String, StepOutcome)> = events
            .recorded()
            .into_iter()
            .filter_map(|e| match e.data {
                EventData::StepEnd { outcome, .. } => Some((e.step.unwrap_or_default(), outcome)),
                _ => None,
            })
            .collect();
        assert_eq!(ends.len(), 2, "{ends:?}");
        assert_eq!(ends[1], ("long".into(), StepOutcome::Cancelled));
        assert_eq!(record.status, RunStatus::Cancelled);
        assert_eq!(
            statuses(&record),
            vec![
                ("quick".into(), StepStatus::Ok),
                ("long".into(), StepStatus::Cancelled),
                ("never".into(), StepStatus::NotRun)
            ]
        );
        assert_eq!(
            record.error.map(|e| e.code),
            Some(FailureCode::CancelledSignal)
        );
        assert_eq!(record.steps[0].output, Some(json!("quick done")));
    }

    #[tokio::test]
    async fn a_step_that_may_fail_is_continued_past_and_its_error_is_readable() {
        let log = Log::default();
        let mut optional = spec("lookup", &[], 0);
        optional.fail_first = 5;
        optional.failure = FailureCode::ToolExecutionFailed;
        optional.continue_on_error = true;
        let mut p = pipeline(vec![optional, spec("answer", &[0], 0)], &log);
        p.steps[1].handler = Arc::new(Template {
            source: PromptSource::Inline(
                "[{{ input }}] {{ steps.lookup.error.code }}: {{ steps.lookup.error.category }}"
                    .into(),
            ),
        });
        let record = execute(&p, json!({}), RunOptions::new(2), &Events::recording()).await;
        assert_eq!(record.status, RunStatus::Complete, "{:?}", record.error);
        assert_eq!(record.steps[0].status, StepStatus::Failed);
        assert!(record.steps[0].continued);
        assert_eq!(
            record.steps[0].error.as_ref().map(|e| e.code),
            Some(FailureCode::ToolExecutionFailed)
        );
        assert_eq!(
            record.output,
            Some(json!("[None] TOOL_EXECUTION_FAILED: tool"))
        );
        // Without `on_error: continue` the same failure stops the run.
        let mut required = spec("lookup", &[], 0);
        required.fail_first = 5;
        required.failure = FailureCode::ToolExecutionFailed;
        let record = execute(
            &pipeline(vec![required, spec("answer", &[0], 0)], &log),
            json!({}),
            RunOptions::new(2),
            &Events::recording(),
        )
        .await;
        assert_eq!(record.status, RunStatus::Error);
        assert_eq!(record.steps[1].status, StepStatus::NotRun);
    }

    /// A model stand-in: its answer counts the feedback messages it was given, and it keeps them.
    struct Drafts {
        seen: Arc<Mutex<Vec<Vec<crate::core::Message>>>>,
    }

    impl StepHandler for Drafts {
        fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
            Box::pin(async move {
                self.seen.lock().expect("seen").push(ctx.feedback.clone());
                Ok(StepOutput {
                    output: json!(format!("draft {}", ctx.feedback.len())),
                    ..StepOutput::default()
                })
            })
        }

        fn render(&self, _: &StepContext) -> Result<Rendered, Failure> {
            Ok(Rendered::Text(String::new()))
        }
    }

    /// answer → polish → check (feedback to answer), and `side`, which also reads answer.
    fn feedback_loop(max_attempts: u32) -> (Pipeline, Arc<Mutex<Vec<Vec<crate::core::Message>>>>) {
        let log = Log::default();
        let mut check = spec("check", &[1], 0);
        check.feedback = Some(Feedback {
            step: 0,
            max_attempts,
        });
        let mut p = pipeline(
            vec![
                spec("answer", &[], 0),
                spec("polish", &[0], 0),
                check,
                spec("side", &[0], 0),
            ],
            &log,
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        p.steps[0].handler = Arc::new(Drafts {
            seen: Arc::clone(&seen),
        });
        p.steps[1].handler = Arc::new(Template {
            source: PromptSource::Inline("{{ input }}!".into()),
        });
        p.steps[2].handler = Arc::new(crate::orchestrate::steps::Validate {
            rules: vec![crate::validate::Rule::Contains("draft 4".into())],
            expressions: Vec::new(),
        });
        p.steps[3].handler = Arc::new(Template {
            source: PromptSource::Inline("side saw {{ input }}".into()),
        });
        (p, seen)
    }

    #[tokio::test]
    async fn a_failed_check_sends_the_run_back_to_the_model_step_with_feedback() {
        let (p, seen) = feedback_loop(3);
        let events = Events::recording();
        let record = execute(&p, json!({}), RunOptions::new(4), &events).await;
        assert_eq!(record.status, RunStatus::Complete, "{:?}", record.error);
        // Three answers: the first with no feedback, then each with every earlier answer and
        // what was wrong with it.
        let seen = seen.lock().expect("seen").clone();
        assert_eq!(seen.iter().map(Vec::len).collect::<Vec<_>>(), [0, 2, 4]);
        assert_eq!(seen[2][0].content, "draft 0");
        assert!(
            seen[2][3]
                .content
                .contains("the output does not contain \"draft 4\""),
            "{}",
            seen[2][3].content
        );
        assert_eq!(record.steps[2].output, Some(json!("draft 4!")));
        // The record keeps every earlier run of the loop's steps; `side` ran once, on the answer
        // that passed.
        let earlier = |i: usize| record.steps[i].earlier.len();
        assert_eq!(
            (earlier(0), earlier(1), earlier(2), earlier(3)),
            (2, 2, 2, 0)
        );
        assert_eq!(
            record.steps[2].earlier[0].error.as_ref().map(|e| e.code),
            Some(FailureCode::ValidationRuleFailed)
        );
        assert_eq!(record.steps[3].output, Some(json!("side saw draft 4")));
        let states = lifecycle_states(&events.recorded());
        use Lifecycle::{Complete, Execute, Validate};
        assert_eq!(
            states,
            [
                Execute, Validate, Execute, Validate, Execute, Validate, Complete
            ]
        );
        // Out of checks, the last failure ends the run.
        let (p, _) = feedback_loop(2);
        let record = execute(&p, json!({}), RunOptions::new(4), &Events::recording()).await;
        assert_eq!(record.status, RunStatus::Error);
        assert_eq!(record.steps[2].earlier.len(), 1);
        assert_eq!(record.steps[3].status, StepStatus::NotRun);
    }

    #[tokio::test]
    async fn events_carry_run_id_spans_and_the_lifecycle() {
        let log = Log::default();
        let p = pipeline(vec![spec("a", &[], 0), spec("b", &[0], 0)], &log);
        let events = Events::recording();
        let record = execute(&p, json!({}), RunOptions::new(1), &events).await;
        let recorded = events.recorded();
        assert!(recorded.iter().all(|e| e.run_id == record.run_id));
        let states = lifecycle_states(&recorded);
        assert_eq!(
            states,
            [Lifecycle::Execute, Lifecycle::Validate, Lifecycle::Complete]
        );
        let starts: Vec<_> = recorded
            .iter()
            .filter(|e| matches!(e.data, EventData::StepStart { attempt: 1 }))
            .collect();
        assert_eq!(starts.len(), 2);
        assert!(
            starts
                .iter()
                .all(|e| e.parent_span == Some(events.run_span()))
        );
        assert_eq!(
            record.usage,
            TokenUsage {
                prompt_tokens: 2,
                completion_tokens: 4
            }
        );
    }
}
