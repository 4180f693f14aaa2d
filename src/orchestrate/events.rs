//! Run events: one per lifecycle transition, step start/end/retry/skip/feedback, model call and
//! tool call, each with the run id, the step, its span and parent span (and the tool_call_id for
//! tool events), written as JSON Lines when `--events FILE` is given. Every start has its end: an
//! attempt or tool call stopped mid-flight ends with status `cancelled`.
//!
//! What an event says is a typed [`EventData`] variant, written as the line's `kind` and `data`
//! keys: emitters cannot misspell a field, and readers (progress lines, the chat's tool lines)
//! match on variants instead of looking up JSON keys.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::Value;

use super::record::Lifecycle;
use crate::core::{Cost, Failure, FailureCode, TokenUsage};
use crate::inference::CacheStatus;
use crate::inference::SchemaMode;
use crate::inference::TokenSink;

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

/// What happened, and what the event says about it: written as the event's `kind` (the variant's
/// name in snake_case) and its `data` (the variant's fields).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", content = "data", rename_all = "snake_case")]
pub enum EventData {
    /// The run entered a lifecycle state.
    Lifecycle { state: Lifecycle },
    /// An attempt of a step started.
    StepStart { attempt: u32 },
    /// An attempt of a step ended: its status with the usage or the failure.
    StepEnd {
        #[serde(flatten)]
        outcome: StepOutcome,
        attempt: u32,
        duration_ms: f64,
    },
    /// A failed attempt will be retried after a delay.
    StepRetry {
        next_attempt: u32,
        delay_ms: u64,
        code: FailureCode,
    },
    /// A check failed and sends the run back to step `to`, which runs again with what was
    /// wrong appended to its messages; the steps between it and this one follow, then this
    /// check runs again (its attempt `next_attempt` of `max_attempts`).
    StepFeedback {
        to: String,
        next_attempt: u32,
        max_attempts: u32,
        code: FailureCode,
    },
    /// A step did not run.
    StepSkipped(SkipReason),
    /// A model call.
    Inference {
        model: String,
        engine: &'static str,
        duration_ms: f64,
        usage: TokenUsage,
        #[serde(flatten)]
        call: ModelCall,
        #[serde(flatten)]
        sent: Sent,
        /// What the call cost at the model's declared price; null for an unpriced model.
        cost: Option<Cost>,
        /// The ids of the tool calls the answer made (their tool events carry them as
        /// `tool_call_id`, and are children of this call's span).
        tool_call_ids: Vec<String>,
        /// Why the call failed, when the engine gave no answer (then usage is zero).
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<Failure>,
        /// Whether the call cache answered it (then no model was called: `usage` is what the
        /// cached call used, and it cost nothing).
        cached: bool,
    },
    /// A tool call started.
    ToolStart { tool: String, args: Value },
    /// A tool call ended (or was refused before it ran).
    ToolEnd {
        tool: String,
        #[serde(flatten)]
        outcome: ToolOutcome,
        duration_ms: f64,
        /// Whether the call cache answered it (then the tool did not run).
        cached: bool,
    },
}

/// How an attempt of a step ended: `"status": "ok"` with its usage, `"failed"` with the error,
/// or `"cancelled"` when it was stopped while it ran (Ctrl-C, SIGTERM).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum StepOutcome {
    Ok { usage: TokenUsage },
    Failed { error: Failure },
    Cancelled,
}

/// How a tool call ended: `"status": "ok"`, `"failed"` with the error, `"refused"` with the
/// reason it never ran (an unknown tool, arguments its schema refuses), or `"cancelled"` when the
/// step calling it was stopped while the tool ran (Ctrl-C, SIGTERM, the step's timeout).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ToolOutcome {
    Ok,
    Failed { error: Failure },
    Refused { error: Failure },
    Cancelled,
}

/// Runs a closure when dropped, unless [`OnDrop::disarm`]ed first. A step attempt or tool call
/// holds one that records its cancelled end: when the run is cancelled (or a timeout fires) its
/// future is dropped mid-flight, and only a drop can still say so.
pub struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> OnDrop<F> {
    pub fn new(on_drop: F) -> Self {
        OnDrop(Some(on_drop))
    }

    /// It ended normally: nothing to do when dropped.
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(on_drop) = self.0.take() {
            on_drop();
        }
    }
}

/// Why a step was skipped: `{"standby_for": STEP}` or `{"when": EXPRESSION}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// It is the fallback of a voting step, and runs only when that step hands over to it.
    StandbyFor(String),
    /// Its `when` expression was false.
    When(String),
}

