//! What a finished span is made of and how it is encoded, whichever thread encodes it: a span
//! under construction ([`Built`]), its ids, a plan and its steps as their spans show them (with
//! what a step's usual attempts' spans and its model calls' requests mostly share, encoded once,
//! since a batch repeats them on every row), and a step attempt's span as a record
//! ([`StepRecord`]) that the run's thread leaves in the export queue for the export thread to
//! encode. The sink builds spans from events; the export queue carries them; both share this.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use super::wire::{self, Attr, Attributes, Kind, Link, Of, Shared, Span, SpanEvent};
use crate::inference::SchemaMode;
use crate::orchestrate::{CallKind, RunTrace, SpanId, StepOutcome};

/// A plan as its runs' spans show it: its name and steps, and the attributes its root span and
/// each step's spans always carry, encoded once. Made by a pipeline's first traced run and kept
/// by the pipeline, so the runs of one plan (a batch's rows) share it.
#[derive(Debug)]
pub struct PlanShape {
    pub name: String,
    steps: Vec<StepShape>,
    /// The root span's attributes that name the plan.
    pub root: Attributes,
}

impl PlanShape {
    /// Plan `name` with `steps` (names and types).
    pub fn new<'a>(name: &str, steps: impl Iterator<Item = (&'a str, &'static str)>) -> PlanShape {
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

    /// Where step `name` is among its steps.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.steps.iter().position(|step| step.name == name)
    }

    /// Its step at `position` (from [`PlanShape::position`]).
    pub fn step(&self, position: usize) -> &StepShape {
        &self.steps[position]
    }
}

/// The OpenInference span kind (`LLM`, `TOOL`, `AGENT`, `CHAIN`, `RETRIEVER`), which Arize
/// Phoenix files spans under, set beside the GenAI attributes.
pub(super) const SHOWN_AS: &str = "openinference.span.kind";

/// A step as its spans show it.
#[derive(Debug)]
pub struct StepShape {
    pub name: String,
    /// The first part of its spans' names (`step `, `invoke_agent `, `retrieval `).
    span_name: &'static str,
    /// Whether it is an agent (`gen_ai.agent.name` is set whether or not it ran rounds).
    agent: bool,
    /// What every span of it carries: its name and type, its span kind and operation.
    constant: Attributes,
    /// What the span of its usual attempt carries, encoded once: the first, ended ok, with no
    /// call the cache answered and no agent rounds unless it is an agent.
    usual: Attributes,
    /// All of its usual attempt's span but the ids and times, encoded once.
    usual_shared: Shared,
    /// What its first model call asked, and the attributes its `chat` span carries for it, from
    /// the call's operation to its request: the step's later calls mostly ask the same.
    first_call: OnceLock<(Asked<'static>, Attributes)>,
}

/// A span under construction, its name's parts borrowed from the event, run or plan it comes
/// from.
pub struct Built<'a> {
    pub name: (&'static str, &'a str),
    pub kind: Kind,
    /// When it started and ended, in Unix nanoseconds.
    pub started: u64,
    pub ended: u64,
    pub attributes: Attributes,
    /// Its `error.type` when it failed: a failure code, or `_OTHER`.
    pub error: Option<&'static str>,
}

impl StepShape {
    pub fn new(name: &str, kind: &'static str) -> StepShape {
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
        let mut shape = StepShape {
            name: name.to_string(),
            span_name,
            agent: kind == "agent",
            constant,
            usual: Attributes::default(),
            usual_shared: Shared::default(),
            first_call: OnceLock::new(),
        };
        let mut usual = shape.constant.clone();
        shape.add_attempt(&mut usual, &Attempt::USUAL);
        let nowhere = Ids {
            trace: [0; 16],
            span: [0; 8],
            parent: None,
            parent_is_remote: false,
        };
        shape.usual_shared = shape.usual_span(nowhere, 0, 0).shared(usual.clone());
        shape.usual = usual;
        shape
    }

