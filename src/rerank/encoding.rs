//! Text to model inputs: tokenising with a `tokenizer.json`, truncating, and padding a batch.
//!
//! The tokenizer's own padding is turned off (the embedded MiniLM's pads every text to 128):
//! a batch is padded here to its longest member only. Texts are cut to the model's maximum
//! length; a (query, passage) pair keeps the whole query and cuts the passage, unless the query
//! alone is too long, when both are cut. The batch's buffers are reused from one batch to the
//! next.

use std::path::Path;

use tokenizers::{Encoding, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::core::{Failure, FailureCode};

/// The maximum length when neither the plan nor the tokenizer gives one (BERT's).
const DEFAULT_MAX_LENGTH: usize = 512;

/// Tokenises single texts and (query, passage) pairs for one model.
pub struct TextEncoder {
    /// Cuts only the passage of a pair (and single texts from the end).
    passage_first: Tokenizer,
    /// Cuts the longer member of a pair first, for queries longer than the maximum alone.
    longest_first: Tokenizer,
    pad_id: i64,
}

impl TextEncoder {
    /// Reads `tokenizer.json`; `max_length` overrides the length it truncates to (else 512).
    pub fn load(path: &Path, max_length: Option<usize>) -> Result<TextEncoder, Failure> {
        let unusable = |reason: String| {
            Failure::new(
                FailureCode::InferenceModelUnavailable,
                format!("cannot use the tokenizer {}: {reason}", path.display()),
            )
            .with_help("`tokenizer:` must be a Hugging Face tokenizer.json (default: tokenizer.json next to the model)")
        };
        if !path.is_file() {
            return Err(unusable("the file does not exist".into()));
        }
        let mut tokenizer = Tokenizer::from_file(path).map_err(|e| unusable(e.to_string()))?;
        let pad_id = tokenizer.get_padding().map_or(0, |p| i64::from(p.pad_id));
        let max_length = max_length
            .or_else(|| tokenizer.get_truncation().map(|t| t.max_length))
            .unwrap_or(DEFAULT_MAX_LENGTH);
        tokenizer.with_padding(None);
        let configured = |strategy| {
            let mut copy = tokenizer.clone();
            copy.with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length,
                strategy,
                stride: 0,
            }))
            .map_err(|e| unusable(e.to_string()))?;
            Ok::<_, Failure>(copy)
        };
        Ok(TextEncoder {
            passage_first: configured(TruncationStrategy::OnlySecond)?,
            longest_first: configured(TruncationStrategy::LongestFirst)?,
            pad_id,
        })
    }

    /// Encodes (query, passage) pairs, in parallel: the query whole where it fits, the passage
    /// cut; when the query alone is too long, both are cut.
    pub fn pairs(&self, query: &str, passages: &[&str]) -> Result<Vec<Encoding>, Failure> {
        let inputs = || passages.iter().map(|p| (query, *p)).collect::<Vec<_>>();
        self.passage_first
            .encode_batch(inputs(), true)
            .or_else(|_| self.longest_first.encode_batch(inputs(), true))
            .map_err(tokenize_failure)
    }

    /// Encodes texts, in parallel, each cut at the maximum length.
    pub fn singles(&self, texts: &[&str]) -> Result<Vec<Encoding>, Failure> {
        self.longest_first
            .encode_batch(texts.to_vec(), true)
            .map_err(tokenize_failure)
    }

    /// The id padding positions get.
    pub fn pad_id(&self) -> i64 {
        self.pad_id
    }
}

fn tokenize_failure(error: tokenizers::Error) -> Failure {
    Failure::new(
        FailureCode::InferenceEngineError,
        format!("tokenising failed: {error}"),
    )
}

/// One batch of model inputs, row-major `[rows, width]`, padded to its longest row.
#[derive(Debug, Default)]
pub struct Batch {
    pub input_ids: Vec<i64>,
    pub attention_mask: Vec<i64>,
    pub token_type_ids: Vec<i64>,
    pub rows: usize,
    pub width: usize,
}

impl Batch {
    /// Refills the buffers with `encodings`, reusing their memory.
    pub fn fill(&mut self, encodings: &[Encoding], pad_id: i64) {
        self.rows = encodings.len();
        self.width = encodings.iter().map(Encoding::len).max().unwrap_or(0);
        let cells = self.rows * self.width;
        for buffer in [
            &mut self.input_ids,
            &mut self.attention_mask,
            &mut self.token_type_ids,
        ] {
            buffer.clear();
            buffer.resize(cells, 0);
        }
        for (row, encoding) in encodings.iter().enumerate() {
            let start = row * self.width;
            let ids = &mut self.input_ids[start..start + self.width];
            ids.fill(pad_id);
            for (cell, id) in ids.iter_mut().zip(encoding.get_ids()) {
                *cell = i64::from(*id);
            }
            let mask = &mut self.attention_mask[start..start + self.width];
            for (cell, bit) in mask.iter_mut().zip(encoding.get_attention_mask()) {
                *cell = i64::from(*bit);
            }
            let types = &mut self.token_type_ids[start..start + self.width];
            for (cell, kind) in types.iter_mut().zip(encoding.get_type_ids()) {
                *cell = i64::from(*kind);
            }
        }
    }

