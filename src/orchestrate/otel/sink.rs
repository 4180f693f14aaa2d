//! The trace sink: every run's typed events become OpenTelemetry spans named and attributed as
//! the GenAI semantic conventions say — one `invoke_workflow` span per run, one per step attempt
//! (`invoke_agent` for an agent, `retrieval` for retrieve and rerank), one `chat {model}` per
//! model call, one `execute_tool {tool}` per tool call under the chat span that asked for it.
//!
//! Events arrive after the fact (a model call's event comes when it ended, with its duration),
//! so spans are built whole and handed to the export queue — encoded, or, a step attempt's, as
//! a [`StepRecord`] the export thread encodes; ids come from [`RunTrace::span_id`], so a span
//! names its parent before the parent has ended. Times are the events' own: a run's
//! start plus an event's `at_ms`, a duration before that for what it ended, so the spans and the
//! events file agree and no span reads the clock again. A run's spans in progress live with the
//! run (its `Events` hold its [`TracedRun`]), so runs on other threads share no lock with it and
//! nothing is looked up by run id. It counts nothing of its own: tokens, costs and statuses are
//! the events' (the ledger's) numbers.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::SystemTime;

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanKind, TraceContextExt, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SamplingDecision, ShouldSample};

use super::content::bounded;
use super::context::{RunTrace, TraceParent};
use super::export::Queue;
use super::span::{
    Asked, Attempt, Built, Ids, SHOWN_AS, StepRecord, StepShape, encode, span_flags,
};
use super::wire::{self, Attr, Attributes, Kind, Link, Of, SpanEvent};
use crate::core::{Failure, FailureCode};
use crate::orchestrate::events::{CallKind, Event, EventData, SpanId, StepOutcome, ToolOutcome};
use crate::orchestrate::record::Lifecycle;

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

/// What a run is, for its root span: its plan, and attributes its caller gave (a batch row's
/// id, a test case's variant).
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub plan: &'static PlanShape,
    pub attributes: Vec<(&'static str, String)>,
}

impl Default for RunInfo {
    /// A run that said nothing of its plan.
    fn default() -> RunInfo {
        static NO_PLAN: LazyLock<PlanShape> = LazyLock::new(PlanShape::default);
        RunInfo {
            plan: &NO_PLAN,
            attributes: Vec::new(),
        }
    }
}

/// Every plan shape this process has traced, each built once and kept for the life of the
/// process, so a step's span can be left to the export thread naming its step by reference. A
/// process traces few plans: a batch's one, the ones a server serves, a watched file's versions.
static SHAPES: Mutex<Vec<&'static PlanShape>> = Mutex::new(Vec::new());

/// The shape of plan `name` with `steps` (names and types), built the first time the process
/// sees it. A pipeline keeps what this gives it, so the runs of one plan (a batch's rows) ask
/// once.
pub fn plan_shape<'a, I>(name: &str, steps: I) -> &'static PlanShape
where
    I: IntoIterator<Item = (&'a str, &'static str)>,
    I::IntoIter: Clone,
{
    let steps = steps.into_iter();
    let mut shapes = SHAPES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(shape) = shapes.iter().find(|shape| shape.is(name, steps.clone())) {
        return shape;
    }
    let shape: &'static PlanShape = Box::leak(Box::new(PlanShape::new(name, steps)));
    shapes.push(shape);
    shape
}

/// A plan as its runs' spans show it: its name and steps, and the attributes its root span and
/// each step's spans always carry, encoded once. Shared by the runs of one plan (a batch's
/// rows), not built for each.
#[derive(Debug, Default)]
pub struct PlanShape {
    pub name: String,
    steps: Vec<StepShape>,
    /// The root span's attributes that name the plan.
    root: Attributes,
}

/// Turns events into spans; see the module docs.
pub struct Tracer {
    queue: Arc<Queue>,
    sampler: Box<dyn ShouldSample>,
    /// The parent of the session's own run (`TRACEPARENT`).
    session_parent: Option<TraceParent>,
    /// The session's root span's name when it runs no plan of its own (`pagantic batch`).
    session_name: String,
    capture_content: bool,
    ids: RandomIdGenerator,
    /// What every `chat` span and every `execute_tool` span carries, encoded once.
    chat_constant: Attributes,
    tool_constant: Attributes,
}

