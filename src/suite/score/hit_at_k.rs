//! Scoring `hit_at_k`: 1 when any relevant source is among the first `k` candidates.

use super::retrieval::{relevant, score_ranking};
use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::HitAtKAssertion;

impl Score for HitAtKAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        score_ranking(&self.ranking, on.subject, hit)
    }
}

/// 1 when a source of `top` is relevant, else 0.
fn hit(top: &[String], wanted: &[String]) -> f64 {
    f64::from(u8::from(top.iter().any(|s| relevant(s, wanted))))
}