    /// The shape of each input tensor.
    pub fn shape(&self) -> [usize; 2] {
        [self.rows, self.width]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WordPiece tokenizer.json over a handful of words, with BERT's pair template.
    pub fn tiny_tokenizer(dir: &Path, truncation: Option<usize>) -> std::path::PathBuf {
        let vocab: Vec<&str> = vec![
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "how", "do", "i", "resume", "a", "batch", "the",
            "plan", "runs", "rows", "again",
        ];
        let vocab: serde_json::Map<String, serde_json::Value> = vocab
            .iter()
            .enumerate()
            .map(|(i, w)| ((*w).to_string(), serde_json::json!(i)))
            .collect();
        let truncation = truncation.map(
            |n| serde_json::json!({"max_length": n, "strategy": "LongestFirst", "stride": 0, "direction": "Right"}),
        );
        let json = serde_json::json!({
            "version": "1.0",
            "truncation": truncation,
            "padding": {"strategy": {"Fixed": 16}, "direction": "Right", "pad_to_multiple_of": null,
                        "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
            "added_tokens": [],
            "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                           "strip_accents": null, "lowercase": true},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                         {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
                "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                   "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
            "decoder": null,
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                      "max_input_chars_per_word": 100, "vocab": vocab}
        });
        let path = dir.join("tokenizer.json");
        std::fs::write(&path, json.to_string()).expect("write tokenizer");
        path
    }

    #[test]
    fn pairs_keep_the_query_and_cut_the_passage() {
        let scratch = tempfile::tempdir().expect("temp dir");
        let dir = scratch.path();
        let encoder = TextEncoder::load(&tiny_tokenizer(dir, None), Some(9)).expect("tokenizer");
        let pairs = encoder
            .pairs("how do I resume", &["the plan runs the rows again", "rows"])
            .expect("pairs");
        let pair = &pairs[0];
        // [CLS] how do i resume [SEP] the plan [SEP]: 9 tokens, the query whole.
        assert_eq!(pair.get_ids(), [2, 4, 5, 6, 7, 3, 10, 11, 3]);
        assert_eq!(pair.get_type_ids(), [0, 0, 0, 0, 0, 0, 1, 1, 1]);
        assert_eq!(pairs[1].get_ids(), [2, 4, 5, 6, 7, 3, 13, 3]);
        // A query longer than the maximum alone is cut too, rather than failing.
        let long = encoder
            .pairs("how do i resume a batch how do i", &["the plan"])
            .expect("long query");
        assert_eq!(long[0].len(), 9);
    }

    #[test]
    fn the_fixed_padding_of_the_file_is_ignored_and_its_truncation_is_the_default() {
        let scratch = tempfile::tempdir().expect("temp dir");
        let dir = scratch.path();
        let encoder = TextEncoder::load(&tiny_tokenizer(dir, Some(4)), None).expect("tokenizer");
        let singles = encoder
            .singles(&["resume", "how do i resume a batch"])
            .expect("singles");
        assert_eq!(singles[0].get_ids(), [2, 7, 3]);
        assert_eq!(singles[1].get_ids(), [2, 4, 5, 3]);
    }

    #[test]
    fn a_batch_is_padded_to_its_longest_row() {
        let scratch = tempfile::tempdir().expect("temp dir");
        let dir = scratch.path();
        let encoder = TextEncoder::load(&tiny_tokenizer(dir, None), None).expect("tokenizer");
        let encodings = [
            encoder.pairs("resume", &["rows"]).expect("a").remove(0),
            encoder
                .pairs("resume a batch", &["rows"])
                .expect("b")
                .remove(0),
        ];
        let mut batch = Batch::default();
        batch.fill(&encodings, encoder.pad_id());
        assert_eq!(batch.shape(), [2, 7]);
        assert_eq!(
            batch.input_ids,
            [2, 7, 3, 13, 3, 0, 0, 2, 7, 8, 9, 3, 13, 3]
        );
        assert_eq!(
            batch.attention_mask,
            [1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1]
        );
        assert_eq!(
            batch.token_type_ids,
            [0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1]
        );
        // Refilling with fewer, shorter rows reuses the buffers and leaves nothing stale.
        batch.fill(&encodings[..1], encoder.pad_id());
        assert_eq!(batch.input_ids, [2, 7, 3, 13, 3]);
    }

    #[test]
    fn a_missing_or_broken_tokenizer_is_a_clear_failure() {
        let scratch = tempfile::tempdir().expect("temp dir");
        let dir = scratch.path();
        let missing = TextEncoder::load(&dir.join("nope.json"), None)
            .err()
            .expect("missing");
        assert!(
            missing.message.contains("does not exist"),
            "{}",
            missing.message
        );
        std::fs::write(dir.join("bad.json"), "{\"model\": 3}").expect("write");
        let broken = TextEncoder::load(&dir.join("bad.json"), None)
            .err()
            .expect("broken");
        assert_eq!(broken.code, FailureCode::InferenceModelUnavailable);
        assert!(broken.help.is_some());
    }
}
