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

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanKind, TraceContextExt, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SamplingDecision, ShouldSample};

use super::content::bounded;
use super::context::{RunTrace, TraceParent};
use super::export::Queue;
use super::wire::{Attr, Attributes, Kind, Link, Of, Span, SpanEvent};
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
    queue: Arc<Queue>,
    sampler: Box<dyn ShouldSample>,
    /// The parent of the session's own run (`TRACEPARENT`).
    session_parent: Option<TraceParent>,
    /// The session's root span's name when it runs no plan of its own (`pagantic batch`).
    session_name: String,
    capture_content: bool,
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

/// A span under construction, its name's parts borrowed from the event or run it comes from.
struct Built<'a> {
    span: SpanId,
    parent: Option<SpanId>,
    name: (&'static str, &'a str),
    kind: Kind,
    started: SystemTime,
    ended: SystemTime,
    attributes: Attributes,
    /// Its `error.type` when it failed: a failure code, or `_OTHER`.
    error: Option<&'static str>,
}

impl Tracer {
    pub fn new(
        queue: Arc<Queue>,
        sampler: Box<dyn ShouldSample>,
        session_parent: Option<TraceParent>,
        session_name: String,
        capture_content: bool,
    ) -> Self {
        Tracer {
            runs: Mutex::new(HashMap::new()),
            queue,
            sampler,
            session_parent,
            session_name,
            capture_content,
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
        let trace = RunTrace::new(run_id, trace_id, sampled, state);
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

    /// The encoded span `built` of a run in `trace`, with `events` and `links`; a root span's
    /// parent is `root_parent`.
    fn export(
        &self,
        trace: &RunTrace,
        root_parent: Option<&SpanContext>,
        built: Built,
        events: &[SpanEvent],
        links: &[Link],
    ) -> Vec<u8> {
        let (parent, remote) = match built.parent {
            Some(parent) => (Some(trace.span_id(parent)), false),
            None => root_parent.map_or((None, false), |p| (Some(p.span_id()), p.is_remote())),
        };
        let mut attributes = built.attributes;
        if let Some(kind) = built.error {
            attributes.str("error.type", kind);
        }
        let trace_state = trace.state.header();
        Span {
            trace_id: trace.trace_id.to_bytes(),
            span_id: trace.span_id(built.span).to_bytes(),
            parent_span_id: parent.map(|id| id.to_bytes()),
            trace_state: &trace_state,
            // Only sampled runs are exported: their trace flags are 01.
            flags: span_flags(0x01, remote),
            name: built.name,
            kind: built.kind,
            start: built.started,
            end: built.ended,
            events,
            links,
            error: built.error,
        }
        .encode(attributes)
    }

    /// The run's root span, ended `now` in `state`.
    fn root_span(&self, run_id: &str, mut run: RunSpans, end: Lifecycle) -> Vec<u8> {
        let now = SystemTime::now();
        let info = run.info.take().unwrap_or_default();
        let mut attributes = Attributes::new(Of::Span);
        let name = if info.plan.is_empty() {
            ("", self.session_name.as_str())
        } else {
            attributes.str("gen_ai.operation.name", "invoke_workflow");
            attributes.str(SHOWN_AS, "CHAIN");
            attributes.str("pagantic.plan", &info.plan);
            ("invoke_workflow ", info.plan.as_str())
        };
        let status = match end {
            Lifecycle::Error => "error",
            Lifecycle::Cancelled => "cancelled",
            _ => "complete",
        };
        attributes.str("pagantic.run_id", run_id);
        attributes.str("pagantic.status", status);
        for (key, value) in &info.attributes {
            attributes.str(key, value);
        }
        let error = match end {
            Lifecycle::Error => Some(run.error.map_or("_OTHER", FailureCode::as_str)),
            _ => None,
        };
        let built = Built {
            span: SpanId::RUN,
            parent: None,
            name,
            kind: Kind::Internal,
            started: run.started,
            ended: now,
            attributes,
            error,
        };
        let links: Vec<Link> = run
            .link
            .iter()
            .map(|link| Link {
                trace_id: link.trace_id().to_bytes(),
                span_id: link.span_id().to_bytes(),
                flags: span_flags(u32::from(link.trace_flags().to_u8()), link.is_remote()),
            })
            .collect();
        let parent = run.parent.as_ref();
        self.export(&run.trace, parent, built, &run.notes, &links)
    }

    fn step_span<'a>(
        &self,
        event: &'a Event,
        ending: Ending,
        outcome: &StepOutcome,
        attempt: u32,
    ) -> Built<'a> {
        let now = SystemTime::now();
        let Ending { open, kind } = ending;
        let step = event.step.as_deref().unwrap_or_default();
        let (name, operation, shown_as) = match kind {
            "agent" => ("invoke_agent ", Some("invoke_agent"), "AGENT"),
            "retrieve" | "rerank" => ("retrieval ", Some("retrieval"), "RETRIEVER"),
            _ => ("step ", None, "CHAIN"),
        };
        let (status, error) = match outcome {
            StepOutcome::Ok { .. } => ("ok", None),
            StepOutcome::Failed { error } => ("failed", Some(error.code)),
            StepOutcome::Cancelled => ("cancelled", None),
        };
        let mut attributes = Attributes::new(Of::Span);
        attributes.str("pagantic.step.name", step);
        attributes.str("pagantic.step.type", kind);
        attributes.int("pagantic.step.attempt", i64::from(attempt));
        attributes.str("pagantic.step.status", status);
        attributes.count("pagantic.step.cached_calls", open.cached_calls);
        attributes.str(SHOWN_AS, shown_as);
        if let Some(operation) = operation {
            attributes.str("gen_ai.operation.name", operation);
        }
        if operation == Some("invoke_agent") || open.agent {
            attributes.str("gen_ai.agent.name", step);
        }
        Built {
            span: event.span,
            parent: event.parent_span,
            name: (name, step),
            kind: Kind::Internal,
            started: open.started.unwrap_or(now),
            ended: now,
            attributes,
            error: error.map(FailureCode::as_str),
        }
    }

