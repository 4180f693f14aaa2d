//! A run session: the one thing every command that runs a pipeline opens (`run`, `run --batch`,
//! `chat`, `render`, `test`, `serve`), so they all behave alike.
//!
//! A session owns the async runtime and what its builds and runs share on it ([`Resources`]: MCP
//! servers, local models' loads, model files' hashes), the event sinks (the `--events` file and
//! an observer such as the progress lines), the lifecycle from INIT to the end state — which the
//! session decides from how its runs and other work ended, not each command — and cancellation:
//! Ctrl-C (SIGINT) and SIGTERM — what Kubernetes, Slurm and systemd send before they kill — both
//! cancel the run in flight, which then ends as a CANCELLED record that keeps every completed
//! step's output. The signal handlers are installed when the session opens, so a signal that
//! arrives while models load cancels the run that follows instead of killing the process with
//! nothing written.
//!
//! Runs get their step timeout from the pipeline (the policy's `timeout_per_step`), never from
//! the command, so no adapter can forget it.
//!
//! Every run goes through the [`Runner`], the only caller of the executor: the commands that own
//! the terminal call [`Session::run`], which blocks on [`Runner::run`]; batch rows and test cases
//! fan out through [`Runner::run_many`]; a route's plan agent is a run nested in its step
//! ([`NestedRuns`]); a server, already inside the session's runtime, clones the [`Runner`] into
//! its request handlers and awaits it, giving each run its own cancellation (a client that went
//! away) and its own [`Watch`] (its events and tokens, streamed to that client).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde_json::{Map, Value};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use super::emit::Events;
use super::events::{Observer, Watch};
use super::executor::{RunHandle, RunOptions, execute, render_step};
use super::ledger::RunLedger;
use super::pipeline::{NestedRun, NestedRuns, Pipeline, Rendered, StepContext};
use super::record::{Lifecycle, RunRecord, RunStatus};
use super::resources::{Resources, start_runtime};
use super::sinks::{JsonLinesFile, Observing, Sinks};
use super::traces::Tracer;
use crate::cache::{CacheSettings, CallCache};
use crate::core::{Failure, TraceParent};

/// How to open a session.
pub struct SessionOptions {
    /// Write every event, of every run in the session, to this file as JSON Lines.
    pub events_file: Option<PathBuf>,
    /// Shown every event as it happens (progress lines, a chat's tool calls).
    pub observer: Option<Observer>,
    /// Most steps of one run running at once.
    pub max_parallel: usize,
    /// A chat session's id, written into every line of the events file.
    pub chat_session: Option<String>,
    /// The call cache: where it is and whether runs read and write it (off by default; the
    /// commands turn it on unless told not to).
    pub cache: CacheSettings,
    /// Where the runs' traces go, when the flags or the environment ask for them: each run's
    /// events are handed to it, as to the sinks.
    pub tracer: Option<Arc<dyn Tracer>>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            events_file: None,
            observer: None,
            max_parallel: 4,
            chat_session: None,
            cache: CacheSettings::default(),
            tracer: None,
        }
    }
}

/// An open session; see the module docs.
pub struct Session {
    /// What its builds and runs share, on its runtime.
    resources: Resources,
    runtime: tokio::runtime::Runtime,
    runner: Runner,
    /// Where its runs' traces go, when they are exported.
    tracer: Option<Arc<dyn Tracer>>,
}

/// What a session runs pipelines with, without its runtime: cheap to clone into the tasks of a
/// server that runs on the session's runtime.
#[derive(Clone)]
pub struct Runner {
    events: Events,
    /// Set to true by Ctrl-C or SIGTERM.
    interrupt: watch::Sender<bool>,
    /// How many times Ctrl-C or SIGTERM arrived (a second one can mean "now").
    signals: watch::Sender<u32>,
    /// Whether the session's own run id is taken (later runs get their own).
    first_run_done: Arc<AtomicBool>,
    max_parallel: usize,
    cache: Option<Arc<CallCache>>,
    /// How the session's runs (and the work that failed without a run) ended.
    outcomes: Arc<Outcomes>,
}

/// How a session's work has ended so far, from which it decides its own end state.
#[derive(Debug, Default)]
struct Outcomes {
    failed: AtomicU64,
    cancelled: AtomicU64,
}

