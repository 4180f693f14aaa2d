//! `kind: mistralrs` — a local GGUF model run in-process by mistral.rs.

use schemars::JsonSchema;
use serde::Deserialize;

use std::path::Path;

use serde_json::{Value, json};

use super::{BuiltModel, ModelEnv, ModelKind, file_sha256};
use crate::core::{Failure, FailureCode, Price};
use crate::inference::{LocalModel, LocalSettings, missing_local_engine};
use crate::model_store::{self, FileHashes, LocalSource, hub_pin};
use crate::plan::steps::ModelRole;

/// Most sequences a local model decodes together: one, so that requests reach mistral.rs one at a
/// time with its prefix cache on (batch rows sharing a prompt prefix prefill it once).
const LOCAL_MAX_BATCH: usize = 1;

/// A local GGUF model run in-process by mistral.rs.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MistralrsModel {
    /// `default` (the embedded Qwen2.5-Coder-0.5B-Instruct), a path to a `.gguf` file, or `hf:ORG/REPO/FILE.gguf` (fetched from Hugging Face on first use).
    #[serde(default)]
    pub source: Option<String>,
    /// Refuse requests whose prompt and max_tokens exceed this many tokens (INFERENCE_CONTEXT_EXCEEDED) instead of sending them.
    #[serde(default)]
    #[schemars(range(min = 256))]
    pub context_length: Option<u32>,
    /// Enforce JSON Schemas and grammars while decoding (default true). With false, JSON
    /// Schemas are only checked after decoding (repair, validation, retries) and grammar
    /// constraints are refused — for comparing the two.
    #[serde(default)]
    pub decoder_constraints: Option<bool>,
    /// What calls to this model cost, per million prompt and completion tokens; the run record,
    /// events and batch summary then carry costs, and the policy's `max_cost` can bound them.
    /// Without it the model's calls have no cost (null in the record).
    #[serde(default)]
    pub price: Option<Price>,
    /// Whether the call cache may answer this model's calls, and store its answers (default true). `false` always asks the model: for a model whose answers must be fresh.
    #[serde(default)]
    pub cache: Option<bool>,
}

impl ModelKind for MistralrsModel {
    fn serves(&self, role: ModelRole) -> bool {
        role == ModelRole::Llm
    }

    fn described(&self) -> &'static str {
        "a mistralrs"
    }

    fn cached(&self) -> bool {
        self.cache != Some(false)
    }

    /// An embedded model by the SHA-256 its pull verifies, a file by its own; a Hugging Face
    /// file by the revision and SHA-256 the Hugging Face cache recorded when it was fetched
    /// (null before: lock after the first run fetched it; nothing is fetched to lock it).
    fn locked(&self, dir: &Path, hashes: &FileHashes) -> Value {
        let source = self.source.as_deref().unwrap_or("default");
        let mut locked = json!({
            "kind": "mistralrs",
            "source": source,
            "decoder_constraints": self.decoder_constraints.unwrap_or(true),
        });
        let (sha256, revision) = match LocalSource::parse(source, dir) {
            Ok(LocalSource::Embedded(model)) => (json!(model.file.sha256), None),
            Ok(LocalSource::File(path)) => (file_sha256(&path, hashes), None),
            Ok(LocalSource::HuggingFace { repo, file }) => {
                let pin = hub_pin(&repo, &file, hashes);
                let revision = json!(pin.as_ref().map(|p| &p.revision));
                (json!(pin.and_then(|p| p.sha256)), Some(revision))
            }
            Err(_) => (Value::Null, None),
        };
        locked["sha256"] = sha256;
        if let Some(revision) = revision {
            locked["revision"] = revision;
        }
        locked
    }

    fn price(&self) -> Option<Price> {
        self.price
    }

    fn grammar_refusal(&self) -> Option<&'static str> {
        (self.decoder_constraints == Some(false)).then_some("it sets `decoder_constraints: false`")
    }

    fn build(&self, env: &ModelEnv<'_>) -> Result<BuiltModel, Failure> {
        let source = match self.source.as_deref() {
            None => LocalSource::Embedded(&model_store::DEFAULT_LLM),
            Some(text) => LocalSource::parse(text, env.dir).map_err(|reason| {
                Failure::new(
                    FailureCode::ConfigInvalidInput,
                    format!("model `{}`: {reason}", env.name),
                )
            })?,
        };
        // Without the local engine only the call cache can answer: the model is built for
        // `--cache-only`, refused (before anything runs) otherwise.
        if !env.replay_only
            && let Some(missing) = missing_local_engine(env.name)
        {
            return Err(missing);
        }
        let settings = LocalSettings {
            max_batch: LOCAL_MAX_BATCH,
            context_length: self.context_length,
            decoder_constraints: self.decoder_constraints.unwrap_or(true),
        };
        Ok(BuiltModel::Language(LocalModel::shared(
            source,
            settings,
            env.notice.clone(),
            env.loads,
        )))
    }
}
