//! Scoring `mrr`: the reciprocal rank of the first relevant candidate among the first `k`.

use super::retrieval::{relevant, score_ranking};
use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::MrrAssertion;

impl Score for MrrAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        score_ranking(&self.ranking, on.subject, reciprocal_rank)
    }
}

/// 1 / the rank of the first relevant source of `top`; 0 when none is.
fn reciprocal_rank(top: &[String], wanted: &[String]) -> f64 {
    top.iter()
        .position(|s| relevant(s, wanted))
        .map_or(0.0, |rank| 1.0 / (rank + 1) as f64)
}