/// What one run brings besides its pipeline and inputs.
#[derive(Default)]
pub struct RunRequest {
    /// Names added to every template's scope (a chat's `history`, a batch row's `row`).
    pub globals: Map<String, Value>,
    /// Cancels this run when it turns true; None: the session's Ctrl-C and SIGTERM do.
    pub cancel: Option<watch::Receiver<bool>>,
    /// Who watches this run alone: shown its events and streamed text as they happen (besides
    /// the session's observer).
    pub watch: Watch,
    /// Record nothing of this run: no events reach the session's sinks, and its end does not
    /// count towards the session's (a `--dry-run`'s preview of the prompts a batch would send).
    pub unrecorded: bool,
    /// Which repeat of the same run this is (a test case run several times): its sampled model
    /// calls (temperature above 0) are cached under it, so each repeat is a sample of its own.
    /// None: the first, or the only one.
    pub sample: Option<u32>,
    /// The caller's span this run's trace continues (a served request's `traceparent`).
    pub trace_parent: Option<TraceParent>,
    /// Attributes of this run's root span: what its caller knows it by (a batch row's id, a
    /// test case and variant).
    pub trace_attributes: Vec<(&'static str, String)>,
}

/// The session's [`NestedRuns`]: its runner, cancelled with the run the step belongs to.
struct Nested {
    runner: Runner,
    cancel: watch::Receiver<bool>,
}

/// Nested runs outside any session (a step context built by a unit test).
#[cfg(test)]
pub(super) fn detached_nesting() -> Arc<dyn NestedRuns> {
    let runner = Runner::standalone(4);
    let cancel = runner.interrupt.subscribe();
    Arc::new(Nested { runner, cancel })
}

impl NestedRuns for Nested {
    /// A run of its own id, its events linked to the parent's step, its calls booked to the
    /// parent run's ledger too (and held to its cost limit), cancelled with it. The caller
    /// decides what its end means for the step; the session's end state does not count it.
    fn run<'a>(
        &'a self,
        pipeline: &'a Pipeline,
        inputs: Value,
        parent: &'a StepContext,
    ) -> NestedRun<'a> {
        Box::pin(async move {
            let events = parent.events.nested_run(parent.span);
            describe(&events, pipeline, Vec::new);
            let run = RunHandle {
                events,
                ledger: Arc::new(RunLedger::new(
                    pipeline.max_cost,
                    Some(Arc::clone(parent.ledger.run())),
                )),
                nesting: Arc::new(Nested {
                    runner: self.runner.clone(),
                    cancel: self.cancel.clone(),
                }),
            };
            let mut options = RunOptions::new(self.runner.max_parallel, self.cancel.clone());
            options.sample = parent.sample;
            execute(pipeline, inputs, options, &run).await
        })
    }
}

impl Session {
    /// Opens the events file, starts the runtime, installs the signal handlers, and records INIT
    /// and then PLAN (the caller loads and checks its plan next). When it fails once the events
    /// file is open (a cassette that cannot be read, say), the file records INIT then ERROR, as
    /// every failure before a run does.
    pub fn open(options: SessionOptions) -> Result<Session, Failure> {
        let file = match &options.events_file {
            Some(path) => Some(JsonLinesFile::create(path, options.chat_session)?),
            None => None,
        };
        let tracer = options.tracer;
        let sinks = Sinks::default()
            .with_some(options.observer.map(Observing))
            .with_some(file);
        let events = Events::traced(Arc::new(sinks), tracer.clone());
        let started = start_runtime().and_then(|runtime| {
            let resources = Resources::new(runtime.handle().clone());
            let cache = CallCache::open(&options.cache, Arc::clone(&resources.hashes))?;
            Ok((runtime, resources, cache))
        });
        let (runtime, resources, cache) = started.inspect_err(|_| {
            events.lifecycle(Lifecycle::Init);
            events.lifecycle(Lifecycle::Error);
        })?;
        let mut runner = Runner::new(events, options.max_parallel);
        runner.cache = cache;
        {
            // Registered now, before anything slow happens, so no signal finds the default
            // action (which would kill the process with nothing written).
            let _entered = runtime.enter();
            let interrupts = signal(SignalKind::interrupt());
            let terminates = signal(SignalKind::terminate());
            if let (Ok(mut interrupts), Ok(mut terminates)) = (interrupts, terminates) {
                let (interrupt, signals) = (runner.interrupt.clone(), runner.signals.clone());
                runtime.spawn(async move {
                    loop {
                        let received = tokio::select! {
                            got = interrupts.recv() => got.is_some(),
                            got = terminates.recv() => got.is_some(),
                        };
                        if !received {
                            break;
                        }
                        interrupt.send_replace(true);
                        signals.send_modify(|count| *count += 1);
                    }
                });
            }
        }
        let session = Session {
            resources,
            runtime,
            runner,
            tracer,
        };
        session.events().lifecycle(Lifecycle::Init);
        session.events().lifecycle(Lifecycle::Plan);
        Ok(session)
    }