/// Which of a step's model calls an `inference` event records; written into its data as
/// `attempt`, `round` or `call` (nothing for a step's only call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelCall {
    /// The step's only call (`infer`).
    Single,
    /// An attempt at schema-valid output (`structured` asks again after an invalid answer).
    Attempt(u32),
    /// A round of an agent's tool loop.
    Round(u32),
    /// One of a `redundant` step's candidates.
    Vote(u32),
    /// An attempt at a routing decision.
    Route { attempt: u32 },
    /// The answer written from the routed agents' results.
    Synthesis,
    /// A routed `template` agent's call, by the agent's name.
    Agent(String),
}

impl std::fmt::Display for ModelCall {
    /// The call in words, as a run record lists the calls the cache answered: `call`,
    /// `attempt 2`, `round 3`, `vote 1`, `route attempt 1`, `synthesis`, `agent lookup`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelCall::Single => f.write_str("call"),
            ModelCall::Attempt(n) => write!(f, "attempt {n}"),
            ModelCall::Round(n) => write!(f, "round {n}"),
            ModelCall::Vote(n) => write!(f, "vote {n}"),
            ModelCall::Route { attempt } => write!(f, "route attempt {attempt}"),
            ModelCall::Synthesis => f.write_str("synthesis"),
            ModelCall::Agent(name) => write!(f, "agent {name}"),
        }
    }
}

impl Serialize for ModelCall {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match self {
            ModelCall::Single => {}
            ModelCall::Attempt(attempt) => map.serialize_entry("attempt", attempt)?,
            ModelCall::Round(round) => map.serialize_entry("round", round)?,
            ModelCall::Vote(vote) => map.serialize_entry("vote", vote)?,
            ModelCall::Route { attempt } => {
                map.serialize_entry("call", "route")?;
                map.serialize_entry("attempt", attempt)?;
            }
            ModelCall::Synthesis => map.serialize_entry("call", "synthesis")?,
            ModelCall::Agent(name) => {
                map.serialize_entry("call", "agent")?;
                map.serialize_entry("agent", name)?;
            }
        }
        map.end()
    }
}

/// What a model call sent, as its `inference` event records it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sent {
    /// Messages in the request.
    pub messages: usize,
    /// Tool definitions offered.
    pub tools: usize,
    /// The decoding constraint the request carried — `json_schema`, `regex` or `lark` — or null.
    pub constraint: Option<&'static str>,
    /// Whether the engine enforced that constraint while decoding (false: checked afterwards,
    /// or no constraint).
    pub constrained: bool,
    pub temperature: Option<f64>,
    /// How the engine held the answer to the JSON schema where it negotiated that with the
    /// server (`json_schema`, `json_object`, or `prompt`: described in the prompt only, not
    /// enforced); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_mode: Option<SchemaMode>,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub run_id: String,
    /// Milliseconds since the run started.
    pub at_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    pub span: SpanId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_span: Option<SpanId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The `kind` and `data` keys.
    #[serde(flatten)]
    pub data: EventData,
}

/// Called with every event (e.g. to print progress).
pub type Observer = Box<dyn Fn(&Event) + Send + Sync>;

/// Where events go: shared by every run of a session (a batch's rows, a chat's turns).
struct Outputs {
    sink: Option<Mutex<Box<dyn Write + Send>>>,
    kept: Option<Mutex<Vec<Event>>>,
    observer: Option<Observer>,
    /// A chat session's id, written into every line of the events file.
    session: Option<String>,
}

/// An event as the events file of a chat session holds it: the session id first.
#[derive(Serialize)]
struct InSession<'a> {
    session: &'a str,
    #[serde(flatten)]
    event: &'a Event,
}

/// What the call cache did for a run's (or a batch's) model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CacheTally {
    /// Calls it answered.
    pub hits: u64,
    /// Calls it was asked about and did not have (the model answered, and it stored that).
    pub misses: u64,
    /// Tokens the answered calls had used when they were made.
    pub tokens_saved: u64,
    /// How long the answered calls had taken when they were made.
    pub ms_saved: f64,
}

impl std::ops::AddAssign for CacheTally {
    fn add_assign(&mut self, other: CacheTally) {
        self.hits += other.hits;
        self.misses += other.misses;
        self.tokens_saved += other.tokens_saved;
        self.ms_saved += other.ms_saved;
    }
}

