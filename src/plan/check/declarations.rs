//! Checks on what a plan declares besides steps: inputs (defaults of the right type), models,
//! corpora (patterns that compile and match files), tools, and agents — a `plan:` agent's plan
//! checked whole, under the policy it inherits.

use std::collections::BTreeSet;

use super::*;
use crate::plan::tools::ToolSpec;

impl Checker<'_> {
    pub(super) fn inputs(&mut self) {
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

    pub(super) fn models(&mut self) {
        for (name, model) in &self.plan.models {
            for (at, error, label) in model.kind().problems(name) {
                let mut at_model = path(&["models", name]);
                at_model.extend(at);
                let span = self.span(&at_model);
                self.emit(error, span, label);
            }
        }
    }

    pub(super) fn corpora(&mut self) {
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

    pub(super) fn tools(&mut self) {
        for (name, spec) in &self.plan.tools {
            if let ToolSpec::Mcp(mcp) = spec {
                for (field, transport) in mcp.misplaced() {
                    let span = self.span(&path(&["tools", name, field]));
                    let error = PlanError::McpField {
                        name: name.clone(),
                        field,
                        transport,
                    };
                    self.emit(error, span, "not used by this server");
                }
            }
            let tool = spec.kind();
            if let Some(parameters) = tool.parameters() {
                self.parameters(&path(&["tools", name, "parameters"]), parameters);
            }
            let scope = Scope {
                step: None,
                upstream: Some(BTreeSet::new()),
                has_input: false,
                extra: &["args", "results"],
                roots: &[],
            };
            for (at, template) in tool.templates() {
                let mut at_tool = path(&["tools", name]);
                at_tool.extend(at);
                self.inline_template(&at_tool, template, TemplateSource::Inline, &scope);
            }
            self.tool_policy(name, &path(&["tools", name]));
            self.capability_policy(name, tool);
            if tool.cache()
                && let Some(reason) = tool.uncacheable()
            {
                let span = self.span(&path(&["tools", name, "cache"]));
                self.emit(
                    PlanError::ToolCache {
                        name: name.clone(),
                        reason,
                    },
                    span,
                    "not for this tool",
                );
            }
        }
    }

    pub(super) fn agents(&mut self) {
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
                    extra: &["args", "results"],
                    roots: roots::ROUTE_AGENT,
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
    pub(super) fn sub_plan(&mut self, at: &[String], agent: &str, file: &str) {
        self.nested_plan(
            at,
            file,
            PlanError::SubPlanCycle {
                agent: agent.to_string(),
                path: file.to_string(),
            },
            |count| PlanError::SubPlanInvalid {
                agent: agent.to_string(),
                path: file.to_string(),
                count,
                plural: if count == 1 { "" } else { "s" },
            },
        );
    }

    /// The `reduce:` plan: a valid plan here (as a sub-plan is) that takes the group's rows as
    /// `rows`, a list.
    pub(super) fn reduce(&mut self) {
        let Some(reduce) = &self.plan.reduce else {
            return;
        };
        let at = path(&["reduce", "plan"]);
        let file = reduce.plan.as_str();
        let invalid = |count: usize| PlanError::ReduceInvalid {
            path: file.to_string(),
            count,
            plural: if count == 1 { "" } else { "s" },
        };
        let Some(plan) = self.nested_plan(&at, file, invalid(1), invalid) else {
            return;
        };
        let found = match plan.raw.inputs.get("rows") {
            Some(spec) if spec.kind == crate::plan::raw::InputType::Array => return,
            Some(spec) => format!("declares `rows` as {}", spec.kind.name()),
            None => "has no input `rows`".to_string(),
        };
        let span = self.span(&at);
        self.emit(
            PlanError::ReduceRows {
                path: file.to_string(),
                found,
            },
            span,
            "this plan",
        );
    }

    /// A plan this one runs (a `plan:` agent's, the `reduce:` plan): it exists, does not lead
    /// back here (`cycle`), and passes every check under the policy in force here, which it
    /// inherits (else `invalid` of its problem count, its own diagnostics following).
    fn nested_plan(
        &mut self,
        at: &[String],
        file: &str,
        cycle: PlanError,
        invalid: impl FnOnce(usize) -> PlanError,
    ) -> Option<crate::plan::Plan> {
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
            return None;
        }
        let mut enclosing = self.nesting.enclosing.to_vec();
        enclosing.push(crate::plan::canonical(self.nesting.path));
        if enclosing.contains(&crate::plan::canonical(&path)) {
            self.emit(cycle, span, "leads back here");
            return None;
        }
        let handed_down =
            crate::plan::PolicyFile::inherited(self.policy, self.nesting.path, self.policy_file);
        match crate::plan::load_within(&path, Some(&handed_down), &enclosing) {
            Ok(plan) => Some(plan),
            Err(problems) => {
                self.emit(invalid(problems.len()), span, "this plan");
                self.out.extend(problems);
                None
            }
        }
    }
}
