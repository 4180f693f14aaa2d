//! The model kinds a plan may declare under `models:`, and what each one needs.
//!
//! Each kind lives in its own file: its config struct (whose doc comments become the JSON
//! Schema's help text) and a [`ModelKind`] impl saying which roles it can serve, what it can
//! enforce while decoding, which mistakes in its own settings `validate` reports, and how it is
//! built. Adding a model kind is one file here plus one line in the [`model_kinds!`] registry,
//! which expands to the `kind`-tagged [`ModelSpec`] enum and its dispatch.

use std::path::Path;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use super::diagnostic::PlanError;
use super::steps::{FieldPath, ModelRole};
use crate::core::{Failure, Memo, Price};
use crate::inference::{Engine, LocalLoads};
use crate::model_store::{FileHashes, Notice};
use crate::rerank::{BiEncoder, CrossEncoder};
use serde_json::Value;

mod mistralrs;
pub(crate) mod onnx;
mod openai;
mod scripted;

pub use mistralrs::MistralrsModel;
pub use onnx::{OnnxModelSpec, OnnxTask};
pub use openai::OpenaiModel;
pub use scripted::{ScriptCall, ScriptReply, ScriptRule, ScriptedModel};

/// Declares the model kinds: `Variant(Config) = "kind-name"`, each with its doc comment.
macro_rules! model_kinds {
    ($($(#[doc = $doc:literal])* $variant:ident($config:ty) = $name:literal,)+) => {
        /// A model, by engine. `kind` picks the engine.
        #[derive(Debug, Clone, Deserialize, JsonSchema)]
        #[serde(tag = "kind")]
        pub enum ModelSpec {
            $($(#[doc = $doc])* #[serde(rename = $name)] $variant($config),)+
        }

        impl ModelSpec {
            /// The `kind:` name.
            pub fn kind_name(&self) -> &'static str {
                match self {
                    $(ModelSpec::$variant(_) => $name,)+
                }
            }

            /// The kind's own behaviour.
            pub fn kind(&self) -> &dyn ModelKind {
                match self {
                    $(ModelSpec::$variant(model) => model,)+
                }
            }
        }
    };
}

model_kinds! {
    /// A local GGUF model run in-process by mistral.rs.
    Mistralrs(MistralrsModel) = "mistralrs",
    /// An OpenAI-compatible chat-completions server (vLLM, llama.cpp server, mistralrs-server…).
    Openai(OpenaiModel) = "openai",
    /// A deterministic stand-in for tests and dry runs: replies from a list, from rules, or an echo.
    Scripted(ScriptedModel) = "scripted",
    /// An ONNX Runtime scorer: a cross-encoder (scores pairs) or a bi-encoder (embeds texts).
    Onnx(OnnxModelSpec) = "onnx",
}

/// The SHA-256 of a model file for a lockfile (read once per session and version of the file,
/// through `hashes`); null when it cannot be read (so a file that appears or goes away later is
/// drift too).
pub fn file_sha256(path: &Path, hashes: &FileHashes) -> Value {
    hashes.sha256(path).map_or(Value::Null, Value::String)
}

/// A mistake a model kind finds in its own settings: the field (relative to the model), the
/// error, and the label under it.
pub type Problem = (FieldPath, PlanError, &'static str);

/// What building a model needs from the plan around it.
pub struct ModelEnv<'a> {
    /// The model's name in `models:`.
    pub name: &'a str,
    /// The directory the plan's relative paths start from.
    pub dir: &'a Path,
    /// Where one-time work (pulling, loading) is announced.
    pub notice: Notice,
    /// Whether `--verbose` asked to hear more (an engine settling for less than asked).
    pub verbose: bool,
    /// Where values computed from content (passage embeddings) may be kept across runs.
    pub memo: Option<Arc<dyn Memo>>,
    /// Whether every call of this model must come from the call cache (`--cache-only`), so the
    /// engine itself is never called.
    pub replay_only: bool,
    /// The session's local models' loads, which a local model shares.
    pub loads: &'a LocalLoads,
}

/// A built model, by what it computes.
#[derive(Clone)]
pub enum BuiltModel {
    Language(Arc<dyn Engine>),
    Cross(Arc<CrossEncoder>),
    Bi(Arc<BiEncoder>),
}

/// Implemented by every model kind's config.
pub trait ModelKind {
    /// Whether the model can serve where a step needs `role`.
    fn serves(&self, role: ModelRole) -> bool;
    /// What it is, with its article, as in "model `m` is an openai model" ("an openai").
    fn described(&self) -> &'static str;
    /// Why it cannot enforce a grammar (regex, Lark, GBNF) while decoding, when it cannot.
    fn grammar_refusal(&self) -> Option<&'static str> {
        None
    }
    /// What its calls cost, when its config declares a `price` (language models only).
    fn price(&self) -> Option<Price> {
        None
    }
    /// Whether the call cache may answer for it (its config's `cache`, default true).
    fn cached(&self) -> bool;
    /// What a lockfile pins about it: its kind and source, and the SHA-256 of its files (or
    /// its server and model name); `dir` is the plan's directory, `hashes` the files the session
    /// has hashed.
    fn locked(&self, dir: &Path, hashes: &FileHashes) -> Value;
    /// Mistakes in its own settings that `validate` reports; `name` is the model's name.
    fn problems(&self, _name: &str) -> Vec<Problem> {
        Vec::new()
    }
    /// Creates the engine or scorer (files are read on first use, not here).
    fn build(&self, env: &ModelEnv<'_>) -> Result<BuiltModel, Failure>;
}