/// One run's trace, kept by the run's events: its ids, and its spans in progress when it is
/// sampled.
pub struct TracedRun {
    pub trace: RunTrace,
    /// None for a run not sampled: it exports nothing.
    spans: Option<Mutex<RunSpans>>,
}

/// A sampled run's spans in progress.
struct RunSpans {
    /// The root span's parent: the caller's remote span, or the step a sub-plan runs in.
    parent: Option<SpanContext>,
    link: Option<SpanContext>,
    info: Option<RunInfo>,
    /// When the run started (Unix nanoseconds): its events' `at_ms` count from here.
    started: u64,
    /// Step attempts and tool calls that started and have not ended (a few at a time).
    open: Vec<(SpanId, Open)>,
    /// Retries, feedback and skips, as events of the root span.
    notes: Vec<SpanEvent>,
    /// The code of the last failure seen, for the root span's `error.type`.
    error: Option<FailureCode>,
    /// The root span has been queued: nothing more is exported.
    ended: bool,
}

impl RunSpans {
    /// The moment `at_ms` into the run.
    fn at(&self, at_ms: f64) -> u64 {
        self.started.saturating_add(nanos_of(at_ms))
    }

    /// Takes the open span `span` (a default one when it never opened).
    fn close(&mut self, span: SpanId) -> Open {
        match self.open.iter().position(|(id, _)| *id == span) {
            Some(at) => self.open.swap_remove(at).1,
            None => Open::default(),
        }
    }
}

