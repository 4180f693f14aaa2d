//! Scoring `max_tokens`: the run (or step) used at most that many tokens.

use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::MaxTokensAssertion;

impl Score for MaxTokensAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let used = on.subject.tokens;
        Scored::check(
            used <= self.value,
            format!("≤ {} tokens", self.value),
            format!("{used} tokens"),
        )
    }
}
