//! The cross-encoder scorer: each (query, passage) pair goes through the model together and its
//! one logit is the score — any sentence-transformers `CrossEncoder` exported to ONNX.

use super::Scorer;
use super::onnx::OnnxModel;
use crate::core::{Failure, FailureCode};

/// Scores pairs with a cross-encoder; with `sigmoid`, the logit is mapped to 0..1 as
/// sentence-transformers' `CrossEncoder.predict` does for single-logit models.
pub struct CrossEncoder {
    model: OnnxModel,
    sigmoid: bool,
}

impl CrossEncoder {
    pub fn new(model: OnnxModel, sigmoid: bool) -> CrossEncoder {
        CrossEncoder { model, sigmoid }
    }
}

impl Scorer for CrossEncoder {
    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f64>, Failure> {
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
                    scores.extend(output.values.iter().map(|&logit| {
                        let logit = f64::from(logit);
                        if self.sigmoid {
                            1.0 / (1.0 + (-logit).exp())
                        } else {
                            logit
                        }
                    }));
                    Ok(())
                },
            )?;
        }
        Ok(scores)
    }

    fn name(&self) -> String {
        format!("cross-encoder:{}", self.model.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rerank::onnx::{reference_pairs, tiny_model};

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
            let score = raw.score(query, &[passage]).expect("scores")[0];
            assert!(
                (score - logit).abs() < 1e-4,
                "{query} / {passage}: {score} vs {logit}"
            );
        }
        let query = &pairs[0].0;
        let passages: Vec<&str> = pairs.iter().map(|p| p.1.as_str()).collect();
        let together = raw.score(query, &passages).expect("scores");
        let apart: Vec<f64> = passages
            .iter()
            .map(|p| raw.score(query, &[p]).expect("scores")[0])
            .collect();
        for (a, b) in together.iter().zip(&apart) {
            assert!((a - b).abs() < 1e-4, "{together:?} vs {apart:?}");
        }
        let probability = squashed.score(&pairs[0].0, &[&pairs[0].1]).expect("scores")[0];
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
