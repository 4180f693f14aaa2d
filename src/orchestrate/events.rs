//! Run events: one per lifecycle transition, step start/end/retry/skip/feedback, model call and
//! tool call, each with the run id, the step, its span and parent span (and the tool_call_id for
//! tool events), written as JSON Lines when `--events FILE` is given. Every start has its end: an
//! attempt or tool call stopped mid-flight ends with status `cancelled`.
//!
//! What an event says is a typed [`EventData`] variant, written as the line's `kind` and `data`
//! keys: emitters cannot misspell a field, and readers (progress lines, the chat's tool lines)
//! match on variants instead of looking up JSON keys.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::Value;

use super::record::Lifecycle;
use crate::core::{Cost, Failure, FailureCode, Message, Timestamp, TokenUsage, ToolCall};
use crate::inference::{ModelInfo, Response, SchemaMode, TokenSink};
use crate::tool::Enforcement;

/// An id for a span of work (the run, a step attempt, a model or tool call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(u64);

impl SpanId {
    /// The span of a run itself (its lifecycle events).
    pub const RUN: SpanId = SpanId(0);

    /// The span numbered `n` in its run (the run's own is 0).
    pub(super) fn numbered(n: u64) -> SpanId {
        SpanId(n)
    }

    /// Its number in its run.
    pub fn number(self) -> u64 {
        self.0
    }
}

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
    /// A model was loaded (a local model's file read) before a call could run, for
    /// `duration_ms`: the load's own time, left out of the call's `duration_ms` and rate. A
    /// child of the call's span.
    ModelLoad {
        model: String,
        /// The model's key in the plan's `models:`.
        #[serde(skip_serializing_if = "Option::is_none")]
        model_key: Option<String>,
        engine: &'static str,
        duration_ms: f64,
    },
    /// A model call.
    Inference {
        model: String,
        /// The model's key in the plan's `models:` (beside `model`, its engine's name for it).
        #[serde(skip_serializing_if = "Option::is_none")]
        model_key: Option<String>,
        engine: &'static str,
        duration_ms: f64,
        usage: TokenUsage,
        /// Completion tokens per second of the call's own time; absent when the cache answered
        /// or the answer had no tokens.
        #[serde(skip_serializing_if = "Option::is_none")]
        tokens_per_second: Option<f64>,
        /// What the call waited for its model's rate limit (or a server's `Retry-After`), in
        /// milliseconds (at most 2^32-1): not part of `duration_ms`. Absent when it did not wait.
        #[serde(skip_serializing_if = "Option::is_none")]
        rate_limit_wait_ms: Option<u32>,
        /// What the call waited for its model to load (a local model's first call), in
        /// milliseconds: not part of `duration_ms` nor of `tokens_per_second` (the load has its
        /// own `model_load` event). Absent when it did not wait.
        #[serde(skip_serializing_if = "Option::is_none")]
        model_load_ms: Option<u32>,
        /// The most tokens one call of the model may hold, when its engine knows.
        #[serde(skip_serializing_if = "Option::is_none")]
        context_window: Option<u64>,
        #[serde(flatten)]
        call: CallKind,
        #[serde(flatten)]
        sent: Sent,
        /// What the call cost at the model's declared price; null for an unpriced model.
        cost: Option<Cost>,
        /// The ids of the tool calls the answer made (their tool events carry them as
        /// `tool_call_id`, and are children of this call's span).
        tool_call_ids: Vec<String>,
        /// Why the call failed, when the engine gave no answer (then usage is zero); boxed, as
        /// most calls answer.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<Box<Failure>>,
        /// Whether the call cache answered it (then no model was called: `usage` is what the
        /// cached call used, and it cost nothing).
        cached: bool,
        /// The call was stopped before it answered (the run cancelled, the step's timeout):
        /// what it used is unknown, so `usage` is zero.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        cut_off: bool,
        /// Why the answer ended (`stop`, `length`, `tool_call`), as the GenAI conventions name
        /// it; absent when the call gave no answer.
        #[serde(skip_serializing_if = "Option::is_none")]
        finish_reason: Option<&'static str>,
        /// The call's messages and answer, only when the session captures content for its
        /// traces; never written to the events file.
        #[serde(skip)]
        content: Option<Arc<CallContent>>,
    },
    /// A tool call started.
    ToolStart {
        tool: String,
        args: Value,
        /// What the tool's processes may reach and what of that is enforced here (for a tool
        /// that starts processes: a command, a stdio MCP server).
        #[serde(skip_serializing_if = "Option::is_none")]
        sandbox: Option<Enforcement>,
    },
    /// A tool call ended (or was refused before it ran).
    ToolEnd {
        tool: String,
        #[serde(flatten)]
        outcome: ToolOutcome,
        duration_ms: f64,
        /// Whether the call cache answered it (then the tool did not run).
        cached: bool,
    },
    /// A route step chose its agents, before the first of them starts: how they run
    /// (`single`, `parallel`, `sequential`), which agents in the route's order, and why.
    RouteDecision {
        mode: String,
        agents: Vec<String>,
        /// The router's reason, when it gave one.
        #[serde(skip_serializing_if = "Option::is_none")]
        rationale: Option<String>,
    },
    /// A routed agent started, with the arguments the router gave it; `index` is its place in
    /// the route (from 0). Its tool call, model call or sub-plan run are children of its span.
    AgentStart {
        agent: String,
        index: usize,
        args: Value,
    },
    /// A routed agent ended: with its result, its error, not run at all (`skipped`), or
    /// `cancelled` while it ran.
    AgentEnd {
        agent: String,
        index: usize,
        #[serde(flatten)]
        outcome: AgentOutcome,
        duration_ms: f64,
    },
}

