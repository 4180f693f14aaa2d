//! The plan file as written: `RawPlan` and everything it declares besides steps.
//!
//! These types are the user's contract. Their doc comments become the descriptions in
//! `schemas/plan.schema.json`, which editors show as help; the schema is generated from them and
//! committed, and a test fails when the two drift. Names referring to other parts of the plan are
//! plain strings here; `plan::check` resolves them and reports what does not exist.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::duration::DurationSpec;
use super::policy::PlanPolicy;
use super::steps::RawStep;
pub use crate::context::ChunkBy;
pub use crate::orchestrate::inputs::{InputSpec, InputType};
pub use crate::orchestrate::tools::SideEffects;

/// A pagantic plan: the inputs it takes, the models, corpora and tools it uses, and its steps.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "pagantic plan")]
pub struct RawPlan {
    /// Plan format version; always `1`.
    #[schemars(range(min = 1, max = 1))]
    pub version: u32,
    /// A short name for the plan (used in run records and logs).
    #[schemars(length(min = 1))]
    pub name: String,
    /// What the plan does.
    #[serde(default)]
    pub description: Option<String>,
    /// Inputs the plan takes (`-i name=value`, or a batch row's columns); templates read them as `inputs.<name>`.
    #[serde(default)]
    pub inputs: IndexMap<String, InputSpec>,
    /// Constants templates read as `vars.<name>`.
    #[serde(default)]
    pub vars: IndexMap<String, Value>,
    /// Models steps refer to by name.
    #[serde(default)]
    pub models: IndexMap<String, ModelSpec>,
    /// Document collections `retrieve` steps search.
    #[serde(default)]
    pub corpora: IndexMap<String, CorpusSpec>,
    /// Tools that `tool`, `agent` and `structured` steps may call.
    #[serde(default)]
    pub tools: IndexMap<String, ToolSpec>,
    /// Agents that `route` steps may choose from.
    #[serde(default)]
    pub agents: IndexMap<String, AgentSpec>,
    /// Limits the plan runs under; a `--policy` file can tighten them further.
    #[serde(default)]
    pub policy: Option<PlanPolicy>,
    /// The steps, in order. A step without `needs` follows the one before it.
    #[schemars(length(min = 1))]
    pub steps: Vec<RawStep>,
    /// A template for the plan's result (default: the last step's output).
    #[serde(default)]
    pub output: Option<String>,
}

/// A model, by engine. `kind` picks the engine.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ModelSpec {
    /// A local GGUF model run in-process by mistral.rs.
    Mistralrs {
        /// `default` (the embedded Qwen2.5-Coder-0.5B-Instruct), a path to a `.gguf` file, or `hf:ORG/REPO/FILE.gguf` (fetched from Hugging Face on first use).
        #[serde(default)]
        source: Option<String>,
        /// Refuse requests whose prompt and max_tokens exceed this many tokens (INFERENCE_CONTEXT_EXCEEDED) instead of sending them.
        #[serde(default)]
        #[schemars(range(min = 256))]
        context_length: Option<u32>,
        /// Enforce JSON Schemas and grammars while decoding (default true). With false, JSON
        /// Schemas are only checked after decoding (repair, validation, retries) and grammar
        /// constraints are refused — for comparing the two.
        #[serde(default)]
        decoder_constraints: Option<bool>,
    },
    /// An OpenAI-compatible chat-completions server (vLLM, llama.cpp server, mistralrs-server…).
    Openai {
        /// The server's base URL, e.g. `http://127.0.0.1:8000/v1`.
        base_url: String,
        /// The model name the server expects.
        model: String,
        /// Environment variable holding the API key, if the server needs one.
        #[serde(default)]
        api_key_env: Option<String>,
        /// Longest one request may take.
        #[serde(default)]
        timeout: Option<DurationSpec>,
    },
    /// A deterministic stand-in for tests and dry runs: replies from a list, from rules, or an echo.
    Scripted {
        /// Replies given in turn (the last one repeats).
        #[serde(default)]
        replies: Vec<ScriptReply>,
        /// Replies chosen by the last user message; the first matching rule wins.
        #[serde(default)]
        rules: Vec<ScriptRule>,
        /// Reply with the last user message when no rule or listed reply applies.
        #[serde(default)]
        echo: bool,
        /// Fail this many calls first (then answer normally), to exercise retries.
        #[serde(default)]
        fail_first: Option<u32>,
        /// Wait this long before answering, to exercise timeouts.
        #[serde(default)]
        stall: Option<DurationSpec>,
    },
    /// An ONNX Runtime scorer: a cross-encoder (scores pairs) or a bi-encoder (embeds texts).
    Onnx {
        /// What the model computes.
        task: OnnxTask,
        /// Path to the `.onnx` file or a directory holding `model.onnx`, or `default` for the embedded MiniLM.
        source: String,
        /// Path to `tokenizer.json` (default: next to the model).
        #[serde(default)]
        tokenizer: Option<String>,
        /// Pairs or texts per inference batch (default 32).
        #[serde(default)]
        #[schemars(range(min = 1, max = 4096))]
        batch_size: Option<u32>,
        /// Threads one inference may use (default: the number of CPUs).
        #[serde(default)]
        #[schemars(range(min = 1, max = 256))]
        threads: Option<u32>,
        /// Longest input in tokens; longer passages are cut, queries kept (default: the tokenizer's truncation length, else 512; 256 for `default`).
        #[serde(default)]
        #[schemars(range(min = 8, max = 8192))]
        max_length: Option<u32>,
        /// Cross-encoders: map the logit to 0..1 with the logistic function, as sentence-transformers' CrossEncoder does (default true).
        #[serde(default)]
        sigmoid: Option<bool>,
    },
}

