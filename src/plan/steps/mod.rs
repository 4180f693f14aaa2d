//! The YAML shape of every step type, and what each step refers to.
//!
//! Each step type lives in its own file: its config struct (whose doc comments become the JSON
//! Schema's help text) and a [`StepConfig`] impl listing the models, tools, corpora, templates and
//! JSON Schemas it refers to, so that the checks in `plan::check` stay generic. Adding a step type
//! is one file here plus one line in the [`steps!`] registry below, which expands to the tagged
//! [`RawStep`] enum, the [`StepType`] list used by policies and "did you mean", and the dispatch.
//!
//! A step builds its handler through a [`BuildContext`]: the shared resources its names resolve
//! to (engines, scorers, corpora, tools, agents) and the [`StepFacts`] the checks found about it.
//! It sees nothing else of the plan.

use std::sync::Arc;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::diagnostic::PlanError;
use crate::core::Failure;
use crate::core::duration::DurationSpec;
use crate::corpora::Corpus;
use crate::inference::{Engine, TokenSink};
use crate::orchestrate::steps::{Prompt, PromptSource, RouteAgent};
use crate::orchestrate::tools::ToolRuntime;
use crate::orchestrate::{Feedback, StepHandler};
use crate::rerank::{BiEncoder, Keep, Scorer};

mod agent;
mod infer;
mod redundant;
mod rerank;
mod retrieve;
mod route;
mod structured;
mod template;
mod tool;
mod validate;

pub use agent::{AgentStep, ToolCallMode};
pub use infer::{Constraint, InferStep};
pub use redundant::{RedundantStep, Voting, VotingMethod};
pub use rerank::RerankStep;
pub use retrieve::{RetrieveScorer, RetrieveStep};
pub use route::RouteStep;
pub use structured::StructuredStep;
pub use template::TemplateStep;
pub use tool::ToolStep;
pub use validate::{FeedbackSpec, ValidateRule, ValidateStep};