/// How a routed agent ended: `"status": "ok"` with its result (bounded as a tool's is),
/// `"failed"` with the error, `"skipped"` when an earlier agent of its sequence failed (`after`
/// names it; a skipped agent has no start), or `"cancelled"` when the step was stopped while it
/// ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum AgentOutcome {
    Ok { result: ToolResult },
    Failed { error: Failure },
    Skipped { after: String },
    Cancelled,
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

impl EventData {
    /// The `inference` event of a model call stopped `after` it started, before it answered.
    pub fn cut_off(
        info: ModelInfo,
        after: std::time::Duration,
        call: CallKind,
        sent: Sent,
    ) -> EventData {
        EventData::Inference {
            model: info.name,
            model_key: info.key,
            engine: info.engine,
            duration_ms: after.as_secs_f64() * 1000.0,
            usage: TokenUsage::default(),
            tokens_per_second: None,
            rate_limit_wait_ms: None,
            model_load_ms: None,
            context_window: None,
            call,
            sent,
            cost: None,
            tool_call_ids: Vec::new(),
            error: None,
            cached: false,
            cut_off: true,
            finish_reason: None,
            content: None,
        }
    }
}

/// How a tool call ended: `"status": "ok"`, `"failed"` with the error, `"refused"` with the
/// reason it never ran (an unknown tool, arguments its schema refuses), or `"cancelled"` when the
/// step calling it was stopped while the tool ran (Ctrl-C, SIGTERM, the step's timeout).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ToolOutcome {
    /// It answered: what it returned, bounded.
    Ok {
        result: ToolResult,
    },
    Failed {
        error: Failure,
    },
    Refused {
        error: Failure,
    },
    Cancelled,
}

/// What a tool call returned, as events and step details keep it: its text (a string result as
/// it is, any other value as JSON), its whole size, and whether the text was cut to
/// [`ToolResult::LIMIT`] bytes — so a record shows what a model was told without holding a
/// command's megabytes of output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResult {
    /// The result's text, whole or cut.
    pub text: String,
    /// The whole text's size in bytes.
    pub bytes: usize,
    /// Whether `text` is only the first [`ToolResult::LIMIT`] bytes (cut at a character
    /// boundary).
    pub truncated: bool,
}

impl ToolResult {
    /// Most bytes of a result's text kept.
    pub const LIMIT: usize = 4096;

    /// The bounded record of `value`.
    pub fn of(value: &Value) -> Self {
        let mut text = match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        let bytes = text.len();
        let truncated = bytes > Self::LIMIT;
        if truncated {
            let cut = (0..=Self::LIMIT)
                .rev()
                .find(|&at| text.is_char_boundary(at))
                .unwrap_or(0);
            text.truncate(cut);
        }
        ToolResult {
            text,
            bytes,
            truncated,
        }
    }
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
pub enum CallKind {
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

impl std::fmt::Display for CallKind {
    /// The call in words, as a run record lists the calls the cache answered: `call`,
    /// `attempt 2`, `round 3`, `vote 1`, `route attempt 1`, `synthesis`, `agent lookup`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallKind::Single => f.write_str("call"),
            CallKind::Attempt(n) => write!(f, "attempt {n}"),
            CallKind::Round(n) => write!(f, "round {n}"),
            CallKind::Vote(n) => write!(f, "vote {n}"),
            CallKind::Route { attempt } => write!(f, "route attempt {attempt}"),
            CallKind::Synthesis => f.write_str("synthesis"),
            CallKind::Agent(name) => write!(f, "agent {name}"),
        }
    }
}