    /// Sends the traces still queued, waiting a bounded time, and says (once) how many spans
    /// were not exported; returns that number (None when traces are off). Runs that end after
    /// this are not exported.
    pub fn finish_traces(&self) -> Option<u64> {
        self.tracer.as_ref().map(|tracer| tracer.finish())
    }

    /// The call cache the session's runs use, when it is on: the build puts it in front of the
    /// plan's engines.
    pub fn cache(&self) -> Option<Arc<CallCache>> {
        self.runner.cache.clone()
    }

    /// What the session's builds and runs share: a plan is built with these.
    pub fn resources(&self) -> &Resources {
        &self.resources
    }

    /// The session's events (its own run id); [`Events::new_run`] gives another run's.
    pub fn events(&self) -> &Events {
        &self.runner.events
    }

    /// What runs pipelines in this session, for tasks on its runtime.
    pub fn runner(&self) -> Runner {
        self.runner.clone()
    }

    /// Records PREPARE, then builds (engines, corpora, tools: this may load models).
    pub fn prepare<T>(&self, build: impl FnOnce() -> T) -> T {
        self.events().lifecycle(Lifecycle::Prepare);
        build()
    }

    /// Records a failure outside any run (input that could not be read, a row that could not be
    /// bound, a suite below its pass rate): the session then ends in ERROR.
    pub fn fail(&self) {
        self.runner.note_failure();
    }

    /// Decides and records the session's own end state, once its work is done (a batch's, a
    /// test command's): CANCELLED when Ctrl-C or SIGTERM arrived or a run was cancelled, ERROR
    /// when a run or other work failed, COMPLETE otherwise. Returns it.
    pub fn finish(&self) -> Lifecycle {
        let outcomes = &self.runner.outcomes;
        let state =
            if *self.runner.interrupt.borrow() || outcomes.cancelled.load(Ordering::Relaxed) > 0 {
                Lifecycle::Cancelled
            } else if outcomes.failed.load(Ordering::Relaxed) > 0 {
                Lifecycle::Error
            } else {
                Lifecycle::Complete
            };
        self.events().lifecycle(state);
        state
    }

    /// Records a server's end: COMPLETE when it stopped as asked (Ctrl-C, SIGTERM: its requests'
    /// runs each ended in their own records), ERROR when it `failed`.
    pub fn finish_serving(&self, failed: bool) {
        self.events().lifecycle(if failed {
            Lifecycle::Error
        } else {
            Lifecycle::Complete
        });
    }

    /// [`Runner::run`] with `globals` (a chat's `history`), waited for on the session's runtime;
    /// Ctrl-C and SIGTERM cancel it.
    pub fn run(
        &self,
        pipeline: &Pipeline,
        inputs: Value,
        globals: Map<String, Value>,
    ) -> RunRecord {
        let request = RunRequest {
            globals,
            ..RunRequest::default()
        };
        self.runtime
            .block_on(self.runner.run(pipeline, inputs, request))
    }

    /// [`Runner::render`], waited for on the session's runtime.
    pub fn render(
        &self,
        pipeline: &Pipeline,
        target: usize,
        inputs: Value,
    ) -> Result<Rendered, Failure> {
        self.runtime.block_on(
            self.runner
                .render(pipeline, target, inputs, RunRequest::default()),
        )
    }

