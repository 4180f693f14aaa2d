//! `type: icontains` — the output contains a text, ignoring case.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AssertionCommon, AssertionKind, ExpectedText};

/// A text the output is compared with.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct IcontainsAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    #[serde(flatten)]
    pub text: ExpectedText,
}

impl AssertionKind for IcontainsAssertion {}
