//! The W3C `traceparent` of the model call in flight, for engines that call a server: the
//! `openai` engine sends it, so the server's own spans (vLLM exports OTLP) join the run's trace.
//! The run sets it around the call ([`with`]) when it exports traces; engines read it
//! ([`current`]). A task-local rather than a request field: it says nothing about what the call
//! asks, so the call cache never keys on it.

use std::future::Future;

tokio::task_local! {
    static TRACEPARENT: String;
}

/// Runs `call` with `traceparent` as the current one (none: runs it as it is).
pub async fn with<F: Future>(traceparent: Option<String>, call: F) -> F::Output {
    match traceparent {
        Some(traceparent) => TRACEPARENT.scope(traceparent, call).await,
        None => call.await,
    }
}

/// The `traceparent` of the call being made, if the run set one.
pub fn current() -> Option<String> {
    TRACEPARENT.try_with(Clone::clone).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_traceparent_is_seen_only_inside_the_call() {
        assert_eq!(current(), None);
        let inside = with(Some("00-a-b-01".into()), async { current() }).await;
        assert_eq!(inside.as_deref(), Some("00-a-b-01"));
        assert_eq!(with(None, async { current() }).await, None);
        assert_eq!(current(), None);
    }
}