    /// Runs a future on the session's runtime (a batch, a chat's wait for its next line, a
    /// server).
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// Resolves when Ctrl-C or SIGTERM arrives (at once if one already has).
    pub fn wait_for_interrupt(&self) -> impl Future<Output = ()> + Send + 'static {
        self.runner.wait_for_interrupt()
    }

    /// Resolves once Ctrl-C or SIGTERM has arrived `count` times in all.
    pub fn wait_for_signals(&self, count: u32) -> impl Future<Output = ()> + Send + 'static {
        wait_until(&self.runner.signals, move |received| *received >= count)
    }

    /// Forgets an interruption that has been dealt with, so the next run is not cancelled at
    /// once (a chat goes on after a cancelled turn).
    pub fn clear_interrupt(&self) {
        self.runner.interrupt.send_replace(false);
    }
}

/// Resolves once the value `watched` holds satisfies `done` (at once if it already does).
fn wait_until<T: Send + Sync + 'static>(
    watched: &watch::Sender<T>,
    done: impl Fn(&T) -> bool + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let mut receiver = watched.subscribe();
    async move {
        // An error means the session is gone, and with it anything to wait for.
        let _ = receiver.wait_for(done).await;
    }
}

impl Runner {
    fn new(events: Events, max_parallel: usize) -> Self {
        let (interrupt, _) = watch::channel(false);
        let (signals, _) = watch::channel(0);
        Runner {
            events,
            interrupt,
            signals,
            first_run_done: Arc::new(AtomicBool::new(false)),
            max_parallel: max_parallel.max(1),
            cache: None,
            outcomes: Arc::default(),
        }
    }

    /// A runner outside any session: no events recorded, no cache, no signal handlers (tests,
    /// and checks that run plans on stand-ins).
    pub fn standalone(max_parallel: usize) -> Self {
        Runner::new(Events::unrecorded(), max_parallel)
    }

    /// Runs `pipeline` once on bound `inputs`: EXECUTE, the steps, then COMPLETE, ERROR or
    /// CANCELLED. The first run uses the session's run id; later ones (chat turns, requests,
    /// batch rows) each get their own.
    pub async fn run(&self, pipeline: &Pipeline, inputs: Value, request: RunRequest) -> RunRecord {
        let unrecorded = request.unrecorded;
        let (run, options) = self.open_run(pipeline, request);
        let record = execute(pipeline, inputs, options, &run).await;
        if !unrecorded {
            self.count(record.status);
        }
        record
    }

    /// Runs the steps upstream of step `target` of `pipeline`, then returns what it would send.
    pub async fn render(
        &self,
        pipeline: &Pipeline,
        target: usize,
        inputs: Value,
        request: RunRequest,
    ) -> Result<Rendered, Failure> {
        let (run, options) = self.open_run(pipeline, request);
        render_step(pipeline, target, inputs, options, &run).await
    }

