//! `type: max_latency` — the run (or a step) took no longer than a duration.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AssertionCommon, AssertionKind};
use crate::core::duration::DurationSpec;

/// The longest the run (or `step`) may take.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct MaxLatencyAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// A duration, e.g. `30s`, `500ms`.
    pub value: DurationSpec,
}

impl AssertionKind for MaxLatencyAssertion {}
