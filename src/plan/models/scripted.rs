//! `kind: scripted` — a deterministic stand-in model for tests and dry runs.

use std::path::Path;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{BuiltModel, ModelEnv, ModelKind, Problem};
use crate::core::duration::DurationSpec;
use crate::core::{Failure, FailureCode, Price};
use crate::inference::{ScriptedConfig, ScriptedEngine, ScriptedReply};
use crate::model_store::FileHashes;
use crate::plan::diagnostic::{PlanError, regex_reason};
use crate::plan::steps::ModelRole;

/// A deterministic stand-in for tests and dry runs: replies from a list, from rules, or an echo.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptedModel {
    /// Replies given in turn (the last one repeats).
    #[serde(default)]
    pub replies: Vec<ScriptReply>,
    /// Replies chosen by the last user message; the first matching rule wins.
    #[serde(default)]
    pub rules: Vec<ScriptRule>,
    /// Reply with the last user message when no rule or listed reply applies.
    #[serde(default)]
    pub echo: bool,
    /// Fail this many calls first (then answer normally), to exercise retries.
    #[serde(default)]
    pub fail_first: Option<u32>,
    /// Wait this long before answering, to exercise timeouts.
    #[serde(default)]
    pub stall: Option<DurationSpec>,
    /// What calls to this model cost, per million prompt and completion tokens; the run record,
    /// events and batch summary then carry costs, and the policy's `max_cost` can bound them.
    /// Without it the model's calls have no cost (null in the record).
    #[serde(default)]
    pub price: Option<Price>,
    /// Whether the call cache may answer this model's calls, and store its answers (default true). `false` always asks the model: for a model whose answers must be fresh.
    #[serde(default)]
    pub cache: Option<bool>,
}

/// A scripted engine rule.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptRule {
    /// Applies when the last user message contains this text.
    #[serde(default)]
    pub contains: Option<String>,
    /// Applies when the last user message matches this regular expression.
    #[serde(default)]
    pub matches: Option<String>,
    /// The reply.
    pub reply: ScriptReply,
}

/// A scripted reply: text, or a tool call (to test agents).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ScriptReply {
    /// Answer with this text.
    Text(String),
    /// Call a tool.
    Call {
        /// The call.
        call: ScriptCall,
    },
}

/// A tool call a scripted model makes.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptCall {
    /// The tool's name.
    pub tool: String,
    /// Its arguments.
    #[serde(default)]
    pub arguments: serde_json::Map<String, Value>,
    /// Text the model writes before the call (streamed like an answer's text).
    #[serde(default)]
    pub text: String,
}

impl ScriptReply {
    /// The engine's form of this reply.
    fn to_engine(&self) -> ScriptedReply {
        match self {
            ScriptReply::Text(text) => ScriptedReply::Text(text.clone()),
            ScriptReply::Call { call } => ScriptedReply::Call {
                tool: call.tool.clone(),
                arguments: Value::Object(call.arguments.clone()),
                text: call.text.clone(),
            },
        }
    }
}

impl ModelKind for ScriptedModel {
    fn serves(&self, role: ModelRole) -> bool {
        role == ModelRole::Llm
    }

    fn described(&self) -> &'static str {
        "a scripted"
    }

    fn cached(&self) -> bool {
        self.cache != Some(false)
    }

    /// Its answers are in the plan itself: the lock pins nothing more.
    fn locked(&self, _dir: &Path, _hashes: &FileHashes) -> Value {
        json!({ "kind": "scripted" })
    }

    fn price(&self) -> Option<Price> {
        self.price
    }

    fn problems(&self, _name: &str) -> Vec<Problem> {
        self.rules
            .iter()
            .enumerate()
            .filter_map(|(i, rule)| {
                let error = regex::Regex::new(rule.matches.as_deref()?).err()?;
                Some((
                    vec!["rules".into(), i.to_string(), "matches".into()],
                    PlanError::InvalidRegex {
                        message: regex_reason(&error),
                    },
                    "does not compile",
                ))
            })
            .collect()
    }

    fn build(&self, env: &ModelEnv<'_>) -> Result<BuiltModel, Failure> {
        let rules = self
            .rules
            .iter()
            .map(|rule| {
                let matches = rule
                    .matches
                    .as_deref()
                    .map(regex::Regex::new)
                    .transpose()
                    .map_err(|e| {
                        Failure::new(
                            FailureCode::ConfigInvalidInput,
                            format!("model `{}`: {e}", env.name),
                        )
                    })?;
                Ok(crate::inference::ScriptedRule {
                    contains: rule.contains.clone(),
                    matches,
                    reply: rule.reply.to_engine(),
                })
            })
            .collect::<Result<Vec<_>, Failure>>()?;
        Ok(BuiltModel::Language(Arc::new(ScriptedEngine::new(
            ScriptedConfig {
                rules,
                replies: self.replies.iter().map(ScriptReply::to_engine).collect(),
                echo: self.echo,
                fail_first: self.fail_first.unwrap_or(0),
                stall: self.stall.map(|s| s.get()),
            },
        ))))
    }
}
