//! Building a checked plan into a runnable pipeline — the PREPARE stage.
//!
//! Names in the plan are resolved to run-time objects here: engines for models, loaded corpora,
//! scorers, tools, prompt templates; then every step's config builds its handler. Resources are
//! created on first use and shared (one engine or ONNX session per model for every step and batch
//! row of the run), and nothing a plan declares but never uses is loaded. `--dry-run` swaps every
//! model for a scripted echo, every ONNX scorer for the keyword scorer (dense retrieval for
//! lexical search), and every tool with side effects for a stand-in that reports the call.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::Plan;
use super::model::{BuiltinTool, CorpusSpec, ModelSpec, OnnxTask, ScriptReply, ToolSpec};
use super::steps::{self as plan_steps, PromptSpec, SchemaSource};
use crate::context::{ChunkOptions, Corpus, CorpusSource, Document, JsonlOptions};
use crate::core::{Failure, FailureCode};
use crate::inference::{
    Engine, LocalModel, LocalSettings, LocalSource, Notice, OpenAiConfig, OpenAiEngine, ScriptRule,
    ScriptedConfig, ScriptedEngine, TokenSink, store,
};
use crate::orchestrate::steps::{AgentAction, Prompt, PromptSource, RouteAgent, Sampling};
use crate::orchestrate::tools::{CommandTemplate, SideEffects, ToolAction, ToolRuntime};
use crate::orchestrate::{Pipeline, StepHandler, StepNode};
use crate::prompt::Templates;
use crate::rerank::{
    BiEncoder, CrossEncoder, KeywordScorer, OnnxConfig, OnnxModel, OnnxSource, Scorer,
};
use crate::tool::Builtin;
use crate::validate::RetryPolicy;

/// How to build.
#[derive(Clone, Default)]
pub struct BuildOptions {
    /// Replace models, ONNX scorers and side-effecting tools with deterministic stand-ins.
    pub dry_run: bool,
    /// Where to tell the user about one-time work (pulling or loading a model).
    pub notice: Option<Notice>,
    /// Where the final step streams its answer, when it is an `infer` step whose output is the
    /// plan's output.
    pub stream: Option<TokenSink>,
    /// Say (through `notice`) which tools are hidden from models and why.
    pub verbose: bool,
}

/// Most sequences a local model decodes together (batch rows and redundant candidates).
const LOCAL_MAX_BATCH: usize = 8;

/// Pairs or texts per ONNX inference when the plan sets no `batch_size`.
const DEFAULT_ONNX_BATCH: usize = 32;
/// The longest input of the embedded MiniLM, as its sentence-transformers configuration sets it.
const DEFAULT_SCORER_MAX_LENGTH: usize = 256;

/// Default timeout of a command tool.
const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);
/// Default output cap of a command tool.
const DEFAULT_TOOL_OUTPUT: usize = 64 * 1024;

/// Resolves names to shared run-time objects while steps are built.
pub struct Builder<'p> {
    plan: &'p Plan,
    options: BuildOptions,
    dir: PathBuf,
    engines: HashMap<String, Arc<dyn Engine>>,
    scorers: HashMap<String, OnnxScorer>,
    corpora: HashMap<String, Arc<Corpus>>,
    tools: HashMap<String, Arc<ToolRuntime>>,
    /// The step being built.
    pub step: usize,
}

