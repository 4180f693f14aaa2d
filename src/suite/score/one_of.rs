//! Scoring `one_of`: the output equals one of the values, each compared as `equals` compares.

use super::{Score, Scored, Scoring, equals, shown};
use crate::plan::suite::assertions::OneOfAssertion;

impl Score for OneOfAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let passed = self.value.iter().any(|want| equals(on.subject, want));
        let choices: Vec<String> = self.value.iter().map(shown).collect();
        Scored::check(
            passed,
            format!("one of {}", choices.join(", ")),
            on.subject.text(),
        )
    }
}
