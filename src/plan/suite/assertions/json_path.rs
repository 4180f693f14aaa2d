//! `type: json_path` — the value at a path inside the output's JSON equals and/or contains
//! something.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{AssertionCommon, AssertionKind};

/// A value at a path inside the output's JSON.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct JsonPathAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// Where, as dotted keys and bracketed indices: `label`, `items[0].name`, `$.scores[2]`.
    pub path: String,
    /// The value there must equal this.
    #[serde(default)]
    pub equals: Option<Value>,
    /// The value there (as text) must contain this.
    #[serde(default)]
    pub contains: Option<String>,
}

impl AssertionKind for JsonPathAssertion {}
