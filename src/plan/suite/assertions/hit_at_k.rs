//! `type: hit_at_k` — 1 when a relevant source is among the first `k` candidates, else 0.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AssertionCommon, AssertionKind, Ranking};

/// A retrieval metric of a `retrieve` or `rerank` step's candidates.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct HitAtKAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    #[serde(flatten)]
    pub ranking: Ranking,
}

impl AssertionKind for HitAtKAssertion {
    fn is_retrieval_metric(&self) -> bool {
        true
    }
}
