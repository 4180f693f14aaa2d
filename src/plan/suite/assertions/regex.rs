//! `type: regex` — the output matches a regular expression; one written without a template must
//! compile when the test file is loaded.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AssertionCommon, AssertionKind, Checks, ExpectedText};
use crate::plan::diagnostic::{PlanError, regex_reason};

/// A regular expression the output must match.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RegexAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    #[serde(flatten)]
    pub text: ExpectedText,
}

impl AssertionKind for RegexAssertion {
    fn check(&self, checks: &mut Checks<'_>) {
        let pattern = &self.text.value;
        // A templated pattern is only known once a case renders it.
        if pattern.contains("{{") {
            return;
        }
        if let Err(e) = ::regex::Regex::new(pattern) {
            checks.report(
                "value",
                PlanError::InvalidRegex {
                    message: regex_reason(&e),
                },
                "does not compile",
                None,
            );
        }
    }
}
