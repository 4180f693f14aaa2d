//! `type: max_tokens` — the run (or a step) used no more than a number of tokens.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AssertionCommon, AssertionKind};

/// The most tokens the run (or `step`) may use, prompt and completion together.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct MaxTokensAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    pub value: u64,
}

impl AssertionKind for MaxTokensAssertion {}
