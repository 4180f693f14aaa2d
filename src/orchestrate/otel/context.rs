//! W3C trace context: the `traceparent` (and `tracestate`) a run continues — from the
//! environment (`TRACEPARENT`, as CI systems and schedulers pass it on) or a served request's
//! headers — and sends on (the `openai` engine's requests), and the ids of a run's spans.
//!
//! A run's event spans are numbered within the run; their OpenTelemetry span ids are derived from
//! the run id and that number, so the sink and the engine that sends `traceparent` agree on a
//! span's id without asking each other, and a child can name its parent before the parent ends.

use std::hash::{DefaultHasher, Hash, Hasher};

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

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

/// The `traceparent` header naming span `span_id` of trace `trace_id`.
pub fn header(trace_id: TraceId, span_id: SpanId, sampled: bool) -> String {
    format!("00-{trace_id}-{span_id}-{:02x}", flags(sampled).to_u8())
}

fn flags(sampled: bool) -> TraceFlags {
    TraceFlags::default().with_sampled(sampled)
}

/// The trace one run belongs to: its id, whether it is sampled (exported), and the state the
/// caller passed on.
#[derive(Debug, Clone, PartialEq)]
pub struct RunTrace {
    pub trace_id: TraceId,
    pub sampled: bool,
    pub state: TraceState,
}

impl RunTrace {
    /// The span context of event span `span` of run `run_id`.
    pub fn span_context(&self, run_id: &str, span: events::SpanId) -> SpanContext {
        SpanContext::new(
            self.trace_id,
            span_id(run_id, span),
            flags(self.sampled),
            false,
            self.state.clone(),
        )
    }

    /// The `traceparent` header naming event span `span` of run `run_id`.
    pub fn traceparent(&self, run_id: &str, span: events::SpanId) -> String {
        header(self.trace_id, span_id(run_id, span), self.sampled)
    }
}

/// The OpenTelemetry span id of event span `span` of run `run_id`: a hash of both (never zero).
pub fn span_id(run_id: &str, span: events::SpanId) -> SpanId {
    let mut hasher = DefaultHasher::new();
    run_id.hash(&mut hasher);
    span.hash(&mut hasher);
    SpanId::from(hasher.finish().max(1))
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
        assert_eq!(header(parent.trace_id, parent.span_id, true), GIVEN);
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
        let (first, second) = (events::SpanId::RUN, events::SpanId::numbered(1));
        assert_eq!(span_id("r1", first), span_id("r1", first));
        assert_ne!(span_id("r1", first), span_id("r1", second));
        assert_ne!(span_id("r1", first), span_id("r2", first));
        assert_ne!(span_id("r1", first), SpanId::INVALID);
    }
}
