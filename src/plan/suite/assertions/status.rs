//! `type: status` — the run (or a step) ended in a given state.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AssertionCommon, AssertionKind};

/// How the run (or `step`) must end.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct StatusAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    pub value: ExpectedStatus,
}

/// A run's or step's end state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExpectedStatus {
    /// The run completed (a step: it ran and succeeded).
    Complete,
    /// It failed.
    Error,
    /// A step whose `when` was false.
    Skipped,
}

impl AssertionKind for StatusAssertion {
    fn expects_failure(&self) -> bool {
        true
    }
}
