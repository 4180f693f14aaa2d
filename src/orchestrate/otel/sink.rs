//! The trace sink: every run's typed events become OpenTelemetry spans named and attributed as
//! the GenAI semantic conventions say — one `invoke_workflow` span per run, one per step attempt
//! (`invoke_agent` for an agent, `retrieval` for retrieve and rerank), one `chat {model}` per
//! model call, one `execute_tool {tool}` per tool call under the chat span that asked for it.
//!
//! Events arrive after the fact (a model call's event comes when it ended, with its duration),
//! so spans are built whole with explicit start and end times and handed to the export queue;
//! ids come from [`span_id`], so a span names its parent before the parent has ended. It counts
//! nothing of its own: tokens, costs and statuses are the events' (the ledger's) numbers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Event as SpanEvent, Link, SpanContext, SpanKind, Status, TraceContextExt, TraceState,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, SamplingDecision, ShouldSample, SpanData, SpanEvents, SpanLinks,
};

use super::SEMCONV_SCHEMA;
use super::content::bounded;
use super::context::{RunTrace, TraceParent, span_id};
use super::export::Queue;
use crate::core::{Failure, FailureCode};
use crate::orchestrate::events::{CallKind, Event, EventData, SpanId, StepOutcome, ToolOutcome};
use crate::orchestrate::record::Lifecycle;
use crate::orchestrate::sinks::EventSink;

/// The OpenInference span kind (`LLM`, `TOOL`, `AGENT`, `CHAIN`, `RETRIEVER`), which Arize
/// Phoenix files spans under, set beside the GenAI attributes.
const SHOWN_AS: &str = "openinference.span.kind";

/// Where a new run's trace comes from.
pub enum Origin {
    /// The session's own run: it continues the session's parent (`TRACEPARENT`) when there is one.
    Session,
    /// A run of its own (a batch row, a test case, a request, a chat turn): it continues
    /// `remote` (a request's `traceparent`) or starts a trace, linked to `link` (the session's
    /// span: a batch's rows link to the batch).
    Own {
        remote: Option<TraceParent>,
        link: Option<SpanContext>,
    },
    /// A run nested in another's step (a sub-plan): the same trace, a child of that step's span.
    Nested(SpanContext),
}

