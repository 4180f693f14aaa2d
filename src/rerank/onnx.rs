//! An ONNX text model loaded on first use: where its files are, its session and tokenizer, and
//! running one padded batch through it.
//!
//! One [`OnnxModel`] is made per model a plan declares and shared by every step and batch row;
//! nothing is read until the first call, so checking a plan or a dry run never loads it. A failed
//! load is remembered and reported to every caller. The session runs one batch at a time (ONNX
//! Runtime parallelises inside a batch with its intra-op threads).

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use ort::session::Session;
use ort::value::TensorRef;
use tokenizers::Encoding;

use super::encoding::{Batch, TextEncoder};
use super::runtime::{self, OnnxSessionOptions};
use crate::core::{Failure, FailureCode};
use crate::model_store::{self, Notice, describe_pull};

/// Where a model's files are.
#[derive(Debug, Clone)]
pub enum OnnxSource {
    /// An embedded model: its file and its first companion (the tokenizer), pulled on first use.
    Embedded(&'static model_store::EmbeddedModel),
    /// Files on disk.
    Files { model: PathBuf, tokenizer: PathBuf },
}

/// How to load and run a model.
#[derive(Debug, Clone)]
pub struct OnnxConfig {
    pub source: OnnxSource,
    /// Texts or pairs per inference.
    pub batch_size: usize,
    /// Threads one inference may use.
    pub threads: usize,
    /// Longest input in tokens (default: the tokenizer's truncation length, else 512).
    pub max_length: Option<usize>,
}

/// A loaded session with its tokenizer and reusable input buffers.
struct Loaded {
    session: Session,
    encoder: TextEncoder,
    /// Whether the graph takes `token_type_ids` (BERT does; DistilBERT and RoBERTa do not).
    takes_token_types: bool,
    batch: Batch,
}

/// An ONNX model, loaded on first use.
pub struct OnnxModel {
    config: OnnxConfig,
    notice: Notice,
    loaded: OnceLock<Result<Mutex<Loaded>, Failure>>,
}

/// The first output of a batch: its shape and values, row-major.
pub struct Output<'a> {
    pub shape: &'a [i64],
    pub values: &'a [f32],
    /// The batch's attention mask, `[rows, width]`.
    pub attention_mask: &'a [i64],
}

impl OnnxModel {
    pub fn new(config: OnnxConfig, notice: Notice) -> OnnxModel {
        OnnxModel {
            config,
            notice,
            loaded: OnceLock::new(),
        }
    }

    /// Most texts or pairs per batch.
    pub fn batch_size(&self) -> usize {
        self.config.batch_size.max(1)
    }

    /// The model's name for run records: the embedded model's name or the file's path.
    pub fn label(&self) -> String {
        match &self.config.source {
            OnnxSource::Embedded(model) => model.name.to_string(),
            OnnxSource::Files { model, .. } => model.display().to_string(),
        }
    }

