//! Scoring `recall_at_k`: the share of the relevant sources found among the first `k`
//! candidates (1 when there are none to find).

use super::retrieval::{score_ranking, source_matches};
use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::RecallAtKAssertion;

impl Score for RecallAtKAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        score_ranking(&self.ranking, on.subject, recall)
    }
}

/// The share of `wanted` that some source of `top` matches.
fn recall(top: &[String], wanted: &[String]) -> f64 {
    if wanted.is_empty() {
        return 1.0;
    }
    let found = wanted
        .iter()
        .filter(|w| top.iter().any(|s| source_matches(s, w)))
        .count();
    found as f64 / wanted.len() as f64
}
