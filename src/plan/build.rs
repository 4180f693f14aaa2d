//! Building a checked plan into a runnable pipeline — the PREPARE stage.
//!
//! Names in the plan are resolved to run-time objects here: engines for models, loaded corpora,
//! scorers, tools, prompt templates; then every step's config builds its handler. Resources are
//! created on first use and shared (one engine or ONNX session per model for every step and batch
//! row of the run), and nothing a plan declares but never uses is loaded. `--dry-run` swaps every
//! model for a scripted echo, every ONNX scorer for the keyword scorer (dense retrieval for
//! lexical search), and every tool with side effects for a stand-in that reports the call. A
//! language model with a declared `price` is wrapped so that its calls say what they cost. Plans
//! this one runs — a `plan:` agent's, the `reduce:` plan a batch runs per group — are loaded
//! and built with it, under its policy and with its options.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};

use super::Plan;
use super::models::{BuiltModel, ModelEnv};
use super::raw::CorpusSpec;
use super::steps::{BuildContext, ModelRole, OnError, SchemaSource, StepFacts};
use super::tools::{ToolEnv, ToolKind};
use crate::cache::{CachedEngine, CallCache};
use crate::core::{Cost, Failure, FailureCode, Memo};
use crate::corpora::{ChunkOptions, Corpus, CorpusSource, Document, JsonlOptions};
use crate::inference::{Declared, Engine, ScriptedConfig, ScriptedEngine, TokenSink};
use crate::model_store::Notice;
use crate::orchestrate::steps::{AgentAction, RouteAgent};
use crate::orchestrate::tools::{Approval, Approvals, ToolAction, ToolCache, ToolRuntime};
use crate::orchestrate::{GroupBy, Pipeline, Reduce, Resources, StepHandler, StepNode};
use crate::prompt::Templates;
use crate::rerank::{BiEncoder, KeywordScorer, Scorer};
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
    /// The call cache, put in front of every language model and step that does not opt out
    /// (`cache: false`); never in a dry run, whose stand-ins' answers are not worth keeping.
    pub cache: Option<Arc<CallCache>>,
    /// Who approves the calls of tools marked `approval: required` (default: nobody, they
    /// fail with TOOL_APPROVAL_REQUIRED); a dry run's stand-ins need no approval.
    pub approvals: Approvals,
}

/// Resolves names to shared run-time objects while steps are built; each step sees it only as
/// its [`BuildContext`].
struct Builder<'p> {
    plan: &'p Plan,
    /// What the session's builds share: its MCP servers, local models' loads, file hashes.
    resources: &'p Resources,
    options: BuildOptions,
    dir: PathBuf,
    models: HashMap<String, BuiltModel>,
    /// Language models behind the call cache, made on first use by a step that may use it.
    cached_engines: HashMap<String, Arc<dyn Engine>>,
    corpora: HashMap<String, Arc<Corpus>>,
    tools: HashMap<String, Arc<ToolRuntime>>,
    /// The step being built.
    step: usize,
}

impl<'p> Builder<'p> {
    /// A builder for `plan` that has resolved no name yet.
    fn new(plan: &'p Plan, resources: &'p Resources, options: BuildOptions) -> Self {
        Builder {
            plan,
            resources,
            options,
            dir: plan.dir(),
            models: HashMap::new(),
            cached_engines: HashMap::new(),
            corpora: HashMap::new(),
            tools: HashMap::new(),
            step: 0,
        }
    }
}

