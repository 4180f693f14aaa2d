//! `type: one_of` — the output equals one of several values.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{AssertionCommon, AssertionKind};

/// Values the output must be one of.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct OneOfAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// The allowed values, compared as `equals` compares.
    #[schemars(length(min = 1))]
    pub value: Vec<Value>,
}

impl AssertionKind for OneOfAssertion {}
