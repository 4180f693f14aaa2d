//! Semantic checks on a schema-valid plan: everything the schema cannot say.
//!
//! Names must resolve (steps, models, corpora, tools, agents), the step graph must be acyclic,
//! templates and prompt files must parse and read only variables that exist where they run (a
//! declared input, a var, an *upstream* step), embedded JSON Schemas and regexes must compile, and
//! the plan must respect the policy in force. Every problem is collected, none stops the others,
//! and each points at the YAML node (or prompt-file position) responsible.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use serde_json::Value;

use super::diagnostic::{Diagnostic, PlanError, Source, did_you_mean, suggestion};
use super::graph::{GraphProblem, StepGraph};
use super::load::Loaded;
use super::model::{ModelSpec, OnnxTask, RawPlan, ToolSpec};
use super::policy::{EffectivePolicy, Limit, PolicyOrigin};
use super::steps::{FieldPath, ModelRole, RawStep, SchemaSource, TemplateRef, TemplateSource};
use super::yaml::Node;
use crate::context::matching_files;
use crate::prompt::{self, GLOBAL_FUNCTIONS, TemplateInfo, TemplateSyntaxError};

/// Whether `model` can serve where a step needs `role`.
fn role_fits(role: ModelRole, model: &ModelSpec) -> bool {
    match (role, model) {
        (ModelRole::Llm, ModelSpec::Onnx { .. }) => false,
        (ModelRole::Llm, _) => true,
        (ModelRole::Scorer, ModelSpec::Onnx { .. }) => true,
        (ModelRole::Embedder, ModelSpec::Onnx { task, .. }) => *task == OnnxTask::BiEncoder,
        (ModelRole::Scorer | ModelRole::Embedder, _) => false,
    }
}

/// What a step's result offers to templates: `steps.<name>.output`, `steps.<name>.usage`.
pub const STEP_FIELDS: &[&str] = &["output", "usage"];

/// The context roots every template may read (`row` in a batch; `history`, a chat's earlier
/// messages, is empty outside `pagantic chat`).
const CONTEXT_ROOTS: &[&str] = &["inputs", "input", "steps", "vars", "row", "history"];

/// The result of checking a plan.
pub struct Analysis {
    pub graph: StepGraph,
    pub policy: EffectivePolicy,
    pub diagnostics: Vec<Diagnostic>,
    /// Per step, the steps its templates read through `steps.<name>` (None: it reads `steps`
    /// as a whole, so every upstream step).
    pub reads: Vec<Option<BTreeSet<usize>>>,
}

/// Where a plan sits: its own path, and the plans whose `plan:` agents lead to it.
pub struct Nesting<'a> {
    pub path: &'a Path,
    /// Canonical paths, outermost first.
    pub enclosing: &'a [PathBuf],
}

/// Runs every semantic check on a loaded plan.
pub fn analyse(
    plan: &Loaded<RawPlan>,
    plan_dir: &Path,
    policy: EffectivePolicy,
    policy_name: Option<&str>,
    nesting: &Nesting<'_>,
) -> Analysis {
    let (graph, graph_problems) = StepGraph::build(&plan.value.steps);
    let mut checker = Checker {
        plan: &plan.value,
        root: &plan.root,
        source: &plan.source,
        dir: plan_dir,
        policy: &policy,
        policy_name,
        nesting,
        graph: &graph,
        prompts: HashMap::new(),
        out: Vec::new(),
        reads: vec![Some(BTreeSet::new()); plan.value.steps.len()],
    };
    checker.duplicate_steps();
    checker.graph_problems(&graph_problems);
    checker.inputs();
    checker.models();
    checker.corpora();
    checker.tools();
    checker.agents();
    for index in 0..plan.value.steps.len() {
        checker.step(index);
    }
    checker.plan_output();
    checker.plan_policy();
    let reads = checker.reads;
    let mut diagnostics = checker.out;
    let plan_name = plan.source.name.clone();
    diagnostics.sort_by_key(|d| {
        let other_file = d.source.as_ref().is_some_and(|s| s.name != plan_name);
        (other_file, d.labels.first().map_or(0, |l| l.offset()))
    });
    Analysis {
        graph,
        policy,
        diagnostics,
        reads,
    }
}

/// A prompt file read once and shared by every step that uses it.
struct PromptFile {
    source: Source,
    parsed: Result<TemplateInfo, TemplateSyntaxError>,
}

/// Where a template's variables may come from.
struct Scope {
    /// The step the template belongs to (None for plan-level templates).
    step: Option<usize>,
    /// Steps whose outputs are available; None means every step (the plan's `output`).
    upstream: Option<BTreeSet<usize>>,
    /// Whether `input` (the upstream output) is defined.
    has_input: bool,
    /// Names this template sees besides the usual roots (e.g. `args` for tool argv).
    extra: &'static [&'static str],
    /// Whether the usual roots are visible at all (tool argv templates see only `args`).
    plan_context: bool,
}

/// Where a template's text lives, for pointing at a variable inside it.
enum Site {
    /// A YAML scalar at this span of the plan.
    Plan(Range<usize>),
    /// A prompt file.
    File(Source),
}

struct Checker<'a> {
    plan: &'a RawPlan,
    root: &'a Node,
    source: &'a Source,
    dir: &'a Path,
    policy: &'a EffectivePolicy,
    policy_name: Option<&'a str>,
    nesting: &'a Nesting<'a>,
    graph: &'a StepGraph,
    prompts: HashMap<String, Option<Rc<PromptFile>>>,
    out: Vec<Diagnostic>,
    reads: Vec<Option<BTreeSet<usize>>>,
}