impl Serialize for CallKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match self {
            CallKind::Single => {}
            CallKind::Attempt(attempt) => map.serialize_entry("attempt", attempt)?,
            CallKind::Round(round) => map.serialize_entry("round", round)?,
            CallKind::Vote(vote) => map.serialize_entry("vote", vote)?,
            CallKind::Route { attempt } => {
                map.serialize_entry("call", "route")?;
                map.serialize_entry("attempt", attempt)?;
            }
            CallKind::Synthesis => map.serialize_entry("call", "synthesis")?,
            CallKind::Agent(name) => {
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
    /// The most tokens the answer may have, when the request set it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

/// A model call's messages and answer, for its trace: kept only when content capture is on (the
/// trace exporter writes them in the GenAI conventions' message format).
#[derive(Debug, Clone, PartialEq)]
pub struct CallContent {
    /// The messages the call sent.
    pub messages: Vec<Message>,
    /// The answer's text and tool calls.
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
}

impl CallContent {
    /// What a call that sent `messages` and got `response` keeps for its trace.
    pub fn of(messages: Vec<Message>, response: &Response) -> CallContent {
        CallContent {
            messages,
            text: response.text.clone(),
            tool_calls: response.tool_calls.clone(),
        }
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub run_id: String,
    /// When it happened, by the wall clock (RFC 3339, UTC, milliseconds).
    pub at: Timestamp,
    /// Milliseconds since the run started.
    pub at_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    pub span: SpanId,
    /// The span this one is part of; for the run-level events of a nested run (a sub-plan), the
    /// span of the step in `parent_run_id`'s run that started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_span: Option<SpanId>,
    /// The run that started this one, for every event of a nested run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The id the run's caller gave it (`serve`'s `X-Request-Id`), on every event of that run and
    /// of its nested runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The `kind` and `data` keys.
    #[serde(flatten)]
    pub data: EventData,
}

/// Called with every event (e.g. to print progress).
pub type Observer = Box<dyn Fn(&Event) + Send + Sync>;

/// What one run shows whoever watches it alone (a server's client), besides the session's
/// sinks: its events as they happen, and the text its streamed steps generate — the steps built
/// to stream (see `BuildOptions::stream`) send their tokens here as well as to the build's sink.
#[derive(Default)]
pub struct Watch {
    pub events: Option<Observer>,
    pub tokens: Option<TokenSink>,
    /// The id the watcher knows the run by (`serve`'s `X-Request-Id`), set on its events.
    pub request_id: Option<String>,
}

/// Hands out run ids: time and process, unique enough to tell runs apart in logs (also a chat
/// session's). A session's runs share one, so no two of its runs in the same nanosecond get the
/// same id; the process id is read once.
#[derive(Debug)]
pub struct RunIds {
    process: u32,
    count: AtomicU64,
}

impl Default for RunIds {
    fn default() -> Self {
        RunIds {
            process: std::process::id(),
            count: AtomicU64::new(0),
        }
    }
}

impl RunIds {
    /// The next id.
    pub fn next(&self) -> String {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let count = self.count.fetch_add(1, Ordering::Relaxed);
        format!(
            "{:012x}-{:04x}{:02x}",
            nanos & 0xffff_ffff_ffff,
            self.process & 0xffff,
            count & 0xff
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::FailureCode;

    #[test]
    fn run_ids_differ_and_name_the_process() {
        let ids = RunIds::default();
        let (first, second) = (ids.next(), ids.next());
        assert_ne!(first, second);
        assert_eq!(first.len(), "000000000000-000000".len());
        let process = format!("{:04x}", std::process::id() & 0xffff);
        assert_eq!(&first[13..17], process);
        assert_eq!((&first[17..], &second[17..]), ("00", "01"));
    }

    fn event(data: EventData) -> Event {
        Event {
            run_id: "r1".into(),
            at: Timestamp::at(UNIX_EPOCH + std::time::Duration::from_millis(1_500)),
            at_ms: 1.5,
            step: Some("ask".into()),
            span: SpanId(2),
            parent_span: Some(SpanId(0)),
            parent_run_id: None,
            tool_call_id: None,
            request_id: None,
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
            r#"{"run_id":"r1","at":"1970-01-01T00:00:01.500Z","at_ms":1.5,"step":"ask","span":"00000002","parent_span":"00000000","kind":"step_end","data":{"status":"failed","error":{"code":"INFERENCE_TIMEOUT","category":"inference","message":"too slow","retryable":true},"attempt":2,"duration_ms":12.5}}"#
        );
        let ok = EventData::StepEnd {
            outcome: StepOutcome::Ok {
                usage: TokenUsage {
                    prompt_tokens: 3,
                    completion_tokens: 4,
                    reasoning_tokens: None,
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
            max_tokens: None,
        }
    }

    fn inference(call: CallKind) -> EventData {
        inference_with(call, sent(), None, Vec::new())
    }

    fn inference_with(
        call: CallKind,
        sent: Sent,
        cost: Option<Cost>,
        tool_call_ids: Vec<String>,
    ) -> EventData {
        EventData::Inference {
            model: "m".into(),
            model_key: None,
            engine: "scripted",
            duration_ms: 4.0,
            usage: TokenUsage::default(),
            tokens_per_second: None,
            rate_limit_wait_ms: None,
            model_load_ms: None,
            context_window: None,
            call,
            sent,
            cost,
            tool_call_ids,
            error: None,
            cached: false,
            cut_off: false,
            finish_reason: None,
            content: None,
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
            (CallKind::Single, base.clone()),
            (CallKind::Attempt(2), with(json!({ "attempt": 2 }))),
            (CallKind::Round(3), with(json!({ "round": 3 }))),
            (CallKind::Vote(4), with(json!({ "vote": 4 }))),
            (
                CallKind::Route { attempt: 1 },
                with(json!({ "call": "route", "attempt": 1 })),
            ),
            (CallKind::Synthesis, with(json!({ "call": "synthesis" }))),
            (
                CallKind::Agent("lookup".into()),
                with(json!({ "call": "agent", "agent": "lookup" })),
            ),
        ] {
            let line = wire(inference(call.clone()));
            assert_eq!(line["kind"], "inference");
            assert_eq!(line["data"], expected, "{call:?}");
        }
        let attempt = serde_json::to_string(&inference(CallKind::Attempt(2))).expect("json");
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
            max_tokens: None,
        };
        let cost = Some(Cost::from_amount(0.00045));
        let ids = vec!["call_1".into(), "call_2".into()];
        let data = inference_with(CallKind::Round(1), sent, cost, ids);
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
                    sandbox: None,
                },
                json!({ "kind": "tool_start", "data": { "tool": "calc", "args": { "expression": "1+1" } } }),
            ),
            (
                EventData::ToolEnd {
                    tool: "calc".into(),
                    outcome: ToolOutcome::Ok {
                        result: ToolResult::of(&json!({ "result": 4 })),
                    },
                    duration_ms: 0.5,
                    cached: true,
                },
                json!({ "kind": "tool_end", "data": { "tool": "calc", "status": "ok", "result": { "text": "{\"result\":4}", "bytes": 12, "truncated": false }, "duration_ms": 0.5, "cached": true } }),
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
        assert_eq!(keys, ["run_id", "at", "at_ms", "span", "kind", "data"]);
    }

    #[test]
    fn a_route_s_decision_and_its_agents_keep_their_data_keys() {
        let decision = EventData::RouteDecision {
            mode: "parallel".into(),
            agents: vec!["pricing".into(), "stock".into()],
            rationale: None,
        };
        assert_eq!(
            wire(decision),
            json!({ "run_id": "r1", "at": "1970-01-01T00:00:01.500Z", "at_ms": 1.5, "step": "ask", "span": "00000002", "parent_span": "00000000", "kind": "route_decision", "data": { "mode": "parallel", "agents": ["pricing", "stock"] } })
        );
        let ends = [
            (
                AgentOutcome::Ok {
                    result: ToolResult::of(&json!("12 in stock")),
                },
                json!({ "status": "ok", "result": { "text": "12 in stock", "bytes": 11, "truncated": false } }),
            ),
            (
                AgentOutcome::Skipped {
                    after: "search".into(),
                },
                json!({ "status": "skipped", "after": "search" }),
            ),
            (AgentOutcome::Cancelled, json!({ "status": "cancelled" })),
        ];
        for (outcome, mut expected) in ends {
            let end = EventData::AgentEnd {
                agent: "stock".into(),
                index: 1,
                outcome,
                duration_ms: 2.0,
            };
            if let Value::Object(fields) = &mut expected {
                fields.extend([
                    ("agent".to_string(), json!("stock")),
                    ("index".to_string(), json!(1)),
                    ("duration_ms".to_string(), json!(2.0)),
                ]);
            }
            let line = wire(end);
            assert_eq!(line["kind"], "agent_end");
            assert_eq!(line["data"], expected);
        }
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

    #[test]
    fn a_tool_result_is_kept_whole_up_to_the_limit_then_cut_at_a_character() {
        let short = ToolResult::of(&json!({ "result": 42 }));
        assert_eq!(
            (short.text.as_str(), short.bytes, short.truncated),
            ("{\"result\":42}", 13, false)
        );
        // 4095 ASCII bytes, then a three-byte character across the limit: cut before it.
        let long = format!("{}€tail", "a".repeat(ToolResult::LIMIT - 1));
        let cut = ToolResult::of(&Value::String(long.clone()));
        assert_eq!((cut.bytes, cut.truncated), (long.len(), true));
        assert_eq!(cut.text, "a".repeat(ToolResult::LIMIT - 1));
        let exact = ToolResult::of(&Value::String("b".repeat(ToolResult::LIMIT)));
        assert!(!exact.truncated);
    }
}
