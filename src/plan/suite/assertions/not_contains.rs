//! `type: not_contains` — the output does not contain a text.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AssertionCommon, AssertionKind, ExpectedText};

/// A text the output is compared with.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct NotContainsAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    #[serde(flatten)]
    pub text: ExpectedText,
}

impl AssertionKind for NotContainsAssertion {}
