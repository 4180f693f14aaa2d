//! The trace sink: every run's typed events become OpenTelemetry spans named and attributed as
//! the GenAI semantic conventions say — one `invoke_workflow` span per run, one per step attempt
//! (`invoke_agent` for an agent, `retrieval` for retrieve and rerank), one `chat {model}` per
//! model call, one `execute_tool {tool}` per tool call under the chat span that asked for it.
//!
//! Events arrive after the fact (a model call's event comes when it ended, with its duration),
//! so spans are built whole and handed to the export queue — encoded, or, a step attempt's, as
//! a [`StepRecord`] the export thread encodes; ids come from [`RunTrace::span_id`], so a span
//! names its parent before the parent has ended. Times are the events' own: a run's start plus
//! an event's `at_ms`, a duration before that for what it ended (a step attempt's start is its
//! end less its `duration_ms`, so its start event takes no lock), so the spans and the events
//! file agree and no span reads the clock again. A run's spans in progress live with the run
//! (its `Events` hold its [`Traced`]), so runs on other threads share no lock with it and
//! nothing is looked up by run id. It counts nothing of its own: tokens, costs and statuses are
//! the events' (the ledger's) numbers.

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use opentelemetry::Context;
use opentelemetry::trace::{
    SpanContext, SpanId as OtelSpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SamplingDecision, ShouldSample};

use super::content::{self, bounded};
use super::export::{Lane, Queue};
use super::span::{
    Asked, Attempt, Built, Ids, Parent, PlanShape, SHOWN_AS, StepRecord, StepShape, encode,
    span_flags,
};
use super::wire::{self, Attr, Attributes, Kind, Link, Of, SpanEvent};
use crate::core::{Failure, FailureCode, TraceParent};
use crate::orchestrate::{
    CallKind, Event, EventData, Lifecycle, Origin, RunTrace, SpanId, StepOutcome, ToolOutcome,
    TraceShape,
};

/// What a run is, for its root span: its plan, and attributes its caller gave (a batch row's
/// id, a test case's variant).
#[derive(Debug, Default)]
struct RunInfo {
    /// None for a run that said nothing of its plan.
    plan: Option<Arc<PlanShape>>,
    attributes: Vec<(&'static str, String)>,
}

/// Turns events into spans; see the module docs. Shared by the session's exporter and its
/// traced runs.
pub struct Sink {
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
pub struct Traced {
    sink: Arc<Sink>,
    trace: RunTrace,
    /// Where its spans are queued.
    lane: Lane,
    /// None for a run not sampled: it exports nothing.
    spans: Option<Mutex<RunSpans>>,
}

/// A sampled run's spans in progress.
struct RunSpans {
    /// The root span's parent: the caller's span (remote), or the step a sub-plan runs in.
    parent: Option<Parent>,
    /// The span the root span links to (a batch row's: the batch's).
    link: Option<TraceParent>,
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