/// Declares the step types: `Variant(Config) = "yaml-name"`, each with its doc comment.
macro_rules! steps {
    ($($(#[doc = $doc:literal])* $variant:ident($config:ty) = $name:literal,)+) => {
        /// One step of a plan, as written. `type` picks the kind of step.
        #[derive(Debug, Clone, Deserialize, JsonSchema)]
        #[serde(tag = "type")]
        pub enum RawStep {
            $($(#[doc = $doc])* #[serde(rename = $name)] $variant($config),)+
        }

        /// The kinds of step, as named in `type:` and in policies.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize, JsonSchema)]
        pub enum StepType {
            $($(#[doc = $doc])* #[serde(rename = $name)] $variant,)+
        }

        impl StepType {
            /// Every step type, in declaration order.
            pub const ALL: &'static [StepType] = &[$(StepType::$variant),+];

            /// The name used in YAML.
            pub fn name(self) -> &'static str {
                match self {
                    $(StepType::$variant => $name,)+
                }
            }
        }

        impl RawStep {
            /// This step's type.
            pub fn step_type(&self) -> StepType {
                match self {
                    $(RawStep::$variant(_) => StepType::$variant,)+
                }
            }

            /// The fields every step has.
            pub fn common(&self) -> &StepCommon {
                match self {
                    $(RawStep::$variant(step) => &step.common,)+
                }
            }

            /// Builds the step's run-time handler.
            pub fn build(&self, context: &mut dyn BuildContext) -> Result<Arc<dyn StepHandler>, Failure> {
                match self {
                    $(RawStep::$variant(step) => step.build(context),)+
                }
            }

            /// What this step passes on as its output, as far as the plan says.
            pub fn output(&self) -> OutputKind {
                match self {
                    $(RawStep::$variant(step) => step.output(),)+
                }
            }

            /// What this step takes as its input.
            pub fn accepts(&self) -> Accepts {
                match self {
                    $(RawStep::$variant(step) => step.accepts(),)+
                }
            }

            /// What this step refers to.
            pub fn references(&self) -> References<'_> {
                let mut refs = References::default();
                match self {
                    $(RawStep::$variant(step) => step.references(&mut refs),)+
                }
                refs
            }
        }
    };
}

steps! {
    /// Call a language model with a prompt and return its text.
    Infer(InferStep) = "infer",
    /// Ask a model for JSON that must validate against a schema: constrained decoding, then repair, enum normalisation, validation and retries with the errors fed back.
    Structured(StructuredStep) = "structured",
    /// Ask N times and vote: majority, unanimity, similarity or per-field majority, with a confidence.
    Redundant(RedundantStep) = "redundant",
    /// A tool-calling loop: the model calls declared tools until it gives a final answer.
    Agent(AgentStep) = "agent",
    /// Find the passages that best match a query: from a corpus, or from a custom retriever (a tool).
    Retrieve(RetrieveStep) = "retrieve",
    /// Re-score candidates (by default the previous step's output) and keep the best.
    Rerank(RerankStep) = "rerank",
    /// Check the input against rules; pass it through unchanged when every rule holds.
    Validate(ValidateStep) = "validate",
    /// Call one declared tool with templated arguments.
    Tool(ToolStep) = "tool",
    /// Render a template; no model involved.
    Template(TemplateStep) = "template",
    /// A model picks which declared agents to run (one, several in parallel, or in sequence), then a second call synthesises the answer.
    Route(RouteStep) = "route",
}

impl StepType {
    /// Whether steps of this type call a language model, and so can be sent a validate step's
    /// feedback.
    pub fn calls_model(self) -> bool {
        matches!(
            self,
            StepType::Infer
                | StepType::Structured
                | StepType::Redundant
                | StepType::Agent
                | StepType::Route
        )
    }
}

impl std::fmt::Display for StepType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Fields every step has, whatever its type.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct StepCommon {
    /// The step's name: unique in the plan; templates read its result as `steps.<name>.output`.
    #[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$"))]
    pub name: String,
    /// What the step is for (shown in `pagantic graph` and run records).
    #[serde(default)]
    pub description: Option<String>,
    /// Steps whose outputs this one needs. Without `needs`, a step follows the step before it and receives its output as `input`.
    #[serde(default)]
    pub needs: Option<Vec<String>>,
    /// A minijinja expression; when it is false the step is skipped.
    #[serde(default)]
    pub when: Option<String>,
    /// How to retry a failed attempt (only failures the taxonomy calls retryable are retried).
    #[serde(default)]
    pub retry: Option<RetrySpec>,
    /// Longest one attempt may take (e.g. `30s`); defaults to the policy's `timeout_per_step`.
    #[serde(default)]
    pub timeout: Option<DurationSpec>,
    /// What a failure of this step (after its retries) does to the run: `fail` stops it (the default); `continue` goes on, with this step's output null and its error readable as `steps.<name>.error`.
    #[serde(default)]
    pub on_error: OnError,
    /// Whether this step's model calls may be answered from the call cache, and stored in it (default true). `false` always asks the model: for a step whose answer must be fresh.
    #[serde(default)]
    pub cache: Option<bool>,
}

/// What a step's failure does to the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// The run fails.
    #[default]
    Fail,
    /// The run goes on: the step's output is null, its error is recorded and readable as `steps.<name>.error`, and the steps after it run.
    Continue,
}

/// Retry settings for a step.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetrySpec {
    /// Attempts in all, the first included.
    #[schemars(range(min = 1, max = 100))]
    pub max_attempts: u32,
    /// Wait before the second attempt; doubles after each further failure.
    #[serde(default)]
    pub backoff: Option<DurationSpec>,
}

/// What a model step sends, and to which model: the fields `infer`, `structured`, `redundant`,
/// `agent` and `route` share, written at the step's top level.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ModelCall {
    /// The language model to call, by its name in `models:`.
    pub model: String,
    #[serde(flatten)]
    pub prompt: PromptSpec,
    #[serde(flatten)]
    pub sampling: Sampling,
}

impl ModelCall {
    /// The run-time prompt.
    pub fn prompt(&self) -> Prompt {
        self.prompt.runtime()
    }

    /// The run-time sampling settings.
    pub fn sampling(&self) -> crate::orchestrate::steps::SamplingSettings {
        crate::orchestrate::steps::SamplingSettings {
            max_tokens: self.sampling.max_tokens,
            temperature: self.sampling.temperature,
            seed: self.sampling.seed,
            stop: self.sampling.stop.clone().unwrap_or_default(),
        }
    }

    fn references<'a>(&'a self, refs: &mut References<'a>) {
        refs.model(&["model"], &self.model, ModelRole::Llm);
        self.prompt.references(refs);
        if let Some(max) = self.sampling.max_tokens {
            refs.max_tokens = Some((path(&["max_tokens"]), u64::from(max)));
        }
    }
}

