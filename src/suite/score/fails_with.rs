//! Scoring `fails_with`: the run (or step) failed with the code; without a failure, what is got
//! is its status.

use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::FailsWithAssertion;

impl Score for FailsWithAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let got = on.subject.error.map_or_else(
            || on.subject.status.to_string(),
            |e| e.code.as_str().to_string(),
        );
        Scored::check(got == self.value, &self.value, got)
    }
}