    /// The span of its usual attempt with `ids`, from `started` to `ended`, its attributes aside.
    fn usual_span(&self, ids: Ids, started: u64, ended: u64) -> Span<'_> {
        Span {
            trace_id: ids.trace,
            span_id: ids.span,
            parent_span_id: ids.parent,
            trace_state: "",
            flags: span_flags(0x01, ids.parent_is_remote),
            name: (self.span_name, &self.name),
            kind: Kind::Internal,
            start: started,
            end: ended,
            events: &[],
            links: &[],
            error: None,
        }
    }

    /// Adds what `attempt` came to.
    fn add_attempt(&self, attributes: &mut Attributes, attempt: &Attempt) {
        attributes.int("pagantic.step.attempt", i64::from(attempt.number));
        attributes.str("pagantic.step.status", attempt.status);
        attributes.count("pagantic.step.cached_calls", attempt.cached_calls);
        if self.agent || attempt.agent {
            attributes.str("gen_ai.agent.name", &self.name);
        }
    }

    /// Whether `attempt` is its usual one, whose attributes are encoded once.
    fn is_usual(&self, attempt: &Attempt) -> bool {
        let Attempt {
            number,
            status,
            cached_calls,
            agent,
            error,
        } = *attempt;
        let usual = Attempt::USUAL;
        number == usual.number
            && status == usual.status
            && cached_calls == usual.cached_calls
            && error.is_none()
            && (self.agent || agent == usual.agent)
    }

    /// Adds to a model call's span `attributes` what every call carries (`constant`) and what
    /// this one `asked`: as encoded for the step's first call when this one asked the same.
    pub fn add_asked(&self, attributes: &mut Attributes, constant: &Attributes, asked: Asked<'_>) {
        match self.first_call.get() {
            Some((first, encoded)) if *first == asked => attributes.extend(encoded),
            Some(_) => {
                attributes.extend(constant);
                asked.add(attributes);
            }
            None => {
                let mut encoded = constant.clone();
                asked.add(&mut encoded);
                attributes.extend(&encoded);
                // Another thread's first call may have been kept first: either serves.
                let _ = self.first_call.set((asked.into_owned(), encoded));
            }
        }
    }

    /// The span of `attempt` of this step, from `started` to `ended`.
    pub fn span(&self, attempt: &Attempt, started: u64, ended: u64) -> Built<'_> {
        let mut attributes = Attributes::new(Of::Span);
        if self.is_usual(attempt) {
            attributes.extend(&self.usual);
        } else {
            attributes.extend(&self.constant);
            self.add_attempt(&mut attributes, attempt);
        }
        Built {
            name: (self.span_name, &self.name),
            kind: Kind::Internal,
            started,
            ended,
            attributes,
            error: attempt.error,
        }
    }
}

/// What a model call asked for, as its `chat` span says it: its engine, model and place in
/// its step, and the request's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Asked<'a> {
    pub engine: &'static str,
    pub model: Cow<'a, str>,
    /// The model's key in the plan's `models:`.
    pub model_key: Option<Cow<'a, str>>,
    pub call: Cow<'a, CallKind>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    pub constraint: Option<&'static str>,
    pub schema_mode: Option<SchemaMode>,
}

impl Asked<'_> {
    /// Its attributes: the provider (`openai`, or `pagantic.` and a local engine's name), the
    /// model, the call, and the settings the request carried.
    pub fn add(&self, attributes: &mut Attributes) {
        match self.engine {
            "openai" => attributes.str("gen_ai.provider.name", "openai"),
            other => attributes.add("gen_ai.provider.name", Attr::Joined("pagantic.", other)),
        }
        attributes.str("gen_ai.request.model", &self.model);
        if let Some(key) = &self.model_key {
            attributes.str("pagantic.model.key", key);
        }
        match &*self.call {
            CallKind::Single => attributes.str("pagantic.call", "call"),
            CallKind::Agent(name) => attributes.add("pagantic.call", Attr::Joined("agent ", name)),
            numbered => attributes.add("pagantic.call", Attr::Shown(numbered)),
        }
        if let Some(temperature) = self.temperature {
            attributes.double("gen_ai.request.temperature", temperature);
        }
        if let Some(max) = self.max_tokens {
            attributes.int("gen_ai.request.max_tokens", i64::from(max));
        }
        if let Some(constraint) = self.constraint {
            attributes.str("pagantic.constraint", constraint);
        }
        if let Some(mode) = self.schema_mode {
            attributes.str("pagantic.schema_mode", mode.name());
        }
    }

    fn into_owned(self) -> Asked<'static> {
        Asked {
            engine: self.engine,
            model: Cow::Owned(self.model.into_owned()),
            model_key: self.model_key.map(|key| Cow::Owned(key.into_owned())),
            call: Cow::Owned(self.call.into_owned()),
            temperature: self.temperature,
            max_tokens: self.max_tokens,
            constraint: self.constraint,
            schema_mode: self.schema_mode,
        }
    }
}

/// What a step attempt came to, as its span says it.
#[derive(Debug, Clone, Copy)]
pub struct Attempt {
    number: u32,
    status: &'static str,
    cached_calls: u64,
    /// Whether it ran agent rounds (`gen_ai.agent.name` is set for an agent step regardless).
    agent: bool,
    /// Its failure's code.
    error: Option<&'static str>,
}