fn path(segments: &[&str]) -> Vec<String> {
    segments.iter().map(|s| s.to_string()).collect()
}

fn step_path(index: usize, field: &[String]) -> Vec<String> {
    let mut p = vec!["steps".to_string(), index.to_string()];
    p.extend(field.iter().cloned());
    p
}

impl Checker<'_> {
    fn node(&self, path: &[String]) -> &Node {
        self.root.locate(path).node
    }

    fn span(&self, path: &[String]) -> Range<usize> {
        self.node(path).span.clone()
    }

    /// The key's span when the path ends at a mapping key, else the node's.
    fn key_span(&self, path: &[String]) -> Range<usize> {
        let located = self.root.locate(path);
        located
            .key_span
            .cloned()
            .unwrap_or_else(|| located.node.span.clone())
    }

    fn emit(&mut self, error: PlanError, span: Range<usize>, label: &str) -> &mut Diagnostic {
        self.out
            .push(Diagnostic::at(error, self.source, span, label));
        let last = self.out.len() - 1;
        &mut self.out[last]
    }

    fn step_name(&self, index: usize) -> &str {
        &self.plan.steps[index].common().name
    }

    fn origin_name(&self, origin: PolicyOrigin) -> String {
        match (origin, self.policy_name) {
            (PolicyOrigin::File, Some(name)) => name.to_string(),
            _ => "plan's policy".to_string(),
        }
    }

    fn duplicate_steps(&mut self) {
        let mut first: HashMap<&str, usize> = HashMap::new();
        for (index, step) in self.plan.steps.iter().enumerate() {
            let name = step.common().name.as_str();
            match first.get(name) {
                Some(&earlier) => {
                    let here = self.span(&step_path(index, &path(&["name"])));
                    let there = self.span(&step_path(earlier, &path(&["name"])));
                    self.out.push(
                        Diagnostic::at(
                            PlanError::DuplicateStep { name: name.into() },
                            self.source,
                            here,
                            "redefined here",
                        )
                        .with_label(there, "first defined here"),
                    );
                }
                None => {
                    first.insert(name, index);
                }
            }
        }
    }

    fn graph_problems(&mut self, problems: &[GraphProblem]) {
        let names: Vec<&str> = self
            .plan
            .steps
            .iter()
            .map(|s| s.common().name.as_str())
            .collect();
        for problem in problems {
            match problem {
                GraphProblem::UnknownNeed {
                    step,
                    position,
                    name,
                } => {
                    let span =
                        self.span(&step_path(*step, &["needs".into(), position.to_string()]));
                    let others = names.iter().copied().filter(|n| *n != names[*step]);
                    let hint = suggestion(name, "steps", others);
                    self.emit(
                        PlanError::UnknownStep { name: name.clone() },
                        span,
                        "no step has this name",
                    )
                    .hint = Some(hint);
                }
                GraphProblem::Cycle { path: cycle } => {
                    let text = cycle
                        .iter()
                        .map(|&i| names[i])
                        .collect::<Vec<_>>()
                        .join(" → ");
                    let mut diagnostic: Option<Diagnostic> = None;
                    for pair in cycle.windows(2) {
                        let (from, to) = (pair[0], pair[1]);
                        let (span, label) = match &self.plan.steps[to].common().needs {
                            Some(needs) => {
                                let position =
                                    needs.iter().position(|n| n == names[from]).unwrap_or(0);
                                (
                                    self.span(&step_path(
                                        to,
                                        &["needs".into(), position.to_string()],
                                    )),
                                    format!("`{}` needs `{}`", names[to], names[from]),
                                )
                            }
                            None => (
                                self.span(&step_path(to, &path(&["name"]))),
                                format!("`{}` follows `{}` (no `needs`)", names[to], names[from]),
                            ),
                        };
                        diagnostic = Some(match diagnostic {
                            None => Diagnostic::at(
                                PlanError::Cycle { path: text.clone() },
                                self.source,
                                span,
                                label,
                            ),
                            Some(d) => d.with_label(span, label),
                        });
                    }
                    self.out.extend(diagnostic);
                }
            }
        }
    }

    fn inputs(&mut self) {
        for (name, input) in &self.plan.inputs {
            // `default: null` (or `default:` with nothing after it) reads as no default at all,
            // which would silently make the input required; no input type holds null.
            let null_default = input.default.is_none()
                && self
                    .root
                    .get("inputs")
                    .and_then(|inputs| inputs.get(name))
                    .and_then(|spec| spec.get("default"))
                    .is_some();
            if null_default
                || input
                    .default
                    .as_ref()
                    .is_some_and(|d| !input.kind.accepts(d))
            {
                let hint = null_default.then(|| {
                    "an input without a default is required; to make it optional, remove `default` and write `required: false`".to_string()
                });
                let span = self.span(&path(&["inputs", name, "default"]));
                self.emit(
                    PlanError::InputDefaultType {
                        input: name.clone(),
                        expected: input.kind.name().into(),
                    },
                    span,
                    if null_default { "null" } else { "wrong type" },
                )
                .hint = hint;
            }
        }
    }

    fn models(&mut self) {
        for (name, model) in &self.plan.models {
            if let ModelSpec::Onnx {
                task: OnnxTask::CrossEncoder,
                source,
                ..
            } = model
                && source == "default"
            {
                let span = self.span(&path(&["models", name, "task"]));
                self.emit(
                    PlanError::OnnxDefaultTask { name: name.clone() },
                    span,
                    "the default model is a bi-encoder",
                );
            }
            if let ModelSpec::Scripted { rules, .. } = model {
                for (i, rule) in rules.iter().enumerate() {
                    if let Some(pattern) = &rule.matches
                        && let Err(e) = regex::Regex::new(pattern)
                    {
                        let span =
                            self.span(&path(&["models", name, "rules", &i.to_string(), "matches"]));
                        self.emit(
                            PlanError::InvalidRegex {
                                message: regex_reason(&e),
                            },
                            span,
                            "does not compile",
                        );
                    }
                }
            }
        }
    }

    fn corpora(&mut self) {
        for (name, corpus) in &self.plan.corpora {
            if corpus.files.is_empty() && corpus.documents.is_empty() && corpus.jsonl.is_none() {
                let span = self.key_span(&path(&["corpora", name]));
                self.emit(
                    PlanError::EmptyCorpus { name: name.clone() },
                    span,
                    "no documents",
                );
            }
            for (i, pattern) in corpus.files.iter().enumerate() {
                let span = self.span(&path(&["corpora", name, "files", &i.to_string()]));
                if let Err(e) = glob::Pattern::new(pattern) {
                    self.emit(
                        PlanError::SchemaViolation {
                            place: format!("corpus `{name}`"),
                            message: format!("invalid glob pattern: {}", e.msg),
                        },
                        span,
                        "bad pattern",
                    );
                } else if matching_files(self.dir, pattern).is_ok_and(|found| found.is_empty()) {
                    self.emit(
                        PlanError::CorpusNoMatch {
                            pattern: pattern.clone(),
                        },
                        span,
                        "no file here",
                    );
                }
            }
        }
    }

    fn tools(&mut self) {
        for (name, tool) in &self.plan.tools {
            if let ToolSpec::Command {
                argv, parameters, ..
            } = tool
            {
                if let Some(parameters) = parameters {
                    self.parameters(&path(&["tools", name, "parameters"]), parameters);
                }
                let scope = Scope {
                    step: None,
                    upstream: Some(BTreeSet::new()),
                    has_input: false,
                    extra: &["args"],
                    plan_context: false,
                };
                for (i, arg) in argv.iter().enumerate() {
                    let at = path(&["tools", name, "argv", &i.to_string()]);
                    self.inline_template(&at, arg, TemplateSource::Inline, &scope);
                }
            }
            self.tool_policy(name, &path(&["tools", name]));
        }
    }

    fn agents(&mut self) {
        for (name, agent) in &self.plan.agents {
            let base = path(&["agents", name]);
            let targets = [
                agent.tool.is_some(),
                agent.plan.is_some(),
                agent.template.is_some(),
            ];
            if targets.iter().filter(|t| **t).count() != 1 {
                let span = self.key_span(&base);
                self.emit(
                    PlanError::AgentTarget { name: name.clone() },
                    span,
                    "this agent",
                );
            }
            if let Some(parameters) = &agent.parameters {
                let mut at = base.clone();
                at.push("parameters".into());
                self.parameters(&at, parameters);
            }
            if agent.template.is_some()
                && agent.model.is_none()
                && agent.tool.is_none()
                && agent.plan.is_none()
            {
                let span = self.span(&[base.clone(), vec!["template".into()]].concat());
                self.emit(
                    PlanError::AgentModel { name: name.clone() },
                    span,
                    "sent to no model",
                );
            }
            if let Some(tool) = &agent.tool {
                let mut at = base.clone();
                at.push("tool".into());
                self.tool_reference(&at, tool);
            }
            if let Some(plan) = &agent.plan {
                let at = [base.clone(), vec!["plan".into()]].concat();
                self.sub_plan(&at, name, plan);
            }
            if let Some(template) = &agent.template {
                let scope = Scope {
                    step: None,
                    upstream: Some(BTreeSet::new()),
                    has_input: false,
                    extra: &["args"],
                    plan_context: true,
                };
                let at = [base.clone(), vec!["template".into()]].concat();
                self.inline_template(&at, template, TemplateSource::Inline, &scope);
            }
            if let Some(model) = &agent.model {
                let at = [base.clone(), vec!["model".into()]].concat();
                self.model_reference(&at, model, ModelRole::Llm);
            }
        }
    }

    /// A `plan:` agent's plan: it exists, does not lead back here, and passes every check under
    /// the policy in force here (which it inherits); its own diagnostics follow this one.
    fn sub_plan(&mut self, at: &[String], agent: &str, file: &str) {
        let path = self.dir.join(file);
        let span = self.span(at);
        if !path.is_file() {
            self.emit(
                PlanError::ReadFailed {
                    path: file.to_string(),
                    reason: "no such plan file (paths are relative to this plan)".into(),
                },
                span,
                "not found",
            );
            return;
        }
        let mut enclosing = self.nesting.enclosing.to_vec();
        enclosing.push(super::canonical(self.nesting.path));
        if enclosing.contains(&super::canonical(&path)) {
            self.emit(
                PlanError::SubPlanCycle {
                    agent: agent.to_string(),
                    path: file.to_string(),
                },
                span,
                "leads back here",
            );
            return;
        }
        let handed_down = super::PolicyFile::inherited(self.policy, self.nesting.path);
        if let Err(problems) = super::load_within(&path, Some(&handed_down), &enclosing) {
            let count = problems.len();
            self.emit(
                PlanError::SubPlanInvalid {
                    agent: agent.to_string(),
                    path: file.to_string(),
                    count,
                    plural: if count == 1 { "" } else { "s" },
                },
                span,
                "this plan",
            );
            self.out.extend(problems);
        }
    }

    fn step(&mut self, index: usize) {
        let step = &self.plan.steps[index];
        let common = step.common();
        let refs = step.references();
        let upstream = Some(self.graph.ancestors(index));
        let has_input = match &common.needs {
            Some(needs) => !needs.is_empty(),
            None => index > 0,
        };
        let scope = |extra| Scope {
            step: Some(index),
            upstream: upstream.clone(),
            has_input,
            extra,
            plan_context: true,
        };

        for (named, role) in &refs.models {
            self.model_reference(&step_path(index, &named.path), named.name, *role);
        }
        for (at, error, label) in &refs.problems {
            let span = self.span(&step_path(index, at));
            self.emit(error.clone(), span, label);
        }
        if let Some((at, model)) = &refs.grammar {
            let reason = match self.plan.models.get(*model) {
                Some(ModelSpec::Openai { .. }) => {
                    Some("an `openai` server is sent JSON Schemas only")
                }
                Some(ModelSpec::Mistralrs {
                    decoder_constraints: Some(false),
                    ..
                }) => Some("it sets `decoder_constraints: false`"),
                _ => None,
            };
            if let Some(reason) = reason {
                let span = self.span(&step_path(index, at));
                self.emit(
                    PlanError::GrammarUnsupported {
                        model: model.to_string(),
                        reason: reason.into(),
                    },
                    span,
                    "not enforceable on this model",
                );
            }
        }
        if let RawStep::Rerank(rerank) = step
            && rerank.query.is_none()
            && !self
                .graph
                .ancestors(index)
                .iter()
                .any(|&u| matches!(self.plan.steps[u], RawStep::Retrieve(_)))
        {
            let span = self.span(&step_path(index, &path(&["type"])));
            self.emit(
                PlanError::RerankQuery {
                    step: common.name.clone(),
                },
                span,
                "no `query`, and no retrieve step upstream",
            );
        }
        for named in &refs.tools {
            let at = step_path(index, &named.path);
            self.tool_reference(&at, named.name);
            self.tool_policy(named.name, &at);
        }
        for named in &refs.corpora {
            if !self.plan.corpora.contains_key(named.name) {
                let span = self.span(&step_path(index, &named.path));
                let hint = suggestion(
                    named.name,
                    "corpora",
                    self.plan.corpora.keys().map(String::as_str),
                );
                self.emit(
                    PlanError::UnknownCorpus {
                        name: named.name.into(),
                    },
                    span,
                    "not declared in `corpora`",
                )
                .hint = Some(hint);
            }
        }
        for named in &refs.agents {
            if !self.plan.agents.contains_key(named.name) {
                let span = self.span(&step_path(index, &named.path));
                let hint = suggestion(
                    named.name,
                    "agents",
                    self.plan.agents.keys().map(String::as_str),
                );
                self.emit(
                    PlanError::UnknownAgent {
                        name: named.name.into(),
                    },
                    span,
                    "not declared in `agents`",
                )
                .hint = Some(hint);
            } else if let Some(tool) = self
                .plan
                .agents
                .get(named.name)
                .and_then(|a| a.tool.as_deref())
            {
                self.tool_policy(tool, &step_path(index, &named.path));
            }
        }
        for named in &refs.steps {
            let exists = self
                .plan
                .steps
                .iter()
                .any(|s| s.common().name == named.name);
            if !exists || named.name == common.name {
                let span = self.span(&step_path(index, &named.path));
                let names = self
                    .plan
                    .steps
                    .iter()
                    .map(|s| s.common().name.as_str())
                    .filter(|n| *n != common.name);
                let hint = suggestion(named.name, "steps", names);
                self.emit(
                    PlanError::UnknownStep {
                        name: named.name.into(),
                    },
                    span,
                    "no other step has this name",
                )
                .hint = Some(hint);
            }
        }
        for template in &refs.templates {
            let at = step_path(index, &template.path);
            self.step_template(&at, template, &scope(template.extra_variables));
        }
        if let Some(when) = &common.when {
            self.inline_template(
                &step_path(index, &path(&["when"])),
                when,
                TemplateSource::Expression,
                &scope(&[]),
            );
        }
        for (at, schema) in &refs.schemas {
            self.schema_source(&step_path(index, at), schema);
        }
        for (at, schema) in &refs.schema_values {
            self.json_schema(&step_path(index, at), schema);
        }
        for (at, pattern) in &refs.regexes {
            if let Err(e) = regex::Regex::new(pattern) {
                let span = self.span(&step_path(index, at));
                self.emit(
                    PlanError::InvalidRegex {
                        message: regex_reason(&e),
                    },
                    span,
                    "does not compile",
                );
            }
        }
        for (at, grammar) in &refs.gbnf {
            if let Err(failure) = crate::constraint::gbnf_to_lark(grammar) {
                let span = self.span(&step_path(index, at));
                self.emit(
                    PlanError::InvalidGrammar {
                        message: failure.message,
                    },
                    span,
                    "does not translate",
                );
            }
        }
        for ([first, second], both) in &refs.exclusive {
            let span = if *both {
                self.key_span(&step_path(index, &path(&[second])))
            } else {
                self.span(&step_path(index, &path(&["name"])))
            };
            let label = if *both {
                "both given"
            } else {
                "neither given in this step"
            };
            let hint = if *both {
                format!("keep one of `{first}` and `{second}` and remove the other")
            } else {
                format!("add one of them: `{first}` or `{second}`")
            };
            self.emit(
                PlanError::ExclusiveFields {
                    first: (*first).into(),
                    second: (*second).into(),
                },
                span,
                label,
            )
            .hint = Some(hint);
        }
        self.step_policy(index, &refs.max_tokens, &refs.max_tool_iterations);
    }

    fn model_reference(&mut self, at: &[String], name: &str, role: ModelRole) {
        let span = self.span(at);
        let Some(model) = self.plan.models.get(name) else {
            let hint = suggestion(name, "models", self.plan.models.keys().map(String::as_str));
            self.emit(
                PlanError::UnknownModel { name: name.into() },
                span,
                "not declared in `models`",
            )
            .hint = Some(hint);
            return;
        };
        if !role_fits(role, model) {
            let role_text = match role {
                ModelRole::Llm => "a language model (kind mistralrs, openai or scripted)",
                ModelRole::Scorer => "an ONNX scorer (kind onnx)",
                ModelRole::Embedder => "an ONNX bi-encoder (kind onnx, task bi-encoder)",
            };
            let kind = match model {
                ModelSpec::Onnx {
                    task: OnnxTask::CrossEncoder,
                    ..
                } => "a cross-encoder",
                ModelSpec::Onnx { .. } => "a bi-encoder",
                ModelSpec::Openai { .. } => "an openai",
                ModelSpec::Mistralrs { .. } => "a mistralrs",
                ModelSpec::Scripted { .. } => "a scripted",
            };
            let fitting: Vec<&str> = self
                .plan
                .models
                .iter()
                .filter(|(_, m)| role_fits(role, m))
                .map(|(n, _)| n.as_str())
                .collect();
            let hint = if fitting.is_empty() {
                format!("declare {role_text} in `models` and name it here")
            } else {
                suggestion(name, "models of that kind", fitting.iter().copied())
            };
            self.emit(
                PlanError::WrongModelKind {
                    name: name.into(),
                    kind: kind.into(),
                    role: role_text.into(),
                },
                span,
                "wrong kind of model",
            )
            .hint = Some(hint);
        }
    }

    fn tool_reference(&mut self, at: &[String], name: &str) {
        if !self.plan.tools.contains_key(name) {
            let span = self.span(at);
            let hint = suggestion(name, "tools", self.plan.tools.keys().map(String::as_str));
            self.emit(
                PlanError::UnknownTool { name: name.into() },
                span,
                "not declared in `tools`",
            )
            .hint = Some(hint);
        }
    }

    fn tool_policy(&mut self, name: &str, at: &[String]) {
        if let Some(Limit {
            value: allowed,
            origin,
        }) = &self.policy.allowed_tools
            && !allowed.iter().any(|t| t == name)
            && self.plan.tools.contains_key(name)
            && at.first().is_some_and(|s| s == "steps")
        {
            let span = self.span(at);
            let hint = format!(
                "allowed tools: {}",
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed.join(", ")
                }
            );
            let origin = self.origin_name(*origin);
            self.emit(
                PlanError::ToolNotAllowed {
                    name: name.into(),
                    origin,
                },
                span,
                "not allowed",
            )
            .hint = Some(hint);
        }
    }

    fn step_template(&mut self, at: &[String], template: &TemplateRef<'_>, scope: &Scope) {
        match template.source {
            TemplateSource::File => self.prompt_file(at, template.text, scope),
            TemplateSource::Inline | TemplateSource::Expression => {
                self.inline_template(at, template.text, template.source, scope)
            }
        }
    }

    fn inline_template(
        &mut self,
        at: &[String],
        text: &str,
        source: TemplateSource,
        scope: &Scope,
    ) {
        let parsed = match source {
            TemplateSource::Expression => prompt::analyze_expression(text),
            TemplateSource::Inline | TemplateSource::File => prompt::analyze_template(text),
        };
        let node_span = self.span(at);
        match parsed {
            Ok(info) => self.variables(&info, scope, &Site::Plan(node_span)),
            Err(error) => {
                let span = error
                    .range
                    .as_ref()
                    .and_then(|range| self.inner_span(&node_span, text, range))
                    .unwrap_or(node_span);
                self.emit(
                    PlanError::TemplateSyntax {
                        message: error.message,
                    },
                    span,
                    "here",
                );
            }
        }
    }

    /// Maps a range inside a template's text onto the YAML source, when the scalar was written
    /// verbatim (no escapes, no folding); otherwise None.
    fn inner_span(
        &self,
        node_span: &Range<usize>,
        text: &str,
        range: &Range<usize>,
    ) -> Option<Range<usize>> {
        let written = self.source.text.get(node_span.clone())?;
        let offset = written.find(text)?;
        let start = node_span.start + offset + range.start.min(text.len());
        let end = (node_span.start + offset + range.end.min(text.len())).max(start);
        Some(start..end)
    }

    fn prompts_dir(&self) -> Option<PathBuf> {
        [
            self.dir.join("prompts"),
            self.dir.join("..").join("prompts"),
        ]
        .into_iter()
        .find(|d| d.is_dir())
    }

    fn prompt_file(&mut self, at: &[String], name: &str, scope: &Scope) {
        let file = match self.prompts.get(name) {
            Some(cached) => cached.clone(),
            None => {
                let loaded = self.read_prompt(name);
                if let Some(file) = &loaded
                    && let Err(error) = &file.parsed
                {
                    let span = error.range.clone().unwrap_or(0..0);
                    self.out.push(Diagnostic::at(
                        PlanError::TemplateSyntax {
                            message: error.message.clone(),
                        },
                        &file.source,
                        span,
                        "here",
                    ));
                }
                self.prompts.insert(name.to_string(), loaded.clone());
                loaded
            }
        };
        match file {
            Some(file) => {
                if let Ok(info) = &file.parsed {
                    self.variables(info, scope, &Site::File(file.source.clone()));
                }
            }
            None => {
                let span = self.span(at);
                let looked = match self.prompts_dir() {
                    Some(dir) => format!("looked in {}", dir.display()),
                    None => format!(
                        "no prompts/ directory next to the plan or above it ({})",
                        self.dir.display()
                    ),
                };
                let mut hint = looked;
                if let Some(dir) = self.prompts_dir()
                    && let Some(close) =
                        did_you_mean(name, prompt_names(&dir).iter().map(String::as_str))
                {
                    hint = format!("{close} ({hint})");
                }
                self.emit(
                    PlanError::PromptNotFound { name: name.into() },
                    span,
                    "no such prompt file",
                )
                .hint = Some(hint);
            }
        }
    }

    fn read_prompt(&self, name: &str) -> Option<Rc<PromptFile>> {
        let dir = self.prompts_dir()?;
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path).ok()?;
        let display = pretty_path(&path);
        let parsed = prompt::analyze_template(&text);
        Some(Rc::new(PromptFile {
            source: Source::new(display, text),
            parsed,
        }))
    }

    fn variables(&mut self, info: &TemplateInfo, scope: &Scope, site: &Site) {
        for variable in &info.variables {
            let parts: Vec<&str> = variable.split('.').collect();
            self.note_read(&parts, scope);
            let problem = self.variable_problem(&parts, scope);
            if let Some((error, hint)) = problem {
                let needle = match &error {
                    PlanError::UnknownVariable { variable } => variable.clone(),
                    _ => "input".to_string(),
                };
                let (source, span) = match site {
                    Site::Plan(span) => (
                        self.source.clone(),
                        find_within(&self.source.text, span.clone(), &needle),
                    ),
                    Site::File(file) => (
                        file.clone(),
                        find_within(&file.text, 0..file.text.len(), &needle),
                    ),
                };
                let mut d = Diagnostic::at(error, &source, span, "not defined here");
                d.hint = hint;
                self.out.push(d);
            }
        }
    }

    /// Records which step a step's template reads, so the executor passes only those.
    fn note_read(&mut self, parts: &[&str], scope: &Scope) {
        let Some(step) = scope.step else { return };
        if parts.first() != Some(&"steps") || !scope.plan_context {
            return;
        }
        match parts.get(1).and_then(|name| {
            self.plan
                .steps
                .iter()
                .position(|s| s.common().name == *name)
        }) {
            Some(read) => {
                if let Some(reads) = &mut self.reads[step] {
                    reads.insert(read);
                }
            }
            None if parts.len() == 1 => self.reads[step] = None,
            None => {}
        }
    }

    /// Why a variable path cannot be read in this scope, if it cannot.
    fn variable_problem(
        &self,
        parts: &[&str],
        scope: &Scope,
    ) -> Option<(PlanError, Option<String>)> {
        let head = parts.first().copied().unwrap_or_default();
        let unknown = |shown: &str, hint: String| {
            Some((
                PlanError::UnknownVariable {
                    variable: shown.to_string(),
                },
                Some(hint),
            ))
        };
        if scope.extra.contains(&head) || GLOBAL_FUNCTIONS.contains(&head) {
            return None;
        }
        if !scope.plan_context || !CONTEXT_ROOTS.contains(&head) {
            let roots: Vec<&str> = if scope.plan_context {
                CONTEXT_ROOTS.iter().chain(scope.extra).copied().collect()
            } else {
                scope.extra.to_vec()
            };
            return unknown(
                head,
                suggestion(head, "variables here", roots.iter().copied()),
            );
        }
        match (head, parts.get(1)) {
            ("inputs", Some(name)) if !self.plan.inputs.contains_key(*name) => unknown(
                &format!("inputs.{name}"),
                suggestion(name, "inputs", self.plan.inputs.keys().map(String::as_str)),
            ),
            ("vars", Some(name)) if !self.plan.vars.contains_key(*name) => unknown(
                &format!("vars.{name}"),
                suggestion(name, "vars", self.plan.vars.keys().map(String::as_str)),
            ),
            ("steps", Some(name)) => self.step_variable(name, parts.get(2).copied(), scope),
            ("input", _) if !scope.has_input => scope.step.map(|i| {
                (
                    PlanError::NoInput {
                        step: self.step_name(i).to_string(),
                    },
                    None,
                )
            }),
            _ => None,
        }
    }

    fn step_variable(
        &self,
        name: &str,
        field: Option<&str>,
        scope: &Scope,
    ) -> Option<(PlanError, Option<String>)> {
        let shown = format!("steps.{name}");
        let Some(index) = self.plan.steps.iter().position(|s| s.common().name == name) else {
            let names = self.plan.steps.iter().map(|s| s.common().name.as_str());
            return Some((
                PlanError::UnknownVariable { variable: shown },
                Some(suggestion(name, "steps", names)),
            ));
        };
        if let (Some(upstream), Some(current)) = (&scope.upstream, scope.step)
            && !upstream.contains(&index)
        {
            let hint = if index == current {
                "a step cannot read its own output".to_string()
            } else {
                format!(
                    "`{name}` is not upstream of `{}`; add it to `needs` so it runs first",
                    self.step_name(current)
                )
            };
            return Some((PlanError::UnknownVariable { variable: shown }, Some(hint)));
        }
        match field {
            Some(field) if !STEP_FIELDS.contains(&field) => Some((
                PlanError::UnknownVariable {
                    variable: format!("steps.{name}.{field}"),
                },
                Some(suggestion(
                    field,
                    "step fields",
                    STEP_FIELDS.iter().copied(),
                )),
            )),
            _ => None,
        }
    }

    fn schema_source(&mut self, at: &[String], schema: &SchemaSource) {
        match schema {
            SchemaSource::Inline(map) => {
                let value =
                    Value::Object(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
                self.json_schema(at, &value);
            }
            SchemaSource::File(file) => {
                let full = self.dir.join(file);
                let loaded = std::fs::read_to_string(&full)
                    .map_err(|e| e.to_string())
                    .and_then(|text| {
                        serde_json::from_str::<Value>(&text).map_err(|e| e.to_string())
                    });
                match loaded {
                    Ok(value) => {
                        if let Err(message) = compile_schema(&value) {
                            let span = self.span(at);
                            self.emit(PlanError::InvalidSchema { message }, span, "in this file");
                        }
                    }
                    Err(reason) => {
                        let span = self.span(at);
                        self.emit(
                            PlanError::SchemaFile {
                                path: file.clone(),
                                reason,
                            },
                            span,
                            "cannot load",
                        );
                    }
                }
            }
        }
    }

    /// A tool's or agent's `parameters`: a JSON Schema whose `required` names only declared
    /// properties (the model is shown the properties; a required one it cannot see is a call
    /// that can never be made right).
    fn parameters(&mut self, at: &[String], value: &Value) {
        self.json_schema(at, value);
        let Some(required) = value.get("required").and_then(Value::as_array) else {
            return;
        };
        let properties = value.get("properties").and_then(Value::as_object);
        for (i, name) in required.iter().enumerate() {
            let Some(name) = name.as_str() else { continue };
            if properties.is_none_or(|p| !p.contains_key(name)) {
                let mut full = at.to_vec();
                full.extend(["required".to_string(), i.to_string()]);
                let span = self.span(&full);
                let hint = suggestion(
                    name,
                    "properties",
                    properties
                        .into_iter()
                        .flat_map(|p| p.keys().map(String::as_str)),
                );
                self.emit(
                    PlanError::RequiredNotDeclared { name: name.into() },
                    span,
                    "not in `properties`",
                )
                .hint = Some(hint);
            }
        }
    }

    fn json_schema(&mut self, at: &[String], value: &Value) {
        if let Err((message, inner)) = compile_schema_at(value) {
            let mut full = at.to_vec();
            full.extend(inner);
            let span = self.span(&full);
            self.emit(PlanError::InvalidSchema { message }, span, "invalid here");
        }
    }

    fn step_policy(
        &mut self,
        index: usize,
        max_tokens: &Option<(FieldPath, u64)>,
        iterations: &Option<(FieldPath, u32)>,
    ) {
        let step = &self.plan.steps[index];
        if let Some(Limit {
            value: allowed,
            origin,
        }) = &self.policy.allowed_step_types
            && !allowed.contains(&step.step_type())
        {
            let span = self.span(&step_path(index, &path(&["type"])));
            let hint = format!(
                "allowed step types: {}",
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed
                        .iter()
                        .map(|t| t.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            );
            let origin = self.origin_name(*origin);
            self.emit(
                PlanError::StepTypeNotAllowed {
                    step_type: step.step_type().name().into(),
                    origin,
                },
                span,
                "not allowed",
            )
            .hint = Some(hint);
        }
        if let (Some(Limit { value: max, origin }), Some(timeout)) =
            (&self.policy.timeout_per_step, step.common().timeout)
            && timeout > *max
        {
            let span = self.span(&step_path(index, &path(&["timeout"])));
            let origin = self.origin_name(*origin);
            self.emit(
                PlanError::TimeoutExceeds {
                    found: timeout.to_string(),
                    max: max.to_string(),
                    origin,
                },
                span,
                "too long",
            );
        }
        if let (Some(Limit { value: max, origin }), Some((at, tokens))) =
            (&self.policy.max_tokens, max_tokens)
            && tokens > max
        {
            let span = self.span(&step_path(index, at));
            let origin = self.origin_name(*origin);
            self.emit(
                PlanError::MaxTokensExceed {
                    found: *tokens,
                    max: *max,
                    origin,
                },
                span,
                "over budget",
            );
        }
        if let (Some(Limit { value: max, origin }), Some((at, found))) =
            (&self.policy.max_tool_iterations, iterations)
            && found > max
        {
            let span = self.span(&step_path(index, at));
            let origin = self.origin_name(*origin);
            self.emit(
                PlanError::ToolIterationsExceed {
                    found: *found,
                    max: *max,
                    origin,
                },
                span,
                "too many",
            );
        }
    }

    fn plan_output(&mut self) {
        if let Some(output) = &self.plan.output {
            let scope = Scope {
                step: None,
                upstream: None,
                has_input: false,
                extra: &[],
                plan_context: true,
            };
            self.inline_template(&path(&["output"]), output, TemplateSource::Inline, &scope);
        }
    }

    fn plan_policy(&mut self) {
        let count = self.plan.steps.len();
        if let Some(Limit { value: max, origin }) = &self.policy.max_steps
            && count > *max as usize
        {
            let span = self.span(&step_path(*max as usize, &path(&["name"])));
            let origin = self.origin_name(*origin);
            self.emit(
                PlanError::TooManySteps {
                    count,
                    max: *max,
                    origin,
                },
                span,
                "first step over the limit",
            );
        }
        if let Some(Limit {
            value: true,
            origin,
        }) = &self.policy.require_linear
        {
            let origin = self.origin_name(*origin);
            for index in 0..count {
                let predecessors = self.graph.predecessors(index);
                let successors = self.graph.successors(index);
                let reason = if predecessors.len() > 1 {
                    Some(format!(
                        "step `{}` joins {} steps",
                        self.step_name(index),
                        predecessors.len()
                    ))
                } else if successors.len() > 1 {
                    Some(format!(
                        "{} steps depend on `{}`",
                        successors.len(),
                        self.step_name(index)
                    ))
                } else if index > 0 && predecessors.is_empty() {
                    Some(format!(
                        "step `{}` starts a second branch",
                        self.step_name(index)
                    ))
                } else {
                    None
                };
                if let Some(reason) = reason {
                    let span = self.span(&step_path(index, &path(&["name"])));
                    self.emit(
                        PlanError::NotLinear {
                            reason,
                            origin: origin.clone(),
                        },
                        span,
                        "here",
                    );
                }
            }
        }
    }
}

/// Compiles a JSON Schema; the error's first line.
fn compile_schema(value: &Value) -> Result<(), String> {
    compile_schema_at(value).map_err(|(message, _)| message)
}

/// Compiles a JSON Schema; on failure, the message and the path inside the schema at fault.
fn compile_schema_at(value: &Value) -> Result<(), (String, Vec<String>)> {
    if let Err(error) = jsonschema::meta::validate(value) {
        let inner: Vec<String> = error
            .instance_path()
            .iter()
            .map(|s| match s {
                jsonschema::paths::LocationSegment::Property(p) => p.to_string(),
                jsonschema::paths::LocationSegment::Index(i) => i.to_string(),
            })
            .collect();
        return Err((first_line_of(&error.to_string()), inner));
    }
    jsonschema::validator_for(value)
        .map(|_| ())
        .map_err(|e| (first_line_of(&e.to_string()), Vec::new()))
}

/// The one-line reason of a regex error ("unclosed group"), without its ASCII-art excerpt.
fn regex_reason(error: &regex::Error) -> String {
    let text = error.to_string();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .map_or_else(|| first_line_of(&text), str::to_string)
}

fn first_line_of(text: &str) -> String {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(text)
        .trim()
        .to_string()
}

/// The span of `needle` inside `within` of `text`, or `within` itself when it does not occur.
fn find_within(text: &str, within: Range<usize>, needle: &str) -> Range<usize> {
    text.get(within.clone())
        .and_then(|slice| slice.find(needle))
        .map(|offset| within.start + offset..within.start + offset + needle.len())
        .unwrap_or(within)
}

/// Prompt files available in `dir` (for "did you mean").
fn prompt_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            let mut names: Vec<String> = entries
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .collect();
            names.sort();
            names
        })
        .unwrap_or_default()
}

