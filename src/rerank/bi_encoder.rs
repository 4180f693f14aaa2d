//! The bi-encoder scorer: query and passages are embedded separately (mean pooling over the
//! attention mask, unit length) and scored by cosine similarity; also the dense retriever's
//! embeddings, cached by content so a corpus is embedded once per run, and, when the scorer is
//! handed a memo (the call cache, see [`Remembered`]), once for every run that finds them there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::onnx::{OnnxModel, Output};
use super::remembered::{Kept, Recalled, Remembered};
use super::{Scorer, Scores};
use crate::core::{Failure, FailureCode};

/// A text's embedding, unit length.
pub type Embedding = Arc<[f32]>;

/// Embeds texts with a sentence-embedding model and scores by cosine similarity.
pub struct BiEncoder {
    model: OnnxModel,
    /// Embeddings of corpus passages by the SHA-256 of their text.
    cache: Mutex<HashMap<[u8; 32], Embedding>>,
    /// Where passage embeddings outlive the run, keyed by the model's identity (what, besides
    /// the text, decides an embedding) and the text.
    memo: Option<Remembered>,
}

impl BiEncoder {
    pub fn new(model: OnnxModel) -> BiEncoder {
        BiEncoder {
            model,
            cache: Mutex::new(HashMap::new()),
            memo: None,
        }
    }

    /// Keeps passage embeddings in `memo` too (when there is one).
    pub fn remembering(self, memo: Option<Remembered>) -> BiEncoder {
        BiEncoder { memo, ..self }
    }

    /// Embeds `texts` (passages this run has not embedded), taking what the memo holds and
    /// storing what had to be computed.
    fn embed_passages(&self, texts: &[&str]) -> Result<Recalled<Embedding>, Failure> {
        let Some(memo) = &self.memo else {
            return Ok(Recalled {
                values: self.embed(texts)?,
                recalled: 0,
            });
        };
        let inputs: Vec<Vec<&str>> = texts.iter().map(|text| vec![*text]).collect();
        memo.recall_or_compute(&inputs, |missing| {
            self.embed(&missing.iter().map(|i| texts[*i]).collect::<Vec<_>>())
        })
    }

    /// One unit-length embedding per text, in order, computed in batches.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Embedding>, Failure> {
        let mut embeddings = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.model.batch_size()) {
            self.model.run(
                |encoder| encoder.singles(chunk),
                "sentence_embedding",
                |output| {
                    embeddings.extend(pooled(&output, chunk.len(), &self.model.label())?);
                    Ok(())
                },
            )?;
        }
        Ok(embeddings)
    }

    /// Cosine similarity of `query` with each passage, embedding each distinct passage text once
    /// for the life of this scorer (a run), and not at all when its memo holds it: for dense
    /// retrieval over a corpus.
    pub fn score_cached(&self, query: &str, passages: &[&str]) -> Result<DenseScores, Failure> {
        let keys: Vec<[u8; 32]> = passages
            .iter()
            .map(|p| Sha256::digest(p.as_bytes()).into())
            .collect();
        let missing: Vec<(usize, &str)> = {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            let mut seen = std::collections::HashSet::new();
            keys.iter()
                .zip(passages)
                .enumerate()
                .filter(|(_, (key, _))| !cache.contains_key(*key) && seen.insert(**key))
                .map(|(i, (_, text))| (i, *text))
                .collect()
        };
        let texts: Vec<&str> = missing.iter().map(|(_, text)| *text).collect();
        let fresh = self.embed_passages(&texts)?;
        let embedded = texts.len() - fresh.recalled;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        for ((i, _), embedding) in missing.iter().zip(fresh.values) {
            cache.insert(keys[*i], embedding);
        }
        let query = self.embed(&[query])?;
        Ok(DenseScores {
            values: keys
                .iter()
                .map(|key| cache.get(key).map_or(0.0, |e| cosine(&query[0], e)))
                .collect(),
            embedded,
        })
    }
}

/// What [`BiEncoder::score_cached`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseScores {
    /// One cosine per passage, in order.
    pub values: Vec<f64>,
    /// How many passages the model embedded for this call (neither embedded earlier in the run
    /// nor found in the memo).
    pub embedded: usize,
}

