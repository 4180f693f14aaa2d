//! `type: mrr` — the reciprocal rank of the first relevant candidate among the first `k`.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AssertionCommon, AssertionKind, Ranking};

/// A retrieval metric of a `retrieve` or `rerank` step's candidates.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct MrrAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    #[serde(flatten)]
    pub ranking: Ranking,
}

impl AssertionKind for MrrAssertion {
    fn default_threshold(&self) -> f64 {
        0.2
    }

    fn is_retrieval_metric(&self) -> bool {
        true
    }
}