/// A path shown without `dir/../` detours.
fn pretty_path(path: &Path) -> String {
    let mut parts: Vec<std::path::Component<'_>> = Vec::new();
    for component in path.components() {
        match component {
            std::path::Component::ParentDir
                if parts
                    .last()
                    .is_some_and(|c| matches!(c, std::path::Component::Normal(_))) =>
            {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    parts.iter().collect::<PathBuf>().display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needles_are_found_inside_their_node_only() {
        let text = "a: inputs.x\nb: '{{ inputs.x }}'\n";
        let node = 15..31;
        assert_eq!(find_within(text, node.clone(), "inputs.x"), 19..27);
        assert_eq!(find_within(text, node.clone(), "nothing"), node);
    }

    #[test]
    fn paths_lose_parent_detours() {
        assert_eq!(
            pretty_path(Path::new("plans/../prompts/a.j2")),
            "prompts/a.j2"
        );
    }

    #[test]
    fn invalid_schemas_name_the_bad_part() {
        let bad =
            serde_json::json!({ "type": "object", "properties": { "x": { "type": "strnig" } } });
        let (message, inner) = compile_schema_at(&bad).expect_err("invalid");
        assert!(!message.is_empty());
        assert_eq!(inner, vec!["properties", "x", "type"]);
        assert!(compile_schema(&serde_json::json!({ "type": "string" })).is_ok());
    }
}
