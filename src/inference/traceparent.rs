//! The W3C `traceparent` of the model call in flight, for engines that call a server: the
//! `openai` engine sends it, so the server's own spans (vLLM exports OTLP) join the run's trace.
//! The run sets it around the call ([`with`]) when it exports traces; engines read it
//! ([`current`]). A task-local rather than a request field: it says nothing about what the call
//! asks, so the call cache never keys on it.

use std::fmt;
use std::future::Future;

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

tokio::task_local! {
    static TRACEPARENT: Traceparent;
}

/// Runs `call` with `traceparent` as the current one (none: runs it as it is).
pub async fn with<F: Future>(traceparent: Option<Traceparent>, call: F) -> F::Output {
    match traceparent {
        Some(traceparent) => TRACEPARENT.scope(traceparent, call).await,
        None => call.await,
    }
}

/// The `traceparent` header of the call being made, if the run set one.
pub fn current() -> Option<String> {
    TRACEPARENT.try_with(Traceparent::to_string).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_traceparent_is_seen_only_inside_the_call() {
        assert_eq!(current(), None);
        let ids = Traceparent {
            trace_id: 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
            span_id: 0x00f0_67aa_0ba9_02b7,
            sampled: true,
        };
        let inside = with(Some(ids), async { current() }).await;
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(inside.as_deref(), Some(header));
        let unsampled = Traceparent {
            sampled: false,
            ..ids
        };
        assert!(unsampled.to_string().ends_with("-00"));
        assert_eq!(with(None, async { current() }).await, None);
        assert_eq!(current(), None);
    }
}
