//! Scoring `json_path`: the value at the path in the output's JSON is there, and equals and/or
//! contains what the assertion says.

use super::{Score, Scored, Scoring, shown, values_equal};
use crate::plan::suite::assertions::JsonPathAssertion;
use crate::suite::paths::json_at;

impl Score for JsonPathAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let expected = match (&self.equals, &self.contains) {
            (Some(value), _) => format!("{} = {}", self.path, shown(value)),
            (None, Some(text)) => format!("{} contains {text}", self.path),
            (None, None) => format!("{} present", self.path),
        };
        let found = on
            .subject
            .json()
            .and_then(|json| json_at(&json, &self.path).cloned());
        let Some(found) = found else {
            return Scored::check(false, expected, format!("no `{}`", self.path));
        };
        let text = shown(&found);
        let passed = self
            .equals
            .as_ref()
            .is_none_or(|want| values_equal(&found, want))
            && self.contains.as_ref().is_none_or(|c| text.contains(c));
        Scored::check(passed, expected, text)
    }
}