impl ModelSpec {
    /// The `kind:` name.
    pub fn kind_name(&self) -> &'static str {
        match self {
            ModelSpec::Mistralrs { .. } => "mistralrs",
            ModelSpec::Openai { .. } => "openai",
            ModelSpec::Scripted { .. } => "scripted",
            ModelSpec::Onnx { .. } => "onnx",
        }
    }
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
}

impl ScriptReply {
    /// The engine's form of this reply.
    pub fn to_engine(&self) -> crate::inference::ScriptedReply {
        match self {
            ScriptReply::Text(text) => crate::inference::ScriptedReply::Text(text.clone()),
            ScriptReply::Call { call } => crate::inference::ScriptedReply::Call {
                tool: call.tool.clone(),
                arguments: Value::Object(call.arguments.clone()),
            },
        }
    }
}

/// A collection of documents, split into passages for retrieval.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CorpusSpec {
    /// Glob patterns of text files, relative to the plan file.
    #[serde(default)]
    pub files: Vec<String>,
    /// Documents written inline.
    #[serde(default)]
    pub documents: Vec<InlineDocument>,
    /// A JSON Lines file with one document per line, relative to the plan file.
    #[serde(default)]
    pub jsonl: Option<JsonlSource>,
    /// How documents are split into passages.
    #[serde(default)]
    pub chunk: Option<ChunkSpec>,
}

/// A document written inline in the plan.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InlineDocument {
    /// The text.
    pub content: String,
    /// Where it came from (shown with each candidate).
    #[serde(default)]
    pub source: Option<String>,
    /// Free-form metadata carried with each candidate.
    #[serde(default)]
    pub metadata: IndexMap<String, Value>,
}

/// A JSON Lines document source.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JsonlSource {
    /// Path of the file, relative to the plan file.
    pub path: String,
    /// The field holding the text (default `content`).
    #[serde(default)]
    pub content_field: Option<String>,
    /// The field naming the document (default: the line number).
    #[serde(default)]
    pub source_field: Option<String>,
}

/// How documents are split into passages.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChunkSpec {
    /// Longest passage in characters.
    #[schemars(range(min = 1))]
    pub max_chars: u32,
    /// Split at paragraph boundaries first (default), or purely by size.
    #[serde(default)]
    pub by: ChunkBy,
}

/// A tool steps and agents may call. `kind` picks how it runs.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToolSpec {
    /// Runs a program directly (never through a shell) with an argv template.
    Command {
        /// What the tool does, for the model.
        description: String,
        /// The program and its arguments; each element is a template that sees `args`.
        #[schemars(length(min = 1))]
        argv: Vec<String>,
        /// JSON Schema of the arguments; calls are validated against it before running.
        #[serde(default)]
        parameters: Option<Value>,
        /// Longest the program may run; it and its children are killed after (default 30s).
        #[serde(default)]
        timeout: Option<DurationSpec>,
        /// Most bytes of output kept (default 65536); the rest is cut and marked.
        #[serde(default)]
        #[schemars(range(min = 1))]
        max_output_bytes: Option<u64>,
        /// Working directory, relative to the plan file.
        #[serde(default)]
        working_dir: Option<String>,
        /// Environment variables passed through; all others are cleared.
        #[serde(default)]
        env: Vec<String>,
        /// Let a templated argv element begin with `-`. Off by default: a value a model chose would otherwise reach the program as an option (`--output=file`), so such a call is refused (TOOL_INVALID_ARGUMENTS). A literal `--` earlier in `argv` also lets the values after it through, for programs that read it as the end of options.
        #[serde(default)]
        allow_dash_values: bool,
        /// What the tool may change (default `external`, the most cautious).
        #[serde(default)]
        side_effects: SideEffects,
        /// Whether calling it twice is the same as once; only idempotent tools are retried automatically.
        #[serde(default)]
        idempotent: bool,
    },
    /// A tool compiled into pagantic.
    Builtin {
        /// Which built-in tool.
        builtin: BuiltinTool,
        /// Override the tool's description for the model.
        #[serde(default)]
        description: Option<String>,
        /// For `read_file`: the directory files may be read from, relative to the plan file.
        #[serde(default)]
        root: Option<String>,
    },
}

/// Tools compiled into pagantic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BuiltinTool {
    /// Evaluates arithmetic expressions.
    Calculator,
    /// Reads a text file inside `root`.
    ReadFile,
    /// The current date and time (UTC).
    CurrentTime,
}

/// An agent a `route` step may choose: a description for the router, an argument schema, and what it runs.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// What the agent does, for the router.
    pub description: String,
    /// JSON Schema of the agent's arguments; a route is rejected before running when they do not validate.
    #[serde(default)]
    pub parameters: Option<Value>,
    /// Runs this tool (by its name in `tools:`) with the agent's arguments.
    #[serde(default)]
    pub tool: Option<String>,
    /// Runs this plan file (relative to this one) with the agent's arguments as inputs.
    #[serde(default)]
    pub plan: Option<String>,
    /// Renders this inline template (it sees `args`) and sends it to `model`.
    #[serde(default)]
    pub template: Option<String>,
    /// The model for `template` agents.
    #[serde(default)]
    pub model: Option<String>,
}