impl Attempt {
    /// A step's usual attempt: the first, ended ok, with no call the cache answered, no rounds.
    const USUAL: Attempt = Attempt {
        number: 1,
        status: "ok",
        cached_calls: 0,
        agent: false,
        error: None,
    };

    /// Attempt `number`, ended with `outcome`; its calls the cache answered, and whether it
    /// ran agent rounds.
    pub fn of(outcome: &StepOutcome, number: u32, cached_calls: u64, agent: bool) -> Attempt {
        let (status, error) = match outcome {
            StepOutcome::Ok { .. } => ("ok", None),
            StepOutcome::Failed { error } => ("failed", Some(error.code.as_str())),
            StepOutcome::Cancelled => ("cancelled", None),
        };
        Attempt {
            number,
            status,
            cached_calls,
            agent,
            error,
        }
    }
}

/// A step attempt's span as a run's thread leaves it for the export thread to encode: its ids
/// and times, its step (by its plan's shape, shared, and its place there) and what the attempt
/// came to. Most of a batch's spans are steps', so most of the encoding is done on the export
/// thread, which takes the time the runs leave, and a run's thread copies a few dozen bytes into
/// the queue where it would copy a few hundred.
#[derive(Debug, Clone)]
pub struct StepRecord {
    ids: Ids,
    plan: Arc<PlanShape>,
    step: usize,
    started: u64,
    ended: u64,
    attempt: Attempt,
}

impl StepRecord {
    /// The span of `attempt` of the step at `step` in `plan`, with `ids`, from `started` to
    /// `ended`.
    pub fn new(
        ids: Ids,
        plan: Arc<PlanShape>,
        step: usize,
        attempt: Attempt,
        started: u64,
        ended: u64,
    ) -> StepRecord {
        StepRecord {
            ids,
            plan,
            step,
            started,
            ended,
            attempt,
        }
    }

    /// Appends its OTLP span to `framed` as [`wire::frame`] does: a usual attempt's (most) from
    /// what its step's usual spans share, any other encoded in full.
    pub fn frame(&self, framed: &mut Vec<u8>) {
        let step = self.plan.step(self.step);
        if step.is_usual(&self.attempt) && !self.ids.parent_is_remote {
            let span = step.usual_span(self.ids, self.started, self.ended);
            span.frame_with(framed, &step.usual_shared);
            return;
        }
        let built = step.span(&self.attempt, self.started, self.ended);
        let span = encode(self.ids, "", built, &[], &[]);
        wire::frame(framed, &span);
    }
}

/// The parent of a run's root span: its span id, and whether it is another process's.
#[derive(Debug, Clone, Copy)]
pub struct Parent {
    pub span_id: u64,
    pub remote: bool,
}

/// A span's OpenTelemetry ids.
#[derive(Debug, Clone, Copy)]
pub struct Ids {
    trace: [u8; 16],
    span: [u8; 8],
    parent: Option<[u8; 8]>,
    parent_is_remote: bool,
}

impl Ids {
    /// The ids of the run's event span and parent `(span, parent)` in `trace`; a root span's
    /// parent is `root_parent`.
    pub fn of(
        trace: &RunTrace,
        (span, parent): (SpanId, Option<SpanId>),
        root_parent: Option<Parent>,
    ) -> Ids {
        let (parent, parent_is_remote) = match parent {
            Some(parent) => (Some(trace.span_id(parent)), false),
            None => root_parent.map_or((None, false), |p| (Some(p.span_id), p.remote)),
        };
        Ids {
            trace: trace.trace_id.to_be_bytes(),
            span: trace.span_id(span).to_be_bytes(),
            parent: parent.map(u64::to_be_bytes),
            parent_is_remote,
        }
    }
}

