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
//!
//! A server's word is not taken for good at once: a downgrade learned from a 4xx (the server
//! saying the request is wrong) is remembered as confirmed, but one learned from a 5xx (which may
//! be a passing failure whose text happens to name `tools`) only once the same refusal comes
//! again — in this process, or in a later one that finds it kept unconfirmed. Only a confirmed
//! dialect is recalled, and only for [`REMEMBERED_FOR`] after it was learned; `pagantic cache
//! stats` lists what is kept.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    /// What differs from the common dialect, in words (`pagantic cache stats` shows it).
    pub(super) fn described(&self) -> String {
        let common = Dialect::default();
        let mut differences = Vec::new();
        if self.schema_mode != common.schema_mode {
            differences.push(format!("schemas as `{}`", self.schema_mode.name()));
        }
        if self.schema_shape != common.schema_shape {
            differences.push("schemas in Text Generation Inference's shape".to_string());
        }
        if !self.json_object {
            differences.push("no `json_object`".to_string());
        }
        if self.tokens_field != common.tokens_field {
            differences.push(format!("`{}`", self.tokens_field.name()));
        }
        if !self.stream_tools {
            differences.push("tool calls not streamed".to_string());
        }
        if !self.tools {
            differences.push("no `tools`".to_string());
        }
        if differences.is_empty() {
            "the common dialect".to_string()
        } else {
            differences.join(", ")
        }
    }

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
    /// The server (its URL without credentials) and the model, written into the entry.
    base_url: String,
    model: String,
}

impl std::fmt::Debug for Remembered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remembered").finish_non_exhaustive()
    }
}

/// The kind of entry a remembered dialect is in the store.
const NEGOTIATED_KIND: &str = "negotiated";

/// How long a confirmed dialect is recalled after it was learned (a server is upgraded, a
/// proxy moved): a week.
pub(super) const REMEMBERED_FOR: Duration = Duration::from_secs(7 * 24 * 3600);

/// A remembered dialect as the store keeps it; the fields in words are what `pagantic cache
/// stats` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Record {
    base_url: String,
    model: String,
    /// The dialect confirmed (a 4xx, or a refusal that came again): what the next process
    /// starts from.
    confirmed: Option<Dialect>,
    /// A dialect learned from one 5xx, not confirmed yet: a later process that meets the same
    /// refusal confirms it.
    unconfirmed: Option<Dialect>,
    /// `confirmed` and `unconfirmed` in words.
    remembered: Option<String>,
    pending: Option<String>,
    /// When the entry stops being recalled, in Unix seconds.
    expires_at_s: u64,
}

/// Seconds since the Unix epoch.
fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

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
            base_url: crate::core::secret::without_credentials(base_url),
            model: model.to_string(),
        }
    }

    /// The entry as it stands, when there is one of this layout that has not expired (an entry
    /// of an earlier layout was remembered without confirmation, and is not read).
    fn record(&self) -> Option<Record> {
        let record: Record = serde_json::from_str(&self.memo.recall(self.key)?).ok()?;
        (record.expires_at_s > now_s()).then_some(record)
    }

    /// The dialect an earlier run negotiated and confirmed, if one did and it has not expired.
    pub(super) fn recall(&self) -> Option<Dialect> {
        self.record()?.confirmed
    }

    /// Keeps `dialect` for later runs: as confirmed, or as learned from one passing-looking
    /// refusal — which an earlier run's unconfirmed entry of the same dialect confirms. Whether
    /// it was confirmed.
    pub(super) fn keep(&self, dialect: &Dialect, confirmed: bool) -> bool {
        let before = self.record();
        let confirmed = confirmed
            || before
                .as_ref()
                .is_some_and(|record| record.unconfirmed == Some(*dialect));
        let (confirmed_dialect, unconfirmed) = match confirmed {
            true => (Some(*dialect), None),
            false => (before.and_then(|record| record.confirmed), Some(*dialect)),
        };
        let record = Record {
            base_url: self.base_url.clone(),
            model: self.model.clone(),
            remembered: confirmed_dialect.as_ref().map(Dialect::described),
            pending: unconfirmed.as_ref().map(Dialect::described),
            confirmed: confirmed_dialect,
            unconfirmed,
            expires_at_s: now_s().saturating_add(REMEMBERED_FOR.as_secs()),
        };
        if let Ok(value) = serde_json::to_string(&record) {
            self.memo.remember(NEGOTIATED_KIND, self.key, value);
        }
        confirmed
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