#[derive(Default)]
struct Open {
    started: Option<u64>,
    /// A step attempt's calls the cache answered.
    cached_calls: u64,
    /// Whether the attempt ran agent rounds.
    agent: bool,
    /// A tool call's arguments (content capture only).
    args: Option<String>,
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
            queue,
            sampler,
            session_parent,
            session_name,
            capture_content,
            ids: RandomIdGenerator::default(),
            chat_constant: Attributes::constant(&[
                ("gen_ai.operation.name", "chat"),
                (SHOWN_AS, "LLM"),
            ]),
            tool_constant: Attributes::constant(&[
                ("gen_ai.operation.name", "execute_tool"),
                (SHOWN_AS, "TOOL"),
                ("gen_ai.tool.type", "function"),
            ]),
        }
    }

    /// The trace of a run that starts now; a sampled run's spans are kept from here on.
    pub fn open_run(&self, origin: Origin) -> TracedRun {
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
        let spans = sampled.then(|| {
            Mutex::new(RunSpans {
                parent,
                link,
                info: None,
                started: wire::nanos(SystemTime::now()),
                open: Vec::new(),
                notes: Vec::new(),
                error: None,
                ended: false,
            })
        });
        TracedRun {
            trace: RunTrace::new(self.ids.new_span_id(), trace_id, sampled, state),
            spans,
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

    /// Takes one of `run`'s events: opens the span it starts, or queues the span it ends (a
    /// span is sent as soon as it ends, so a long run shows its finished steps while it runs).
    pub fn receive(&self, run: &TracedRun, event: &Event) {
        if !shapes_spans(&event.data) {
            return;
        }
        let Some(Ok(mut spans)) = run.spans.as_ref().map(Mutex::lock) else {
            return;
        };
        if spans.ended {
            return;
        }
        let ended = match &event.data {
            EventData::Lifecycle { state } => {
                spans.ended = true;
                Ended::Encoded(self.root_span(&run.trace, event, &mut spans, *state))
            }
            _ => {
                let Some(ending) = self.settle(event, &mut spans) else {
                    return;
                };
                let Some(ended) = self.ended(&run.trace, event, ending, &spans) else {
                    return;
                };
                ended
            }
        };
        drop(spans);
        match ended {
            Ended::Encoded(span) => {
                self.queue.push(&span);
                wire::spare(span);
            }
            Ended::Step(record) => self.queue.push_step(record),
        }
    }

    /// The run's root span, ended by `event` (the run's move to `end`).
    fn root_span(
        &self,
        trace: &RunTrace,
        event: &Event,
        run: &mut RunSpans,
        end: Lifecycle,
    ) -> Vec<u8> {
        let info = run.info.take().unwrap_or_default();
        let mut attributes = Attributes::new(Of::Span);
        let plan = info.plan.name.as_str();
        let name = if plan.is_empty() {
            ("", self.session_name.as_str())
        } else {
            attributes.extend(&info.plan.root);
            ("invoke_workflow ", plan)
        };
        let status = match end {
            Lifecycle::Error => "error",
            Lifecycle::Cancelled => "cancelled",
            _ => "complete",
        };
        attributes.str("pagantic.run_id", &event.run_id);
        attributes.str("pagantic.status", status);
        for (key, value) in &info.attributes {
            attributes.str(key, value);
        }
        let error = match end {
            Lifecycle::Error => Some(run.error.map_or("_OTHER", FailureCode::as_str)),
            _ => None,
        };
        let built = Built {
            name,
            kind: Kind::Internal,
            started: run.started,
            ended: run.at(event.at_ms),
            attributes,
            error,
        };
        let link = run.link.as_ref().map(|link| Link {
            trace_id: link.trace_id().to_bytes(),
            span_id: link.span_id().to_bytes(),
            flags: span_flags(u32::from(link.trace_flags().to_u8()), link.is_remote()),
        });
        export(
            trace,
            (SpanId::RUN, None),
            run.parent.as_ref(),
            built,
            &run.notes,
            link.as_slice(),
        )
    }

    fn tool_span<'a>(
        &self,
        event: &Event,
        ending: Ending,
        tool: &'a str,
        outcome: &ToolOutcome,
        cached: bool,
        duration_ms: f64,
    ) -> Built<'a> {
        let Ending { open, at } = ending;
        let mut attributes = Attributes::new(Of::Span);
        attributes.extend(&self.tool_constant);
        attributes.str("gen_ai.tool.name", tool);
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
            name: ("execute_tool ", tool),
            kind: Kind::Internal,
            started: open.started.unwrap_or_else(|| before(at, duration_ms)),
            ended: at,
            attributes,
            error: error.map(FailureCode::as_str),
        }
    }

    /// The span of a model call, from its `inference` event, which ended it at `at`; what it
    /// asked is encoded once for its step (`step`, when the run's plan has it).
    fn chat_span<'a>(
        &self,
        event: &'a Event,
        at: u64,
        step: Option<&StepShape>,
    ) -> Option<Built<'a>> {
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
        let mut attributes = Attributes::new(Of::Span);
        let asked = Asked {
            engine,
            model: Cow::Borrowed(model),
            call: Cow::Borrowed(call),
            temperature: sent.temperature,
            max_tokens: sent.max_tokens,
            constraint: sent.constraint,
            schema_mode: sent.schema_mode,
        };
        match step {
            Some(step) => step.add_asked(&mut attributes, &self.chat_constant, asked),
            None => {
                attributes.extend(&self.chat_constant);
                asked.add(&mut attributes);
            }
        }
        attributes.count("gen_ai.usage.input_tokens", usage.prompt_tokens);
        attributes.count("gen_ai.usage.output_tokens", usage.completion_tokens);
        attributes.bool("pagantic.cached", *cached);
        if let Some(cost) = cost {
            attributes.double("pagantic.cost", cost.amount());
        }
        if *cut_off {
            attributes.bool("pagantic.cut_off", true);
        }
        if let Some(reason) = finish_reason {
            attributes.add("gen_ai.response.finish_reasons", Attr::Strs(&[reason]));
        }
        if let Some(content) = content.as_deref().filter(|_| self.capture_content) {
            attributes.str("gen_ai.input.messages", &content.input);
            attributes.str("gen_ai.output.messages", &content.output);
        }
        Some(Built {
            name: ("chat ", model),
            kind: Kind::Client,
            started: before(at, *duration_ms),
            ended: at,
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
            time: run.at(event.at_ms),
            attributes,
        });
    }
}