    /// Encodes one batch with `encode`, runs it, and reads the output named `preferred` (else
    /// the first) with `read`.
    pub fn run<R>(
        &self,
        encode: impl FnOnce(&TextEncoder) -> Result<Vec<Encoding>, Failure>,
        preferred: &str,
        read: impl FnOnce(Output<'_>) -> Result<R, Failure>,
    ) -> Result<R, Failure> {
        let loaded = self
            .loaded
            .get_or_init(|| self.load().map(Mutex::new))
            .as_ref()
            .map_err(Clone::clone)?;
        let mut guard = loaded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Loaded {
            session,
            encoder,
            takes_token_types,
            batch,
        } = &mut *guard;
        let encodings = encode(encoder)?;
        batch.fill(&encodings, encoder.pad_id());
        let shape = batch.shape();
        let mut inputs = vec![
            ("input_ids", tensor(shape, &batch.input_ids)?),
            ("attention_mask", tensor(shape, &batch.attention_mask)?),
        ];
        if *takes_token_types {
            inputs.push(("token_type_ids", tensor(shape, &batch.token_type_ids)?));
        }
        let outputs = session.run(inputs).map_err(|e| engine_failure(&e))?;
        let output = match outputs.get(preferred) {
            Some(output) => output,
            None => &outputs[0],
        };
        let (shape, values) = output
            .try_extract_tensor::<f32>()
            .map_err(|e| engine_failure(&e))?;
        read(Output {
            shape,
            values,
            attention_mask: &batch.attention_mask,
        })
    }

    fn load(&self) -> Result<Loaded, Failure> {
        let (model, tokenizer) = match &self.config.source {
            OnnxSource::Files { model, tokenizer } => (model.clone(), tokenizer.clone()),
            OnnxSource::Embedded(embedded) => {
                let model = model_store::ensure(embedded, &mut |progress| {
                    if let Some(line) = describe_pull(embedded, &progress) {
                        (self.notice)(&line);
                    }
                })?;
                let tokenizer = embedded
                    .companions
                    .first()
                    .map(model_store::stored_path)
                    .unwrap_or_default();
                (model, tokenizer)
            }
        };
        if !model.is_file() {
            return Err(Failure::new(
                FailureCode::InferenceModelUnavailable,
                format!("the ONNX model {} does not exist", model.display()),
            )
            .with_help("`source:` is a path to a .onnx file (or a directory holding model.onnx), relative to the plan, or `default`"));
        }
        let encoder = TextEncoder::load(&tokenizer, self.config.max_length)?;
        let session = runtime::session(
            &model,
            OnnxSessionOptions {
                intra_threads: self.config.threads.max(1),
            },
            &self.notice,
        )?;
        let names: Vec<&str> = session.inputs().iter().map(|i| i.name()).collect();
        if let Some(unknown) = names
            .iter()
            .find(|name| !matches!(**name, "input_ids" | "attention_mask" | "token_type_ids"))
        {
            return Err(Failure::new(
                FailureCode::InferenceModelUnavailable,
                format!(
                    "the ONNX model {} takes an input `{unknown}`; pagantic feeds input_ids, attention_mask and token_type_ids",
                    model.display()
                ),
            )
            .with_help("export the model with the usual transformer inputs (optimum, or torch.onnx.export of a Hugging Face model)"));
        }
        let takes_token_types = names.contains(&"token_type_ids");
        Ok(Loaded {
            session,
            encoder,
            takes_token_types,
            batch: Batch::default(),
        })
    }
}

/// A view of `values` as a `[rows, width]` tensor, without copying.
fn tensor(shape: [usize; 2], values: &[i64]) -> Result<TensorRef<'_, i64>, Failure> {
    TensorRef::from_array_view((shape, values)).map_err(|e| engine_failure(&e))
}

fn engine_failure(error: &ort::Error) -> Failure {
    Failure::new(
        FailureCode::InferenceEngineError,
        format!("ONNX Runtime: {error}"),
    )
}

/// A model of `tests/onnx/` (made by `tests/onnx/make_tiny_models.py`), with its tokenizer.
#[cfg(test)]
pub(super) fn tiny_model(file: &str) -> OnnxModel {
    runtime::require_library();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/onnx");
    OnnxModel::new(
        OnnxConfig {
            source: OnnxSource::Files {
                model: dir.join(file),
                tokenizer: dir.join("tokenizer.json"),
            },
            // Small batches, so the reference pairs span several and padding differs between them.
            batch_size: 3,
            threads: 2,
            max_length: Some(24),
        },
        std::sync::Arc::new(|_: &str| {}),
    )
}

/// The pairs of `tests/onnx/reference.json`: (query, passage, logit, cosine). A missing or
/// malformed file, or one with fewer than the expected pairs, fails the test that asked rather
/// than leaving it nothing to compare.
#[cfg(test)]
pub(super) fn reference_pairs() -> Vec<(String, String, f64, f64)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/onnx/reference.json");
    let text = std::fs::read_to_string(&path).expect("tests/onnx/reference.json is readable");
    let json: serde_json::Value = serde_json::from_str(&text).expect("the reference is JSON");
    let pairs: Vec<(String, String, f64, f64)> = json["pairs"]
        .as_array()
        .expect("the reference has `pairs`")
        .iter()
        .map(|p| {
            let text = |key: &str| p[key].as_str().expect("a text field").to_string();
            let number = |key: &str| p[key].as_f64().expect("a number field");
            (
                text("query"),
                text("passage"),
                number("logit"),
                number("cosine"),
            )
        })
        .collect();
    assert_eq!(pairs.len(), 7, "the reference holds seven pairs");
    pairs
}