/// What a run is, for its root span: its plan, its steps' types, and attributes its caller gave
/// (a batch row's id, a test case's variant).
#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    pub plan: String,
    pub steps: Vec<(String, &'static str)>,
    pub attributes: Vec<(&'static str, String)>,
}

/// Turns events into spans; see the module docs.
pub struct Tracer {
    /// The sampled runs whose root span has not ended, by run id.
    runs: Mutex<HashMap<String, RunSpans>>,
    queue: Queue,
    sampler: Box<dyn ShouldSample>,
    /// The parent of the session's own run (`TRACEPARENT`).
    session_parent: Option<TraceParent>,
    /// The session's root span's name when it runs no plan of its own (`pagantic batch`).
    session_name: String,
    capture_content: bool,
    scope: InstrumentationScope,
    ids: RandomIdGenerator,
}

/// A sampled run whose root span has not ended.
struct RunSpans {
    trace: RunTrace,
    /// The root span's parent: the caller's remote span, or the step a sub-plan runs in.
    parent: Option<SpanContext>,
    link: Option<SpanContext>,
    info: Option<RunInfo>,
    started: SystemTime,
    /// Step attempts and tool calls that started and have not ended.
    open: HashMap<SpanId, Open>,
    /// Retries, feedback and skips, as events of the root span.
    notes: Vec<SpanEvent>,
    /// The code of the last failure seen, for the root span's `error.type`.
    error: Option<FailureCode>,
}

#[derive(Default)]
struct Open {
    started: Option<SystemTime>,
    /// A step attempt's calls the cache answered.
    cached_calls: u64,
    /// Whether the attempt ran agent rounds.
    agent: bool,
    /// A tool call's arguments (content capture only).
    args: Option<String>,
}

/// A span under construction.
struct Built {
    span: SpanId,
    parent: Option<SpanId>,
    name: String,
    kind: SpanKind,
    started: SystemTime,
    ended: SystemTime,
    attributes: Vec<KeyValue>,
    /// Its `error.type` when it failed: a failure code, or `_OTHER`.
    error: Option<&'static str>,
}

impl Tracer {
    pub fn new(
        queue: Queue,
        sampler: Box<dyn ShouldSample>,
        session_parent: Option<TraceParent>,
        session_name: String,
        capture_content: bool,
    ) -> Self {
        let scope = InstrumentationScope::builder("pagantic")
            .with_version(env!("CARGO_PKG_VERSION"))
            .with_schema_url(SEMCONV_SCHEMA)
            .build();
        Tracer {
            runs: Mutex::new(HashMap::new()),
            queue,
            sampler,
            session_parent,
            session_name,
            capture_content,
            scope,
            ids: RandomIdGenerator::default(),
        }
    }

    /// The trace of run `run_id`, which starts now; a sampled run's spans are kept from here on.
    pub fn open_run(&self, run_id: &str, origin: Origin) -> RunTrace {
        let (parent, link) = match origin {
            Origin::Session => (
                self.session_parent
                    .as_ref()
                    .map(TraceParent::remote_context),
                None,
            ),
            Origin::Own { remote, link } => {
                (remote.as_ref().map(TraceParent::remote_context), link)
            }
            Origin::Nested(step) => (Some(step), None),
        };
        let trace_id = match &parent {
            Some(parent) => parent.trace_id(),
            None => self.ids.new_trace_id(),
        };
        let sampled = match &parent {
            Some(step) if !step.is_remote() => step.is_sampled(),
            _ => {
                let context = parent
                    .as_ref()
                    .map(|p| Context::new().with_remote_span_context(p.clone()));
                let decision = self.sampler.should_sample(
                    context.as_ref(),
                    trace_id,
                    "invoke_workflow",
                    &SpanKind::Internal,
                    &[],
                    &[],
                );
                decision.decision == SamplingDecision::RecordAndSample
            }
        };
        let state = parent
            .as_ref()
            .map_or_else(TraceState::default, |p| p.trace_state().clone());
        let trace = RunTrace {
            trace_id,
            sampled,
            state,
        };
        if sampled && let Ok(mut runs) = self.runs.lock() {
            runs.insert(
                run_id.to_string(),
                RunSpans {
                    trace: trace.clone(),
                    parent,
                    link,
                    info: None,
                    started: SystemTime::now(),
                    open: HashMap::new(),
                    notes: Vec::new(),
                    error: None,
                },
            );
        }
        trace
    }

    /// Says what run `run_id` runs (its root span's name and attributes).
    pub fn describe(&self, run_id: &str, info: RunInfo) {
        if let Ok(mut runs) = self.runs.lock()
            && let Some(run) = runs.get_mut(run_id)
        {
            run.info = Some(info);
        }
    }

    /// Whether spans carry prompts, answers, tool arguments and results.
    pub fn captures_content(&self) -> bool {
        self.capture_content
    }

    /// Stops taking spans: what is queued is still sent.
    pub fn close_queue(&self) {
        self.queue.close();
    }

    /// The span `built` of run `run_id` in `trace`; a root span's parent is `root_parent`.
    fn export(
        &self,
        run_id: &str,
        trace: &RunTrace,
        root_parent: Option<&SpanContext>,
        built: Built,
    ) -> SpanData {
        let context = trace.span_context(run_id, built.span);
        let (parent_span_id, parent_span_is_remote) = match built.parent {
            Some(parent) => (span_id(run_id, parent), false),
            None => root_parent.map_or((opentelemetry::trace::SpanId::INVALID, false), |p| {
                (p.span_id(), p.is_remote())
            }),
        };
        let mut attributes = built.attributes;
        let status = match built.error {
            Some(kind) => {
                attributes.push(KeyValue::new("error.type", kind));
                Status::error(kind)
            }
            None => Status::Unset,
        };
        SpanData {
            span_context: context,
            parent_span_id,
            parent_span_is_remote,
            span_kind: built.kind,
            name: built.name.into(),
            start_time: built.started,
            end_time: built.ended,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        }
    }

    /// The run's root span, ended `now` in `state`.
    fn root_span(&self, run_id: &str, mut run: RunSpans, end: Lifecycle) -> SpanData {
        let now = SystemTime::now();
        let info = run.info.take().unwrap_or_default();
        let (name, mut attributes) = if info.plan.is_empty() {
            (self.session_name.clone(), Vec::new())
        } else {
            (
                format!("invoke_workflow {}", info.plan),
                vec![
                    KeyValue::new("gen_ai.operation.name", "invoke_workflow"),
                    KeyValue::new(SHOWN_AS, "CHAIN"),
                    KeyValue::new("pagantic.plan", info.plan),
                ],
            )
        };
        let status = match end {
            Lifecycle::Error => "error",
            Lifecycle::Cancelled => "cancelled",
            _ => "complete",
        };
        attributes.push(KeyValue::new("pagantic.run_id", run_id.to_string()));
        attributes.push(KeyValue::new("pagantic.status", status));
        for (key, value) in info.attributes {
            attributes.push(KeyValue::new(key, value));
        }
        let error = match end {
            Lifecycle::Error => Some(run.error.map_or("_OTHER", FailureCode::as_str)),
            _ => None,
        };
        let built = Built {
            span: SpanId::RUN,
            parent: None,
            name,
            kind: SpanKind::Internal,
            started: run.started,
            ended: now,
            attributes,
            error,
        };
        let mut span = self.export(run_id, &run.trace, run.parent.as_ref(), built);
        span.events.events = run.notes;
        if let Some(link) = run.link {
            span.links.links.push(Link::with_context(link));
        }
        span
    }

    fn step_span(
        &self,
        event: &Event,
        run: &mut RunSpans,
        outcome: &StepOutcome,
        attempt: u32,
    ) -> Built {
        let now = SystemTime::now();
        let open = run.open.remove(&event.span).unwrap_or_default();
        let step = event.step.clone().unwrap_or_default();
        let kind = run
            .info
            .as_ref()
            .and_then(|info| info.steps.iter().find(|(name, _)| *name == step))
            .map_or("", |(_, kind)| *kind);
        let (name, operation, shown_as) = match kind {
            "agent" => (
                format!("invoke_agent {step}"),
                Some("invoke_agent"),
                "AGENT",
            ),
            "retrieve" | "rerank" => (format!("retrieval {step}"), Some("retrieval"), "RETRIEVER"),
            _ => (format!("step {step}"), None, "CHAIN"),
        };
        let (status, error) = match outcome {
            StepOutcome::Ok { .. } => ("ok", None),
            StepOutcome::Failed { error } => ("failed", Some(error.code)),
            StepOutcome::Cancelled => ("cancelled", None),
        };
        let mut attributes = vec![
            KeyValue::new("pagantic.step.name", step.clone()),
            KeyValue::new("pagantic.step.type", kind),
            KeyValue::new("pagantic.step.attempt", i64::from(attempt)),
            KeyValue::new("pagantic.step.status", status),
            KeyValue::new("pagantic.step.cached_calls", saturating(open.cached_calls)),
            KeyValue::new(SHOWN_AS, shown_as),
        ];
        if let Some(operation) = operation {
            attributes.push(KeyValue::new("gen_ai.operation.name", operation));
        }
        if operation == Some("invoke_agent") || open.agent {
            attributes.push(KeyValue::new("gen_ai.agent.name", step));
        }
        if let Some(code) = error {
            run.error = Some(code);
        }
        Built {
            span: event.span,
            parent: event.parent_span,
            name,
            kind: SpanKind::Internal,
            started: open.started.unwrap_or(now),
            ended: now,
            attributes,
            error: error.map(FailureCode::as_str),
        }
    }

    fn tool_span(
        &self,
        event: &Event,
        run: &mut RunSpans,
        tool: &str,
        outcome: &ToolOutcome,
        cached: bool,
        duration_ms: f64,
    ) -> Built {
        let now = SystemTime::now();
        let open = run.open.remove(&event.span).unwrap_or_default();
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new(SHOWN_AS, "TOOL"),
            KeyValue::new("gen_ai.tool.name", tool.to_string()),
            KeyValue::new("gen_ai.tool.type", "function"),
            KeyValue::new("pagantic.cached", cached),
        ];
        if let Some(id) = &event.tool_call_id {
            attributes.push(KeyValue::new("gen_ai.tool.call.id", id.clone()));
        }
        if let Some(args) = open.args {
            attributes.push(KeyValue::new("gen_ai.tool.call.arguments", args));
        }
        let error = match outcome {
            ToolOutcome::Ok { result } => {
                if self.capture_content {
                    attributes.push(KeyValue::new(
                        "gen_ai.tool.call.result",
                        bounded(&result.text).to_string(),
                    ));
                }
                None
            }
            ToolOutcome::Failed { error } | ToolOutcome::Refused { error } => Some(error.code),
            ToolOutcome::Cancelled => None,
        };
        Built {
            span: event.span,
            parent: event.parent_span,
            name: format!("execute_tool {tool}"),
            kind: SpanKind::Internal,
            started: open.started.unwrap_or_else(|| before(now, duration_ms)),
            ended: now,
            attributes,
            error: error.map(FailureCode::as_str),
        }
    }

    /// The span of a model call, from its `inference` event.
    fn chat_span(&self, event: &Event, run: &mut RunSpans) -> Option<Built> {
        let EventData::Inference {
            model,
            engine,
            duration_ms,
            usage,
            call,
            sent,
            cost,
            error,
            cached,
            cut_off,
            finish_reason,
            content,
            ..
        } = &event.data
        else {
            return None;
        };
        let now = SystemTime::now();
        if let Some(parent) = event.parent_span.and_then(|p| run.open.get_mut(&p)) {
            parent.cached_calls += u64::from(*cached);
            parent.agent |= matches!(call, CallKind::Round(_));
        }
        let provider = match *engine {
            "openai" => "openai".to_string(),
            other => format!("pagantic.{other}"),
        };
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new(SHOWN_AS, "LLM"),
            KeyValue::new("gen_ai.provider.name", provider),
            KeyValue::new("gen_ai.request.model", model.clone()),
            KeyValue::new("gen_ai.usage.input_tokens", saturating(usage.prompt_tokens)),
            KeyValue::new(
                "gen_ai.usage.output_tokens",
                saturating(usage.completion_tokens),
            ),
            KeyValue::new("pagantic.call", call.to_string()),
            KeyValue::new("pagantic.cached", *cached),
        ];
        if let Some(temperature) = sent.temperature {
            attributes.push(KeyValue::new("gen_ai.request.temperature", temperature));
        }
        if let Some(cost) = cost {
            attributes.push(KeyValue::new("pagantic.cost", cost.amount()));
        }
        if let Some(constraint) = sent.constraint {
            attributes.push(KeyValue::new("pagantic.constraint", constraint));
        }
        if let Some(mode) = sent.schema_mode {
            attributes.push(KeyValue::new("pagantic.schema_mode", mode.name()));
        }
        if *cut_off {
            attributes.push(KeyValue::new("pagantic.cut_off", true));
        }
        if let Some(max) = sent.max_tokens {
            attributes.push(KeyValue::new("gen_ai.request.max_tokens", i64::from(max)));
        }
        if let Some(reason) = finish_reason {
            let reasons = Value::Array(vec![opentelemetry::StringValue::from(*reason)].into());
            attributes.push(KeyValue::new("gen_ai.response.finish_reasons", reasons));
        }
        if let Some(content) = content.as_deref().filter(|_| self.capture_content) {
            attributes.push(KeyValue::new(
                "gen_ai.input.messages",
                content.input.clone(),
            ));
            attributes.push(KeyValue::new(
                "gen_ai.output.messages",
                content.output.clone(),
            ));
        }
        Some(Built {
            span: event.span,
            parent: event.parent_span,
            name: format!("chat {model}"),
            kind: SpanKind::Client,
            started: before(now, *duration_ms),
            ended: now,
            attributes,
            error: error
                .as_deref()
                .map(|failure: &Failure| failure.code.as_str()),
        })
    }

    /// A note on the root span: a retry, a feedback loop, a skipped step.
    fn note(event: &Event, run: &mut RunSpans) {
        let step = event.step.clone().unwrap_or_default();
        let (name, mut attributes) = match &event.data {
            EventData::StepRetry {
                next_attempt, code, ..
            } => {
                run.error = Some(*code);
                (
                    "step_retry",
                    vec![
                        KeyValue::new("pagantic.step.next_attempt", i64::from(*next_attempt)),
                        KeyValue::new("error.type", code.as_str()),
                    ],
                )
            }
            EventData::StepFeedback {
                to,
                next_attempt,
                code,
                ..
            } => (
                "step_feedback",
                vec![
                    KeyValue::new("pagantic.step.feedback_to", to.clone()),
                    KeyValue::new("pagantic.step.next_attempt", i64::from(*next_attempt)),
                    KeyValue::new("error.type", code.as_str()),
                ],
            ),
            EventData::StepSkipped(_) => ("step_skipped", Vec::new()),
            _ => return,
        };
        attributes.push(KeyValue::new("pagantic.step.name", step));
        run.notes
            .push(SpanEvent::new(name, SystemTime::now(), attributes, 0));
    }
}

