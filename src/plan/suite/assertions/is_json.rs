//! `type: is_json` — the output is JSON.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AssertionCommon, AssertionKind};

/// A check with no parameter.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct IsJsonAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
}

impl AssertionKind for IsJsonAssertion {}