impl PlanShape {
    fn new<'a>(name: &str, steps: impl Iterator<Item = (&'a str, &'static str)>) -> PlanShape {
        PlanShape {
            name: name.to_string(),
            steps: steps
                .map(|(step, kind)| StepShape::new(step, kind))
                .collect(),
            root: Attributes::constant(&[
                ("gen_ai.operation.name", "invoke_workflow"),
                (SHOWN_AS, "CHAIN"),
                ("pagantic.plan", name),
            ]),
        }
    }

    /// Whether it is plan `name` with `steps`.
    fn is<'a>(&self, name: &str, mut steps: impl Iterator<Item = (&'a str, &'static str)>) -> bool {
        self.name == name
            && self.steps.iter().all(|step| {
                steps
                    .next()
                    .is_some_and(|(other, kind)| other == step.name && kind == step.kind)
            })
            && steps.next().is_none()
    }

    fn step(&self, name: &str) -> Option<&StepShape> {
        self.steps.iter().find(|step| step.name == name)
    }
}

/// A span that an event ended: encoded, or a step attempt's left to the export thread.
enum Ended {
    Encoded(Vec<u8>),
    Step(StepRecord),
}

/// The span of a step attempt that `event` ended: a record for the export thread when its step
/// is in the run's plan and its trace carries no state, else encoded here.
fn step_span(
    trace: &RunTrace,
    event: &Event,
    ending: Ending,
    run: &RunSpans,
    attempt: Attempt,
) -> Ended {
    let Ending { open, at } = ending;
    let started = open.started.unwrap_or(at);
    let step = event.step.as_deref().unwrap_or_default();
    let planned = run.info.as_ref().and_then(|info| info.plan.step(step));
    let ids = (event.span, event.parent_span);
    if let Some(shape) = planned
        && trace.state_header.is_empty()
    {
        let ids = Ids::of(trace, ids, None);
        return Ended::Step(StepRecord::new(ids, shape, attempt, started, at));
    }
    let unplanned;
    let shape = match planned {
        Some(shape) => shape,
        None => {
            unplanned = StepShape::new(step, "");
            &unplanned
        }
    };
    let built = shape.span(&attempt, started, at);
    Ended::Encoded(export(trace, ids, None, built, &[], &[]))
}

/// The encoded span `built` of a run in `trace`, its event span and parent `ids`, with `events`
/// and `links`; a root span's parent is `root_parent`.
fn export(
    trace: &RunTrace,
    ids: (SpanId, Option<SpanId>),
    root_parent: Option<&SpanContext>,
    built: Built,
    events: &[SpanEvent],
    links: &[Link],
) -> Vec<u8> {
    let ids = Ids::of(trace, ids, root_parent);
    encode(ids, &trace.state_header, built, events, links)
}

impl TracedRun {
    /// Says what the run runs (its root span's name and attributes); a run not sampled keeps
    /// nothing.
    pub fn describe(&self, info: RunInfo) {
        if let Some(Ok(mut spans)) = self.spans.as_ref().map(Mutex::lock) {
            spans.info = Some(info);
        }
    }
}

/// What a span that `event` ends takes from its run's spans in progress: the rest of it comes
/// from the event and the run's plan.
struct Ending {
    open: Open,
    /// When the event happened, in Unix nanoseconds.
    at: u64,
}

