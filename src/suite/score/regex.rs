//! Scoring `regex`: the pattern (compiled once rendered) matches somewhere in the output's text.

use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::RegexAssertion;

impl Score for RegexAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let written = &self.text.value;
        match ::regex::Regex::new(written) {
            Ok(pattern) => {
                let got = on.subject.text();
                Scored::check(pattern.is_match(&got), format!("/{written}/"), got)
            }
            Err(e) => Scored::broken(written, format!("invalid regular expression: {e}")),
        }
    }
}
