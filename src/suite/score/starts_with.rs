//! Scoring `starts_with`: the output's text, leading whitespace ignored, starts with the text.

use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::StartsWithAssertion;

impl Score for StartsWithAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let want = &self.text.value;
        let got = on.subject.text();
        Scored::check(got.trim_start().starts_with(want), want, got)
    }
}