impl EventSink for Arc<Tracer> {
    /// Updates the run's open spans under the lock, and builds and queues a finished span
    /// outside it, so runs on other threads wait only for the bookkeeping.
    fn receive(&self, event: &Event) {
        let run_id = event.run_id.as_str();
        let Ok(mut runs) = self.runs.lock() else {
            return;
        };
        if let EventData::Lifecycle { state } = &event.data {
            let ended = matches!(
                state,
                Lifecycle::Complete | Lifecycle::Error | Lifecycle::Cancelled
            );
            if ended && let Some(run) = runs.remove(run_id) {
                drop(runs);
                self.queue.push(self.root_span(run_id, run, *state));
            }
            return;
        }
        let Some(run) = runs.get_mut(run_id) else {
            return;
        };
        let Some(built) = self.built(event, run) else {
            return;
        };
        let trace = run.trace.clone();
        drop(runs);
        self.queue.push(self.export(run_id, &trace, None, built));
    }
}

impl Tracer {
    /// What `event` ends, if it ends a span (it opens one, or adds to the run, otherwise).
    fn built(&self, event: &Event, run: &mut RunSpans) -> Option<Built> {
        match &event.data {
            EventData::StepStart { .. } => {
                let open = Open {
                    started: Some(SystemTime::now()),
                    ..Open::default()
                };
                run.open.insert(event.span, open);
                None
            }
            EventData::StepEnd {
                outcome, attempt, ..
            } => Some(self.step_span(event, run, outcome, *attempt)),
            EventData::ToolStart { args, .. } => {
                let args = self
                    .capture_content
                    .then(|| bounded(&args.to_string()).to_string());
                let open = Open {
                    started: Some(SystemTime::now()),
                    args,
                    ..Open::default()
                };
                run.open.insert(event.span, open);
                None
            }
            EventData::ToolEnd {
                tool,
                outcome,
                cached,
                duration_ms,
            } => Some(self.tool_span(event, run, tool, outcome, *cached, *duration_ms)),
            EventData::Inference { .. } => self.chat_span(event, run),
            _ => {
                Tracer::note(event, run);
                None
            }
        }
    }
}

