//! Scoring `max_latency`: the run (or step) took at most the duration.

use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::MaxLatencyAssertion;

impl Score for MaxLatencyAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let limit_ms = self.value.get().as_secs_f64() * 1000.0;
        let took_ms = on.subject.duration_ms;
        Scored::check(
            took_ms <= limit_ms,
            format!("≤ {}", self.value),
            format!("{took_ms:.0} ms"),
        )
    }
}