struct Inner {
    run_id: String,
    started: Instant,
    next_span: AtomicU64,
    /// Model calls recorded in this run so far (not counting those the cache answered).
    model_calls: AtomicU64,
    /// What the call cache did for this run's calls.
    cache: Mutex<CacheTally>,
    /// What they cost, where priced; None while no priced model answered.
    cost: Mutex<Option<Cost>>,
    outputs: Arc<Outputs>,
    /// Who watches this run alone (a server's stream of one run to its client).
    watch: Watch,
}

/// What one run shows whoever watches it alone (a server's client), besides the session's
/// outputs: its events as they happen, and the text its streamed steps generate — the steps built
/// to stream (see `BuildOptions::stream`) send their tokens here as well as to the build's sink.
#[derive(Default)]
pub struct Watch {
    pub events: Option<Observer>,
    pub tokens: Option<TokenSink>,
}

/// Where events go; cheap to clone and share between steps.
#[derive(Clone)]
pub struct Events {
    inner: Arc<Inner>,
}

impl Events {
    /// Events for a new run, written to `sink` (one JSON object per line) if given.
    pub fn new(sink: Option<Box<dyn Write + Send>>) -> Self {
        Self::build(sink, false, None, None)
    }

    /// Events written to `sink` and shown to `observer` as they happen; with `session` (a chat
    /// session's id), every line written carries it.
    pub fn with_observer(
        sink: Option<Box<dyn Write + Send>>,
        observer: Option<Observer>,
        session: Option<String>,
    ) -> Self {
        Self::build(sink, false, observer, session)
    }

    /// Events kept in memory (for tests).
    pub fn recording() -> Self {
        Self::build(None, true, None, None)
    }

    fn build(
        sink: Option<Box<dyn Write + Send>>,
        keep: bool,
        observer: Option<Observer>,
        session: Option<String>,
    ) -> Self {
        Self::for_outputs(Arc::new(Outputs {
            sink: sink.map(Mutex::new),
            kept: keep.then(|| Mutex::new(Vec::new())),
            observer,
            session,
        }))
    }

    fn for_outputs(outputs: Arc<Outputs>) -> Self {
        Self::for_outputs_watched(outputs, Watch::default())
    }

    fn for_outputs_watched(outputs: Arc<Outputs>, watch: Watch) -> Self {
        Events {
            inner: Arc::new(Inner {
                run_id: new_run_id(),
                started: Instant::now(),
                next_span: AtomicU64::new(1),
                model_calls: AtomicU64::new(0),
                cache: Mutex::default(),
                cost: Mutex::new(None),
                outputs,
                watch,
            }),
        }
    }

    /// Events of another run (its own run id, clock and spans) that go where these go: every
    /// row of a batch and every turn of a chat is a run of its own in the same events file.
    pub fn new_run(&self) -> Events {
        Self::for_outputs(Arc::clone(&self.inner.outputs))
    }

    /// [`Events::new_run`] watched by `watch` too.
    pub fn new_run_watched(&self, watch: Watch) -> Events {
        Self::for_outputs_watched(Arc::clone(&self.inner.outputs), watch)
    }

    /// Where this run's streamed text goes besides the build's sink, if anyone watches it.
    pub fn tokens(&self) -> Option<&TokenSink> {
        self.inner.watch.tokens.as_ref()
    }

    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// Model calls this run has made so far (every attempt, vote and tool round), not
    /// counting those the call cache answered.
    pub fn model_calls(&self) -> u64 {
        self.inner.model_calls.load(Ordering::Relaxed)
    }

    /// What the call cache did for this run's calls so far.
    pub fn cache_tally(&self) -> CacheTally {
        self.inner
            .cache
            .lock()
            .map(|tally| *tally)
            .unwrap_or_default()
    }

    /// Counts what the call cache did for one call: answered it (saving `usage` and the
    /// original call's time), or had no answer.
    pub fn count_cache(&self, status: CacheStatus, usage: TokenUsage) {
        if let Ok(mut tally) = self.inner.cache.lock() {
            match status {
                CacheStatus::Unused => {}
                CacheStatus::Miss => tally.misses += 1,
                CacheStatus::Hit { original } => {
                    tally.hits += 1;
                    tally.tokens_saved += usage.total();
                    tally.ms_saved += original.as_secs_f64() * 1000.0;
                }
            }
        }
    }