/// The OTLP span `built` with `ids`, `trace_state`, `events` and `links`.
pub fn encode(
    ids: Ids,
    trace_state: &str,
    built: Built,
    events: &[SpanEvent],
    links: &[Link],
) -> Vec<u8> {
    let mut attributes = built.attributes;
    if let Some(kind) = built.error {
        attributes.str("error.type", kind);
    }
    Span {
        trace_id: ids.trace,
        span_id: ids.span,
        parent_span_id: ids.parent,
        trace_state,
        // Only sampled runs are exported: their trace flags are 01.
        flags: span_flags(0x01, ids.parent_is_remote),
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

/// OTLP's span flags: the W3C trace flags, and that the context says whether the parent is
/// remote, and whether it is.
pub fn span_flags(trace_flags: u32, parent_is_remote: bool) -> u32 {
    const HAS_IS_REMOTE: u32 = 0x100;
    const IS_REMOTE: u32 = 0x200;
    trace_flags | HAS_IS_REMOTE | if parent_is_remote { IS_REMOTE } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step's usual attempt takes its attributes encoded once; they must be the ones the
    /// attempt would have written out in full, for an agent (named either way) and a step that
    /// is not one.
    #[test]
    fn a_usual_attempt_s_span_is_the_one_written_out_in_full() {
        let ids = Ids {
            trace: [7; 16],
            span: [2; 8],
            parent: Some([1; 8]),
            parent_is_remote: false,
        };
        for kind in ["infer", "agent"] {
            let step = StepShape::new("ask", kind);
            for ran_rounds in [false, true] {
                let attempt = Attempt {
                    agent: ran_rounds,
                    ..Attempt::USUAL
                };
                let mut full = step.constant.clone();
                step.add_attempt(&mut full, &attempt);
                let written = Built {
                    name: (step.span_name, "ask"),
                    kind: Kind::Internal,
                    started: 1,
                    ended: 2,
                    attributes: full,
                    error: None,
                };
                let usual = step.span(&attempt, 1, 2);
                assert_eq!(
                    encode(ids, "", usual, &[], &[]),
                    encode(ids, "", written, &[], &[]),
                    "{kind}, rounds: {ran_rounds}"
                );
            }
        }
        assert!(!StepShape::new("ask", "infer").is_usual(&Attempt {
            agent: true,
            ..Attempt::USUAL
        }));
    }

    /// A step's model calls that asked what its first asked take the attributes encoded for
    /// it; one that asked otherwise (another call of a vote, another model) writes its own.
    #[test]
    fn a_call_that_asked_what_its_step_s_first_asked_takes_its_attributes_encoded_once() {
        let step = StepShape::new("ask", "infer");
        let constant = Attributes::constant(&[("gen_ai.operation.name", "chat")]);
        let asked = |model: &'static str, call: CallKind| Asked {
            engine: "local",
            model: Cow::Borrowed(model),
            model_key: Some(Cow::Borrowed("writer")),
            call: Cow::Owned(call),
            temperature: Some(0.2),
            max_tokens: Some(64),
            constraint: Some("json_schema"),
            schema_mode: None,
        };
        let written = |asked: Asked<'_>| {
            let mut full = constant.clone();
            asked.add(&mut full);
            full
        };
        let through_step = |asked: Asked<'_>| {
            let mut attributes = Attributes::default();
            step.add_asked(&mut attributes, &constant, asked);
            attributes
        };
        let first = asked("qwen", CallKind::Vote(1));
        for asked in [
            first.clone(),
            first.clone(),
            asked("qwen", CallKind::Vote(2)),
            asked("llama", CallKind::Vote(1)),
            Asked {
                temperature: None,
                ..first.clone()
            },
        ] {
            assert_eq!(
                through_step(asked.clone()),
                written(asked.clone()),
                "{asked:?}"
            );
        }
        let kept = step.first_call.get().expect("the first call is kept");
        assert_eq!(kept.0, first);
    }

    /// A usual attempt's span framed from what its step's usual spans share is the one encoded
    /// in full; another attempt's is encoded in full.
    #[test]
    fn a_usual_attempt_s_span_framed_from_its_step_s_shared_fields_is_the_full_one() {
        for kind in ["infer", "agent"] {
            let plan = Arc::new(PlanShape::new("plan", [("ask", kind)].into_iter()));
            let step = plan.step(0);
            for parent in [Some([1; 8]), None] {
                let ids = Ids {
                    trace: [7; 16],
                    span: [2; 8],
                    parent,
                    parent_is_remote: false,
                };
                let failed = Attempt {
                    number: 2,
                    status: "failed",
                    error: Some("INFERENCE_TIMEOUT"),
                    ..Attempt::USUAL
                };
                for attempt in [Attempt::USUAL, failed] {
                    let mut framed = Vec::new();
                    let record = StepRecord::new(ids, Arc::clone(&plan), 0, attempt, 10, 20);
                    record.frame(&mut framed);
                    let mut full = Vec::new();
                    wire::frame(
                        &mut full,
                        &encode(ids, "", step.span(&attempt, 10, 20), &[], &[]),
                    );
                    assert_eq!(framed, full, "{kind}, {parent:?}, {attempt:?}");
                }
            }
        }
    }
}