impl Plan {
    /// Builds the runnable pipeline with the session's `resources` (the MCP servers its tools
    /// reach, the loads its local models share).
    pub fn build(&self, resources: &Resources, options: BuildOptions) -> Result<Pipeline, Failure> {
        let templates = Arc::new(Templates::new(super::prompts_dir(&self.dir())));
        let mut builder = Builder::new(self, resources, options);
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
                standby_for: self.facts[index].standby_for.clone(),
                continue_on_error: common.on_error == OnError::Continue,
                feedback: self.facts[index].feedback,
            });
        }
        let reduce = builder.reduce()?;
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
            max_cost: self
                .policy
                .max_cost
                .as_ref()
                .map(|l| Cost::from_amount(l.value)),
            trace_shape: OnceLock::new(),
            reduce,
        })
    }

    /// The scorer a test's `similar` assertion embeds with: the plan's bi-encoder `model`, else
    /// the embedded all-MiniLM-L6-v2; on `--dry-run`, the keyword scorer.
    pub fn build_similarity(
        &self,
        model: Option<&str>,
        resources: &Resources,
        options: BuildOptions,
    ) -> Result<Arc<dyn Scorer>, Failure> {
        if options.dry_run {
            return Ok(Arc::new(KeywordScorer));
        }
        let notice = options
            .notice
            .clone()
            .unwrap_or_else(|| Arc::new(|_: &str| {}));
        let Some(name) = model else {
            return Ok(Arc::new(super::models::onnx::embedded_bi_encoder(notice)));
        };
        let mut builder = Builder::new(self, resources, options);
        match builder.built_model(name)? {
            BuiltModel::Bi(encoder) => Ok(encoder),
            _ => Err(wrong_kind(name, "a bi-encoder")),
        }
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
    /// Model `name`, built on first use and shared by every step after.
    fn built_model(&mut self, name: &str) -> Result<BuiltModel, Failure> {
        if let Some(model) = self.models.get(name) {
            return Ok(model.clone());
        }
        let spec = self.plan.raw.models.get(name).ok_or_else(|| {
            Failure::new(
                FailureCode::ConfigNoEngine,
                format!("model `{name}` is not declared"),
            )
        })?;
        let model = if self.options.dry_run && spec.kind().serves(ModelRole::Llm) {
            BuiltModel::Language(Arc::new(ScriptedEngine::new(ScriptedConfig::echo())))
        } else {
            spec.kind()
                .build(&self.model_env(name, spec.kind().cached()))?
        };
        // A language model's calls name its key; a declared price stays with the model in a
        // dry run too: the stand-in's usage then gives a (rough) cost, and `max_cost` is
        // exercised as in the real run.
        let model = match model {
            BuiltModel::Language(engine) => {
                BuiltModel::Language(Arc::new(Declared::new(engine, name, spec.kind().price())))
            }
            model => model,
        };
        self.models.insert(name.to_string(), model.clone());
        Ok(model)
    }

    /// What building model `name` may use; the call cache as its memo when the model does not
    /// opt out (`cache: false`) and the run is not a dry run.
    fn model_env<'a>(&'a self, name: &'a str, cached: bool) -> ModelEnv<'a> {
        ModelEnv {
            name,
            dir: &self.dir,
            notice: self.notice(),
            verbose: self.options.verbose,
            memo: match &self.options.cache {
                Some(cache) if cached && !self.options.dry_run => {
                    Some(Arc::clone(cache) as Arc<dyn Memo>)
                }
                _ => None,
            },
            replay_only: cached
                && !self.options.dry_run
                && self
                    .options
                    .cache
                    .as_ref()
                    .is_some_and(|cache| cache.only()),
            loads: &self.resources.loads,
        }
    }

    /// Where tool `name` keeps its results: the call cache, when the plan marked the tool
    /// `cache: true` (which `validate` allows only for a tool whose results may be reused), the
    /// cache is on and this is not a dry run. Its identity holds the SHA-256 of the files it
    /// names, so editing one runs the tool again.
    fn tool_cache(&self, name: &str, tool: &dyn ToolKind) -> Option<ToolCache> {
        let cache = self.options.cache.as_ref()?;
        if !tool.cache() || tool.uncacheable().is_some() || self.options.dry_run {
            return None;
        }
        let files: BTreeMap<String, Option<String>> = tool
            .files(&self.dir)
            .into_iter()
            .map(|path| {
                let sha256 = cache.file_sha256(&path);
                let name = path.strip_prefix(&self.dir).unwrap_or(&path);
                (name.display().to_string(), sha256)
            })
            .collect();
        Some(ToolCache {
            cache: Arc::clone(cache),
            identity: json!({ "tool": name, "definition": tool.identity(), "files": files }),
        })
    }

    fn notice(&self) -> Notice {
        self.options
            .notice
            .clone()
            .unwrap_or_else(|| Arc::new(|_: &str| {}))
    }

    /// A `plan:` agent: the plan file loaded and checked under the policy in force here (as
    /// `validate` checked it), and built like this one (same options), run with the agent's
    /// arguments as its inputs.
    fn sub_plan(&self, agent: &str, file: &str) -> Result<AgentAction, Failure> {
        let path = self.dir.join(file);
        let plan = self.nested_plan(&path).map_err(|diagnostics| {
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
        Ok(AgentAction::Plan(Arc::new(
            plan.build(self.resources, self.nested_options())?,
        )))
    }

    /// The plan's `reduce:`, loaded and built as a `plan:` agent's plan is.
    fn reduce(&self) -> Result<Option<Reduce>, Failure> {
        let Some(spec) = &self.plan.raw.reduce else {
            return Ok(None);
        };
        let path = self.dir.join(&spec.plan);
        let plan = self.nested_plan(&path).map_err(|diagnostics| {
            Failure::new(
                FailureCode::ConfigInvalidInput,
                format!(
                    "the reduce plan {} is not valid ({} problems)",
                    path.display(),
                    diagnostics.len()
                ),
            )
            .with_help(format!(
                "see `pagantic validate {}`",
                self.plan.path.display()
            ))
        })?;
        let pipeline = Arc::new(plan.build(self.resources, self.nested_options())?);
        Ok(Some(Reduce {
            pipeline,
            group_by: GroupBy {
                key: spec.group_by.clone(),
                skip_missing_key: spec.skip_missing_key,
                fold: spec.fold,
            },
            plan_sha256: Box::new(move |resources| super::lock::plan_sha256(&plan, resources)),
        }))
    }

    /// A plan this one runs (a `plan:` agent's, the `reduce:` plan), loaded and checked under
    /// the policy in force here, as `validate` checked it.
    fn nested_plan(&self, path: &Path) -> Result<Plan, Vec<super::Diagnostic>> {
        let enclosing = [super::canonical(&self.plan.path)];
        super::load_within(path, Some(&self.plan.handed_down_policy()), &enclosing)
    }

    /// How a plan this one runs is built: as this one, without streaming its answer.
    fn nested_options(&self) -> BuildOptions {
        BuildOptions {
            stream: None,
            ..self.options.clone()
        }
    }

    /// The tools entry `name` offers a model: itself, or the several its kind offers (an MCP
    /// server's allowed tools).
    fn tool_set(&mut self, name: &str) -> Result<Vec<Arc<ToolRuntime>>, Failure> {
        let env = ToolEnv {
            name,
            dir: &self.dir,
            dry_run: self.options.dry_run,
            mcp: &self.resources.mcp,
            sandboxes: &self.resources.sandboxes,
        };
        match self
            .plan
            .raw
            .tools
            .get(name)
            .and_then(|spec| spec.kind().build_set(&env))
        {
            Some(set) => {
                let set = set?;
                for tool in &set {
                    self.contained(tool)?;
                }
                Ok(set.into_iter().map(Arc::new).collect())
            }
            None => Ok(vec![self.tool(name)?]),
        }
    }

    /// Refuses a tool that starts processes this machine cannot sandbox as it should, under a
    /// policy with `require_sandbox: true`: it would run with less than its `requires` say.
    fn contained(&self, tool: &ToolRuntime) -> Result<(), Failure> {
        let Some(why) = self.plan.policy.sandbox_refusal(tool.enforcement()) else {
            return Ok(());
        };
        Err(Failure::new(
            FailureCode::ToolNotAllowed,
            format!("tool `{}` cannot be sandboxed here: {why}", tool.name),
        )
        .with_help("run it on a machine that allows what is missing, declare what it needs in `requires`, or drop `require_sandbox`; `pagantic tools PLAN` shows what this machine enforces")
        .retryable(false))
    }
}

/// A model of the wrong kind for where it is used (the checks prevent this for a valid plan).
fn wrong_kind(name: &str, needed: &str) -> Failure {
    Failure::new(
        FailureCode::ConfigNoEngine,
        format!("model `{name}` is not {needed}"),
    )
}

impl BuildContext for Builder<'_> {
    fn step_name(&self) -> &str {
        &self.plan.raw.steps[self.step].common().name
    }

    fn facts(&self) -> &StepFacts {
        &self.plan.facts[self.step]
    }

    /// The model's engine, behind the call cache unless the cache is off, this is a dry run,
    /// or the model or the step being built says `cache: false`.
    fn engine(&mut self, model: &str) -> Result<Arc<dyn Engine>, Failure> {
        let engine = match self.built_model(model)? {
            BuiltModel::Language(engine) => engine,
            _ => return Err(wrong_kind(model, "a language model")),
        };
        let model_opts_in = self
            .plan
            .raw
            .models
            .get(model)
            .is_some_and(|spec| spec.kind().cached());
        let step_opts_in = self.plan.raw.steps[self.step].common().cache != Some(false);
        match &self.options.cache {
            Some(cache) if !self.options.dry_run && model_opts_in && step_opts_in => Ok(self
                .cached_engines
                .entry(model.to_string())
                .or_insert_with(|| Arc::new(CachedEngine::new(engine, Arc::clone(cache))))
                .clone()),
            _ => Ok(engine),
        }
    }

    fn scorer(&mut self, model: Option<&str>) -> Result<Arc<dyn Scorer>, Failure> {
        match model {
            Some(name) if !self.options.dry_run => match self.built_model(name)? {
                BuiltModel::Cross(scorer) => Ok(scorer),
                BuiltModel::Bi(scorer) => Ok(scorer),
                BuiltModel::Language(_) => Err(wrong_kind(name, "an ONNX scorer")),
            },
            _ => Ok(Arc::new(KeywordScorer)),
        }
    }

    fn embedder(&mut self, model: &str) -> Result<Option<Arc<BiEncoder>>, Failure> {
        if self.options.dry_run {
            return Ok(None);
        }
        match self.built_model(model)? {
            BuiltModel::Bi(encoder) => Ok(Some(encoder)),
            _ => Err(wrong_kind(model, "a bi-encoder")),
        }
    }

    fn corpus(&mut self, name: &str) -> Result<Arc<Corpus>, Failure> {
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

    fn tool(&mut self, name: &str) -> Result<Arc<ToolRuntime>, Failure> {
        if let Some(tool) = self.tools.get(name) {
            return Ok(Arc::clone(tool));
        }
        let spec = self.plan.raw.tools.get(name).ok_or_else(|| {
            Failure::new(
                FailureCode::ToolNotFound,
                format!("tool `{name}` is not declared"),
            )
        })?;
        let env = ToolEnv {
            name,
            dir: &self.dir,
            dry_run: self.options.dry_run,
            mcp: &self.resources.mcp,
            sandboxes: &self.resources.sandboxes,
        };
        let mut tool = spec.kind().build(&env)?;
        self.contained(&tool)?;
        if spec.kind().access().approval == Approval::Required
            && !matches!(tool.action, ToolAction::DryRun)
        {
            tool = tool.approved_by(self.options.approvals.clone());
        }
        let tool = Arc::new(match self.tool_cache(name, spec.kind()) {
            Some(cache) => tool.caching(cache),
            None => tool,
        });
        self.tools.insert(name.to_string(), Arc::clone(&tool));
        Ok(tool)
    }

    /// The tools a model may be offered. Those that cannot run now are hidden from it at each
    /// turn — a tool it cannot call only leads it astray — and, with `verbose`, the notice says
    /// why.
    fn offered_tools(&mut self, names: &[String]) -> Result<Vec<Arc<ToolRuntime>>, Failure> {
        let mut offered = Vec::new();
        for name in names {
            for tool in self.tool_set(name)? {
                // Offered while it can run: the step checks again each time it lists its tools.
                if let Some(reason) = tool.action.unavailable()
                    && self.options.verbose
                {
                    (self.notice())(&format!(
                        "step `{}`: tool `{}` is hidden from the model: {reason}",
                        self.step_name(),
                        tool.name
                    ));
                }
                offered.push(tool);
            }
        }
        Ok(offered)
    }

    fn agent(&mut self, name: &str) -> Result<Arc<RouteAgent>, Failure> {
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

    fn schema(&self, source: &SchemaSource) -> Result<Value, Failure> {
        match source {
            SchemaSource::Inline(map) => Ok(Value::Object(
                map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            )),
            SchemaSource::File(file) => {
                let path = self.dir.join(file);
                crate::core::file::read_bounded(&path, crate::core::file::TEXT_LIMIT)
                    .map_err(|e| e.reason())
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

    fn fallback(&mut self, name: &str) -> Result<Arc<dyn StepHandler>, Failure> {
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

    fn stream(&self) -> Option<TokenSink> {
        self.facts()
            .output_as_is
            .then(|| self.options.stream.clone())
            .flatten()
    }

    fn policy_tool_iterations(&self) -> Option<u32> {
        self.plan
            .policy
            .max_tool_iterations
            .as_ref()
            .map(|l| l.value)
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
