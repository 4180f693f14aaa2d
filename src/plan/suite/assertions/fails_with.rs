//! `type: fails_with` — the run (or a step) fails with a given failure code, which must be one of
//! the taxonomy's.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AssertionCommon, AssertionKind, Checks};
use crate::core::FailureCode;
use crate::plan::diagnostic::{PlanError, suggestion};

/// The failure code the run (or `step`) must fail with, e.g. `VALIDATION_RULE_FAILED`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct FailsWithAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    pub value: String,
}

impl AssertionKind for FailsWithAssertion {
    fn expects_failure(&self) -> bool {
        true
    }

    fn check(&self, checks: &mut Checks<'_>) {
        let codes = FailureCode::ALL.iter().map(|c| c.as_str());
        if codes.clone().any(|code| code == self.value) {
            return;
        }
        checks.report(
            "value",
            PlanError::UnknownFailureCode {
                code: self.value.clone(),
            },
            "not a failure code",
            Some(suggestion(&self.value, "failure codes", codes)),
        );
    }
}
