//! The W3C `traceparent` of a model call, for engines that call a server: the `openai` engine
//! sends it, so the server's own spans (vLLM exports OTLP) join the run's trace. The run puts it
//! in the call's context ([`super::CallContext`]) when it exports traces: it says nothing about
//! what the call asks, so the call cache never keys on it.

use std::fmt;

/// The ids a `traceparent` header names: kept as numbers, and written out only when an engine
/// sends them (most engines never do).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Traceparent {
    pub trace_id: u128,
    pub span_id: u64,
    pub sampled: bool,
}

impl fmt::Display for Traceparent {
    /// The header, as W3C Trace Context writes it: `00-<32 hex>-<16 hex>-<flags>`.
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

    #[test]
    fn the_header_is_written_as_w3c_trace_context_says() {
        let ids = Traceparent {
            trace_id: 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
            span_id: 0x00f0_67aa_0ba9_02b7,
            sampled: true,
        };
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(ids.to_string(), header);
        let unsampled = Traceparent {
            sampled: false,
            ..ids
        };
        assert!(unsampled.to_string().ends_with("-00"));
    }
}
