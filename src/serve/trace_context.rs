//! The caller's trace context: a request's W3C `traceparent` (with its `tracestate`) is handed
//! to the run it starts, whose trace continues it — a malformed one is ignored and a new trace
//! starts, as the W3C specification asks — and, when traces are exported, the run's trace id goes
//! back in `X-Trace-Id` (a streamed run's is in its record, the last event).

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::Response;

use crate::core::TraceParent;
use crate::orchestrate::RunRecord;

/// The response header that names the run's trace.
pub const TRACE_ID: HeaderName = HeaderName::from_static("x-trace-id");

/// Who started a run: the id they know it by (`X-Request-Id`) and the span their trace
/// continues from (`traceparent`).
#[derive(Debug, Default)]
pub struct Caller {
    pub request_id: Option<String>,
    pub trace_parent: Option<TraceParent>,
}

impl From<Option<String>> for Caller {
    /// A caller known by `request_id`, with no trace context.
    fn from(request_id: Option<String>) -> Self {
        Caller {
            request_id,
            trace_parent: None,
        }
    }
}

impl Caller {
    /// The caller of a request with `headers`, known by `request_id`.
    pub fn of(request_id: Option<String>, headers: &HeaderMap) -> Self {
        let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
        Caller {
            request_id,
            trace_parent: text("traceparent")
                .and_then(|parent| TraceParent::parse(parent, text("tracestate"))),
        }
    }
}

/// `response` with the trace id of `record` in `X-Trace-Id`, when it has one.
pub fn with_trace_id(mut response: Response, record: &RunRecord) -> Response {
    if let Some(value) = record
        .trace_id
        .as_deref()
        .and_then(|id| HeaderValue::from_str(id).ok())
    {
        response.headers_mut().insert(TRACE_ID, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_continues_a_valid_traceparent_and_ignores_a_malformed_one() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "traceparent",
            HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        );
        headers.insert("tracestate", HeaderValue::from_static("v=1"));
        let caller = Caller::of(Some("req-1".into()), &headers);
        let parent = caller.trace_parent.expect("continued");
        assert_eq!(parent.trace_id, 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736);
        assert_eq!(parent.state, "v=1");
        headers.insert("traceparent", HeaderValue::from_static("garbage"));
        assert!(Caller::of(None, &headers).trace_parent.is_none());
    }
}
