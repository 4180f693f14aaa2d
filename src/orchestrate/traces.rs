//! What a session's runs tell its trace exporter, and what they ask of it: the [`Tracer`] a
//! session is opened with (the OTLP exporter of the `trace` module, a layer above, implements
//! it), the [`TracedRun`] each run keeps beside its events, and a run's [`RunTrace`] — its trace
//! id and its spans' ids, which the run needs itself (its record's `trace_id`, the `traceparent`
//! its model calls send). This layer builds no span and knows no wire format: an exporter is
//! handed every event of every run, as the event sinks are, and turns them into spans.
//!
//! A run's event spans are numbered within the run; their trace span ids are mixed from that
//! number and a seed the run's trace draws when it opens, so the exporter and the engine that
//! sends `traceparent` agree on a span's id without asking each other, and a child can name its
//! parent before the parent ends.

use std::any::Any;
use std::sync::Arc;

use super::events::{Event, SpanId};
use crate::core::TraceParent;

/// A session's trace exporter, as its runs see it.
pub trait Tracer: Send + Sync {
    /// The trace of a run that starts now, from `origin`; a sampled one is exported.
    fn open_run(&self, origin: Origin) -> Box<dyn TracedRun>;
    /// What the exporter keeps of plan `name` with `steps` (names and types) for all its runs:
    /// made once, by a pipeline's first traced run, and kept by the pipeline.
    fn plan_shape(
        &self,
        name: &str,
        steps: &mut dyn Iterator<Item = (&str, &'static str)>,
    ) -> TraceShape;
    /// Whether sampled runs' model calls carry their messages and answers.
    fn captures_content(&self) -> bool;
    /// Sends what is queued (waiting a bounded time), and says how many spans were not
    /// exported (the first time only). Returns that number. Runs that end after this are not
    /// exported.
    fn finish(&self) -> u64;
}

/// One run's trace, kept by the run's events.
pub trait TracedRun: Send + Sync {
    fn trace(&self) -> &RunTrace;
    /// Says what the run runs: its plan's shape (from [`Tracer::plan_shape`]) and its root
    /// span's attributes (a batch row's id, a test case's variant).
    fn describe(&self, plan: TraceShape, attributes: Vec<(&'static str, String)>);
    /// Takes one of the run's events, as it is emitted.
    fn receive(&self, event: &Event);
}

/// What a trace exporter keeps of a pipeline for all its runs (its spans' constant parts),
/// opaque here: the pipeline holds it as long as it lives, and drops it with it.
pub type TraceShape = Arc<dyn Any + Send + Sync>;

/// Where a new run's trace comes from.
#[derive(Debug, Clone)]
pub enum Origin {
    /// The session's own run: it continues the session's parent (`TRACEPARENT`) when there is one.
    Session,
    /// A run of its own (a batch row, a test case, a request, a chat turn): it continues
    /// `remote` (a request's `traceparent`) or starts a trace, linked to `link` (the session's
    /// span: a batch's rows link to the batch).
    Own {
        remote: Option<TraceParent>,
        link: Option<TraceParent>,
    },
    /// A run nested in another's step (a sub-plan): the same trace, a child of that step's span.
    Nested(TraceParent),
}

/// The trace one run belongs to: its id, whether it is sampled (exported), the state the caller
/// passed on, and what its spans' ids are made from.
#[derive(Debug, Clone, PartialEq)]
pub struct RunTrace {
    /// Never zero.
    pub trace_id: u128,
    pub sampled: bool,
    /// The W3C `tracestate` header the trace carries (empty for none).
    pub state: String,
    /// Drawn at random for the run: what its spans' ids are mixed from.
    seed: u64,
}

impl RunTrace {
    /// The trace of a run, its span ids mixed from `seed` (drawn at random for it: runs of one
    /// trace, such as a sub-plan's and its caller's, draw different ones).
    pub fn new(seed: u64, trace_id: u128, sampled: bool, state: String) -> RunTrace {
        RunTrace {
            trace_id,
            sampled,
            state,
            seed,
        }
    }

    /// The trace span id of the run's event span `span`: the run's seed and the span's number
    /// mixed (splitmix64, one-to-one, so two spans of a run never share an id), never zero.
    pub fn span_id(&self, span: SpanId) -> u64 {
        let mut mixed = self.seed ^ span.number().wrapping_mul(0x9e37_79b9_7f4a_7c15);
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (mixed ^ (mixed >> 31)).max(1)
    }

    /// The run's event span `span` as a trace context (what a model call sends, what a nested
    /// or linked run hangs from).
    pub fn traceparent(&self, span: SpanId) -> TraceParent {
        TraceParent {
            trace_id: self.trace_id,
            span_id: self.span_id(span),
            sampled: self.sampled,
            state: self.state.clone(),
        }
    }

    /// The trace id as 32 lowercase hex digits (every row of a traced batch writes one: written
    /// digit by digit, a fifth of the instructions of `format!`'s padded hex).
    pub fn trace_id_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0u8; 32];
        for (at, byte) in self.trace_id.to_be_bytes().into_iter().enumerate() {
            hex[2 * at] = DIGITS[usize::from(byte >> 4)];
            hex[2 * at + 1] = DIGITS[usize::from(byte & 0x0f)];
        }
        String::from_utf8(hex.to_vec()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_id_depends_on_the_run_and_the_span_and_is_never_zero() {
        let run = |seed: u64| RunTrace::new(seed, 7, true, String::new());
        let (first, second) = (SpanId::RUN, SpanId::numbered(1));
        assert_eq!(run(1).span_id(first), run(1).span_id(first));
        assert_ne!(run(1).span_id(first), run(1).span_id(second));
        assert_ne!(run(1).span_id(first), run(2).span_id(first));
        // Even a seed of 0 (a span id no generator draws) makes no zero id.
        let ids: std::collections::HashSet<u64> = (0..10_000)
            .map(|n| run(0).span_id(SpanId::numbered(n)))
            .collect();
        assert_eq!(ids.len(), 10_000);
        assert!(!ids.contains(&0));
        let parent = run(1).traceparent(second);
        assert_eq!(parent.span_id, run(1).span_id(second));
        assert_eq!(run(1).trace_id_hex(), format!("{:032x}", 7));
        let wide = RunTrace::new(
            1,
            0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
            true,
            String::new(),
        );
        assert_eq!(wide.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let widest = RunTrace::new(1, u128::MAX, true, String::new());
        assert_eq!(widest.trace_id_hex(), "f".repeat(32));
    }
}
