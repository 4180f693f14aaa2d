//! What a finished span is made of and how it is encoded, whichever thread encodes it: a span
//! under construction ([`Built`]), its ids, a plan's step as its spans show it, and a step
//! attempt's span as a record ([`StepRecord`]) that the run's thread leaves in the export queue
//! for the export thread to encode. The sink builds spans from events; the export queue carries
//! them; both share this.

use opentelemetry::trace::SpanContext;

use super::context::RunTrace;
use super::wire::{Attributes, Kind, Link, Of, Span, SpanEvent};
use crate::orchestrate::events::{SpanId, StepOutcome};

/// The OpenInference span kind (`LLM`, `TOOL`, `AGENT`, `CHAIN`, `RETRIEVER`), which Arize
/// Phoenix files spans under, set beside the GenAI attributes.
pub(super) const SHOWN_AS: &str = "openinference.span.kind";

/// A step as its spans show it.
#[derive(Debug)]
pub struct StepShape {
    pub name: String,
    /// Its type, as the plan says it.
    pub kind: &'static str,
    /// The first part of its spans' names (`step `, `invoke_agent `, `retrieval `).
    span_name: &'static str,
    /// Whether it is an agent (`gen_ai.agent.name` is set whether or not it ran rounds).
    agent: bool,
    /// What every span of it carries: its name and type, its span kind and operation.
    constant: Attributes,
    /// What the span of its usual attempt carries, encoded once: the first, ended ok, with no
    /// call the cache answered and no agent rounds unless it is an agent.
    usual: Attributes,
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
            kind,
            span_name,
            agent: kind == "agent",
            constant,
            usual: Attributes::default(),
        };
        let mut usual = shape.constant.clone();
        shape.add_attempt(&mut usual, &Attempt::USUAL);
        shape.usual = usual;
        shape
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
/// and times, its step (by reference: plan shapes live as long as the process) and what the
/// attempt came to. Most of a batch's spans are steps', so most of the encoding is done on the
/// export thread, which takes the time the runs leave, and a run's thread copies a few dozen
/// bytes into the queue where it would copy a few hundred.
#[derive(Debug, Clone, Copy)]
pub struct StepRecord {
    ids: Ids,
    step: &'static StepShape,
    started: u64,
    ended: u64,
    attempt: Attempt,
}

impl StepRecord {
    /// The span of `attempt` of `step` with `ids`, from `started` to `ended`.
    pub fn new(
        ids: Ids,
        step: &'static StepShape,
        attempt: Attempt,
        started: u64,
        ended: u64,
    ) -> StepRecord {
        StepRecord {
            ids,
            step,
            started,
            ended,
            attempt,
        }
    }

    /// Its OTLP span, encoded.
    pub fn encode(&self) -> Vec<u8> {
        let built = self.step.span(&self.attempt, self.started, self.ended);
        encode(self.ids, "", built, &[], &[])
    }
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
        root_parent: Option<&SpanContext>,
    ) -> Ids {
        let (parent, parent_is_remote) = match parent {
            Some(parent) => (Some(trace.span_id(parent)), false),
            None => root_parent.map_or((None, false), |p| (Some(p.span_id()), p.is_remote())),
        };
        Ids {
            trace: trace.trace_id.to_bytes(),
            span: trace.span_id(span).to_bytes(),
            parent: parent.map(|id| id.to_bytes()),
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
}
