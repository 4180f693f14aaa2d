//! Scoring `status`: the run (or step) ended as expected.

use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::{ExpectedStatus, StatusAssertion};

impl Score for StatusAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let want = match self.value {
            ExpectedStatus::Complete => "complete",
            ExpectedStatus::Error => "error",
            ExpectedStatus::Skipped => "skipped",
        };
        Scored::check(on.subject.status == want, want, on.subject.status)
    }
}
