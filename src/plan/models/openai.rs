//! `kind: openai` — an OpenAI-compatible chat-completions server.

use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;

use std::num::NonZeroU32;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::{BuiltModel, ModelEnv, ModelKind};
use crate::core::duration::DurationSpec;
use crate::core::{Failure, FailureCode, Price};
use crate::inference::{Compat, OpenAiConfig, OpenAiEngine, RateLimit};
use crate::model_store::FileHashes;
use crate::plan::steps::ModelRole;

/// An OpenAI-compatible chat-completions server (vLLM, llama.cpp server, mistralrs-server…).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenaiModel {
    /// The server's base URL, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    /// The model name the server expects.
    pub model: String,
    /// Environment variable holding the API key, if the server needs one.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Longest one request may take.
    #[serde(default)]
    pub timeout: Option<DurationSpec>,
    /// What calls to this model cost, per million prompt and completion tokens; the run record,
    /// events and batch summary then carry costs, and the policy's `max_cost` can bound them.
    /// Without it the model's calls have no cost (null in the record).
    #[serde(default)]
    pub price: Option<Price>,
    /// Whether the call cache may answer this model's calls, and store its answers (default true). `false` always asks the model: for a model whose answers must be fresh.
    #[serde(default)]
    pub cache: Option<bool>,
    /// How fast the model may be called, by every step, vote candidate, agent round and batch
    /// row of the process together: `requests_per_minute`, `tokens_per_minute`, `max_in_flight`,
    /// `burst` (any subset, each at least 1), and `max_wait`, the longest one call waits for what
    /// the server asks (default 30s; past it the call fails as a transient rate limit).
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    /// The server's dialect of the API, when negotiation cannot find it alone: `openai`,
    /// `vllm`, `tgi`, `llama.cpp`, `ollama` or `lmstudio` (default: negotiated from the server's
    /// errors, and remembered in the call cache's store).
    #[serde(default)]
    pub compat: Option<Compat>,
    /// The most tokens (prompt and answer) one call to the model may hold, as its server is
    /// configured: inference events and usage records report it (an OpenAI-compatible server
    /// does not say). Reported only: requests are not held to it.
    #[serde(default)]
    pub context_window: Option<NonZeroU32>,
}

impl OpenaiModel {
    /// The least time `calls` model calls using about `tokens` tokens in all take at this
    /// model's `rate_limit` (None without a per-minute quota): the longer of the requests' and
    /// the tokens' share of their quotas.
    pub fn paced_at_least(&self, calls: u64, tokens: u64) -> Option<Duration> {
        let limit = self.rate_limit?;
        let minutes = |amount: u64, per_minute: Option<NonZeroU32>| {
            per_minute.map(|quota| amount as f64 / f64::from(quota.get()))
        };
        let requests = minutes(calls, limit.requests_per_minute);
        let tokens = minutes(tokens, limit.tokens_per_minute);
        let most = requests.into_iter().chain(tokens).reduce(f64::max)?;
        Duration::try_from_secs_f64(most * 60.0).ok()
    }
}

impl ModelKind for OpenaiModel {
    fn serves(&self, role: ModelRole) -> bool {
        role == ModelRole::Llm
    }

    fn described(&self) -> &'static str {
        "an openai"
    }

    fn cached(&self) -> bool {
        self.cache != Some(false)
    }

    fn locked(&self, _dir: &Path, _hashes: &FileHashes) -> Value {
        json!({ "kind": "openai", "base_url": self.base_url, "model": self.model })
    }

    fn price(&self) -> Option<Price> {
        self.price
    }

    fn grammar_refusal(&self) -> Option<&'static str> {
        Some("an `openai` server is sent JSON Schemas only")
    }

    fn build(&self, env: &ModelEnv<'_>) -> Result<BuiltModel, Failure> {
        let api_key = match &self.api_key_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                Failure::new(
                    FailureCode::ConfigInvalidInput,
                    format!(
                        "model `{}` reads its API key from ${var}, which is not set",
                        env.name
                    ),
                )
                .with_help(format!("export {var}=… before running"))
            })?),
            None => None,
        };
        let mut config = OpenAiConfig::new(self.base_url.clone(), self.model.clone());
        config.api_key = api_key;
        config.notice = env.verbose.then(|| env.notice.clone());
        config.rate_limit = self.rate_limit.unwrap_or_default();
        config.compat = self.compat;
        config.memo = env.memo.clone();
        config.context_window = self.context_window.map(|tokens| u64::from(tokens.get()));
        if let Some(timeout) = self.timeout {
            config.timeout = timeout.get();
        }
        Ok(BuiltModel::Language(Arc::new(OpenAiEngine::new(config)?)))
    }
}
