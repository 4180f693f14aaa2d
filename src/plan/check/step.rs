//! The checks of one step: everything it refers to (models, tools, corpora, agents, other steps,
//! templates, schemas, regexes, grammars) and the rules on its own fields, one function per kind
//! of reference, run in a fixed order so diagnostics at the same place keep their order.

use super::*;
use crate::core::Price;
use crate::plan::steps::NamedRef;

impl Checker<'_> {
    /// Checks step `index`: its references, then the policy on its limits.
    pub(super) fn step(&mut self, index: usize) {
        let step = &self.plan.steps[index];
        let refs = step.references();
        for (named, role) in &refs.models {
            self.model_reference(&step_path(index, &named.path), named.name, *role);
        }
        for (at, error, label) in &refs.problems {
            let span = self.span(&step_path(index, at));
            self.emit(error.clone(), span, label);
        }
        if let Some((at, model)) = &refs.grammar {
            self.grammar_model(index, at, model);
        }
        self.step_type_rules(index, step);
        self.step_boundary(index);
        for named in &refs.tools {
            let at = step_path(index, &named.path);
            self.tool_reference(&at, named.name);
            self.tool_policy(named.name, &at);
        }
        self.corpus_references(index, &refs.corpora);
        self.agent_references(index, &refs.agents);
        self.step_references(index, &refs.steps);
        self.templates_of_step(index, &refs.templates);
        for (at, schema) in &refs.schemas {
            self.schema_source(&step_path(index, at), schema);
        }
        for (at, schema) in &refs.schema_values {
            self.json_schema(&step_path(index, at), schema);
        }
        self.regexes(index, &refs.regexes);
        self.gbnf_grammars(index, &refs.gbnf);
        self.lark_grammars(index, &refs.lark);
        self.exclusive_fields(index, &refs.exclusive);
        self.step_policy(
            index,
            &refs.max_tokens,
            &refs.max_tool_iterations,
            self.priced_model(&refs.models),
        );
    }

    /// A grammar constraint (at `at`) must go to a model that can enforce it while decoding.
    fn grammar_model(&mut self, index: usize, at: &[String], model: &str) {
        let reason = self
            .plan
            .models
            .get(model)
            .and_then(|m| m.kind().grammar_refusal());
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

    /// What one step type needs of the plan around it: a validate step's feedback goes to a
    /// model step upstream; a rerank step without `query` needs a retrieve step upstream.
    fn step_type_rules(&mut self, index: usize, step: &RawStep) {
        if let RawStep::Validate(validate) = step
            && let Some(feedback) = &validate.feedback
        {
            self.feedback_target(index, &feedback.step);
        }
        if let RawStep::Rerank(rerank) = step
            && rerank.query.is_none()
            && self.facts[index].upstream_query.is_none()
        {
            let span = self.span(&step_path(index, &path(&["type"])));
            self.emit(
                PlanError::RerankQuery {
                    step: step.common().name.clone(),
                },
                span,
                "no `query`, and no retrieve step upstream",
            );
        }
    }

    /// Every corpus the step names must be declared in `corpora`.
    fn corpus_references(&mut self, index: usize, corpora: &[NamedRef<'_>]) {
        for named in corpora {
            if self.plan.corpora.contains_key(named.name) {
                continue;
            }
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

    /// Every agent the step names must be declared in `agents`, and the tool a declared agent
    /// calls must be allowed by the policy.
    fn agent_references(&mut self, index: usize, agents: &[NamedRef<'_>]) {
        for named in agents {
            let at = step_path(index, &named.path);
            let Some(agent) = self.plan.agents.get(named.name) else {
                let span = self.span(&at);
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
                continue;
            };
            if let Some(tool) = agent.tool.as_deref() {
                self.tool_policy(tool, &at);
            }
        }
    }

    /// Every other step the step names outside `needs` must exist and not be itself.
    fn step_references(&mut self, index: usize, steps: &[NamedRef<'_>]) {
        let own_name = self.plan.steps[index].common().name.as_str();
        for named in steps {
            let exists = self
                .plan
                .steps
                .iter()
                .any(|s| s.common().name == named.name);
            if exists && named.name != own_name {
                continue;
            }
            let span = self.span(&step_path(index, &named.path));
            let names = self
                .plan
                .steps
                .iter()
                .map(|s| s.common().name.as_str())
                .filter(|n| *n != own_name);
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

    /// The step's templates and its `when` expression, each checked in the scope the step runs
    /// in: its upstream steps, and `input` when something comes before it.
    fn templates_of_step(&mut self, index: usize, templates: &[TemplateRef<'_>]) {
        let common = self.plan.steps[index].common();
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
            roots: roots::STEP,
        };
        for template in templates {
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
    }

    /// Every regular expression of the step must compile.
    fn regexes(&mut self, index: usize, regexes: &[(FieldPath, &str)]) {
        for (at, pattern) in regexes {
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
    }

    /// Every GBNF grammar of the step must translate to Lark, and the decoder must take the
    /// translation.
    fn gbnf_grammars(&mut self, index: usize, grammars: &[(FieldPath, &str)]) {
        for (at, grammar) in grammars {
            let span = self.span(&step_path(index, at));
            match crate::constraint::gbnf_to_lark(grammar) {
                Err(error) => {
                    let at = self.inner_span(&span, grammar, &error.span).unwrap_or(span);
                    self.emit(
                        PlanError::InvalidGrammar {
                            message: error.message,
                        },
                        at,
                        "does not translate",
                    );
                }
                Ok(lark) => {
                    if let Err(rejected) = check_lark(&lark) {
                        self.emit(
                            PlanError::InvalidGrammar {
                                message: rejected.to_string(),
                            },
                            span,
                            "the decoder refuses it",
                        );
                    }
                }
            }
        }
    }

    /// The decoder must take every Lark grammar of the step.
    fn lark_grammars(&mut self, index: usize, grammars: &[(FieldPath, &str)]) {
        for (at, grammar) in grammars {
            if let Err(rejected) = check_lark(grammar) {
                let span = self.span(&step_path(index, at));
                self.emit(
                    PlanError::InvalidLark {
                        message: rejected.to_string(),
                    },
                    span,
                    "the decoder refuses it",
                );
            }
        }
    }

    /// Of each pair of fields that exclude each other, exactly one must be given: `both` says
    /// whether both were.
    fn exclusive_fields(&mut self, index: usize, pairs: &[([&'static str; 2], bool)]) {
        for ([first, second], both) in pairs {
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
    }

    /// The first language model the step calls that has a declared price, and the price.
    fn priced_model<'r>(&self, models: &[(NamedRef<'r>, ModelRole)]) -> Option<(&'r str, Price)> {
        models
            .iter()
            .filter(|(_, role)| *role == ModelRole::Llm)
            .find_map(|(named, _)| {
                let price = self.plan.models.get(named.name)?.kind().price()?;
                Some((named.name, price))
            })
    }
}