impl Plan {
    /// Builds the runnable pipeline.
    pub fn build(&self, options: BuildOptions) -> Result<Pipeline, Failure> {
        let dir = self.dir();
        let templates = Arc::new(Templates::new(super::prompts_dir(&dir)));
        let mut builder = Builder {
            plan: self,
            options,
            dir,
            engines: HashMap::new(),
            scorers: HashMap::new(),
            corpora: HashMap::new(),
            tools: HashMap::new(),
            step: 0,
        };
        let standby = self.standby_steps();
        let mut steps = Vec::with_capacity(self.raw.steps.len());
        for (index, step) in self.raw.steps.iter().enumerate() {
            builder.step = index;
            let common = step.common();
            let handler = step.build(&mut builder)?;
            let upstream: Vec<usize> = self.graph.ancestors(index).into_iter().collect();
            let reads = match &self.reads[index] {
                Some(reads) => reads
                    .iter()
                    .copied()
                    .filter(|r| upstream.contains(r))
                    .collect(),
                None => upstream.clone(),
            };
            steps.push(StepNode {
                name: common.name.clone(),
                kind: step.step_type().name(),
                needs: self.graph.predecessors(index),
                upstream,
                reads,
                when: common.when.clone(),
                retry: common
                    .retry
                    .as_ref()
                    .map_or_else(RetryPolicy::default, |r| RetryPolicy {
                        max_attempts: r.max_attempts,
                        backoff: r.backoff.map_or(Duration::ZERO, |b| b.get()),
                    }),
                timeout: common.timeout.map(|t| t.get()),
                handler,
                standby_for: standby.get(common.name.as_str()).map(|o| o.to_string()),
            });
        }
        Ok(Pipeline {
            name: self.raw.name.clone(),
            steps,
            output: self.raw.output.clone(),
            vars: Value::Object(
                self.raw
                    .vars
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
            templates,
            inputs: self.raw.inputs.clone(),
            step_timeout: self.policy.timeout_per_step.as_ref().map(|l| l.value.get()),
        })
    }

    /// Voting fallbacks and the voting step each stands by for.
    fn standby_steps(&self) -> HashMap<&str, &str> {
        self.raw
            .steps
            .iter()
            .filter_map(|s| match s {
                plan_steps::RawStep::Redundant(r) => r
                    .voting
                    .fallback
                    .as_deref()
                    .map(|fallback| (fallback, r.common.name.as_str())),
                _ => None,
            })
            .collect()
    }

    /// The directory paths in the plan are relative to.
    pub fn dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }
}