impl Tracer {
    /// Under the run's lock: opens the span `event` starts, adds a note or a model call's count
    /// to the run, or takes what the span it ends needs.
    fn settle(&self, event: &Event, run: &mut RunSpans) -> Option<Ending> {
        let at = run.at(event.at_ms);
        match &event.data {
            EventData::StepStart { .. } => {
                let open = Open {
                    started: Some(at),
                    ..Open::default()
                };
                run.open.push((event.span, open));
                None
            }
            EventData::ToolStart { args, .. } => {
                let args = self
                    .capture_content
                    .then(|| bounded(&args.to_string()).to_string());
                let open = Open {
                    started: Some(at),
                    args,
                    ..Open::default()
                };
                run.open.push((event.span, open));
                None
            }
            EventData::StepEnd { outcome, .. } => {
                if let StepOutcome::Failed { error } = outcome {
                    run.error = Some(error.code);
                }
                let open = run.close(event.span);
                Some(Ending { open, at })
            }
            EventData::ToolEnd { .. } => Some(Ending {
                open: run.close(event.span),
                at,
            }),
            EventData::Inference { cached, call, .. } => {
                let parent = event.parent_span.and_then(|parent| {
                    let found = run.open.iter_mut().find(|(id, _)| *id == parent);
                    found.map(|(_, open)| open)
                });
                if let Some(parent) = parent {
                    parent.cached_calls += u64::from(*cached);
                    parent.agent |= matches!(call, CallKind::Round(_));
                }
                Some(Ending {
                    open: Open::default(),
                    at,
                })
            }
            _ => {
                Tracer::note(event, run);
                None
            }
        }
    }

    /// The span `event` ends, from the event, what [`Tracer::settle`] took from `run`, and the
    /// plan `run` runs: a step attempt's as [`step_span`] leaves it, a tool call's or a model
    /// call's encoded.
    fn ended(
        &self,
        trace: &RunTrace,
        event: &Event,
        ending: Ending,
        run: &RunSpans,
    ) -> Option<Ended> {
        let built = match &event.data {
            EventData::StepEnd {
                outcome, attempt, ..
            } => {
                let open = &ending.open;
                let attempt = Attempt::of(outcome, *attempt, open.cached_calls, open.agent);
                return Some(step_span(trace, event, ending, run, attempt));
            }
            EventData::ToolEnd {
                tool,
                outcome,
                cached,
                duration_ms,
            } => self.tool_span(event, ending, tool, outcome, *cached, *duration_ms),
            EventData::Inference { .. } => {
                let step = event.step.as_deref().unwrap_or_default();
                let planned = run.info.as_ref().and_then(|info| info.plan.step(step));
                self.chat_span(event, ending.at, planned)?
            }
            _ => return None,
        };
        let ids = (event.span, event.parent_span);
        Some(Ended::Encoded(export(trace, ids, None, built, &[], &[])))
    }
}

/// Whether `data` opens or ends a span or is noted on the run's: a run's moves short of its end,
/// route decisions and an agent's start and end shape none, so they take no lock.
fn shapes_spans(data: &EventData) -> bool {
    match data {
        EventData::Lifecycle { state } => matches!(
            state,
            Lifecycle::Complete | Lifecycle::Error | Lifecycle::Cancelled
        ),
        EventData::RouteDecision { .. }
        | EventData::AgentStart { .. }
        | EventData::AgentEnd { .. } => false,
        _ => true,
    }
}

/// The moment `duration_ms` before `end` (Unix nanoseconds).
fn before(end: u64, duration_ms: f64) -> u64 {
    end.saturating_sub(nanos_of(duration_ms))
}