/// The moment `duration_ms` before `end`.
fn before(end: SystemTime, duration_ms: f64) -> SystemTime {
    let took = Duration::try_from_secs_f64(duration_ms.max(0.0) / 1000.0).unwrap_or_default();
    end.checked_sub(took).unwrap_or(end)
}

/// A count as an attribute value.
fn saturating(count: u64) -> Value {
    Value::I64(i64::try_from(count).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use opentelemetry_sdk::trace::Sampler;
    use serde_json::json;
    use tokio::sync::mpsc;

    use super::*;
    use crate::core::TokenUsage;
    use crate::orchestrate::emit::Events;
    use crate::orchestrate::events::{Sent, ToolResult};
    use crate::orchestrate::otel::export;
    use crate::orchestrate::sinks::Sinks;

    /// The events of a session whose spans go to the returned receiver.
    fn traced(sampler: Sampler) -> (Events, mpsc::Receiver<SpanData>) {
        let (queue, receiver) = export::queue(100);
        let name = "pagantic test".to_string();
        let tracer = Arc::new(Tracer::new(queue, Box::new(sampler), None, name, false));
        let sinks = Sinks::default().with(Arc::clone(&tracer));
        (Events::traced(Arc::new(sinks), Some(tracer)), receiver)
    }

    fn spans(receiver: &mut mpsc::Receiver<SpanData>) -> Vec<SpanData> {
        std::iter::from_fn(|| receiver.try_recv().ok()).collect()
    }

    fn info(plan: &str, steps: &[(&str, &'static str)]) -> RunInfo {
        RunInfo {
            plan: plan.into(),
            steps: steps.iter().map(|(n, k)| (n.to_string(), *k)).collect(),
            attributes: vec![("pagantic.batch.row", "7".into())],
        }
    }

    fn end(events: &Events, step: &str, span: SpanId) {
        let data = EventData::StepEnd {
            outcome: StepOutcome::Ok {
                usage: TokenUsage::default(),
            },
            attempt: 1,
            duration_ms: 1.0,
        };
        events.emit(Some(step), span, Some(SpanId::RUN), data);
    }

    fn chat(events: &Events, step: &str, span: SpanId, parent: SpanId) {
        let data = EventData::Inference {
            model: "m".into(),
            engine: "scripted",
            duration_ms: 2.0,
            usage: TokenUsage {
                prompt_tokens: 5,
                completion_tokens: 3,
                ..TokenUsage::default()
            },
            tokens_per_second: None,
            context_window: None,
            call: CallKind::Round(1),
            sent: Sent {
                messages: 1,
                tools: 1,
                constraint: None,
                constrained: false,
                temperature: Some(0.2),
                schema_mode: None,
                max_tokens: Some(64),
            },
            cost: None,
            tool_call_ids: vec!["call_1".into()],
            error: None,
            cached: true,
            cut_off: false,
            finish_reason: Some("tool_call"),
            content: None,
        };
        events.emit(Some(step), span, Some(parent), data);
    }

    fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no `{name}` in {spans:#?}"))
    }

    #[test]
    fn a_run_s_spans_hang_from_their_parents_and_a_sub_plan_from_its_step() {
        let (session, mut receiver) = traced(Sampler::AlwaysOn);
        session.describe(|| info("main", &[("solve", "agent"), ("route", "route")]));
        let solve = session.new_span();
        session.emit(
            Some("solve"),
            solve,
            Some(SpanId::RUN),
            EventData::StepStart { attempt: 1 },
        );
        let call = session.new_span();
        chat(&session, "solve", call, solve);
        let tool = session.new_span();
        session.emit(
            Some("solve"),
            tool,
            Some(call),
            EventData::ToolStart {
                tool: "calc".into(),
                args: json!({ "expression": "1+1" }),
            },
        );
        let result = ToolResult::of(&json!(2));
        session.emit(
            Some("solve"),
            tool,
            Some(call),
            EventData::ToolEnd {
                tool: "calc".into(),
                outcome: ToolOutcome::Ok { result },
                duration_ms: 0.5,
                cached: false,
            },
        );
        end(&session, "solve", solve);
        let route = session.new_span();
        session.emit(
            Some("route"),
            route,
            Some(SpanId::RUN),
            EventData::StepStart { attempt: 1 },
        );
        let nested = session.nested_run(route);
        nested.describe(|| info("sub", &[("inner", "infer")]));
        nested.lifecycle(Lifecycle::Execute);
        let inner = nested.new_span();
        nested.emit(
            Some("inner"),
            inner,
            Some(SpanId::RUN),
            EventData::StepStart { attempt: 1 },
        );
        end(&nested, "inner", inner);
        nested.lifecycle(Lifecycle::Complete);
        end(&session, "route", route);
        session.lifecycle(Lifecycle::Complete);
        let spans = spans(&mut receiver);
        assert_eq!(spans.len(), 7, "{spans:#?}");
        let root = named(&spans, "invoke_workflow main");
        assert_eq!(root.parent_span_id, opentelemetry::trace::SpanId::INVALID);
        assert!(
            root.attributes
                .contains(&KeyValue::new("pagantic.batch.row", "7"))
        );
        assert!(
            spans
                .iter()
                .all(|s| s.span_context.trace_id() == root.span_context.trace_id())
        );
        let agent = named(&spans, "invoke_agent solve");
        assert_eq!(agent.parent_span_id, root.span_context.span_id());
        assert!(
            agent
                .attributes
                .contains(&KeyValue::new("pagantic.step.cached_calls", 1))
        );
        let chat = named(&spans, "chat m");
        assert_eq!(chat.parent_span_id, agent.span_context.span_id());
        assert!(
            chat.attributes
                .contains(&KeyValue::new("gen_ai.usage.output_tokens", 3))
        );
        assert!(
            chat.attributes
                .contains(&KeyValue::new("gen_ai.request.temperature", 0.2))
        );
        assert!(
            chat.attributes
                .contains(&KeyValue::new("gen_ai.request.max_tokens", 64))
        );
        let reasons = Value::Array(vec![opentelemetry::StringValue::from("tool_call")].into());
        assert!(
            chat.attributes
                .contains(&KeyValue::new("gen_ai.response.finish_reasons", reasons))
        );
        let tool = named(&spans, "execute_tool calc");
        assert_eq!(tool.parent_span_id, chat.span_context.span_id());
        assert!(
            tool.attributes
                .iter()
                .all(|kv| kv.key.as_str() != "gen_ai.tool.call.arguments")
        );
        let step = named(&spans, "step route");
        let sub = named(&spans, "invoke_workflow sub");
        assert_eq!(sub.parent_span_id, step.span_context.span_id());
        assert!(!sub.parent_span_is_remote);
        assert_eq!(
            named(&spans, "step inner").parent_span_id,
            sub.span_context.span_id()
        );
        assert_eq!(
            session.trace_id(),
            Some(root.span_context.trace_id().to_string())
        );
    }

    #[test]
    fn an_unsampled_trace_exports_nothing_but_keeps_its_id() {
        let (session, mut receiver) = traced(Sampler::AlwaysOff);
        session.describe(|| info("main", &[]));
        session.lifecycle(Lifecycle::Execute);
        session.lifecycle(Lifecycle::Complete);
        assert!(spans(&mut receiver).is_empty());
        let traceparent = session.traceparent(SpanId::RUN).expect("a context");
        assert!(traceparent.ends_with("-00"), "{traceparent}");
        assert!(session.trace_id().is_some());
    }
}