impl Builder<'_> {
    /// The engine of model `name`, created on first use.
    pub fn engine(&mut self, name: &str) -> Result<Arc<dyn Engine>, Failure> {
        if let Some(engine) = self.engines.get(name) {
            return Ok(Arc::clone(engine));
        }
        let spec = self.model(name)?;
        let engine: Arc<dyn Engine> = match spec {
            _ if self.options.dry_run => Arc::new(ScriptedEngine::new(ScriptedConfig::echo())),
            ModelSpec::Scripted {
                replies,
                rules,
                echo,
                fail_first,
                stall,
            } => {
                let rules = rules
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
                                    format!("model `{name}`: {e}"),
                                )
                            })?;
                        Ok(ScriptRule {
                            contains: rule.contains.clone(),
                            matches,
                            reply: rule.reply.to_engine(),
                        })
                    })
                    .collect::<Result<Vec<_>, Failure>>()?;
                Arc::new(ScriptedEngine::new(ScriptedConfig {
                    rules,
                    replies: replies.iter().map(ScriptReply::to_engine).collect(),
                    echo: *echo,
                    fail_first: fail_first.unwrap_or(0),
                    stall: stall.map(|s| s.get()),
                }))
            }
            ModelSpec::Mistralrs {
                source,
                context_length,
                decoder_constraints,
            } => {
                let source = match source.as_deref() {
                    None => LocalSource::Embedded(&store::DEFAULT_LLM),
                    Some(text) => LocalSource::parse(text, &self.dir).map_err(|reason| {
                        Failure::new(
                            FailureCode::ConfigInvalidInput,
                            format!("model `{name}`: {reason}"),
                        )
                    })?,
                };
                let settings = LocalSettings {
                    max_batch: LOCAL_MAX_BATCH,
                    context_length: *context_length,
                    decoder_constraints: decoder_constraints.unwrap_or(true),
                };
                LocalModel::new(source, settings, self.notice()).shared()
            }
            ModelSpec::Openai {
                base_url,
                model,
                api_key_env,
                timeout,
            } => {
                let api_key = match api_key_env {
                    Some(var) => Some(std::env::var(var).map_err(|_| {
                        Failure::new(
                            FailureCode::ConfigInvalidInput,
                            format!(
                                "model `{name}` reads its API key from ${var}, which is not set"
                            ),
                        )
                        .with_help(format!("export {var}=… before running"))
                    })?),
                    None => None,
                };
                let mut config = OpenAiConfig::new(base_url.clone(), model.clone());
                config.api_key = api_key;
                if let Some(timeout) = timeout {
                    config.timeout = timeout.get();
                }
                Arc::new(OpenAiEngine::new(config)?)
            }
            other => return Err(not_available(name, other.kind_name())),
        };
        self.engines.insert(name.to_string(), Arc::clone(&engine));
        Ok(engine)
    }

    fn notice(&self) -> Notice {
        self.options
            .notice
            .clone()
            .unwrap_or_else(|| Arc::new(|_: &str| {}))
    }

    /// The scorer of a rerank step: model `name`, or the keyword scorer when none is named (or
    /// in a dry run).
    pub fn scorer(&mut self, name: Option<&str>) -> Result<Arc<dyn Scorer>, Failure> {
        match name {
            None => Ok(Arc::new(KeywordScorer)),
            Some(_) if self.options.dry_run => Ok(Arc::new(KeywordScorer)),
            Some(name) => Ok(match self.onnx(name)? {
                OnnxScorer::Cross(scorer) => scorer,
                OnnxScorer::Bi(scorer) => scorer,
            }),
        }
    }

    /// The bi-encoder of a dense retrieve step; none in a dry run, where lexical search stands in.
    pub fn embedder(&mut self, name: &str) -> Result<Option<Arc<BiEncoder>>, Failure> {
        if self.options.dry_run {
            return Ok(None);
        }
        match self.onnx(name)? {
            OnnxScorer::Bi(encoder) => Ok(Some(encoder)),
            OnnxScorer::Cross(_) => Err(Failure::new(
                FailureCode::ConfigNoEngine,
                format!("model `{name}` is a cross-encoder; dense retrieval needs a bi-encoder"),
            )),
        }
    }

    /// ONNX model `name`, created on first use (its files are read on its first call).
    fn onnx(&mut self, name: &str) -> Result<OnnxScorer, Failure> {
        if let Some(scorer) = self.scorers.get(name) {
            return Ok(scorer.clone());
        }
        let ModelSpec::Onnx {
            task,
            source,
            tokenizer,
            batch_size,
            threads,
            max_length,
            sigmoid,
        } = self.model(name)?
        else {
            let kind = self.model(name)?.kind_name();
            return Err(Failure::new(
                FailureCode::ConfigNoEngine,
                format!("model `{name}` is of kind `{kind}`, not an ONNX scorer"),
            ));
        };
        // The checker refuses `source: default` with `task: cross-encoder`.
        let (source, default_max_length) = if source == "default" {
            (
                OnnxSource::Embedded(&store::DEFAULT_SCORER),
                Some(DEFAULT_SCORER_MAX_LENGTH),
            )
        } else {
            let path = self.dir.join(source);
            let model = if path.is_dir() {
                path.join("model.onnx")
            } else {
                path
            };
            let tokenizer = match tokenizer {
                Some(file) => self.dir.join(file),
                None => model.with_file_name("tokenizer.json"),
            };
            (OnnxSource::Files { model, tokenizer }, None)
        };
        let config = OnnxConfig {
            source,
            batch_size: batch_size.map_or(DEFAULT_ONNX_BATCH, |b| b as usize),
            threads: threads.map_or_else(
                || std::thread::available_parallelism().map_or(1, |n| n.get()),
                |t| t as usize,
            ),
            max_length: max_length.map(|m| m as usize).or(default_max_length),
        };
        let model = OnnxModel::new(config, self.notice());
        let scorer = match task {
            OnnxTask::CrossEncoder => {
                OnnxScorer::Cross(Arc::new(CrossEncoder::new(model, sigmoid.unwrap_or(true))))
            }
            OnnxTask::BiEncoder => OnnxScorer::Bi(Arc::new(BiEncoder::new(model))),
        };
        self.scorers.insert(name.to_string(), scorer.clone());
        Ok(scorer)
    }

    fn model(&self, name: &str) -> Result<&ModelSpec, Failure> {
        self.plan.raw.models.get(name).ok_or_else(|| {
            Failure::new(
                FailureCode::ConfigNoEngine,
                format!("model `{name}` is not declared"),
            )
        })
    }

    /// Corpus `name`, loaded on first use.
    pub fn corpus(&mut self, name: &str) -> Result<Arc<Corpus>, Failure> {
        if let Some(corpus) = self.corpora.get(name) {
            return Ok(Arc::clone(corpus));
        }
        let spec = self.plan.raw.corpora.get(name).ok_or_else(|| {
            Failure::new(
                FailureCode::ConfigFileError,
                format!("corpus `{name}` is not declared"),
            )
        })?;
        let corpus = Arc::new(Corpus::load(&corpus_source(spec, &self.dir))?);
        self.corpora.insert(name.to_string(), Arc::clone(&corpus));
        Ok(corpus)
    }

    /// Tool `name`, built on first use.
    pub fn tool(&mut self, name: &str) -> Result<Arc<ToolRuntime>, Failure> {
        if let Some(tool) = self.tools.get(name) {
            return Ok(Arc::clone(tool));
        }
        let spec = self.plan.raw.tools.get(name).ok_or_else(|| {
            Failure::new(
                FailureCode::ToolNotFound,
                format!("tool `{name}` is not declared"),
            )
        })?;
        let tool = Arc::new(self.tool_runtime(name, spec)?);
        self.tools.insert(name.to_string(), Arc::clone(&tool));
        Ok(tool)
    }

    fn tool_runtime(&self, name: &str, spec: &ToolSpec) -> Result<ToolRuntime, Failure> {
        match spec {
            ToolSpec::Command {
                description,
                argv,
                parameters,
                timeout,
                max_output_bytes,
                working_dir,
                env,
                allow_dash_values,
                side_effects,
                idempotent,
            } => {
                let side_effects = *side_effects;
                let action = if self.options.dry_run
                    && matches!(side_effects, SideEffects::Write | SideEffects::External)
                {
                    ToolAction::DryRun
                } else {
                    ToolAction::Command(CommandTemplate {
                        argv: argv.clone(),
                        timeout: timeout.map_or(DEFAULT_TOOL_TIMEOUT, |t| t.get()),
                        max_output_bytes: max_output_bytes.map_or(DEFAULT_TOOL_OUTPUT, |m| {
                            usize::try_from(m).unwrap_or(usize::MAX)
                        }),
                        working_dir: Some(self.dir.join(working_dir.as_deref().unwrap_or("."))),
                        env_allow: env.clone(),
                        allow_dash_values: *allow_dash_values,
                    })
                };
                ToolRuntime::new(
                    name.to_string(),
                    description.clone(),
                    parameters.clone().unwrap_or(Value::Null),
                    side_effects,
                    *idempotent,
                    action,
                )
            }
            ToolSpec::Builtin {
                builtin,
                description,
                root,
            } => {
                let builtin = match builtin {
                    BuiltinTool::Calculator => Builtin::Calculator,
                    BuiltinTool::CurrentTime => Builtin::CurrentTime,
                    BuiltinTool::ReadFile => Builtin::ReadFile {
                        root: self.dir.join(root.as_deref().unwrap_or(".")),
                    },
                };
                let (own_description, parameters) = builtin.definition();
                let side_effects = match builtin {
                    Builtin::Calculator => SideEffects::None,
                    Builtin::ReadFile { .. } | Builtin::CurrentTime => SideEffects::Read,
                };
                ToolRuntime::new(
                    name.to_string(),
                    description
                        .clone()
                        .unwrap_or_else(|| own_description.to_string()),
                    parameters,
                    side_effects,
                    true,
                    ToolAction::Builtin(builtin),
                )
            }
        }
    }

    /// Another step's handler, built again (for a voting fallback, which runs in the place of
    /// the step that hands over to it).
    pub fn step_handler(&mut self, name: &str) -> Result<Arc<dyn StepHandler>, Failure> {
        let index = self
            .plan
            .raw
            .steps
            .iter()
            .position(|s| s.common().name == name)
            .ok_or_else(|| {
                Failure::new(
                    FailureCode::ConfigInvalidInput,
                    format!("no step `{name}` to hand over to"),
                )
            })?;
        let building = std::mem::replace(&mut self.step, index);
        let handler = self.plan.raw.steps[index].build(self);
        self.step = building;
        handler
    }

    /// The tools a model may be offered (agent steps, the tool phase of structured steps): those
    /// that can run here. The others are hidden from the model — a tool it cannot call only
    /// leads it astray — and, with `verbose`, the notice says why.
    pub fn offered_tools(&mut self, names: &[String]) -> Result<Vec<Arc<ToolRuntime>>, Failure> {
        let mut offered = Vec::new();
        for name in names {
            let tool = self.tool(name)?;
            match tool.action.unavailable() {
                Some(reason) => {
                    if self.options.verbose {
                        (self.notice())(&format!(
                            "step `{}`: tool `{name}` is hidden from the model: {reason}",
                            self.step_name()
                        ));
                    }
                }
                None => offered.push(tool),
            }
        }
        Ok(offered)
    }

    /// Agent `name` of a route step.
    pub fn agent(&mut self, name: &str) -> Result<Arc<RouteAgent>, Failure> {
        let spec = self.plan.raw.agents.get(name).ok_or_else(|| {
            Failure::new(
                FailureCode::ConfigInvalidInput,
                format!("agent `{name}` is not declared"),
            )
        })?;
        let action = match (&spec.tool, &spec.plan, &spec.template, &spec.model) {
            (Some(tool), _, _, _) => AgentAction::Tool(self.tool(tool)?),
            (None, Some(file), _, _) => self.sub_plan(name, file)?,
            (None, None, Some(template), Some(model)) => AgentAction::Model {
                template: template.clone(),
                engine: self.engine(model)?,
            },
            _ => {
                return Err(Failure::new(
                    FailureCode::ConfigNoEngine,
                    format!("agent `{name}`: a `template` agent needs a `model`"),
                ));
            }
        };
        Ok(Arc::new(RouteAgent {
            name: name.to_string(),
            description: spec.description.clone(),
            parameters: spec.parameters.clone().unwrap_or(Value::Null),
            action,
        }))
    }

    /// A `plan:` agent: the plan file loaded and checked under the policy in force here (as
    /// `validate` checked it), and built like this one (same options), run with the agent's
    /// arguments as its inputs.
    fn sub_plan(&self, agent: &str, file: &str) -> Result<AgentAction, Failure> {
        let path = self.dir.join(file);
        let enclosing = [super::canonical(&self.plan.path)];
        let plan = super::load_within(&path, Some(&self.plan.handed_down_policy()), &enclosing)
            .map_err(|diagnostics| {
                let first = diagnostics
                    .first()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                Failure::new(
                    FailureCode::ConfigInvalidInput,
                    format!(
                        "agent `{agent}`: {} is not a valid plan: {first}",
                        path.display()
                    ),
                )
                .with_help(format!("run `pagantic validate {}`", path.display()))
            })?;
        let options = BuildOptions {
            stream: None,
            ..self.options.clone()
        };
        Ok(AgentAction::Plan(Arc::new(plan.build(options)?)))
    }

    /// A JSON Schema given inline or as a file relative to the plan.
    pub fn schema(&self, source: &SchemaSource) -> Result<Value, Failure> {
        match source {
            SchemaSource::Inline(map) => Ok(Value::Object(
                map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            )),
            SchemaSource::File(file) => {
                let path = self.dir.join(file);
                std::fs::read_to_string(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()))
                    .map_err(|reason| {
                        Failure::new(
                            FailureCode::ConfigFileError,
                            format!("cannot load schema {}: {reason}", path.display()),
                        )
                    })
            }
        }
    }

    /// The query template of the nearest retrieve step upstream of the step being built.
    pub fn upstream_query(&self) -> Option<String> {
        let mut upstream: Vec<usize> = self.plan.graph.ancestors(self.step).into_iter().collect();
        upstream.sort_unstable_by(|a, b| b.cmp(a));
        upstream
            .into_iter()
            .find_map(|i| match &self.plan.raw.steps[i] {
                plan_steps::RawStep::Retrieve(retrieve) => Some(retrieve.query.clone()),
                _ => None,
            })
    }

    /// The policy's `max_tool_iterations`, the default for agent steps that set none.
    pub fn policy_tool_iterations(&self) -> Option<u32> {
        self.plan
            .policy
            .max_tool_iterations
            .as_ref()
            .map(|l| l.value)
    }

    /// The token sink for the step being built, when it is the one whose answer is streamed.
    pub fn stream(&self) -> Option<TokenSink> {
        let last = self.plan.raw.steps.len().checked_sub(1)?;
        let name = &self.plan.raw.steps[last].common().name;
        let output_is_last = match &self.plan.raw.output {
            None => true,
            Some(template) => {
                template.split_whitespace().collect::<String>()
                    == format!("{{{{steps.{name}.output}}}}")
            }
        };
        (self.step == last && output_is_last)
            .then(|| self.options.stream.clone())
            .flatten()
    }

    /// The name of the step being built.
    pub fn step_name(&self) -> &str {
        &self.plan.raw.steps[self.step].common().name
    }
}

