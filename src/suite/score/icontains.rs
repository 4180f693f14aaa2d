//! Scoring `icontains`: the output's text contains the text, both lowercased.

use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::IcontainsAssertion;

impl Score for IcontainsAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let want = &self.text.value;
        let got = on.subject.text();
        let passed = got.to_lowercase().contains(&want.to_lowercase());
        Scored::check(passed, want, got)
    }
}