impl Scorer for BiEncoder {
    fn score(&self, query: &str, passages: &[&str]) -> Result<Scores, Failure> {
        let query = self.embed(&[query])?;
        let passages = self.embed_passages(passages)?;
        Ok(Scores {
            values: passages
                .values
                .iter()
                .map(|p| cosine(&query[0], p))
                .collect(),
            cached: passages.recalled,
        })
    }

    fn name(&self) -> String {
        format!("bi-encoder:{}", self.model.label())
    }
}

/// A passage's embedding: its f32 values, little-endian, in hex.
impl Kept for Embedding {
    const KIND: &'static str = "embedding";

    fn encode(&self) -> String {
        self.iter()
            .flat_map(|x| x.to_le_bytes())
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    fn decode(hex: &str) -> Option<Embedding> {
        if !hex.len().is_multiple_of(8) || hex.is_empty() {
            return None;
        }
        let bytes: Option<Vec<u8>> = (0..hex.len())
            .step_by(2)
            .map(|i| {
                hex.get(i..i + 2)
                    .and_then(|b| u8::from_str_radix(b, 16).ok())
            })
            .collect();
        Some(
            bytes?
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        )
    }
}

/// The dot product of two unit vectors: their cosine similarity.
fn cosine(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

/// One unit-length embedding per row: the output itself when it is `[rows, dim]` (a pooled
/// `sentence_embedding`), else the mean of `[rows, tokens, dim]` over the attended tokens.
fn pooled(output: &Output<'_>, rows: usize, model: &str) -> Result<Vec<Embedding>, Failure> {
    let dims: Vec<usize> = output
        .shape
        .iter()
        .map(|d| usize::try_from(*d).unwrap_or(0))
        .collect();
    let vectors: Vec<Vec<f32>> = match dims[..] {
        [r, dim] if r == rows => output
            .values
            .chunks(dim.max(1))
            .map(<[f32]>::to_vec)
            .collect(),
        [r, tokens, dim]
            if r == rows
                && output.attention_mask.len() == rows * tokens
                && output.values.len() == rows * tokens * dim =>
        {
            mean_pool(output, [rows, tokens, dim])
        }
        _ => {
            return Err(Failure::new(
                FailureCode::InferenceModelUnavailable,
                format!(
                    "a bi-encoder must output token embeddings [batch, tokens, dim] or sentence embeddings [batch, dim]; {model} outputs shape {:?}",
                    output.shape
                ),
            )
            .with_help("use `task: cross-encoder` for models that score pairs"));
        }
    };
    Ok(vectors
        .into_iter()
        .map(|mut v| {
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            if norm > 0.0 {
                v.iter_mut().for_each(|x| *x /= norm);
            }
            Embedding::from(v)
        })
        .collect())
}

/// The mean of each row's attended token embeddings (`values` is `[rows, tokens, dim]`, the mask
/// `[rows, tokens]`); a row that attends to nothing pools to zeros.
fn mean_pool(output: &Output<'_>, [rows, tokens, dim]: [usize; 3]) -> Vec<Vec<f32>> {
    if tokens == 0 || dim == 0 {
        return vec![vec![0.0; dim]; rows];
    }
    output
        .values
        .chunks(tokens * dim)
        .zip(output.attention_mask.chunks(tokens))
        .map(|(row, mask)| {
            let mut sum = vec![0f32; dim];
            let mut attended = 0usize;
            for (token, _) in row.chunks(dim).zip(mask).filter(|(_, m)| **m != 0) {
                sum.iter_mut().zip(token).for_each(|(s, v)| *s += v);
                attended += 1;
            }
            let count = attended.max(1) as f32;
            sum.iter_mut().for_each(|s| *s /= count);
            sum
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Memo;
    use crate::rerank::onnx::{reference_pairs, tiny_model};
    use crate::rerank::remembered::tests::InMemory;

    /// A second scorer (a later run) handed the same memo embeds no passage again, and scores
    /// exactly as the first did, saying the embeddings were found; another model identity
    /// shares nothing.
    #[test]
    fn passage_embeddings_outlive_the_scorer_through_its_memo() {
        let kept = Arc::new(InMemory::default());
        let scorer = |identity: &str| {
            BiEncoder::new(tiny_model("tiny-bi-encoder.onnx")).remembering(Some(Remembered::new(
                Arc::clone(&kept) as Arc<dyn Memo>,
                identity.to_string(),
            )))
        };
        let passages = ["a lighthouse by the sea", "a batch resumed after a crash"];
        let first = scorer("tiny")
            .score_cached("resume", &passages)
            .expect("scores");
        assert_eq!((kept.stored(), first.embedded), (2, 2));
        let later = scorer("tiny");
        let again = later.score_cached("resume", &passages).expect("scores");
        assert_eq!(again.values, first.values);
        assert_eq!(again.embedded, 0, "nothing embedded again");
        assert_eq!(kept.stored(), 2);
        let first = first.values;
        let reranked = later.score("resume", &passages).expect("scores");
        assert_eq!((reranked.values, reranked.cached), (first, 2));
        scorer("other")
            .score_cached("resume", &passages)
            .expect("scores");
        assert_eq!(kept.stored(), 4);
        assert_eq!(kept.kinds(), ["embedding"; 4]);
    }

    /// Mean pooling and cosine over the tiny BERT of `tests/onnx/` agree with the reference the
    /// Python onnxruntime and numpy computed.
    #[test]
    fn cosines_match_the_python_onnxruntime_reference() {
        let encoder = BiEncoder::new(tiny_model("tiny-bi-encoder.onnx"));
        for (query, passage, _, cosine) in reference_pairs() {
            let score = encoder.score(&query, &[&passage]).expect("scores").values[0];
            assert!(
                (score - cosine).abs() < 1e-4,
                "{query} / {passage}: {score} vs {cosine}"
            );
        }
    }

    #[test]
    fn cached_scores_equal_fresh_ones_and_embed_each_text_once() {
        let encoder = BiEncoder::new(tiny_model("tiny-bi-encoder.onnx"));
        let passages = [
            "the cat sat on the mat",
            "validate plans in ci",
            "the cat sat on the mat",
        ];
        let fresh = encoder
            .score("validate plans", &passages)
            .expect("fresh")
            .values;
        let cached = encoder
            .score_cached("validate plans", &passages)
            .expect("cached");
        assert_eq!(cached.embedded, 2, "the repeated text once");
        let cached = cached.values;
        let again = encoder
            .score_cached("validate plans", &passages)
            .expect("again");
        assert_eq!(again.embedded, 0, "embedded earlier in the run");
        let again = again.values;
        for (a, b) in fresh.iter().zip(&cached) {
            assert!((a - b).abs() < 1e-6, "{fresh:?} vs {cached:?}");
        }
        assert_eq!(cached, again);
        assert_eq!(
            encoder.cache.lock().expect("cache").len(),
            2,
            "duplicates embedded once"
        );
    }

    #[test]
    fn embeddings_round_trip_through_the_memo_text_and_damaged_entries_are_refused() {
        let embedding = Embedding::from(vec![0.25f32, -1.5, 3.0e-7]);
        assert_eq!(Embedding::decode(&embedding.encode()), Some(embedding));
        assert_eq!(Embedding::decode("zz"), None);
        assert_eq!(Embedding::decode("0000803"), None);
    }

    #[test]
    fn token_embeddings_are_mean_pooled_over_the_mask_and_normalised() {
        // Two rows, three tokens, two dims; row 0 attends to two tokens, row 1 to one.
        let values = [
            3.0, 0.0, 1.0, 0.0, 100.0, 100.0, 0.0, 2.0, 9.0, 9.0, 9.0, 9.0,
        ];
        let output = Output {
            shape: &[2, 3, 2],
            values: &values,
            attention_mask: &[1, 1, 0, 1, 0, 0],
        };
        let pooled = pooled(&output, 2, "m").expect("pooled");
        // Row 0: mean (2, 0) → (1, 0); row 1: (0, 2) → (0, 1).
        assert_eq!(&*pooled[0], [1.0, 0.0]);
        assert_eq!(&*pooled[1], [0.0, 1.0]);
        assert!((cosine(&pooled[0], &pooled[1])).abs() < 1e-12);
    }

    #[test]
    fn sentence_embeddings_are_normalised_and_other_shapes_refused() {
        let values = [3.0, 4.0];
        let output = Output {
            shape: &[1, 2],
            values: &values,
            attention_mask: &[1],
        };
        assert_eq!(&*pooled(&output, 1, "m").expect("pooled")[0], [0.6, 0.8]);
        let scalar = Output {
            shape: &[2],
            values: &values,
            attention_mask: &[1, 1],
        };
        let failure = pooled(&scalar, 2, "m").expect_err("refused");
        assert!(
            failure.message.contains("outputs shape [2]"),
            "{}",
            failure.message
        );
    }
}