/// Where a model step's prompt comes from: a file in `prompts/`, or inline text; plus an optional system message.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct PromptSpec {
    /// A prompt template file, relative to the plan's `prompts/` directory (e.g. `answer.j2`).
    #[serde(default)]
    pub prompt: Option<String>,
    /// An inline prompt template (minijinja), used instead of `prompt`.
    #[serde(default)]
    pub template: Option<String>,
    /// An inline system message template.
    #[serde(default)]
    pub system: Option<String>,
}

impl PromptSpec {
    /// The run-time prompt.
    pub fn runtime(&self) -> Prompt {
        let user = match (&self.prompt, &self.template) {
            (Some(file), _) => PromptSource::File(file.clone()),
            (None, Some(text)) => PromptSource::Inline(text.clone()),
            // `validate` guarantees one of the two; an empty prompt is the harmless fallback.
            (None, None) => PromptSource::Inline(String::new()),
        };
        Prompt {
            user,
            system: self.system.clone(),
        }
    }

    fn references<'a>(&'a self, refs: &mut References<'a>) {
        if let Some(file) = &self.prompt {
            refs.template(&["prompt"], file, TemplateSource::File);
        }
        if let Some(text) = &self.template {
            refs.template(&["template"], text, TemplateSource::Inline);
        }
        if let Some(text) = &self.system {
            refs.template(&["system"], text, TemplateSource::Inline);
        }
        if self.prompt.is_some() == self.template.is_some() {
            refs.exclusive(&["prompt", "template"], self.prompt.is_some());
        }
    }
}

/// Sampling settings shared by the steps that call a language model.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct Sampling {
    /// Most tokens to generate.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u32>,
    /// Sampling temperature; 0 is greedy.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 2.0))]
    pub temperature: Option<f64>,
    /// Random seed, for reproducible sampling.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Stop generating at any of these strings.
    #[serde(default)]
    pub stop: Option<Vec<String>>,
}

/// What a `retrieve` or `rerank` step passes on besides its count (`limit`, `top_k`): distinct
/// passages, within a character budget. Written at the step's top level.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct KeepSpec {
    /// Drop duplicate passages, keeping the best-ranked: the same text (whitespace aside), or the same `source` and `metadata.chunk`. Default true; duplicates are dropped before `limit` / `top_k` count.
    #[serde(default = "dedup_by_default")]
    pub dedup: bool,
    /// Most characters of passage text passed on, all candidates together (about 4 characters make a token of English text). Candidates go best first; the one that crosses the budget is cut to the characters left and marked `metadata.truncated: true`; the rest are dropped.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_chars: Option<u32>,
}

fn dedup_by_default() -> bool {
    true
}

impl KeepSpec {
    /// The run-time limits, with the step's count.
    pub fn keep(&self, limit: Option<usize>) -> Keep {
        Keep {
            limit,
            dedup: self.dedup,
            max_chars: self.max_chars.map(|m| m as usize),
        }
    }
}

/// A JSON Schema given inline, or as a path to a `.json` file relative to the plan.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SchemaSource {
    /// Path to a JSON Schema file, relative to the plan file.
    File(String),
    /// An inline JSON Schema.
    Inline(IndexMap<String, Value>),
}

/// What kind of model a reference needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelRole {
    /// A language model (mistralrs, openai or scripted).
    Llm,
    /// An ONNX cross-encoder or bi-encoder.
    Scorer,
    /// An ONNX bi-encoder (dense retrieval embeds the corpus and the query separately).
    Embedder,
}

/// How a template string is to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateSource {
    /// Inline minijinja template text.
    Inline,
    /// A minijinja expression (`when:`, validate `expr`).
    Expression,
    /// The name of a file in `prompts/`.
    File,
}

