//! Scoring `equals`: text is compared with the output's text, any other value with its JSON.

use super::{Score, Scored, Scoring, equals, shown};
use crate::plan::suite::assertions::EqualsAssertion;

impl Score for EqualsAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let passed = equals(on.subject, &self.value);
        Scored::check(passed, shown(&self.value), on.subject.text())
    }
}