    fn tool_span<'a>(
        &self,
        event: &Event,
        open: Open,
        tool: &'a str,
        outcome: &ToolOutcome,
        cached: bool,
        duration_ms: f64,
    ) -> Built<'a> {
        let now = SystemTime::now();
        let mut attributes = Attributes::new(Of::Span);
        attributes.str("gen_ai.operation.name", "execute_tool");
        attributes.str(SHOWN_AS, "TOOL");
        attributes.str("gen_ai.tool.name", tool);
        attributes.str("gen_ai.tool.type", "function");
        attributes.bool("pagantic.cached", cached);
        if let Some(id) = &event.tool_call_id {
            attributes.str("gen_ai.tool.call.id", id);
        }
        if let Some(args) = &open.args {
            attributes.str("gen_ai.tool.call.arguments", args);
        }
        let error = match outcome {
            ToolOutcome::Ok { result } => {
                if self.capture_content {
                    attributes.str("gen_ai.tool.call.result", bounded(&result.text));
                }
                None
            }
            ToolOutcome::Failed { error } | ToolOutcome::Refused { error } => Some(error.code),
            ToolOutcome::Cancelled => None,
        };
        Built {
            span: event.span,
            parent: event.parent_span,
            name: ("execute_tool ", tool),
            kind: Kind::Internal,
            started: open.started.unwrap_or_else(|| before(now, duration_ms)),
            ended: now,
            attributes,
            error: error.map(FailureCode::as_str),
        }
    }

    /// The span of a model call, from its `inference` event.
    fn chat_span<'a>(&self, event: &'a Event) -> Option<Built<'a>> {
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
        let mut attributes = Attributes::new(Of::Span);
        attributes.str("gen_ai.operation.name", "chat");
        attributes.str(SHOWN_AS, "LLM");
        match *engine {
            "openai" => attributes.str("gen_ai.provider.name", "openai"),
            other => attributes.str("gen_ai.provider.name", &format!("pagantic.{other}")),
        }
        attributes.str("gen_ai.request.model", model);
        attributes.count("gen_ai.usage.input_tokens", usage.prompt_tokens);
        attributes.count("gen_ai.usage.output_tokens", usage.completion_tokens);
        attributes.str("pagantic.call", &call.to_string());
        attributes.bool("pagantic.cached", *cached);
        if let Some(temperature) = sent.temperature {
            attributes.double("gen_ai.request.temperature", temperature);
        }
        if let Some(cost) = cost {
            attributes.double("pagantic.cost", cost.amount());
        }
        if let Some(constraint) = sent.constraint {
            attributes.str("pagantic.constraint", constraint);
        }
        if let Some(mode) = sent.schema_mode {
            attributes.str("pagantic.schema_mode", mode.name());
        }
        if *cut_off {
            attributes.bool("pagantic.cut_off", true);
        }
        if let Some(max) = sent.max_tokens {
            attributes.int("gen_ai.request.max_tokens", i64::from(max));
        }
        if let Some(reason) = finish_reason {
            attributes.add("gen_ai.response.finish_reasons", Attr::Strs(&[reason]));
        }
        if let Some(content) = content.as_deref().filter(|_| self.capture_content) {
            attributes.str("gen_ai.input.messages", &content.input);
            attributes.str("gen_ai.output.messages", &content.output);
        }
        Some(Built {
            span: event.span,
            parent: event.parent_span,
            name: ("chat ", model),
            kind: Kind::Client,
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
        let mut attributes = Attributes::new(Of::Event);
        let name = match &event.data {
            EventData::StepRetry {
                next_attempt, code, ..
            } => {
                run.error = Some(*code);
                attributes.int("pagantic.step.next_attempt", i64::from(*next_attempt));
                attributes.str("error.type", code.as_str());
                "step_retry"
            }
            EventData::StepFeedback {
                to,
                next_attempt,
                code,
                ..
            } => {
                attributes.str("pagantic.step.feedback_to", to);
                attributes.int("pagantic.step.next_attempt", i64::from(*next_attempt));
                attributes.str("error.type", code.as_str());
                "step_feedback"
            }
            EventData::StepSkipped(_) => "step_skipped",
            _ => return,
        };
        attributes.str(
            "pagantic.step.name",
            event.step.as_deref().unwrap_or_default(),
        );
        run.notes.push(SpanEvent {
            name,
            time: SystemTime::now(),
            attributes,
        });
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
        let Some(ending) = self.settle(event, run) else {
            return;
        };
        let trace = run.trace.clone();
        drop(runs);
        if let Some(built) = self.built(event, ending) {
            self.queue.push(self.export(&trace, None, built, &[], &[]));
        }
    }
}

