//! `type: max_cost` — the run's (or a step's) model calls cost no more than an amount.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AssertionCommon, AssertionKind};

/// The most the run's (or `step`'s) model calls may cost, in the models' `price` currency.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct MaxCostAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    #[schemars(range(min = 0.0))]
    pub value: f64,
}

impl AssertionKind for MaxCostAssertion {}
