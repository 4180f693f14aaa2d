//! The cross-encoder scorer: each (query, passage) pair goes through the model together and its
//! one logit is the score — any sentence-transformers `CrossEncoder` exported to ONNX. Handed a
//! memo (the call cache, see [`Remembered`]), it keeps each pair's logit there, so a later run
//! scores only the pairs it has not seen.

use super::onnx::OnnxModel;
use super::remembered::Remembered;
use super::{Scorer, Scores};
use crate::core::{Failure, FailureCode};

/// Scores pairs with a cross-encoder; with `sigmoid`, the logit is mapped to 0..1 as
/// sentence-transformers' `CrossEncoder.predict` does for single-logit models.
pub struct CrossEncoder {
    model: OnnxModel,
    sigmoid: bool,
    /// Where the pairs' logits outlive the run, keyed by the model's identity, the query and
    /// the passage (the logit, not the score: `sigmoid` does not change it).
    memo: Option<Remembered>,
}

impl CrossEncoder {
    pub fn new(model: OnnxModel, sigmoid: bool) -> CrossEncoder {
        CrossEncoder {
            model,
            sigmoid,
            memo: None,
        }
    }

    /// Keeps the pairs' logits in `memo` too (when there is one).
    pub fn remembering(self, memo: Option<Remembered>) -> CrossEncoder {
        CrossEncoder { memo, ..self }
    }

    /// One logit per (query, passage) pair, computed in batches.
    fn logits(&self, query: &str, passages: &[&str]) -> Result<Vec<f64>, Failure> {
        let mut scores = Vec::with_capacity(passages.len());
        for chunk in passages.chunks(self.model.batch_size()) {
            self.model.run(
                |encoder| encoder.pairs(query, chunk),
                "logits",
                |output| {
                    // One logit per pair: shape [rows] or [rows, 1].
                    let per_row = output.shape.iter().skip(1).product::<i64>();
                    if per_row != 1 || output.values.len() != chunk.len() {
                        return Err(Failure::new(
                            FailureCode::InferenceModelUnavailable,
                            format!(
                                "a cross-encoder must output one logit per pair; {} outputs shape {:?}",
                                self.model.label(),
                                output.shape
                            ),
                        )
                        .with_help("use `task: bi-encoder` for embedding models"));
                    }
                    scores.extend(output.values.iter().map(|&logit| f64::from(logit)));
                    Ok(())
                },
            )?;
        }
        Ok(scores)
    }
}

impl Scorer for CrossEncoder {
    fn score(&self, query: &str, passages: &[&str]) -> Result<Scores, Failure> {
        let (logits, cached) = match &self.memo {
            None => (self.logits(query, passages)?, 0),
            Some(memo) => {
                let pairs: Vec<Vec<&str>> = passages.iter().map(|p| vec![query, *p]).collect();
                let found = memo.recall_or_compute(&pairs, |missing| {
                    let missing: Vec<&str> = missing.iter().map(|i| passages[*i]).collect();
                    self.logits(query, &missing)
                })?;
                (found.values, found.recalled)
            }
        };
        let values = if self.sigmoid {
            logits
                .into_iter()
                .map(|logit| 1.0 / (1.0 + (-logit).exp()))
                .collect()
        } else {
            logits
        };
        Ok(Scores { values, cached })
    }

    fn name(&self) -> String {
        format!("cross-encoder:{}", self.model.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Memo;
    use crate::rerank::onnx::{reference_pairs, tiny_model};
    use crate::rerank::remembered::tests::InMemory;
    use std::sync::Arc;

    /// A later scorer handed the same memo scores the pairs it has seen without running the
    /// model — its model file does not even exist — and exactly as the first did, with or
    /// without the sigmoid; a new pair, or another model identity, is computed.
    #[test]
    fn pair_scores_outlive_the_scorer_through_its_memo() {
        let kept = Arc::new(InMemory::default());
        let scorer = |file: &str, sigmoid: bool, identity: &str| {
            CrossEncoder::new(tiny_model(file), sigmoid).remembering(Some(Remembered::new(
                Arc::clone(&kept) as Arc<dyn Memo>,
                identity.to_string(),
            )))
        };
        let pairs = reference_pairs();
        let passages: Vec<&str> = pairs.iter().map(|p| p.1.as_str()).collect();
        let first = scorer("tiny-cross-encoder.onnx", false, "tiny")
            .score(&pairs[0].0, &passages)
            .expect("scores");
        assert_eq!((first.cached, kept.stored()), (0, passages.len()));
        let gone = scorer("no-such-model.onnx", false, "tiny");
        let again = gone.score(&pairs[0].0, &passages).expect("from the memo");
        assert_eq!(
            again,
            Scores {
                cached: passages.len(),
                ..first.clone()
            }
        );
        let squashed = scorer("no-such-model.onnx", true, "tiny")
            .score(&pairs[0].0, &passages)
            .expect("from the memo");
        let expected: Vec<f64> = first
            .values
            .iter()
            .map(|l| 1.0 / (1.0 + (-l).exp()))
            .collect();
        assert_eq!(squashed.values, expected);
        assert_eq!(kept.stored(), passages.len(), "nothing computed again");
        assert!(
            gone.score("another query", &passages[..1]).is_err(),
            "a new pair runs the model"
        );
        let other = scorer("tiny-cross-encoder.onnx", false, "other")
            .score(&pairs[0].0, &passages)
            .expect("scores");
        assert_eq!(other.cached, 0);
        assert_eq!(kept.kinds(), vec!["score"; 2 * passages.len()]);
    }

    /// The tiny random-weight BERT of `tests/onnx/` scores every reference pair as the Python
    /// onnxruntime did (its query kept, its passage cut at 24 tokens, batches padded per batch).
    #[test]
    fn scores_match_the_python_onnxruntime_reference() {
        let pairs = reference_pairs();
        assert_eq!(pairs.len(), 7, "tests/onnx/reference.json");
        let raw = CrossEncoder::new(tiny_model("tiny-cross-encoder.onnx"), false);
        let squashed = CrossEncoder::new(tiny_model("tiny-cross-encoder.onnx"), true);
        // One pair at a time and all together: the padding of a batch must not change a score.
        for (query, passage, logit, _) in &pairs {
            let score = raw.score(query, &[passage]).expect("scores").values[0];
            assert!(
                (score - logit).abs() < 1e-4,
                "{query} / {passage}: {score} vs {logit}"
            );
        }
        let query = &pairs[0].0;
        let passages: Vec<&str> = pairs.iter().map(|p| p.1.as_str()).collect();
        let together = raw.score(query, &passages).expect("scores").values;
        let apart: Vec<f64> = passages
            .iter()
            .map(|p| raw.score(query, &[p]).expect("scores").values[0])
            .collect();
        for (a, b) in together.iter().zip(&apart) {
            assert!((a - b).abs() < 1e-4, "{together:?} vs {apart:?}");
        }
        let probability = squashed
            .score(&pairs[0].0, &[&pairs[0].1])
            .expect("scores")
            .values[0];
        assert!((probability - 1.0 / (1.0 + (-pairs[0].2).exp())).abs() < 1e-4);
        assert!(raw.name().starts_with("cross-encoder:"));
    }

    #[test]
    fn an_embedding_model_is_refused_as_a_cross_encoder() {
        let wrong = CrossEncoder::new(tiny_model("tiny-bi-encoder.onnx"), false);
        let failure = wrong.score("q", &["p"]).expect_err("refused");
        assert_eq!(failure.code, FailureCode::InferenceModelUnavailable);
        assert!(
            failure.message.contains("one logit per pair"),
            "{}",
            failure.message
        );
    }
}
