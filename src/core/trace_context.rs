//! W3C Trace Context: the `traceparent` header, with its `tracestate`, naming one span of a trace.
//! It is the one trace-context value every layer passes: the span a run continues (the
//! environment's `TRACEPARENT`, a served request's headers), the span a run is linked to or
//! nested in, and the span a model call names to the server it calls (the `openai` engine sends
//! it, so the server's own spans join the run's trace).
//!
//! Ids are kept as numbers and written out only when a header is sent; the `tracestate` is kept
//! as its header, checked when parsed (OpenTelemetry's `TraceState` applies the W3C rules).

use std::fmt;

use opentelemetry::trace::TraceState;

/// A span of a trace, as W3C Trace Context names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    /// Never zero.
    pub trace_id: u128,
    /// Never zero.
    pub span_id: u64,
    pub sampled: bool,
    /// The `tracestate` header the trace carries (empty for none).
    pub state: String,
}

impl TraceParent {
    /// `traceparent` as W3C Trace Context writes it (`00-<32 hex>-<16 hex>-<2 hex>`), with an
    /// optional `tracestate`; None when it is not one (a bad version, length, character, or an
    /// all-zero id), so a malformed header starts a new trace instead of failing the request. A
    /// `tracestate` that breaks the rules is left out (the parent is kept).
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
        let trace_id = u128::from_str_radix(trace, 16).ok()?;
        let span_id = u64::from_str_radix(span, 16).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        if trace_id == 0 || span_id == 0 {
            return None;
        }
        let state = tracestate
            .and_then(|state| state.parse::<TraceState>().ok())
            .map(|state| state.header())
            .unwrap_or_default();
        Some(TraceParent {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
            state,
        })
    }
}

impl fmt::Display for TraceParent {
    /// The `traceparent` header: `00-<32 hex>-<16 hex>-<flags>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flags = u8::from(self.sampled);
        write!(
            f,
            "00-{:032x}-{:016x}-{flags:02x}",
            self.trace_id, self.span_id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIVEN: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_is_parsed_and_written_back_the_same() {
        let parent = TraceParent::parse(GIVEN, Some("vendor=value , other=1")).expect("parsed");
        assert_eq!(parent.trace_id, 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736);
        assert_eq!(parent.span_id, 0x00f0_67aa_0ba9_02b7);
        assert!(parent.sampled);
        assert_eq!(parent.state, "vendor=value,other=1");
        assert_eq!(parent.to_string(), GIVEN);
        let unsampled = TraceParent::parse(&GIVEN.replace("-01", "-00"), None).expect("parsed");
        assert!(!unsampled.sampled);
        assert!(unsampled.to_string().ends_with("-00"));
        assert_eq!(unsampled.state, "");
    }

    #[test]
    fn a_malformed_traceparent_is_none_and_a_malformed_tracestate_is_left_out() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad, None), None, "{bad}");
        }
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more";
        assert!(TraceParent::parse(later, None).is_some());
        for state in ["no pair", "Upper=1", "k=v,no pair", "\x1b[31m=red"] {
            let parent = TraceParent::parse(GIVEN, Some(state)).expect("the parent is kept");
            assert_eq!(parent.state, "", "{state:?}");
        }
    }
}