    /// Resolves when Ctrl-C or SIGTERM arrives (at once if one already has).
    pub fn wait_for_interrupt(&self) -> impl Future<Output = ()> + Send + 'static {
        wait_until(&self.interrupt, |interrupted| *interrupted)
    }

    /// A new id from those the session's runs get theirs from (a streamed completion's).
    pub fn new_id(&self) -> String {
        self.events.new_id()
    }

    /// Records a failure outside any run (see [`Session::fail`]).
    pub fn note_failure(&self) {
        self.outcomes.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// The session's Ctrl-C and SIGTERM, for work that waits on more than one run.
    pub fn cancellation(&self) -> watch::Receiver<bool> {
        self.interrupt.subscribe()
    }

    /// From now on every run gets a run id of its own (a fan-out's runs are not the session's).
    pub(super) fn keep_session_run_id(&self) {
        self.first_run_done.store(true, Ordering::Relaxed);
    }

    fn count(&self, status: RunStatus) {
        let counter = match status {
            RunStatus::Complete => return,
            RunStatus::Error => &self.outcomes.failed,
            RunStatus::Cancelled => &self.outcomes.cancelled,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The events, ledger and options of the next run.
    fn open_run(&self, pipeline: &Pipeline, request: RunRequest) -> (RunHandle, RunOptions) {
        let events = if request.unrecorded {
            Events::unrecorded()
        } else {
            self.events_for_next_run(request.watch, request.trace_parent)
        };
        describe(&events, pipeline, || request.trace_attributes);
        let cancel = request.cancel.unwrap_or_else(|| self.interrupt.subscribe());
        let mut options = RunOptions::new(self.max_parallel, cancel.clone());
        options.globals.extend(request.globals);
        options.sample = request.sample;
        let run = RunHandle {
            events,
            ledger: Arc::new(RunLedger::new(pipeline.max_cost, None)),
            nesting: Arc::new(Nested {
                runner: self.clone(),
                cancel,
            }),
        };
        (run, options)
    }

    fn events_for_next_run(&self, watch: Watch, remote: Option<TraceParent>) -> Events {
        let first = !self.first_run_done.swap(true, Ordering::Relaxed);
        let watched = watch.events.is_some() || watch.tokens.is_some();
        if watched || remote.is_some() {
            self.events.new_run_continuing(watch, remote)
        } else if first {
            self.events.clone()
        } else {
            self.events.new_run()
        }
    }
}

/// Says what a run of `pipeline` is, for its trace: the plan, its steps' types, and
/// `attributes`.
fn describe(
    events: &Events,
    pipeline: &Pipeline,
    attributes: impl FnOnce() -> Vec<(&'static str, String)>,
) {
    let shape = |tracer: &dyn Tracer| {
        let shape = pipeline.trace_shape.get_or_init(|| {
            let steps = pipeline.steps.iter();
            let mut steps = steps.map(|step| (step.name.as_str(), step.kind));
            tracer.plan_shape(&pipeline.name, &mut steps)
        });
        Arc::clone(shape)
    };
    events.describe(shape, attributes);
}

impl Drop for Session {
    /// Commits what the cache still has queued and records the session's hits and misses, and
    /// sends the traces still queued (waiting a bounded time).
    fn drop(&mut self) {
        if let Some(cache) = &self.runner.cache {
            cache.finish();
        }
        self.finish_traces();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::FailureCode;

    #[test]
    fn a_session_records_init_plan_prepare_and_its_end_state() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("events.jsonl");
        let session = Session::open(SessionOptions {
            events_file: Some(path.clone()),
            ..SessionOptions::default()
        })
        .expect("open");
        session.prepare(|| ());
        assert_eq!(session.finish(), Lifecycle::Complete);
        drop(session);
        let states: Vec<String> = std::fs::read_to_string(&path)
            .expect("events")
            .lines()
            .map(|line| {
                let event: Value = serde_json::from_str(line).expect("json");
                event["data"]["state"].as_str().unwrap_or("").to_string()
            })
            .collect();
        assert_eq!(states, ["INIT", "PLAN", "PREPARE", "COMPLETE"]);
    }

    #[test]
    fn an_events_file_that_cannot_be_created_is_a_clear_failure() {
        let failure = Session::open(SessionOptions {
            events_file: Some(PathBuf::from("/nonexistent-dir/events.jsonl")),
            ..SessionOptions::default()
        })
        .err()
        .expect("refused");
        assert_eq!(failure.code, FailureCode::ConfigFileError);
        assert!(failure.message.contains("/nonexistent-dir/events.jsonl"));
    }

    #[test]
    fn an_interrupt_cancels_runs_until_it_is_cleared() {
        let session = Session::open(SessionOptions::default()).expect("open");
        assert!(!*session.runner.cancellation().borrow());
        session.runner.interrupt.send_replace(true);
        assert!(*session.runner.cancellation().borrow());
        session.block_on(session.wait_for_interrupt());
        session.clear_interrupt();
        assert!(!*session.runner.cancellation().borrow());
    }

    #[test]
    fn the_session_decides_its_end_state_from_how_its_work_ended() {
        let session = Session::open(SessionOptions::default()).expect("open");
        session.runner.count(RunStatus::Complete);
        assert_eq!(session.finish(), Lifecycle::Complete);
        session.fail();
        assert_eq!(session.finish(), Lifecycle::Error);
        session.runner.count(RunStatus::Cancelled);
        assert_eq!(session.finish(), Lifecycle::Cancelled);
        let interrupted = Session::open(SessionOptions::default()).expect("open");
        interrupted.runner.interrupt.send_replace(true);
        assert_eq!(interrupted.finish(), Lifecycle::Cancelled);
    }
}
