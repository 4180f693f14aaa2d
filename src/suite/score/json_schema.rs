//! Scoring `json_schema`: the output's JSON is valid against the schema; the note lists every
//! violation with where it is.

use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::JsonSchemaAssertion;

/// What a `json_schema` assertion reports as expected.
const EXPECTED: &str = "JSON valid against the schema";

impl Score for JsonSchemaAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let got = on.subject.text();
        let Some(json) = on.subject.json() else {
            return Scored::check(false, EXPECTED, got);
        };
        let validator = match jsonschema::validator_for(&self.value) {
            Ok(validator) => validator,
            Err(e) => return Scored::broken("a valid schema", e.to_string()),
        };
        let violations: Vec<String> = validator
            .iter_errors(&json)
            .map(|e| format!("{e} at `{}`", e.instance_path().as_str()))
            .collect();
        if violations.is_empty() {
            Scored::check(true, EXPECTED, got)
        } else {
            Scored::check(false, EXPECTED, got).noted(violations.join("; "))
        }
    }
}
