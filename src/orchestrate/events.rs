//! Run events: one per lifecycle transition, step start/end/retry/skip, model call and tool call,
//! each with the run id, the step, its span and parent span (and the tool_call_id for tool
//! events), written as JSON Lines when `--events FILE` is given.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

/// An id for a span of work (the run, a step attempt, a model or tool call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(u64);

impl std::fmt::Display for SpanId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:08x}", self.0)
    }
}

impl Serialize for SpanId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Lifecycle,
    StepStart,
    StepEnd,
    StepRetry,
    StepSkipped,
    Inference,
    ToolStart,
    ToolEnd,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub run_id: String,
    /// Milliseconds since the run started.
    pub at_ms: f64,
    pub kind: EventKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    pub span: SpanId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_span: Option<SpanId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    pub data: Value,
}

/// Called with every event (e.g. to print progress).
pub type Observer = Box<dyn Fn(&Event) + Send + Sync>;

/// Where events go: shared by every run of a session (a batch's rows, a chat's turns).
struct Outputs {
    sink: Option<Mutex<Box<dyn Write + Send>>>,
    kept: Option<Mutex<Vec<Event>>>,
    observer: Option<Observer>,
}

struct Inner {
    run_id: String,
    started: Instant,
    next_span: AtomicU64,
    /// Model calls recorded in this run so far.
    model_calls: AtomicU64,
    outputs: Arc<Outputs>,
}

/// Where events go; cheap to clone and share between steps.
#[derive(Clone)]
pub struct Events {
    inner: Arc<Inner>,
}

impl Events {
    /// Events for a new run, written to `sink` (one JSON object per line) if given.
    pub fn new(sink: Option<Box<dyn Write + Send>>) -> Self {
        Self::build(sink, false, None)
    }

    /// Events written to `sink` and shown to `observer` as they happen.
    pub fn with_observer(sink: Option<Box<dyn Write + Send>>, observer: Observer) -> Self {
        Self::build(sink, false, Some(observer))
    }

    /// Events kept in memory (for tests).
    pub fn recording() -> Self {
        Self::build(None, true, None)
    }

    fn build(sink: Option<Box<dyn Write + Send>>, keep: bool, observer: Option<Observer>) -> Self {
        Self::for_outputs(Arc::new(Outputs {
            sink: sink.map(Mutex::new),
            kept: keep.then(|| Mutex::new(Vec::new())),
            observer,
        }))
    }

    fn for_outputs(outputs: Arc<Outputs>) -> Self {
        Events {
            inner: Arc::new(Inner {
                run_id: new_run_id(),
                started: Instant::now(),
                next_span: AtomicU64::new(1),
                model_calls: AtomicU64::new(0),
                outputs,
            }),
        }
    }

    /// Events of another run (its own run id, clock and spans) that go where these go: every
    /// row of a batch and every turn of a chat is a run of its own in the same events file.
    pub fn new_run(&self) -> Events {
        Self::for_outputs(Arc::clone(&self.inner.outputs))
    }

    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// Model calls this run has made so far (every attempt, vote and tool round).
    pub fn model_calls(&self) -> u64 {
        self.inner.model_calls.load(Ordering::Relaxed)
    }

    /// The run's own span.
    pub fn run_span(&self) -> SpanId {
        SpanId(0)
    }

    /// A fresh span id.
    pub fn new_span(&self) -> SpanId {
        SpanId(self.inner.next_span.fetch_add(1, Ordering::Relaxed))
    }

    /// Milliseconds since the run started.
    pub fn elapsed_ms(&self) -> f64 {
        self.inner.started.elapsed().as_secs_f64() * 1000.0
    }

    /// Records an event.
    pub fn emit(
        &self,
        kind: EventKind,
        step: Option<&str>,
        span: SpanId,
        parent: Option<SpanId>,
        data: Value,
    ) {
        self.emit_event(Event {
            run_id: self.inner.run_id.clone(),
            at_ms: (self.elapsed_ms() * 1000.0).round() / 1000.0,
            kind,
            step: step.map(str::to_string),
            span,
            parent_span: parent,
            tool_call_id: None,
            data,
        });
    }

    /// Records a fully built event (tool events set `tool_call_id`).
    pub fn emit_event(&self, event: Event) {
        if event.kind == EventKind::Inference {
            self.inner.model_calls.fetch_add(1, Ordering::Relaxed);
        }
        let outputs = &self.inner.outputs;
        if let Some(observer) = &outputs.observer {
            observer(&event);
        }
        if let Some(sink) = &outputs.sink
            && let Ok(mut sink) = sink.lock()
            && let Ok(line) = serde_json::to_string(&event)
        {
            // An events file that cannot be written must not fail the run.
            let _ = writeln!(sink, "{line}");
            let _ = sink.flush();
        }
        if let Some(kept) = &outputs.kept
            && let Ok(mut kept) = kept.lock()
        {
            kept.push(event);
        }
    }

    /// The events recorded so far (only for [`Events::recording`]).
    pub fn recorded(&self) -> Vec<Event> {
        self.inner
            .outputs
            .kept
            .as_ref()
            .and_then(|k| k.lock().ok().map(|k| k.clone()))
            .unwrap_or_default()
    }
}

/// A run id: time and process, unique enough to tell runs apart in logs.
fn new_run_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:012x}-{:04x}{:02x}",
        nanos & 0xffff_ffff_ffff,
        std::process::id() & 0xffff,
        count & 0xff
    )
}
