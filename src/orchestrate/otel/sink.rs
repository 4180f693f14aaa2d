//! The trace sink: every run's typed events become OpenTelemetry spans named and attributed as
//! the GenAI semantic conventions say — one `invoke_workflow` span per run, one per step attempt
//! (`invoke_agent` for an agent, `retrieval` for retrieve and rerank), one `chat {model}` per
//! model call, one `execute_tool {tool}` per tool call under the chat span that asked for it.
//!
//! Events arrive after the fact (a model call's event comes when it ended, with its duration),
//! so spans are built whole and handed to the export queue; ids come from [`RunTrace::span_id`],
//! so a span names its parent before the parent has ended. Times are the events' own: a run's
//! start plus an event's `at_ms`, a duration before that for what it ended, so the spans and the
//! events file agree and no span reads the clock again. A run's spans in progress live with the
//! run (its `Events` hold its [`TracedRun`]), so runs on other threads share no lock with it and
//! nothing is looked up by run id. It counts nothing of its own: tokens, costs and statuses are
//! the events' (the ledger's) numbers.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanKind, TraceContextExt, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SamplingDecision, ShouldSample};

use super::content::bounded;
use super::context::{RunTrace, TraceParent};
use super::export::Queue;
use super::wire::{self, Attr, Attributes, Kind, Link, Of, Span, SpanEvent};
use crate::core::{Failure, FailureCode};
use crate::orchestrate::events::{CallKind, Event, EventData, SpanId, StepOutcome, ToolOutcome};
use crate::orchestrate::record::Lifecycle;

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

/// What a run is, for its root span: its plan, and attributes its caller gave (a batch row's
/// id, a test case's variant).
#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    pub plan: Arc<PlanShape>,
    pub attributes: Vec<(&'static str, String)>,
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

/// A step as its spans show it.
#[derive(Debug)]
struct StepShape {
    name: String,
    /// Its type, as the plan says it.
    kind: &'static str,
    /// The first part of its spans' names (`step `, `invoke_agent `, `retrieval `).
    span_name: &'static str,
    /// Whether it is an agent (`gen_ai.agent.name` is set whether or not it ran rounds).
    agent: bool,
    /// What every span of it carries: its name and type, its span kind and operation.
    constant: Attributes,
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

/// A span under construction, its name's parts borrowed from the event or run it comes from.
struct Built<'a> {
    span: SpanId,
    parent: Option<SpanId>,
    name: (&'static str, &'a str),
    kind: Kind,
    /// When it started and ended, in Unix nanoseconds.
    started: u64,
    ended: u64,
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

    /// The shape of plan `name` with `steps` (names and types): the last one this thread asked
    /// for when it is the same. Kept by each thread, so the rows of a batch share no lock and no
    /// reference count between threads.
    pub fn plan_shape<'a, I>(&self, name: &str, steps: I) -> Arc<PlanShape>
    where
        I: IntoIterator<Item = (&'a str, &'static str)>,
        I::IntoIter: Clone,
    {
        thread_local! {
            static LAST_PLAN: RefCell<Option<Arc<PlanShape>>> = const { RefCell::new(None) };
        }
        let steps = steps.into_iter();
        LAST_PLAN.with_borrow_mut(|last| {
            if let Some(shape) = last.as_ref().filter(|shape| shape.is(name, steps.clone())) {
                return Arc::clone(shape);
            }
            let shape = Arc::new(PlanShape::new(name, steps));
            *last = Some(Arc::clone(&shape));
            shape
        })
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
        let span = match &event.data {
            EventData::Lifecycle { state } => {
                spans.ended = true;
                self.root_span(&run.trace, event, &mut spans, *state)
            }
            _ => {
                let Some(ending) = self.settle(event, &mut spans) else {
                    return;
                };
                let Some(built) = self.built(event, ending, &spans) else {
                    return;
                };
                self.export(&run.trace, None, built, &[], &[])
            }
        };
        drop(spans);
        self.queue.push(&span);
        wire::spare(span);
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
            span: SpanId::RUN,
            parent: None,
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
        self.export(
            trace,
            run.parent.as_ref(),
            built,
            &run.notes,
            link.as_slice(),
        )
    }

    /// The span of step attempt `attempt` of `shape`, ended by `event` with `outcome`.
    fn step_span<'a>(
        &self,
        event: &'a Event,
        ending: Ending,
        shape: &StepShape,
        outcome: &StepOutcome,
        attempt: u32,
    ) -> Built<'a> {
        let Ending { open, at } = ending;
        let step = event.step.as_deref().unwrap_or_default();
        let (status, error) = match outcome {
            StepOutcome::Ok { .. } => ("ok", None),
            StepOutcome::Failed { error } => ("failed", Some(error.code)),
            StepOutcome::Cancelled => ("cancelled", None),
        };
        let mut attributes = Attributes::new(Of::Span);
        attributes.extend(&shape.constant);
        attributes.int("pagantic.step.attempt", i64::from(attempt));
        attributes.str("pagantic.step.status", status);
        attributes.count("pagantic.step.cached_calls", open.cached_calls);
        if shape.agent || open.agent {
            attributes.str("gen_ai.agent.name", step);
        }
        Built {
            span: event.span,
            parent: event.parent_span,
            name: (shape.span_name, step),
            kind: Kind::Internal,
            started: open.started.unwrap_or(at),
            ended: at,
            attributes,
            error: error.map(FailureCode::as_str),
        }
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
            span: event.span,
            parent: event.parent_span,
            name: ("execute_tool ", tool),
            kind: Kind::Internal,
            started: open.started.unwrap_or_else(|| before(at, duration_ms)),
            ended: at,
            attributes,
            error: error.map(FailureCode::as_str),
        }
    }

    /// The span of a model call, from its `inference` event, which ended it at `at`.
    fn chat_span<'a>(&self, event: &'a Event, at: u64) -> Option<Built<'a>> {
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
        attributes.extend(&self.chat_constant);
        match *engine {
            "openai" => attributes.str("gen_ai.provider.name", "openai"),
            other => attributes.add("gen_ai.provider.name", Attr::Joined("pagantic.", other)),
        }
        attributes.str("gen_ai.request.model", model);
        attributes.count("gen_ai.usage.input_tokens", usage.prompt_tokens);
        attributes.count("gen_ai.usage.output_tokens", usage.completion_tokens);
        match call {
            CallKind::Single => attributes.str("pagantic.call", "call"),
            CallKind::Agent(name) => attributes.add("pagantic.call", Attr::Joined("agent ", name)),
            numbered => attributes.add("pagantic.call", Attr::Shown(numbered)),
        }
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

