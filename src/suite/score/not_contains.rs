//! Scoring `not_contains`: the output's text does not contain the text.

use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::NotContainsAssertion;

impl Score for NotContainsAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let unwanted = &self.text.value;
        let got = on.subject.text();
        Scored::check(!got.contains(unwanted), format!("no `{unwanted}`"), got)
    }
}
