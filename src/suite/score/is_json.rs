//! Scoring `is_json`: the output is JSON, or text that parses as JSON.

use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::IsJsonAssertion;

impl Score for IsJsonAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        Scored::check(on.subject.json().is_some(), "JSON", on.subject.text())
    }
}
