//! `kind: onnx` — an ONNX Runtime scorer: a cross-encoder or a bi-encoder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{BuiltModel, ModelEnv, ModelKind, Problem, file_sha256};
use crate::core::Failure;
use crate::model_store::{self, FileHashes};
use crate::plan::diagnostic::PlanError;
use crate::plan::steps::ModelRole;
use crate::rerank::{BiEncoder, CrossEncoder, OnnxConfig, OnnxModel, OnnxSource, Remembered};

/// Pairs or texts per ONNX inference when the plan sets no `batch_size`.
const DEFAULT_ONNX_BATCH: usize = 32;
/// The longest input of the embedded MiniLM, as its sentence-transformers configuration sets it.
const DEFAULT_SCORER_MAX_LENGTH: usize = 256;

/// An ONNX Runtime scorer: a cross-encoder (scores pairs) or a bi-encoder (embeds texts).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OnnxModelSpec {
    /// What the model computes.
    pub task: OnnxTask,
    /// Path to the `.onnx` file or a directory holding `model.onnx`, or `default` for the embedded MiniLM.
    pub source: String,
    /// Path to `tokenizer.json` (default: next to the model).
    #[serde(default)]
    pub tokenizer: Option<String>,
    /// Pairs or texts per inference batch (default 32).
    #[serde(default)]
    #[schemars(range(min = 1, max = 4096))]
    pub batch_size: Option<u32>,
    /// Threads one inference may use (default: the number of CPUs).
    #[serde(default)]
    #[schemars(range(min = 1, max = 256))]
    pub threads: Option<u32>,
    /// Longest input in tokens; longer passages are cut, queries kept (default: the tokenizer's truncation length, else 512; 256 for `default`).
    #[serde(default)]
    #[schemars(range(min = 8, max = 8192))]
    pub max_length: Option<u32>,
    /// Cross-encoders: map the logit to 0..1 with the logistic function, as sentence-transformers' CrossEncoder does (default true).
    #[serde(default)]
    pub sigmoid: Option<bool>,
    /// Whether the call cache may keep this model's embeddings and scores (default true).
    #[serde(default)]
    pub cache: Option<bool>,
}

/// What an ONNX model computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OnnxTask {
    /// Scores (query, passage) pairs jointly.
    CrossEncoder,
    /// Embeds texts; scores by cosine similarity.
    BiEncoder,
}

impl OnnxModelSpec {
    /// The model file and tokenizer a `source` other than `default` names, relative to `dir`.
    fn files(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let path = dir.join(&self.source);
        let model = if path.is_dir() {
            path.join("model.onnx")
        } else {
            path
        };
        let tokenizer = match &self.tokenizer {
            Some(file) => dir.join(file),
            None => model.with_file_name("tokenizer.json"),
        };
        (model, tokenizer)
    }
}

impl ModelKind for OnnxModelSpec {
    fn serves(&self, role: ModelRole) -> bool {
        match role {
            ModelRole::Llm => false,
            ModelRole::Scorer => true,
            ModelRole::Embedder => self.task == OnnxTask::BiEncoder,
        }
    }

    fn cached(&self) -> bool {
        self.cache != Some(false)
    }

    fn locked(&self, dir: &Path, hashes: &FileHashes) -> Value {
        if self.source == "default" {
            let model = &model_store::DEFAULT_SCORER;
            let files = model.files().map(|f| (f.file_name, f.sha256));
            return json!({ "kind": "onnx", "source": "default", "sha256": files.collect::<BTreeMap<_, _>>() });
        }
        let (model, tokenizer) = self.files(dir);
        json!({
            "kind": "onnx",
            "source": self.source,
            "sha256": {
                "model": file_sha256(&model, hashes),
                "tokenizer": file_sha256(&tokenizer, hashes),
            },
        })
    }

    fn described(&self) -> &'static str {
        match self.task {
            OnnxTask::CrossEncoder => "a cross-encoder",
            OnnxTask::BiEncoder => "a bi-encoder",
        }
    }

    fn problems(&self, name: &str) -> Vec<Problem> {
        if self.task == OnnxTask::CrossEncoder && self.source == "default" {
            vec![(
                vec!["task".into()],
                PlanError::OnnxDefaultTask { name: name.into() },
                "the default model is a bi-encoder",
            )]
        } else {
            Vec::new()
        }
    }

    fn build(&self, env: &ModelEnv<'_>) -> Result<BuiltModel, Failure> {
        // `validate` refuses `source: default` with `task: cross-encoder`.
        let (source, default_max_length) = if self.source == "default" {
            embedded_source()
        } else {
            let (model, tokenizer) = self.files(env.dir);
            (OnnxSource::Files { model, tokenizer }, None)
        };
        let config = OnnxConfig {
            source,
            batch_size: self.batch_size.map_or(DEFAULT_ONNX_BATCH, |b| b as usize),
            threads: self.threads.map_or_else(all_cpus, |t| t as usize),
            max_length: self.max_length.map(|m| m as usize).or(default_max_length),
        };
        let model = OnnxModel::new(config, env.notice.clone());
        let remembered = self.remembered(env);
        Ok(match self.task {
            OnnxTask::CrossEncoder => BuiltModel::Cross(Arc::new(
                CrossEncoder::new(model, self.sigmoid.unwrap_or(true)).remembering(remembered),
            )),
            OnnxTask::BiEncoder => {
                BuiltModel::Bi(Arc::new(BiEncoder::new(model).remembering(remembered)))
            }
        })
    }
}

impl OnnxModelSpec {
    /// The memo to keep this model's embeddings or pair scores in, with what identifies them
    /// there: the model file's SHA-256 (the embedded model's published one), the longest input,
    /// and for a cross-encoder its task (its values are logits, not embeddings). None without a
    /// memo or when the file cannot be read.
    fn remembered(&self, env: &ModelEnv<'_>) -> Option<Remembered> {
        let memo = env.memo.clone()?;
        let sha256 = if self.source == "default" {
            model_store::DEFAULT_SCORER.file.sha256.to_string()
        } else {
            memo.file_sha256(&self.files(env.dir).0)?
        };
        let max_length = self.max_length.map(|m| m as usize);
        let identity = match self.task {
            OnnxTask::BiEncoder => format!("onnx:{sha256}:{max_length:?}"),
            OnnxTask::CrossEncoder => format!("onnx:cross-encoder:{sha256}:{max_length:?}"),
        };
        Some(Remembered::new(memo, identity))
    }
}

/// The embedded all-MiniLM-L6-v2 and its longest input.
fn embedded_source() -> (OnnxSource, Option<usize>) {
    (
        OnnxSource::Embedded(&model_store::DEFAULT_SCORER),
        Some(DEFAULT_SCORER_MAX_LENGTH),
    )
}

fn all_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The embedded all-MiniLM-L6-v2 as a bi-encoder with the default settings (`source: default`),
/// for what needs embeddings without a plan declaring a model (a test's `similar` assertion).
pub fn embedded_bi_encoder(notice: crate::model_store::Notice) -> BiEncoder {
    let (source, max_length) = embedded_source();
    BiEncoder::new(OnnxModel::new(
        OnnxConfig {
            source,
            batch_size: DEFAULT_ONNX_BATCH,
            threads: all_cpus(),
            max_length,
        },
        notice,
    ))
}
