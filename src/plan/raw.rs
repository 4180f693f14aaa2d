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

use super::models::ModelSpec;
use super::policy::PlanPolicy;
use super::steps::RawStep;
use super::tools::ToolSpec;
pub use crate::corpora::ChunkBy;
pub use crate::orchestrate::inputs::{InputSpec, InputType};

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
    /// Makes a batch of this plan a map then a reduce: after one run per row, the rows' output
    /// lines are grouped and another plan runs once per group (`run --batch` with `--group-by`).
    #[serde(default)]
    pub reduce: Option<ReduceSpec>,
}

/// The reduce that follows a batch of this plan.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReduceSpec {
    /// The group key: a dotted path into each of the map's output lines (`input.product`,
    /// `output.label`) or a template over the line as `row` ("{{ row.input.product }}").
    #[schemars(length(min = 1))]
    pub group_by: String,
    /// The reduce plan, relative to this one; it declares `rows: { type: array }` (the group's
    /// lines), and may declare `group` (the key) and `fold_level`.
    pub plan: String,
    /// Reduce a group of more than this many rows in chunks of it, then the partial results,
    /// until one is left.
    #[serde(default)]
    #[schemars(range(min = 2))]
    pub fold: Option<u64>,
    /// Leave rows without the key out, instead of grouping them under `null`.
    #[serde(default)]
    pub skip_missing_key: bool,
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
    /// Runs this plan file (relative to this one) with the agent's arguments as inputs; a plan that declares an input `results` (type array, e.g. `{ type: array, default: [] }`) receives in it the earlier agents' results of a sequential route (an empty list otherwise).
    #[serde(default)]
    pub plan: Option<String>,
    /// Renders this inline template and sends it to `model`. It sees `args`, `inputs`, `vars`, and `results`: the earlier agents' results of a sequential route (`[{agent, arguments, output}]`; an empty list otherwise).
    #[serde(default)]
    pub template: Option<String>,
    /// The model for `template` agents.
    #[serde(default)]
    pub model: Option<String>,
}