    /// The open span `span`, opened now (with no start) when it was not.
    fn opened(&mut self, span: SpanId) -> &mut Open {
        let at = match self.open.iter().position(|(id, _)| *id == span) {
            Some(at) => at,
            None => {
                self.open.push((span, Open::default()));
                self.open.len() - 1
            }
        };
        &mut self.open[at].1
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

impl Sink {
    pub fn new(
        queue: Arc<Queue>,
        sampler: Box<dyn ShouldSample>,
        session_parent: Option<TraceParent>,
        session_name: String,
        capture_content: bool,
    ) -> Self {
        Sink {
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
    pub fn open_run(self: &Arc<Self>, origin: Origin) -> Traced {
        let (parent, link, remote) = match origin {
            Origin::Session => (self.session_parent.clone(), None, true),
            Origin::Own { remote, link } => (remote, link, true),
            Origin::Nested(step) => (Some(step), None, false),
        };
        let trace_id = match &parent {
            Some(parent) => parent.trace_id,
            None => u128::from_be_bytes(self.ids.new_trace_id().to_bytes()),
        };
        let sampled = match &parent {
            Some(step) if !remote => step.sampled,
            remote => self.samples(remote.as_ref(), trace_id),
        };
        let state = parent.as_ref().map(|p| p.state.clone()).unwrap_or_default();
        let spans = sampled.then(|| {
            Mutex::new(RunSpans {
                parent: parent.map(|parent| Parent {
                    span_id: parent.span_id,
                    remote,
                }),
                link,
                info: None,
                started: wire::nanos(SystemTime::now()),
                open: Vec::new(),
                notes: Vec::new(),
                error: None,
                ended: false,
            })
        });
        let seed = u64::from_be_bytes(self.ids.new_span_id().to_bytes());
        Traced {
            sink: Arc::clone(self),
            trace: RunTrace::new(seed, trace_id, sampled, state),
            lane: self.queue.lane(),
            spans,
        }
    }

    /// Whether the sampler keeps trace `trace_id`, whose first span continues `remote` (another
    /// process's span) or has no parent.
    fn samples(&self, remote: Option<&TraceParent>, trace_id: u128) -> bool {
        let context = remote.map(|parent| {
            let state = TraceState::from_str(&parent.state).unwrap_or_default();
            let flags = TraceFlags::default().with_sampled(parent.sampled);
            let span_id = OtelSpanId::from(parent.span_id);
            let parent =
                SpanContext::new(TraceId::from(parent.trace_id), span_id, flags, true, state);
            Context::new().with_remote_span_context(parent)
        });
        let decision = self.sampler.should_sample(
            context.as_ref(),
            TraceId::from(trace_id),
            "invoke_workflow",
            &SpanKind::Internal,
            &[],
            &[],
        );
        decision.decision == SamplingDecision::RecordAndSample
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
    fn receive(&self, run: &Traced, event: &Event) {
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
            Ended::Encoded(span) => self.queue.push(run.lane, &span),
            Ended::Step(record) => self.queue.push_step(run.lane, record),
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
        let name = match info.plan.as_deref() {
            Some(plan) => {
                attributes.extend(&plan.root);
                ("invoke_workflow ", plan.name.as_str())
            }
            None => ("", self.session_name.as_str()),
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
            trace_id: link.trace_id.to_be_bytes(),
            span_id: link.span_id.to_be_bytes(),
            flags: span_flags(u32::from(link.sampled), false),
        });
        export(
            trace,
            (SpanId::RUN, None),
            run.parent,
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
            model_key,
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
            model_key: model_key.as_deref().map(Cow::Borrowed),
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
            let input = content::input_messages(&content.messages);
            attributes.str("gen_ai.input.messages", &input);
            let finish_reason = finish_reason.unwrap_or_default();
            let output = content::output_messages(content, finish_reason);
            attributes.str("gen_ai.output.messages", &output);
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

/// A span that an event ended: encoded, or a step attempt's left to the export thread.
enum Ended {
    Encoded(Vec<u8>),
    Step(StepRecord),
}

/// The span of a step attempt that `event` ended, which ran from `started` to `at`: a record
/// for the export thread when its step is in the run's plan and its trace carries no state,
/// else encoded here.
fn step_span(
    trace: &RunTrace,
    event: &Event,
    (started, at): (u64, u64),
    run: &RunSpans,
    attempt: Attempt,
) -> Ended {
    let step = event.step.as_deref().unwrap_or_default();
    let plan = run.info.as_ref().and_then(|info| info.plan.as_ref());
    let planned = plan.and_then(|plan| Some((plan, plan.position(step)?)));
    let ids = (event.span, event.parent_span);
    if let Some((plan, position)) = planned
        && trace.state.is_empty()
    {
        let ids = Ids::of(trace, ids, None);
        let plan = Arc::clone(plan);
        return Ended::Step(StepRecord::new(ids, plan, position, attempt, started, at));
    }
    let unplanned;
    let shape = match planned {
        Some((plan, position)) => plan.step(position),
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
    root_parent: Option<Parent>,
    built: Built,
    events: &[SpanEvent],
    links: &[Link],
) -> Vec<u8> {
    let ids = Ids::of(trace, ids, root_parent);
    encode(ids, &trace.state, built, events, links)
}

impl crate::orchestrate::TracedRun for Traced {
    fn trace(&self) -> &RunTrace {
        &self.trace
    }

    /// Keeps what the run runs (its root span's name and attributes); a run not sampled keeps
    /// nothing. A shape another exporter made (none does) is taken as no plan.
    fn describe(&self, plan: TraceShape, attributes: Vec<(&'static str, String)>) {
        if let Some(Ok(mut spans)) = self.spans.as_ref().map(Mutex::lock) {
            let plan = plan.downcast::<PlanShape>().ok();
            spans.info = Some(RunInfo { plan, attributes });
        }
    }

    fn receive(&self, event: &Event) {
        self.sink.receive(self, event);
    }
}

/// What a span that `event` ends takes from its run's spans in progress: the rest of it comes
/// from the event and the run's plan.
struct Ending {
    open: Open,
    /// When the event happened, in Unix nanoseconds.
    at: u64,
}

impl Sink {
    /// Under the run's lock: opens the span `event` starts, adds a note or a model call's count
    /// to the run, or takes what the span it ends needs.
    fn settle(&self, event: &Event, run: &mut RunSpans) -> Option<Ending> {
        let at = run.at(event.at_ms);
        match &event.data {
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
                let round = matches!(call, CallKind::Round(_));
                // What a step attempt's span counts of its calls: kept from its first call
                // that has something to count (most have nothing), until its end.
                if let Some(parent) = event.parent_span.filter(|_| *cached || round) {
                    let parent = run.opened(parent);
                    parent.cached_calls += u64::from(*cached);
                    parent.agent |= round;
                }
                Some(Ending {
                    open: Open::default(),
                    at,
                })
            }
            _ => {
                Sink::note(event, run);
                None
            }
        }
    }

    /// The span `event` ends, from the event, what [`Sink::settle`] took from `run`, and the
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
                outcome,
                attempt,
                duration_ms,
            } => {
                let open = &ending.open;
                let attempt = Attempt::of(outcome, *attempt, open.cached_calls, open.agent);
                let times = (before(ending.at, *duration_ms), ending.at);
                return Some(step_span(trace, event, times, run, attempt));
            }
            EventData::ToolEnd {
                tool,
                outcome,
                cached,
                duration_ms,
            } => self.tool_span(event, ending, tool, outcome, *cached, *duration_ms),
            EventData::Inference { .. } => {
                let step = event.step.as_deref().unwrap_or_default();
                let plan = run.info.as_ref().and_then(|info| info.plan.as_deref());
                let planned = plan.and_then(|plan| Some(plan.step(plan.position(step)?)));
                self.chat_span(event, ending.at, planned)?
            }
            _ => return None,
        };
        let ids = (event.span, event.parent_span);
        Some(Ended::Encoded(export(trace, ids, None, built, &[], &[])))
    }
}

/// Whether `data` opens or ends a span or is noted on the run's: a run's moves short of its end,
/// a step attempt's start (its end says how long it ran), route decisions and an agent's start
/// and end shape none, so they take no lock.
fn shapes_spans(data: &EventData) -> bool {
    match data {
        EventData::Lifecycle { state } => matches!(
            state,
            Lifecycle::Complete | Lifecycle::Error | Lifecycle::Cancelled
        ),
        EventData::StepStart { .. }
        | EventData::RouteDecision { .. }
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
    use crate::orchestrate::{Events, Sent, Sinks, ToolResult, Tracer};
    use crate::trace::{Exporter, export};

    /// The events of a session whose spans go to the returned queue, where they stay.
    fn traced(sampler: Sampler) -> (Events, Arc<Queue>) {
        let limits = export::Limits::default();
        let queue = Arc::new(Queue::new(&limits));
        let name = "pagantic test".to_string();
        let sink = Sink::new(Arc::clone(&queue), Box::new(sampler), None, name, false);
        let exporter = Exporter {
            sink: Arc::new(sink),
            counts: Arc::default(),
            done: std::sync::Mutex::new(None),
            max_queue: limits.max_queue,
            warn: None,
        };
        let tracer: Arc<dyn Tracer> = Arc::new(exporter);
        (
            Events::traced(Arc::new(Sinks::default()), Some(tracer)),
            queue,
        )
    }

    /// What a run of plan `name` with `steps` says of its plan, for [`Events::describe`].
    fn plan(
        name: &'static str,
        steps: &'static [(&'static str, &'static str)],
    ) -> impl FnOnce(&dyn Tracer) -> TraceShape {
        move |tracer| tracer.plan_shape(name, &mut steps.iter().copied())
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
            model_key: Some("writer".into()),
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
            plan("main", &[("solve", "agent"), ("route", "route")]),
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
                sandbox: None,
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
        nested.describe(plan("sub", &[("inner", "infer")]), Vec::new);
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
        assert_eq!(attribute(chat, "pagantic.model.key"), text("writer"));
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
            run.describe(plan("main", &[("solve", "agent")]), row_7);
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
        session.describe(plan("main", &[]), Vec::new);
        session.lifecycle(Lifecycle::Execute);
        session.lifecycle(Lifecycle::Complete);
        assert!(spans(&queue).is_empty());
        let traceparent = session.traceparent(SpanId::RUN).expect("a context");
        let traceparent = traceparent.to_string();
        assert!(traceparent.ends_with("-00"), "{traceparent}");
        assert!(session.trace_id().is_some());
    }
}
