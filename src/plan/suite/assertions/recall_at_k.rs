//! `type: recall_at_k` — the share of the relevant sources found among the first `k` candidates.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AssertionCommon, AssertionKind, Ranking};

/// A retrieval metric of a `retrieve` or `rerank` step's candidates.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RecallAtKAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    #[serde(flatten)]
    pub ranking: Ranking,
}

impl AssertionKind for RecallAtKAssertion {
    fn is_retrieval_metric(&self) -> bool {
        true
    }
}