/// What a span that `event` ends takes from its run (under the lock): the rest of it is built
/// from the event alone.
struct Ending {
    open: Open,
    /// A step's type, as the plan says it.
    kind: &'static str,
}

impl Tracer {
    /// Under the run's lock: opens the span `event` starts, adds a note or a model call's count
    /// to the run, or takes what the span it ends needs.
    fn settle(&self, event: &Event, run: &mut RunSpans) -> Option<Ending> {
        let taken = |run: &mut RunSpans| run.open.remove(&event.span).unwrap_or_default();
        match &event.data {
            EventData::StepStart { .. } => {
                let open = Open {
                    started: Some(SystemTime::now()),
                    ..Open::default()
                };
                run.open.insert(event.span, open);
                None
            }
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
            EventData::StepEnd { outcome, .. } => {
                if let StepOutcome::Failed { error } = outcome {
                    run.error = Some(error.code);
                }
                let step = event.step.as_deref().unwrap_or_default();
                let kind = run
                    .info
                    .as_ref()
                    .and_then(|info| info.steps.iter().find(|(name, _)| *name == step))
                    .map_or("", |(_, kind)| *kind);
                let open = taken(run);
                Some(Ending { open, kind })
            }
            EventData::ToolEnd { .. } => Some(Ending {
                open: taken(run),
                kind: "",
            }),
            EventData::Inference { cached, call, .. } => {
                if let Some(parent) = event.parent_span.and_then(|p| run.open.get_mut(&p)) {
                    parent.cached_calls += u64::from(*cached);
                    parent.agent |= matches!(call, CallKind::Round(_));
                }
                Some(Ending {
                    open: Open::default(),
                    kind: "",
                })
            }
            _ => {
                Tracer::note(event, run);
                None
            }
        }
    }

    /// The span `event` ends, built outside the lock from the event and what [`Tracer::settle`]
    /// took from its run.
    fn built<'a>(&self, event: &'a Event, ending: Ending) -> Option<Built<'a>> {
        match &event.data {
            EventData::StepEnd {
                outcome, attempt, ..
            } => Some(self.step_span(event, ending, outcome, *attempt)),
            EventData::ToolEnd {
                tool,
                outcome,
                cached,
                duration_ms,
            } => Some(self.tool_span(event, ending.open, tool, outcome, *cached, *duration_ms)),
            EventData::Inference { .. } => self.chat_span(event),
            _ => None,
        }
    }
}

/// The moment `duration_ms` before `end`.
fn before(end: SystemTime, duration_ms: f64) -> SystemTime {
    let took = Duration::try_from_secs_f64(duration_ms.max(0.0) / 1000.0).unwrap_or_default();
    end.checked_sub(took).unwrap_or(end)
}

