//! Scoring `contains`: the output's text contains the text, as written.

use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::ContainsAssertion;

impl Score for ContainsAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let want = &self.text.value;
        let got = on.subject.text();
        Scored::check(got.contains(want), want, got)
    }
}
