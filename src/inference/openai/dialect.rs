//! The dialects of the chat-completions API: what an OpenAI-compatible server accepts, named by
//! a model's `compat:` or learned from the server's errors, and remembered across runs.
//!
//! A [`Dialect`] is what the engine sends one server: the schema mode to try first, how a JSON
//! Schema goes into `response_format` (OpenAI's `json_schema` object, or Text Generation
//! Inference's `{"type": "json", "value": …}`), whether `json_object` is taken at all (LM Studio
//! refuses it), which field carries the most tokens to generate (`max_tokens`, or
//! `max_completion_tokens` for OpenAI's newer models), whether tool calls survive streaming
//! (Ollama's are lost: requests with tools then go without streaming), and whether `tools` are
//! taken. No dialect sends `strict` inside a tool definition (vLLM refuses it). Without a
//! `compat:` the engine starts from the common dialect and negotiates; what it learns is kept in
//! the call cache's store (a [`Memo`]), keyed by the server's base URL and the model, so the next
//! process starts where this one ended instead of paying the failed first attempts again.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::core::Memo;
use crate::inference::SchemaMode;

/// The server a model's `compat:` names, when negotiation cannot find its dialect alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum Compat {
    /// OpenAI: `json_schema`, and `max_completion_tokens` (its newer models refuse `max_tokens`).
    #[serde(rename = "openai")]
    OpenAi,
    /// vLLM: `json_schema` and `max_tokens`.
    #[serde(rename = "vllm")]
    Vllm,
    /// Text Generation Inference: `{"type": "json", "value": schema}`; no schema-less
    /// `json_object`.
    #[serde(rename = "tgi")]
    Tgi,
    /// llama.cpp's server and llama-cpp-python's: `json_object` with the schema attached.
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
    /// Ollama: `json_schema`; tool calls are lost when streaming, so requests with tools are
    /// asked without streaming.
    #[serde(rename = "ollama")]
    Ollama,
    /// LM Studio: `json_schema`; `json_object` is refused.
    #[serde(rename = "lmstudio")]
    LmStudio,
}

/// How a JSON Schema is put into `response_format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum SchemaShape {
    /// `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`.
    OpenAi,
    /// `{"type": "json", "value": schema}`.
    Tgi,
}

/// The field that carries the most tokens to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum TokensField {
    MaxTokens,
    MaxCompletionTokens,
}

impl TokensField {
    pub(super) fn name(self) -> &'static str {
        match self {
            TokensField::MaxTokens => "max_tokens",
            TokensField::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

/// What the engine sends one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Dialect {
    /// The schema mode to try first: the best one the server took.
    pub(super) schema_mode: SchemaMode,
    pub(super) schema_shape: SchemaShape,
    /// Whether `{"type": "json_object"}` is worth asking for.
    pub(super) json_object: bool,
    pub(super) tokens_field: TokensField,
    /// Whether tool calls come through a streamed reply.
    pub(super) stream_tools: bool,
    /// Whether `tools` are taken.
    pub(super) tools: bool,
}

/// The common dialect, where negotiation starts.
impl Default for Dialect {
    fn default() -> Self {
        Dialect {
            schema_mode: SchemaMode::JsonSchema,
            schema_shape: SchemaShape::OpenAi,
            json_object: true,
            tokens_field: TokensField::MaxTokens,
            stream_tools: true,
            tools: true,
        }
    }
}

impl Compat {
    /// The dialect this server speaks.
    pub(super) fn dialect(self) -> Dialect {
        let common = Dialect::default();
        match self {
            Compat::OpenAi => Dialect {
                tokens_field: TokensField::MaxCompletionTokens,
                ..common
            },
            Compat::Vllm => common,
            Compat::Tgi => Dialect {
                schema_shape: SchemaShape::Tgi,
                json_object: false,
                ..common
            },
            Compat::LlamaCpp => Dialect {
                schema_mode: SchemaMode::JsonObject,
                ..common
            },
            Compat::Ollama => Dialect {
                stream_tools: false,
                ..common
            },
            Compat::LmStudio => Dialect {
                json_object: false,
                ..common
            },
        }
    }
}

impl Dialect {
    /// The mode to try after `mode` was refused, if any is left.
    pub(super) fn fallback_after(&self, mode: SchemaMode) -> Option<SchemaMode> {
        match mode {
            SchemaMode::JsonSchema if self.json_object => Some(SchemaMode::JsonObject),
            SchemaMode::JsonSchema | SchemaMode::JsonObject => Some(SchemaMode::Prompt),
            SchemaMode::Prompt | SchemaMode::Ignored => None,
        }
    }
}

/// Where a negotiated dialect is kept across runs: the call cache's store, under a key of the
/// server's base URL and the model.
#[derive(Clone)]
pub(super) struct Remembered {
    memo: Arc<dyn Memo>,
    key: [u8; 32],
}

impl std::fmt::Debug for Remembered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remembered").finish_non_exhaustive()
    }
}

/// The kind of entry a remembered dialect is in the store.
const NEGOTIATED_KIND: &str = "negotiated";

impl Remembered {
    pub(super) fn new(memo: Arc<dyn Memo>, base_url: &str, model: &str) -> Self {
        let mut hash = Sha256::new();
        for part in [NEGOTIATED_KIND, base_url.trim_end_matches('/'), model] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part.as_bytes());
        }
        Remembered {
            memo,
            key: hash.finalize().into(),
        }
    }

    /// The dialect an earlier run negotiated, if one did (and it still reads).
    pub(super) fn recall(&self) -> Option<Dialect> {
        serde_json::from_str(&self.memo.recall(self.key)?).ok()
    }

    pub(super) fn keep(&self, dialect: &Dialect) {
        if let Ok(value) = serde_json::to_string(dialect) {
            self.memo.remember(NEGOTIATED_KIND, self.key, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_compat_names_what_its_server_takes() {
        let tgi = Compat::Tgi.dialect();
        assert_eq!(tgi.schema_shape, SchemaShape::Tgi);
        assert_eq!(
            tgi.fallback_after(SchemaMode::JsonSchema),
            Some(SchemaMode::Prompt)
        );
        let lmstudio = Compat::LmStudio.dialect();
        assert_eq!(
            lmstudio.fallback_after(SchemaMode::JsonSchema),
            Some(SchemaMode::Prompt),
            "LM Studio refuses json_object"
        );
        assert_eq!(
            Compat::OpenAi.dialect().tokens_field.name(),
            "max_completion_tokens"
        );
        assert!(!Compat::Ollama.dialect().stream_tools);
        assert_eq!(
            Compat::LlamaCpp.dialect().schema_mode,
            SchemaMode::JsonObject
        );
        assert_eq!(Compat::Vllm.dialect(), Dialect::default());
        let common = Dialect::default();
        assert_eq!(
            common.fallback_after(SchemaMode::JsonSchema),
            Some(SchemaMode::JsonObject)
        );
        assert_eq!(common.fallback_after(SchemaMode::Prompt), None);
    }

    #[test]
    fn compat_reads_the_servers_names() {
        let read = |name: &str| serde_json::from_value::<Compat>(serde_json::json!(name)).ok();
        assert_eq!(read("llama.cpp"), Some(Compat::LlamaCpp));
        assert_eq!(read("lmstudio"), Some(Compat::LmStudio));
        assert_eq!(read("tgi"), Some(Compat::Tgi));
        assert_eq!(read("llamacpp"), None);
    }
}