/// A built ONNX model, by what it computes.
#[derive(Clone)]
enum OnnxScorer {
    Cross(Arc<CrossEncoder>),
    Bi(Arc<BiEncoder>),
}

/// A model kind this build cannot run (yet): a clear configuration failure, never a panic.
fn not_available(name: &str, kind: &str) -> Failure {
    Failure::new(
        FailureCode::ConfigNoEngine,
        format!("model `{name}` is of kind `{kind}`, which this build of pagantic cannot run yet"),
    )
    .with_help("run with --dry-run to replace every model with a scripted echo, or declare a `kind: scripted` model")
}

/// The run-time prompt of a step.
pub fn prompt(spec: &PromptSpec) -> Prompt {
    let user = match (&spec.prompt, &spec.template) {
        (Some(file), _) => PromptSource::File(file.clone()),
        (None, Some(text)) => PromptSource::Inline(text.clone()),
        // The checker guarantees one of the two; an empty prompt is the harmless fallback.
        (None, None) => PromptSource::Inline(String::new()),
    };
    Prompt {
        user,
        system: spec.system.clone(),
    }
}

/// The run-time sampling settings of a step.
pub fn sampling(spec: &plan_steps::Sampling) -> Sampling {
    Sampling {
        max_tokens: spec.max_tokens,
        temperature: spec.temperature,
        seed: spec.seed,
        stop: spec.stop.clone().unwrap_or_default(),
    }
}

fn corpus_source(spec: &CorpusSpec, dir: &Path) -> CorpusSource {
    CorpusSource {
        base_dir: dir.to_path_buf(),
        file_patterns: spec.files.clone(),
        documents: spec
            .documents
            .iter()
            .enumerate()
            .map(|(i, d)| Document {
                content: d.content.clone(),
                source: d
                    .source
                    .clone()
                    .unwrap_or_else(|| format!("document {}", i + 1)),
                metadata: d
                    .metadata
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            })
            .collect(),
        jsonl: spec.jsonl.as_ref().map(|j| JsonlOptions {
            // Relative to the plan: loading joins it to `base_dir`.
            path: PathBuf::from(&j.path),
            content_field: j.content_field.clone().unwrap_or_else(|| "content".into()),
            source_field: j.source_field.clone(),
        }),
        chunk: spec.chunk.as_ref().map(|c| ChunkOptions {
            max_chars: usize::try_from(c.max_chars).unwrap_or(usize::MAX),
            by: c.by,
        }),
    }
}
