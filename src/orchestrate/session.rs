//! A run session: the one thing every command that runs a pipeline opens (`run`, `run --batch`,
//! `chat`, `render`), so they all behave alike.
//!
//! A session owns the async runtime, the events (the `--events` file and an observer such as the
//! progress lines), the lifecycle from INIT to the end state, and cancellation: Ctrl-C (SIGINT)
//! and SIGTERM — what Kubernetes, Slurm and systemd send before they kill — both cancel the run in
//! flight, which then ends as a CANCELLED record that keeps every completed step's output. The
//! signal handlers are installed when the session opens, so a signal that arrives while models
//! load cancels the run that follows instead of killing the process with nothing written.
//!
//! Runs get their step timeout from the pipeline (the policy's `timeout_per_step`), never from
//! the command, so no adapter can forget it.
//!
//! Every run goes through one [`Runner::run`]: the commands that own the terminal call
//! [`Session::run`], which blocks on it; a server, already inside the session's runtime, clones
//! the [`Runner`] into its request handlers and awaits it, giving each run its own cancellation
//! (a client that went away) and its own [`Watch`] (its events and tokens, streamed to that client).

use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use super::events::{Events, Observer, Watch};
use super::executor::{RunOptions, execute, render_step};
use super::pipeline::{Pipeline, Rendered};
use super::record::{Lifecycle, RunRecord};
use crate::cache::{CacheSettings, CallCache};
use crate::core::{Failure, FailureCode};

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
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            events_file: None,
            observer: None,
            max_parallel: 4,
            chat_session: None,
            cache: CacheSettings::default(),
        }
    }
}

/// An open session; see the module docs.
pub struct Session {
    runtime: tokio::runtime::Runtime,
    runner: Runner,
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
}

/// What one run brings besides its pipeline and inputs.
#[derive(Default)]
pub struct RunRequest {
    /// Names added to every template's scope (a chat's `history`).
    pub globals: Map<String, Value>,
    /// Cancels this run when it turns true; None: the session's Ctrl-C and SIGTERM do.
    pub cancel: Option<watch::Receiver<bool>>,
    /// Who watches this run alone: shown its events and streamed text as they happen (besides
    /// the session's observer).
    pub watch: Watch,
}

impl Session {
    /// Opens the events file, starts the runtime, installs the signal handlers, and records INIT
    /// and then PLAN (the caller loads and checks its plan next).
    pub fn open(options: SessionOptions) -> Result<Session, Failure> {
        let sink = match &options.events_file {
            Some(path) => {
                let file = std::fs::File::create(path).map_err(|e| {
                    Failure::new(
                        FailureCode::ConfigFileError,
                        format!("cannot write events to {}: {e}", path.display()),
                    )
                    .with_help(
                        "--events needs a file path in a directory that exists and is writable",
                    )
                })?;
                Some(Box::new(std::io::BufWriter::new(file)) as Box<dyn Write + Send>)
            }
            None => None,
        };
        let events = Events::with_observer(sink, options.observer, options.chat_session);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| {
                Failure::new(
                    FailureCode::ConfigFileError,
                    format!("cannot start the async runtime: {e}"),
                )
            })?;
        let (interrupt, _) = watch::channel(false);
        let (signals, _) = watch::channel(0);
        {
            // Registered now, before anything slow happens, so no signal finds the default
            // action (which would kill the process with nothing written).
            let _entered = runtime.enter();
            let interrupts = signal(SignalKind::interrupt());
            let terminates = signal(SignalKind::terminate());
            if let (Ok(mut interrupts), Ok(mut terminates)) = (interrupts, terminates) {
                let (interrupt, signals) = (interrupt.clone(), signals.clone());
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
            runtime,
            runner: Runner {
                events,
                interrupt,
                signals,
                first_run_done: Arc::new(AtomicBool::new(false)),
                max_parallel: options.max_parallel.max(1),
                cache: CallCache::open(&options.cache),
            },
        };
        session.events().lifecycle(Lifecycle::Init);
        session.events().lifecycle(Lifecycle::Plan);
        Ok(session)
    }

    /// The call cache the session's runs use, when it is on: the build puts it in front of the
    /// plan's engines.
    pub fn cache(&self) -> Option<Arc<CallCache>> {
        self.runner.cache.clone()
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

    /// Records the session's own end state (a batch's, after its rows' runs ended).
    pub fn finish(&self, state: Lifecycle) {
        self.events().lifecycle(state);
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

    /// Runs the steps upstream of step `target`, then returns what it would send.
    pub fn render(
        &self,
        pipeline: &Pipeline,
        target: usize,
        inputs: Value,
    ) -> Result<Rendered, Failure> {
        let events = self.runner.events_for_next_run(Watch::default());
        self.runtime.block_on(render_step(
            pipeline,
            target,
            inputs,
            self.run_options(),
            &events,
        ))
    }

    /// Options for a run in this session: its parallelism and its cancellation.
    pub fn run_options(&self) -> RunOptions {
        self.runner.run_options()
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
    /// Runs `pipeline` once on bound `inputs`: EXECUTE, the steps, then COMPLETE, ERROR or
    /// CANCELLED. The first run uses the session's run id; later ones (chat turns, requests)
    /// each get their own.
    pub async fn run(&self, pipeline: &Pipeline, inputs: Value, request: RunRequest) -> RunRecord {
        let events = self.events_for_next_run(request.watch);
        let mut options = self.run_options();
        options.globals.extend(request.globals);
        if let Some(cancel) = request.cancel {
            options.cancel = cancel;
        }
        execute(pipeline, inputs, options, &events).await
    }

    /// Resolves when Ctrl-C or SIGTERM arrives (at once if one already has).
    pub fn wait_for_interrupt(&self) -> impl Future<Output = ()> + Send + 'static {
        wait_until(&self.interrupt, |interrupted| *interrupted)
    }

    fn run_options(&self) -> RunOptions {
        let mut options = RunOptions::new(self.max_parallel);
        options.cancel = self.interrupt.subscribe();
        options
    }

    fn events_for_next_run(&self, watch: Watch) -> Events {
        let first = !self.first_run_done.swap(true, Ordering::Relaxed);
        let watched = watch.events.is_some() || watch.tokens.is_some();
        if watched {
            self.events.new_run_watched(watch)
        } else if first {
            self.events.clone()
        } else {
            self.events.new_run()
        }
    }
}

impl Drop for Session {
    /// Commits what the cache still has queued and records the session's hits and misses.
    fn drop(&mut self) {
        if let Some(cache) = &self.runner.cache {
            cache.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        session.finish(Lifecycle::Complete);
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
        assert!(!*session.run_options().cancel.borrow());
        session.runner.interrupt.send_replace(true);
        assert!(*session.run_options().cancel.borrow());
        session.block_on(session.wait_for_interrupt());
        session.clear_interrupt();
        assert!(!*session.run_options().cancel.borrow());
    }
}
