//! `type: equals` — the output is exactly an expected value.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{AssertionCommon, AssertionKind};

/// A JSON value the output is compared with.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct EqualsAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// The expected value: text (compared after trimming whitespace at both ends) or any JSON value (compared with the output parsed as JSON).
    pub value: Value,
}

impl AssertionKind for EqualsAssertion {}