/// OTLP's span flags: the W3C trace flags, and that the context says whether the parent is
/// remote, and whether it is.
fn span_flags(trace_flags: u32, parent_is_remote: bool) -> u32 {
    const HAS_IS_REMOTE: u32 = 0x100;
    const IS_REMOTE: u32 = 0x200;
    trace_flags | HAS_IS_REMOTE | if parent_is_remote { IS_REMOTE } else { 0 }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue};
    use opentelemetry_proto::tonic::trace::v1::Span as Decoded;
    use opentelemetry_sdk::trace::Sampler;
    use prost::Message;
    use serde_json::json;

    use super::*;
    use crate::core::TokenUsage;
    use crate::orchestrate::emit::Events;
    use crate::orchestrate::events::{Sent, ToolResult};
    use crate::orchestrate::otel::export;
    use crate::orchestrate::sinks::Sinks;

    /// The events of a session whose spans go to the returned queue.
    fn traced(sampler: Sampler) -> (Events, Arc<Queue>) {
        let queue = Arc::new(Queue::new(&export::Limits::default()));
        let name = "pagantic test".to_string();
        let tracer = Tracer::new(Arc::clone(&queue), Box::new(sampler), None, name, false);
        let tracer = Arc::new(tracer);
        let sinks = Sinks::default().with(Arc::clone(&tracer));
        (Events::traced(Arc::new(sinks), Some(tracer)), queue)
    }

    fn spans(queue: &Queue) -> Vec<Decoded> {
        let pending = queue.take();
        let spans = pending.spans().into_iter();
        spans
            .map(|span| Decoded::decode(span).expect("an OTLP span"))
            .collect()
    }

    /// The value of attribute `key` of `span`.
    fn attribute(span: &Decoded, key: &str) -> Option<Any> {
        let found = span.attributes.iter().find(|kv| kv.key == key)?;
        found.value.as_ref()?.value.clone()
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
            rate_limit_wait_ms: None,
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

    fn named<'a>(spans: &'a [Decoded], name: &str) -> &'a Decoded {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no `{name}` in {spans:#?}"))
    }

    #[test]
    fn a_run_s_spans_hang_from_their_parents_and_a_sub_plan_from_its_step() {
        let (session, queue) = traced(Sampler::AlwaysOn);
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
        let spans = spans(&queue);
        assert_eq!(spans.len(), 7, "{spans:#?}");
        let root = named(&spans, "invoke_workflow main");
        assert!(root.parent_span_id.is_empty());
        assert_eq!(root.flags, 0x101, "sampled, parent not remote");
        let text = |value: &str| Some(Any::StringValue(value.into()));
        assert_eq!(attribute(root, "pagantic.batch.row"), text("7"));
        assert!(spans.iter().all(|s| s.trace_id == root.trace_id));
        let agent = named(&spans, "invoke_agent solve");
        assert_eq!(agent.parent_span_id, root.span_id);
        assert_eq!(
            attribute(agent, "pagantic.step.cached_calls"),
            Some(Any::IntValue(1))
        );
        let chat = named(&spans, "chat m");
        assert_eq!(chat.parent_span_id, agent.span_id);
        assert_eq!(chat.kind, 3, "a client span");
        assert_eq!(
            attribute(chat, "gen_ai.usage.output_tokens"),
            Some(Any::IntValue(3))
        );
        assert_eq!(
            attribute(chat, "gen_ai.request.temperature"),
            Some(Any::DoubleValue(0.2))
        );
        assert_eq!(
            attribute(chat, "gen_ai.request.max_tokens"),
            Some(Any::IntValue(64))
        );
        let reasons = ArrayValue {
            values: vec![AnyValue {
                value: text("tool_call"),
            }],
        };
        assert_eq!(
            attribute(chat, "gen_ai.response.finish_reasons"),
            Some(Any::ArrayValue(reasons))
        );
        let tool = named(&spans, "execute_tool calc");
        assert_eq!(tool.parent_span_id, chat.span_id);
        assert_eq!(attribute(tool, "gen_ai.tool.call.arguments"), None);
        let step = named(&spans, "step route");
        let sub = named(&spans, "invoke_workflow sub");
        assert_eq!(sub.parent_span_id, step.span_id);
        assert_eq!(sub.flags & 0x200, 0, "a sub-plan's parent is not remote");
        assert_eq!(named(&spans, "step inner").parent_span_id, sub.span_id);
        let trace_id = crate::inference::store::hex(&root.trace_id);
        assert_eq!(session.trace_id(), Some(trace_id));
    }

    #[test]
    fn an_unsampled_trace_exports_nothing_but_keeps_its_id() {
        let (session, queue) = traced(Sampler::AlwaysOff);
        session.describe(|| info("main", &[]));
        session.lifecycle(Lifecycle::Execute);
        session.lifecycle(Lifecycle::Complete);
        assert!(spans(&queue).is_empty());
        let traceparent = session.traceparent(SpanId::RUN).expect("a context");
        assert!(traceparent.ends_with("-00"), "{traceparent}");
        assert!(session.trace_id().is_some());
    }
}