    /// What this run's model calls have cost so far (sub-plans run by its agents included);
    /// None while no priced model has answered.
    pub fn cost(&self) -> Option<Cost> {
        self.inner.cost.lock().ok().and_then(|cost| *cost)
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
    pub fn emit(&self, step: Option<&str>, span: SpanId, parent: Option<SpanId>, data: EventData) {
        self.emit_event(Event {
            run_id: self.inner.run_id.clone(),
            at_ms: (self.elapsed_ms() * 1000.0).round() / 1000.0,
            step: step.map(str::to_string),
            span,
            parent_span: parent,
            tool_call_id: None,
            data,
        });
    }

    /// Records the run's move to `state`.
    pub fn lifecycle(&self, state: Lifecycle) {
        self.emit(None, self.run_span(), None, EventData::Lifecycle { state });
    }

    /// Records a fully built event (tool events set `tool_call_id`).
    pub fn emit_event(&self, event: Event) {
        if let EventData::Inference { cost, cached, .. } = &event.data {
            if !cached {
                self.inner.model_calls.fetch_add(1, Ordering::Relaxed);
            }
            if let Ok(mut total) = self.inner.cost.lock() {
                *total = Cost::sum(*total, *cost);
            }
        }
        let outputs = &self.inner.outputs;
        if let Some(observer) = &outputs.observer {
            observer(&event);
        }
        if let Some(watcher) = &self.inner.watch.events {
            watcher(&event);
        }
        // Serialised only when there is a file to write it to: a batch without `--events`
        // emits several events a row, and writing them as JSON would be most of its work.
        if let Some(sink) = &outputs.sink {
            let line = match &outputs.session {
                Some(session) => serde_json::to_string(&InSession {
                    session,
                    event: &event,
                }),
                None => serde_json::to_string(&event),
            };
            if let Ok(line) = line
                && let Ok(mut sink) = sink.lock()
            {
                // An events file that cannot be written must not fail the run.
                let _ = writeln!(sink, "{line}");
                let _ = sink.flush();
            }
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

/// A run id: time and process, unique enough to tell runs apart in logs (also a chat session's).
pub fn new_run_id() -> String {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::FailureCode;

    fn event(data: EventData) -> Event {
        Event {
            run_id: "r1".into(),
            at_ms: 1.5,
            step: Some("ask".into()),
            span: SpanId(2),
            parent_span: Some(SpanId(0)),
            tool_call_id: None,
            data,
        }
    }

    fn wire(data: EventData) -> Value {
        serde_json::to_value(event(data)).expect("serializes")
    }

    #[test]
    fn a_failed_step_end_is_one_line_with_kind_data_and_the_error() {
        let data = EventData::StepEnd {
            outcome: StepOutcome::Failed {
                error: Failure::new(FailureCode::InferenceTimeout, "too slow"),
            },
            attempt: 2,
            duration_ms: 12.5,
        };
        let line = serde_json::to_string(&event(data)).expect("serializes");
        assert_eq!(
            line,
            r#"{"run_id":"r1","at_ms":1.5,"step":"ask","span":"00000002","parent_span":"00000000","kind":"step_end","data":{"status":"failed","error":{"code":"INFERENCE_TIMEOUT","category":"inference","message":"too slow","retryable":true},"attempt":2,"duration_ms":12.5}}"#
        );
        let ok = EventData::StepEnd {
            outcome: StepOutcome::Ok {
                usage: TokenUsage {
                    prompt_tokens: 3,
                    completion_tokens: 4,
                },
            },
            attempt: 1,
            duration_ms: 2.0,
        };
        assert_eq!(
            wire(ok)["data"],
            json!({ "status": "ok", "usage": { "prompt_tokens": 3, "completion_tokens": 4 }, "attempt": 1, "duration_ms": 2.0 })
        );
    }

    fn sent() -> Sent {
        Sent {
            messages: 2,
            tools: 0,
            constraint: None,
            constrained: false,
            temperature: None,
            schema_mode: None,
        }
    }

    fn inference(call: ModelCall) -> EventData {
        inference_with(call, sent(), None, Vec::new())
    }

    fn inference_with(
        call: ModelCall,
        sent: Sent,
        cost: Option<Cost>,
        tool_call_ids: Vec<String>,
    ) -> EventData {
        EventData::Inference {
            model: "m".into(),
            engine: "scripted",
            duration_ms: 4.0,
            usage: TokenUsage::default(),
            call,
            sent,
            cost,
            tool_call_ids,
            error: None,
            cached: false,
        }
    }

    #[test]
    fn an_inference_event_says_which_call_it_was() {
        let base = json!({
            "model": "m",
            "engine": "scripted",
            "duration_ms": 4.0,
            "usage": { "prompt_tokens": 0, "completion_tokens": 0 },
            "messages": 2,
            "tools": 0,
            "constraint": null,
            "constrained": false,
            "temperature": null,
            "cost": null,
            "tool_call_ids": [],
            "cached": false,
        });
        let with = |extra: Value| {
            let mut data = base.clone();
            if let (Value::Object(data), Value::Object(extra)) = (&mut data, extra) {
                data.extend(extra);
            }
            data
        };
        for (call, expected) in [
            (ModelCall::Single, base.clone()),
            (ModelCall::Attempt(2), with(json!({ "attempt": 2 }))),
            (ModelCall::Round(3), with(json!({ "round": 3 }))),
            (ModelCall::Vote(4), with(json!({ "vote": 4 }))),
            (
                ModelCall::Route { attempt: 1 },
                with(json!({ "call": "route", "attempt": 1 })),
            ),
            (ModelCall::Synthesis, with(json!({ "call": "synthesis" }))),
            (
                ModelCall::Agent("lookup".into()),
                with(json!({ "call": "agent", "agent": "lookup" })),
            ),
        ] {
            let line = wire(inference(call.clone()));
            assert_eq!(line["kind"], "inference");
            assert_eq!(line["data"], expected, "{call:?}");
        }
        let attempt = serde_json::to_string(&inference(ModelCall::Attempt(2))).expect("json");
        assert_eq!(
            attempt,
            r#"{"kind":"inference","data":{"model":"m","engine":"scripted","duration_ms":4.0,"usage":{"prompt_tokens":0,"completion_tokens":0},"attempt":2,"messages":2,"tools":0,"constraint":null,"constrained":false,"temperature":null,"cost":null,"tool_call_ids":[],"cached":false}}"#
        );
    }

    #[test]
    fn an_inference_event_says_what_was_sent_what_it_cost_and_which_tools_it_called() {
        let sent = Sent {
            messages: 3,
            tools: 2,
            constraint: Some("json_schema"),
            constrained: true,
            temperature: Some(0.7),
            schema_mode: None,
        };
        let cost = Some(Cost::from_amount(0.00045));
        let ids = vec!["call_1".into(), "call_2".into()];
        let data = inference_with(ModelCall::Round(1), sent, cost, ids);
        let line = wire(data);
        assert_eq!(
            line["data"],
            json!({
                "model": "m", "engine": "scripted", "duration_ms": 4.0,
                "usage": { "prompt_tokens": 0, "completion_tokens": 0 },
                "round": 1,
                "messages": 3, "tools": 2, "constraint": "json_schema", "constrained": true,
                "temperature": 0.7, "cost": 0.00045, "tool_call_ids": ["call_1", "call_2"],
                "cached": false,
            })
        );
    }

    #[test]
    fn lifecycle_skips_retries_and_tool_events_keep_their_data_keys() {
        let cases = [
            (
                EventData::Lifecycle {
                    state: Lifecycle::Execute,
                },
                json!({ "kind": "lifecycle", "data": { "state": "EXECUTE" } }),
            ),
            (
                EventData::StepStart { attempt: 1 },
                json!({ "kind": "step_start", "data": { "attempt": 1 } }),
            ),
            (
                EventData::StepRetry {
                    next_attempt: 2,
                    delay_ms: 250,
                    code: FailureCode::InferenceRateLimited,
                },
                json!({ "kind": "step_retry", "data": { "next_attempt": 2, "delay_ms": 250, "code": "INFERENCE_RATE_LIMITED" } }),
            ),
            (
                EventData::StepFeedback {
                    to: "answer".into(),
                    next_attempt: 2,
                    max_attempts: 3,
                    code: FailureCode::ValidationRuleFailed,
                },
                json!({ "kind": "step_feedback", "data": { "to": "answer", "next_attempt": 2, "max_attempts": 3, "code": "VALIDATION_RULE_FAILED" } }),
            ),
            (
                EventData::StepEnd {
                    outcome: StepOutcome::Cancelled,
                    attempt: 1,
                    duration_ms: 3.0,
                },
                json!({ "kind": "step_end", "data": { "status": "cancelled", "attempt": 1, "duration_ms": 3.0 } }),
            ),
            (
                EventData::ToolEnd {
                    tool: "sleep".into(),
                    outcome: ToolOutcome::Cancelled,
                    duration_ms: 7.0,
                    cached: false,
                },
                json!({ "kind": "tool_end", "data": { "tool": "sleep", "status": "cancelled", "duration_ms": 7.0, "cached": false } }),
            ),
            (
                EventData::StepSkipped(SkipReason::When("inputs.go".into())),
                json!({ "kind": "step_skipped", "data": { "when": "inputs.go" } }),
            ),
            (
                EventData::StepSkipped(SkipReason::StandbyFor("vote".into())),
                json!({ "kind": "step_skipped", "data": { "standby_for": "vote" } }),
            ),
            (
                EventData::ToolStart {
                    tool: "calc".into(),
                    args: json!({ "expression": "1+1" }),
                },
                json!({ "kind": "tool_start", "data": { "tool": "calc", "args": { "expression": "1+1" } } }),
            ),
            (
                EventData::ToolEnd {
                    tool: "calc".into(),
                    outcome: ToolOutcome::Ok,
                    duration_ms: 0.5,
                    cached: true,
                },
                json!({ "kind": "tool_end", "data": { "tool": "calc", "status": "ok", "duration_ms": 0.5, "cached": true } }),
            ),
            (
                EventData::ToolEnd {
                    tool: "nope".into(),
                    outcome: ToolOutcome::Refused {
                        error: Failure::new(FailureCode::ToolNotFound, "no tool `nope`")
                            .retryable(false),
                    },
                    duration_ms: 0.0,
                    cached: false,
                },
                json!({ "kind": "tool_end", "data": { "tool": "nope", "status": "refused", "error": { "code": "TOOL_NOT_FOUND", "category": "tool", "message": "no tool `nope`", "retryable": false }, "duration_ms": 0.0, "cached": false } }),
            ),
        ];
        for (data, expected) in cases {
            let line = wire(data);
            assert_eq!(line["kind"], expected["kind"]);
            assert_eq!(line["data"], expected["data"], "{}", expected["kind"]);
        }
        let run_event = Event {
            step: None,
            parent_span: None,
            ..event(EventData::StepStart { attempt: 1 })
        };
        let keys: Vec<String> = serde_json::to_value(run_event)
            .expect("json")
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["run_id", "at_ms", "span", "kind", "data"]);
    }

    #[test]
    fn only_inference_events_count_as_model_calls_and_costs() {
        let events = Events::recording();
        events.lifecycle(Lifecycle::Execute);
        events.emit(
            Some("ask"),
            events.new_span(),
            Some(events.run_span()),
            EventData::StepStart { attempt: 1 },
        );
        assert_eq!(events.model_calls(), 0);
        assert_eq!(events.cost(), None);
        for (call, cost) in [(ModelCall::Single, None), (ModelCall::Round(1), Some(0.25))] {
            let data = inference_with(call, sent(), cost.map(Cost::from_amount), Vec::new());
            events.emit(Some("ask"), events.new_span(), None, data);
        }
        assert_eq!(events.model_calls(), 2);
        assert_eq!(events.cost().map(Cost::amount), Some(0.25));
        assert_eq!(events.recorded().len(), 4);
    }

    #[test]
    fn a_watched_run_shows_its_own_events_to_its_watcher_and_the_others_to_nobody_else() {
        let session = Events::recording();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let watcher: Observer = {
            let seen = Arc::clone(&seen);
            Box::new(move |event: &Event| {
                if let Ok(mut seen) = seen.lock() {
                    seen.push(event.run_id.clone());
                }
            })
        };
        let tokens: TokenSink = Arc::new(|_: &str| {});
        let watched = session.new_run_watched(Watch {
            events: Some(watcher),
            tokens: Some(tokens),
        });
        let other = session.new_run();
        watched.lifecycle(Lifecycle::Execute);
        other.lifecycle(Lifecycle::Execute);
        assert_eq!(*seen.lock().expect("seen"), [watched.run_id().to_string()]);
        assert_eq!(
            session.recorded().len(),
            2,
            "both still reach the session's outputs"
        );
        assert!(watched.tokens().is_some() && other.tokens().is_none());
    }

    #[test]
    fn on_drop_runs_only_when_not_disarmed() {
        let ran = std::sync::atomic::AtomicU32::new(0);
        drop(OnDrop::new(|| {
            ran.fetch_add(1, Ordering::Relaxed);
        }));
        OnDrop::new(|| {
            ran.fetch_add(10, Ordering::Relaxed);
        })
        .disarm();
        assert_eq!(ran.load(Ordering::Relaxed), 1);
    }
}