impl StepShape {
    fn new(name: &str, kind: &'static str) -> StepShape {
        let (span_name, operation, shown_as) = match kind {
            "agent" => ("invoke_agent ", Some("invoke_agent"), "AGENT"),
            "retrieve" | "rerank" => ("retrieval ", Some("retrieval"), "RETRIEVER"),
            _ => ("step ", None, "CHAIN"),
        };
        let mut constant = Attributes::constant(&[
            ("pagantic.step.name", name),
            ("pagantic.step.type", kind),
            (SHOWN_AS, shown_as),
        ]);
        if let Some(operation) = operation {
            constant.str("gen_ai.operation.name", operation);
        }
        StepShape {
            name: name.to_string(),
            kind,
            span_name,
            agent: kind == "agent",
            constant,
        }
    }
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

    /// The span `event` ends, built from the event, what [`Tracer::settle`] took from `run`,
    /// and the plan `run` runs.
    fn built<'a>(&self, event: &'a Event, ending: Ending, run: &RunSpans) -> Option<Built<'a>> {
        match &event.data {
            EventData::StepEnd {
                outcome, attempt, ..
            } => {
                let step = event.step.as_deref().unwrap_or_default();
                let planned = run.info.as_ref().and_then(|info| info.plan.step(step));
                let unplanned;
                let shape = match planned {
                    Some(shape) => shape,
                    None => {
                        unplanned = StepShape::new(step, "");
                        &unplanned
                    }
                };
                Some(self.step_span(event, ending, shape, outcome, *attempt))
            }
            EventData::ToolEnd {
                tool,
                outcome,
                cached,
                duration_ms,
            } => Some(self.tool_span(event, ending, tool, outcome, *cached, *duration_ms)),
            EventData::Inference { .. } => self.chat_span(event, ending.at),
            _ => None,
        }
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
        (
            Events::traced(Arc::new(Sinks::default()), Some(tracer)),
            queue,
        )
    }

    fn spans(queue: &Queue) -> Vec<Decoded> {
        let pending = queue.take();
        let spans = pending.spans.spans().into_iter();
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
        session.describe("main", [("solve", "agent"), ("route", "route")], row_7);
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
        nested.describe("sub", [("inner", "infer")], Vec::new);
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
    fn the_runs_of_one_plan_share_its_shape_and_another_plan_gets_its_own() {
        let queue = Arc::new(Queue::new(&export::Limits::default()));
        let tracer = Tracer::new(queue, Box::new(Sampler::AlwaysOn), None, "t".into(), false);
        let first = tracer.plan_shape("main", [("a", "infer"), ("b", "tool")]);
        let again = tracer.plan_shape("main", [("a", "infer"), ("b", "tool")]);
        assert!(Arc::ptr_eq(&first, &again));
        for (name, steps) in [
            ("main", vec![("a", "infer")]),
            ("main", vec![("a", "infer"), ("b", "tool"), ("c", "tool")]),
            ("main", vec![("a", "infer"), ("b", "agent")]),
            ("other", vec![("a", "infer"), ("b", "tool")]),
        ] {
            let shape = tracer.plan_shape(name, steps.clone());
            assert!(!Arc::ptr_eq(&first, &shape), "{name} {steps:?}");
            assert!(shape.is(name, steps.into_iter()));
        }
    }

    #[test]
    fn an_unsampled_trace_exports_nothing_but_keeps_its_id() {
        let (session, queue) = traced(Sampler::AlwaysOff);
        session.describe("main", [], Vec::new);
        session.lifecycle(Lifecycle::Execute);
        session.lifecycle(Lifecycle::Complete);
        assert!(spans(&queue).is_empty());
        let traceparent = session.traceparent(SpanId::RUN).expect("a context");
        let traceparent = traceparent.to_string();
        assert!(traceparent.ends_with("-00"), "{traceparent}");
        assert!(session.trace_id().is_some());
    }
}