/// A field path relative to the step, e.g. `["rules", "2", "regex"]`.
pub type FieldPath = Vec<String>;

/// A name this step refers to, and where it wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedRef<'a> {
    pub path: FieldPath,
    pub name: &'a str,
}

/// A template a step uses, and the variables it may read beyond the usual ones.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateRef<'a> {
    pub path: FieldPath,
    pub text: &'a str,
    pub source: TemplateSource,
    /// Variables this template sees besides `inputs`, `input`, `steps`, `vars` and `row`.
    pub extra_variables: &'static [&'static str],
}

/// What a step refers to; filled by each step type's [`StepConfig::references`].
#[derive(Debug, Default)]
pub struct References<'a> {
    pub models: Vec<(NamedRef<'a>, ModelRole)>,
    pub tools: Vec<NamedRef<'a>>,
    pub corpora: Vec<NamedRef<'a>>,
    pub agents: Vec<NamedRef<'a>>,
    /// Other steps named outside `needs` (e.g. a voting fallback).
    pub steps: Vec<NamedRef<'a>>,
    pub templates: Vec<TemplateRef<'a>>,
    pub schemas: Vec<(FieldPath, &'a SchemaSource)>,
    /// Inline JSON Schemas given as plain values (validate rules).
    pub schema_values: Vec<(FieldPath, &'a Value)>,
    /// Regular expressions to compile.
    pub regexes: Vec<(FieldPath, &'a str)>,
    /// GBNF grammars to translate.
    pub gbnf: Vec<(FieldPath, &'a str)>,
    /// Lark grammars to check.
    pub lark: Vec<(FieldPath, &'a str)>,
    /// Pairs of fields of which exactly one must be given: (the pair, whether both were given).
    pub exclusive: Vec<([&'static str; 2], bool)>,
    pub max_tokens: Option<(FieldPath, u64)>,
    pub max_tool_iterations: Option<(FieldPath, u32)>,
    /// A grammar constraint (regex, Lark, GBNF) and the model that must enforce it while decoding.
    pub grammar: Option<(FieldPath, &'a str)>,
    /// Mistakes the step type finds in its own settings: where, what, and the label.
    pub problems: Vec<(FieldPath, PlanError, &'static str)>,
}

fn path(segments: &[&str]) -> FieldPath {
    segments.iter().map(|s| s.to_string()).collect()
}

impl<'a> References<'a> {
    pub(crate) fn model(&mut self, at: &[&str], name: &'a str, role: ModelRole) {
        self.models.push((
            NamedRef {
                path: path(at),
                name,
            },
            role,
        ));
    }
    pub(crate) fn tool(&mut self, at: FieldPath, name: &'a str) {
        self.tools.push(NamedRef { path: at, name });
    }
    pub(crate) fn corpus(&mut self, at: &[&str], name: &'a str) {
        self.corpora.push(NamedRef {
            path: path(at),
            name,
        });
    }
    pub(crate) fn agent(&mut self, at: FieldPath, name: &'a str) {
        self.agents.push(NamedRef { path: at, name });
    }
    pub(crate) fn step(&mut self, at: &[&str], name: &'a str) {
        self.steps.push(NamedRef {
            path: path(at),
            name,
        });
    }
    pub(crate) fn template(&mut self, at: &[&str], text: &'a str, source: TemplateSource) {
        self.template_at(path(at), text, source, &[]);
    }
    pub(crate) fn template_at(
        &mut self,
        at: FieldPath,
        text: &'a str,
        source: TemplateSource,
        extra_variables: &'static [&'static str],
    ) {
        self.templates.push(TemplateRef {
            path: at,
            text,
            source,
            extra_variables,
        });
    }
    pub(crate) fn schema(&mut self, at: &[&str], schema: &'a SchemaSource) {
        self.schemas.push((path(at), schema));
    }
    pub(crate) fn exclusive(&mut self, pair: &[&'static str; 2], both: bool) {
        self.exclusive.push((*pair, both));
    }
    pub(crate) fn problem(&mut self, at: &[&str], error: PlanError, label: &'static str) {
        self.problems.push((path(at), error, label));
    }
}

/// What a step passes on as its output (its `input` to the step after it), as far as the plan
/// says before anything runs: `validate` refuses a connection no run could make work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputKind {
    /// Text: a JSON string.
    Text,
    /// JSON valid against the step's schema, with the top-level `type` the schema names (None:
    /// the schema names none, or is in a file).
    Json(Option<String>),
    /// A list of candidates: passages with their source and score.
    Candidates,
    /// Its own input, unchanged.
    Input,
    /// What the named tool returns (its kind decides).
    OfTool(String),
    /// Not known before the run.
    Unknown,
}

impl OutputKind {
    /// The output kind of a JSON Schema's answers: its top-level `type` when it names one.
    pub fn of_schema(schema: &SchemaSource) -> OutputKind {
        match schema {
            SchemaSource::Inline(schema) => {
                OutputKind::Json(schema.get("type").and_then(Value::as_str).map(String::from))
            }
            SchemaSource::File(_) => OutputKind::Json(None),
        }
    }
}

/// What a step takes as its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepts {
    /// Any value (templates read what they need; a check stringifies what is not text).
    Anything,
    /// A list of candidates, as a `retrieve` or `rerank` step gives.
    Candidates,
}

/// Implemented by every step config: what the step refers to, what it passes on and takes, and
/// how it is built.
pub trait StepConfig {
    fn references<'a>(&'a self, refs: &mut References<'a>);
    /// What the step passes on as its output.
    fn output(&self) -> OutputKind;
    /// What the step takes as its input: most steps read it through templates, so anything.
    fn accepts(&self) -> Accepts {
        Accepts::Anything
    }
    fn build(&self, context: &mut dyn BuildContext) -> Result<Arc<dyn StepHandler>, Failure>;
}

/// What the checks found out about a step that building it needs, so a step never searches the
/// plan itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepFacts {
    /// The query template of the nearest `retrieve` step upstream (a `rerank` step's default).
    pub upstream_query: Option<String>,
    /// Whether this step's answer is the plan's output unchanged (so it may be streamed).
    pub output_as_is: bool,
    /// The voting step this one is the fallback of: it runs only in that step's place.
    pub standby_for: Option<String>,
    /// Where a failed check of this (validate) step sends the run back to.
    pub feedback: Option<Feedback>,
}

/// What a step may ask for while its handler is built: the run-time objects its names resolve
/// to (created once per run and shared) and the facts about it.
pub trait BuildContext {
    /// The step's name.
    fn step_name(&self) -> &str;
    /// What the checks found out about the step.
    fn facts(&self) -> &StepFacts;
    /// Language model `model`'s engine.
    fn engine(&mut self, model: &str) -> Result<Arc<dyn Engine>, Failure>;
    /// The scorer of a rerank step: ONNX model `model`, or the keyword scorer without one.
    fn scorer(&mut self, model: Option<&str>) -> Result<Arc<dyn Scorer>, Failure>;
    /// The bi-encoder of a dense retrieve step; None where lexical search stands in for it.
    fn embedder(&mut self, model: &str) -> Result<Option<Arc<BiEncoder>>, Failure>;
    fn corpus(&mut self, name: &str) -> Result<Arc<Corpus>, Failure>;
    fn tool(&mut self, name: &str) -> Result<Arc<ToolRuntime>, Failure>;
    /// The tools a model may be offered (each turn offers those of them that can run then).
    fn offered_tools(&mut self, names: &[String]) -> Result<Vec<Arc<ToolRuntime>>, Failure>;
    fn agent(&mut self, name: &str) -> Result<Arc<RouteAgent>, Failure>;
    /// A JSON Schema given inline or as a file relative to the plan.
    fn schema(&self, source: &SchemaSource) -> Result<Value, Failure>;
    /// The handler of step `name`, built for running in this step's place (a voting fallback).
    fn fallback(&mut self, name: &str) -> Result<Arc<dyn StepHandler>, Failure>;
    /// Where to stream the answer, when this step's answer is streamed.
    fn stream(&self) -> Option<TokenSink>;
    /// The policy's `max_tool_iterations`, for steps that set none.
    fn policy_tool_iterations(&self) -> Option<u32>;
}
