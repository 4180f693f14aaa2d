//! Scoring candidates against a query, and choosing which to keep.
//!
//! A [`Scorer`] scores passages for a query; the keyword scorer lives here and the ONNX cross- and
//! bi-encoders plug in through the same trait. [`select`] applies a rerank step's policy: best
//! first, keep scores `>= min_score` (inclusive), then [`Keep`]'s limits (duplicates, `top_k`,
//! a character budget), which a retrieve step applies to its own ranking too.
//!
//! | file | owns |
//! | --- | --- |
//! | `runtime.rs` | loading the ONNX Runtime library once per process; sessions |
//! | `encoding.rs` | tokenising, truncation, padding a batch |
//! | `onnx.rs` | [`OnnxModel`]: a model loaded on first use, running one batch |
//! | `cross_encoder.rs` | [`CrossEncoder`]: one logit per (query, passage) pair |
//! | `bi_encoder.rs` | [`BiEncoder`]: mean-pooled embeddings, cosine, the dense retrieval cache |
//! | `remembered.rs` | [`Remembered`]: embeddings and pair scores kept across runs in a memo |
//! | `keep.rs` | [`Keep`]: what is passed on — distinct passages, a count, a character budget |

mod bi_encoder;
mod cross_encoder;
mod encoding;
mod keep;
mod onnx;
mod remembered;
mod runtime;

pub use bi_encoder::BiEncoder;
pub use cross_encoder::CrossEncoder;
pub use keep::Keep;
pub use onnx::{OnnxConfig, OnnxModel, OnnxSource};
pub use remembered::Remembered;
pub use runtime::LIBRARY_VARIABLE;

use serde_json::Value;

use crate::core::{Candidate, Failure, text};

/// A scorer's scores for a query's passages, and how many of them came from the call cache.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Scores {
    /// One score per passage, in order.
    pub values: Vec<f64>,
    /// How many passages were scored from what an earlier run computed (a cross-encoder's pair
    /// scores, a bi-encoder's passage embeddings) rather than by the model.
    pub cached: usize,
}

/// Scores passages for a query; higher is more relevant.
pub trait Scorer: Send + Sync {
    /// One score per passage, in order.
    fn score(&self, query: &str, passages: &[&str]) -> Result<Scores, Failure>;
    /// A short name for run records (`keyword`, `cross-encoder:…`).
    fn name(&self) -> String;
}

/// The share of the query's distinct words found in the passage (0 to 1).
#[derive(Debug, Clone, Copy, Default)]
pub struct KeywordScorer;

impl Scorer for KeywordScorer {
    fn score(&self, query: &str, passages: &[&str]) -> Result<Scores, Failure> {
        Ok(Scores {
            values: passages
                .iter()
                .map(|p| text::keyword_score(query, p))
                .collect(),
            cached: 0,
        })
    }

    fn name(&self) -> String {
        "keyword".into()
    }
}

/// Re-scores `candidates` with `scorer` and applies the selection policy; also says how many
/// were scored from the call cache. The score each candidate came with is kept as
/// `metadata.retrieval_score` (a second rerank leaves the first's there: it is the retrieval's
/// score).
pub fn rerank(
    scorer: &dyn Scorer,
    query: &str,
    candidates: Vec<Candidate>,
    min_score: Option<f64>,
    keep: Keep,
) -> Result<(Vec<Candidate>, usize), Failure> {
    let passages: Vec<&str> = candidates.iter().map(|c| c.content.as_str()).collect();
    let scores = scorer.score(query, &passages)?;
    let rescored = candidates
        .into_iter()
        .zip(scores.values)
        .map(|(mut candidate, score)| {
            candidate
                .metadata
                .entry("retrieval_score")
                .or_insert(Value::from(candidate.score));
            Candidate { score, ..candidate }
        })
        .collect();
    Ok((select(rescored, min_score, keep), scores.cached))
}

/// Best first (ties keep their order), scores below `min_score` dropped (a score equal to it is
/// kept), then `keep`'s limits.
pub fn select(
    mut candidates: Vec<Candidate>,
    min_score: Option<f64>,
    keep: Keep,
) -> Vec<Candidate> {
    candidates.sort_by(|a, b| b.score.total_cmp(&a.score));
    if let Some(min) = min_score {
        candidates.retain(|c| c.score >= min);
    }
    keep.apply(candidates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(content: &str, score: f64) -> Candidate {
        Candidate {
            content: content.into(),
            source: content.into(),
            score,
            metadata: serde_json::Map::new(),
        }
    }

    #[test]
    fn selection_is_best_first_inclusive_and_bounded() {
        let picked = select(
            vec![
                candidate("a", 0.1),
                candidate("b", 0.9),
                candidate("c", 0.5),
                candidate("d", 0.5),
            ],
            Some(0.5),
            Keep {
                limit: Some(3),
                ..Keep::default()
            },
        );
        let names: Vec<&str> = picked.iter().map(|c| c.content.as_str()).collect();
        assert_eq!(
            names,
            ["b", "c", "d"],
            "0.5 is kept because min_score is inclusive; ties keep order"
        );
    }

    #[test]
    fn keyword_reranking_prefers_passages_with_the_query_words() {
        let candidates = vec![
            candidate("the weather is nice", 9.0),
            candidate("validate plans in CI", 0.0),
        ];
        let keep = Keep {
            limit: Some(1),
            ..Keep::default()
        };
        let (ranked, cached) =
            rerank(&KeywordScorer, "validate plans", candidates, None, keep).expect("scores");
        assert_eq!(cached, 0);
        assert_eq!(ranked.len(), 1);
        assert_eq!(ranked[0].content, "validate plans in CI");
        assert_eq!(ranked[0].score, 1.0);
        assert_eq!(
            ranked[0].metadata["retrieval_score"], 0.0,
            "the score it came with"
        );
        let (again, _) = rerank(&KeywordScorer, "plans", ranked, None, keep).expect("scores");
        assert_eq!(
            again[0].metadata["retrieval_score"], 0.0,
            "a second rerank keeps the retrieval's score"
        );
    }
}
