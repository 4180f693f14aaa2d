//! W3C trace context: the `traceparent` (and `tracestate`) a run continues — from the
//! environment (`TRACEPARENT`, as CI systems and schedulers pass it on) or a served request's
//! headers — and sends on (the `openai` engine's requests), and the ids of a run's spans.
//!
//! A run's event spans are numbered within the run; their OpenTelemetry span ids are derived from
//! a random number the run's trace draws when it starts and that number, so the sink and the
//! engine that sends `traceparent` agree on a span's id without asking each other, and a child
//! can name its parent before the parent ends.

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

use crate::inference::traceparent::Traceparent;
use crate::orchestrate::events;

/// A parsed `traceparent` header (with its `tracestate`): the span a run continues.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceParent {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub sampled: bool,
    pub state: TraceState,
}

impl TraceParent {
    /// `traceparent` as W3C Trace Context writes it (`00-<32 hex>-<16 hex>-<2 hex>`), with an
    /// optional `tracestate`; None when it is not one (a bad version, length, character, or an
    /// all-zero id), so a malformed header starts a new trace instead of failing the request.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<TraceParent> {
        let mut parts = traceparent.trim().split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |text: &str, len: usize| {
            text.len() == len
                && text
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        // Version 00 has exactly four parts; a later version may add more after these.
        let later_version = version != "00" && version != "ff";
        if !hex(version, 2) || (parts.next().is_some() && !later_version) || version == "ff" {
            return None;
        }
        if !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
            return None;
        }
        let trace_id = TraceId::from_hex(trace).ok()?;
        let span_id = SpanId::from_hex(span).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
            return None;
        }
        let state = tracestate
            .and_then(|state| state.parse::<TraceState>().ok())
            .unwrap_or_default();
        Some(TraceParent {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
            state,
        })
    }

    /// The parent as the span context of a remote span.
    pub fn remote_context(&self) -> SpanContext {
        SpanContext::new(
            self.trace_id,
            self.span_id,
            flags(self.sampled),
            true,
            self.state.clone(),
        )
    }
}

fn flags(sampled: bool) -> TraceFlags {
    TraceFlags::default().with_sampled(sampled)
}

/// The trace one run belongs to: its id, whether it is sampled (exported), the state the caller
/// passed on, and what its spans' ids are made from.
#[derive(Debug, Clone, PartialEq)]
pub struct RunTrace {
    pub trace_id: TraceId,
    pub sampled: bool,
    pub state: TraceState,
    /// `state` as its W3C `tracestate` header (empty for none), written once for all the run's
    /// spans.
    pub state_header: String,
    /// Drawn at random for the run: what its spans' ids are mixed from.
    run: u64,
}

impl RunTrace {
    /// The trace of a run, its span ids mixed from `seed` (a random span id drawn for it: runs
    /// of one trace, such as a sub-plan's and its caller's, draw different ones).
    pub fn new(seed: SpanId, trace_id: TraceId, sampled: bool, state: TraceState) -> RunTrace {
        RunTrace {
            trace_id,
            sampled,
            state_header: state.header(),
            state,
            run: u64::from_be_bytes(seed.to_bytes()),
        }
    }

    /// The OpenTelemetry span id of the run's event span `span`: the run's seed and the span's
    /// number mixed (splitmix64, one-to-one, so two spans of a run never share an id), never zero.
    pub fn span_id(&self, span: events::SpanId) -> SpanId {
        let mut mixed = self.run ^ span.number().wrapping_mul(0x9e37_79b9_7f4a_7c15);
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        SpanId::from((mixed ^ (mixed >> 31)).max(1))
    }

    /// The span context of the run's event span `span`.
    pub fn span_context(&self, span: events::SpanId) -> SpanContext {
        SpanContext::new(
            self.trace_id,
            self.span_id(span),
            flags(self.sampled),
            false,
            self.state.clone(),
        )
    }

    /// The `traceparent` naming the run's event span `span`.
    pub fn traceparent(&self, span: events::SpanId) -> Traceparent {
        Traceparent {
            trace_id: u128::from_be_bytes(self.trace_id.to_bytes()),
            span_id: u64::from_be_bytes(self.span_id(span).to_bytes()),
            sampled: self.sampled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIVEN: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_is_parsed_and_written_back_the_same() {
        let parent = TraceParent::parse(GIVEN, Some("vendor=value")).expect("parsed");
        assert_eq!(
            parent.trace_id.to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(parent.sampled);
        assert_eq!(parent.state.get("vendor"), Some("value"));
        let written = Traceparent {
            trace_id: u128::from_be_bytes(parent.trace_id.to_bytes()),
            span_id: u64::from_be_bytes(parent.span_id.to_bytes()),
            sampled: true,
        };
        assert_eq!(written.to_string(), GIVEN);
        let unsampled = TraceParent::parse(&GIVEN.replace("-01", "-00"), None).expect("parsed");
        assert!(!unsampled.sampled);
        assert!(parent.remote_context().is_remote());
    }

    #[test]
    fn a_malformed_traceparent_is_none() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad, None), None, "{bad}");
        }
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more";
        assert!(TraceParent::parse(later, None).is_some());
    }

    #[test]
    fn a_span_id_depends_on_the_run_and_the_span_and_is_never_zero() {
        let run = |seed: u64| {
            RunTrace::new(
                SpanId::from(seed),
                TraceId::from(7),
                true,
                TraceState::default(),
            )
        };
        let (first, second) = (events::SpanId::RUN, events::SpanId::numbered(1));
        assert_eq!(run(1).span_id(first), run(1).span_id(first));
        assert_ne!(run(1).span_id(first), run(1).span_id(second));
        assert_ne!(run(1).span_id(first), run(2).span_id(first));
        // Even a seed of 0 (a span id no generator draws) makes no zero id.
        let ids: std::collections::HashSet<SpanId> = (0..10_000)
            .map(|n| run(0).span_id(events::SpanId::numbered(n)))
            .collect();
        assert_eq!(ids.len(), 10_000);
        assert!(!ids.contains(&SpanId::INVALID));
    }
}