/// `ms` milliseconds in nanoseconds (none for a negative or not-a-number duration).
fn nanos_of(ms: f64) -> u64 {
    // A float-to-integer `as` saturates, and takes NaN to 0.
    (ms.max(0.0) * 1_000_000.0) as u64
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
        (
            Events::traced(Arc::new(Sinks::default()), Some(tracer)),
            queue,
        )
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

    fn row_7() -> Vec<(&'static str, String)> {
        vec![("pagantic.batch.row", "7".into())]
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
            model_load_ms: None,
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
        session.describe(
            || plan_shape("main", [("solve", "agent"), ("route", "route")]),
            row_7,
        );
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
        nested.describe(|| plan_shape("sub", [("inner", "infer")]), Vec::new);
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
        let trace_id = crate::model_store::hex(&root.trace_id);
        assert_eq!(session.trace_id(), Some(trace_id));
    }

    #[test]
    fn the_runs_of_one_plan_share_its_shape_and_another_plan_gets_its_own() {
        let steps = [("a", "infer"), ("b", "tool")];
        let first = plan_shape("main", steps);
        assert!(std::ptr::eq(first, plan_shape("main", steps)));
        for (name, others) in [
            ("main", vec![("a", "infer")]),
            ("main", vec![("a", "infer"), ("b", "tool"), ("c", "tool")]),
            ("main", vec![("a", "infer"), ("b", "agent")]),
            ("other", vec![("a", "infer"), ("b", "tool")]),
        ] {
            let shape = plan_shape(name, others.clone());
            assert!(!std::ptr::eq(first, shape), "{name} {others:?}");
            assert!(shape.is(name, others.into_iter()));
        }
        // Asked for again after other plans, and from another thread: built once for the process.
        assert!(std::ptr::eq(first, plan_shape("main", steps)));
        std::thread::scope(|threads| {
            let elsewhere = threads.spawn(move || plan_shape("main", steps));
            let elsewhere = elsewhere.join().expect("the other thread");
            assert!(std::ptr::eq(first, elsewhere));
        });
    }

    /// A planned step's span is left to the export thread as a record, except in a trace that
    /// carries state (encoded on the run's thread, with it); both come out as the same span.
    #[test]
    fn a_step_s_span_is_the_same_whichever_thread_encodes_it() {
        let (session, queue) = traced(Sampler::AlwaysOn);
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let stateful = TraceParent::parse(parent, Some("vendor=on")).expect("a traceparent");
        let runs = [
            session.new_run(),
            session.new_run_continuing(Default::default(), Some(stateful)),
        ];
        let mut steps = Vec::new();
        for run in &runs {
            run.describe(|| plan_shape("main", [("solve", "agent")]), row_7);
            let solve = run.new_span();
            let start = EventData::StepStart { attempt: 2 };
            run.emit(Some("solve"), solve, Some(SpanId::RUN), start);
            let failed = EventData::StepEnd {
                outcome: StepOutcome::Failed {
                    error: Failure::new(FailureCode::ToolTimeout, "too slow"),
                },
                attempt: 2,
                duration_ms: 1.0,
            };
            run.emit(Some("solve"), solve, Some(SpanId::RUN), failed);
            let [step] = <[Decoded; 1]>::try_from(spans(&queue)).expect("one span");
            let run_span = run.traceparent(SpanId::RUN).expect("traced").span_id;
            assert_eq!(step.parent_span_id, run_span.to_be_bytes(), "under its run");
            steps.push(step);
        }
        let [recorded, encoded] = <[Decoded; 2]>::try_from(steps).expect("two");
        assert_eq!(recorded.trace_state, "");
        assert_eq!(encoded.trace_state, "vendor=on");
        for span in [&recorded, &encoded] {
            assert_eq!(span.name, "invoke_agent solve");
            assert_eq!(
                span.flags, 0x101,
                "sampled; its parent, the run, is not remote"
            );
            assert_eq!(
                attribute(span, "gen_ai.agent.name"),
                Some(Any::StringValue("solve".into()))
            );
            assert_eq!(
                attribute(span, "pagantic.step.attempt"),
                Some(Any::IntValue(2))
            );
            assert_eq!(
                attribute(span, "error.type"),
                Some(Any::StringValue("TOOL_TIMEOUT".into()))
            );
        }
        let names = |span: &Decoded| -> Vec<String> {
            span.attributes.iter().map(|kv| kv.key.clone()).collect()
        };
        assert_eq!(names(&recorded), names(&encoded));
    }

    #[test]
    fn an_unsampled_trace_exports_nothing_but_keeps_its_id() {
        let (session, queue) = traced(Sampler::AlwaysOff);
        session.describe(|| plan_shape("main", []), Vec::new);
        session.lifecycle(Lifecycle::Execute);
        session.lifecycle(Lifecycle::Complete);
        assert!(spans(&queue).is_empty());
        let traceparent = session.traceparent(SpanId::RUN).expect("a context");
        let traceparent = traceparent.to_string();
        assert!(traceparent.ends_with("-00"), "{traceparent}");
        assert!(session.trace_id().is_some());
    }
}
