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

use super::PolicyFile;
use super::diagnostic::{
    Diagnostic, PlanError, Source, did_you_mean, first_line_of, regex_reason, suggestion,
};
use super::graph::{GraphProblem, StepGraph};
use super::load::Loaded;
use super::policy::{EffectivePolicy, Limit, PolicyOrigin};
use super::raw::RawPlan;
use super::steps::{
    FieldPath, ModelRole, RawStep, SchemaSource, StepFacts, TemplateRef, TemplateSource,
};
use super::yaml::Node;
use crate::constraint::check_lark;
use crate::corpora::matching_files;
use crate::orchestrate::Feedback;
use crate::prompt::{self, GLOBAL_FUNCTIONS, TemplateInfo, TemplateSyntaxError, roots};

mod boundaries;
mod declarations;
mod policy;
mod references;
mod step;
mod templates;

use templates::{PromptFile, Scope};

/// What a step's result offers to templates: `steps.<name>.output`, `steps.<name>.usage`, and
/// `steps.<name>.error` (null unless the step failed and the run went on past it).
pub const STEP_FIELDS: &[&str] = &["output", "usage", "error"];

/// The result of checking a plan.
pub struct Analysis {
    pub graph: StepGraph,
    pub policy: EffectivePolicy,
    pub diagnostics: Vec<Diagnostic>,
    /// Per step, the steps its templates read through `steps.<name>` (None: it reads `steps`
    /// as a whole, so every upstream step).
    pub reads: Vec<Option<BTreeSet<usize>>>,
    /// Per step, what building it needs to know about the plan around it.
    pub facts: Vec<StepFacts>,
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
    policy_file: Option<&PolicyFile>,
    nesting: &Nesting<'_>,
) -> Analysis {
    let (graph, graph_problems) = StepGraph::build(&plan.value.steps);
    let facts = step_facts(&plan.value, &graph);
    let mut checker = Checker {
        plan: &plan.value,
        root: &plan.root,
        source: &plan.source,
        dir: plan_dir,
        policy: &policy,
        policy_file,
        nesting,
        graph: &graph,
        prompts: HashMap::new(),
        out: Vec::new(),
        reads: vec![Some(BTreeSet::new()); plan.value.steps.len()],
        facts: &facts,
    };
    checker.duplicate_steps();
    checker.graph_problems(&graph_problems);
    checker.inputs();
    checker.models();
    checker.corpora();
    checker.tools();
    checker.agents();
    checker.reduce();
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
        facts,
    }
}

/// What each step's build needs to know about the plan around it: the nearest upstream retrieve
/// step's query, whether its answer is the plan's output unchanged, the voting step it stands by
/// for.
fn step_facts(plan: &RawPlan, graph: &StepGraph) -> Vec<StepFacts> {
    let last = plan.steps.len().saturating_sub(1);
    let output_step = match &plan.output {
        None => Some(last),
        Some(template) => prompt::single_path(template).and_then(|parts| match parts.as_slice() {
            [steps, name, output] if steps == "steps" && output == "output" => {
                plan.steps.iter().position(|s| &s.common().name == name)
            }
            _ => None,
        }),
    };
    let mut facts: Vec<StepFacts> = (0..plan.steps.len())
        .map(|index| StepFacts {
            upstream_query: graph.ancestors(index).iter().rev().find_map(|&u| {
                match &plan.steps[u] {
                    RawStep::Retrieve(retrieve) => Some(retrieve.query.clone()),
                    _ => None,
                }
            }),
            // Only the last step's answer can be streamed as it is made: an earlier one's
            // stream would interleave with the steps after it.
            output_as_is: output_step == Some(index) && index == last,
            standby_for: None,
            feedback: match &plan.steps[index] {
                RawStep::Validate(validate) => validate.feedback.as_ref().and_then(|spec| {
                    let step = plan
                        .steps
                        .iter()
                        .position(|s| s.common().name == spec.step)?;
                    Some(Feedback {
                        step,
                        max_attempts: spec.max_attempts,
                    })
                }),
                _ => None,
            },
        })
        .collect();
    for step in &plan.steps {
        if let RawStep::Redundant(redundant) = step
            && let Some(fallback) = &redundant.voting.fallback
            && let Some(at) = plan.steps.iter().position(|s| &s.common().name == fallback)
        {
            facts[at].standby_for = Some(redundant.common.name.clone());
        }
    }
    facts
}

struct Checker<'a> {
    plan: &'a RawPlan,
    root: &'a Node,
    source: &'a Source,
    dir: &'a Path,
    policy: &'a EffectivePolicy,
    /// The policy from outside the plan (`--policy`, or handed down to a sub-plan), if any.
    policy_file: Option<&'a PolicyFile>,
    nesting: &'a Nesting<'a>,
    graph: &'a StepGraph,
    prompts: HashMap<String, Option<Rc<PromptFile>>>,
    out: Vec<Diagnostic>,
    reads: Vec<Option<BTreeSet<usize>>>,
    facts: &'a [StepFacts],
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
}

impl Checker<'_> {
    /// A validate step's `feedback.step` must name a step upstream of it that calls a model.
    fn feedback_target(&mut self, index: usize, name: &str) {
        let upstream = self.graph.ancestors(index);
        let target = self.plan.steps.iter().position(|s| s.common().name == name);
        let label = match target {
            None => "no step has this name",
            Some(t) if !upstream.contains(&t) => "not upstream of this validate step",
            Some(t) if !self.plan.steps[t].step_type().calls_model() => "this step calls no model",
            Some(_) => return,
        };
        let candidates: Vec<&str> = upstream
            .iter()
            .filter(|&&u| self.plan.steps[u].step_type().calls_model())
            .map(|&u| self.step_name(u))
            .collect();
        let listed: Vec<String> = candidates.iter().map(|c| format!("`{c}`")).collect();
        let hint = did_you_mean(name, candidates.iter().copied()).unwrap_or_else(|| {
            if listed.is_empty() {
                "no step upstream of this one calls a model".to_string()
            } else {
                format!(
                    "the model steps upstream of this one: {}",
                    listed.join(", ")
                )
            }
        });
        let span = self.span(&step_path(index, &path(&["feedback", "step"])));
        let step = self.step_name(index).to_string();
        self.emit(
            PlanError::FeedbackTarget {
                name: name.into(),
                step,
            },
            span,
            label,
        )
        .hint = Some(hint);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts_of(plan: serde_json::Value) -> Vec<StepFacts> {
        let plan: RawPlan = serde_json::from_value(plan).expect("a valid plan");
        let (graph, _) = StepGraph::build(&plan.steps);
        step_facts(&plan, &graph)
    }

    fn retrieve(name: &str, query: &str) -> serde_json::Value {
        serde_json::json!({ "type": "retrieve", "name": name, "corpus": "docs", "query": query })
    }

    #[test]
    fn a_step_learns_the_query_of_the_nearest_retrieve_upstream() {
        let facts = facts_of(serde_json::json!({
            "version": 1, "name": "p",
            "steps": [
                retrieve("wide", "{{ inputs.a }}"),
                retrieve("narrow", "{{ inputs.b }}"),
                { "type": "rerank", "name": "best" },
                { "type": "template", "name": "alone", "needs": [], "template": "x" },
            ],
        }));
        assert_eq!(facts[0].upstream_query, None);
        assert_eq!(facts[2].upstream_query.as_deref(), Some("{{ inputs.b }}"));
        assert_eq!(facts[3].upstream_query, None);
    }

    #[test]
    fn only_the_last_step_whose_answer_is_the_output_streams() {
        let plan = |output: Option<&str>| {
            let mut plan = serde_json::json!({
                "version": 1, "name": "p",
                "steps": [
                    { "type": "template", "name": "first", "template": "a" },
                    { "type": "template", "name": "last", "template": "b" },
                ],
            });
            if let Some(output) = output {
                plan["output"] = output.into();
            }
            facts_of(plan)
                .iter()
                .map(|f| f.output_as_is)
                .collect::<Vec<_>>()
        };
        assert_eq!(plan(None), [false, true]);
        assert_eq!(plan(Some(" {{steps.last.output}}\n")), [false, true]);
        assert_eq!(plan(Some("{{ steps.first.output }}")), [false, false]);
        assert_eq!(
            plan(Some("Answer: {{ steps.last.output }}")),
            [false, false]
        );
        assert_eq!(
            plan(Some("{{ steps.last.output | upper }}")),
            [false, false]
        );
    }

    #[test]
    fn a_voting_fallback_knows_whose_place_it_takes() {
        let facts = facts_of(serde_json::json!({
            "version": 1, "name": "p",
            "steps": [
                { "type": "redundant", "name": "vote", "model": "m", "template": "q",
                  "voting": { "method": "majority", "fallback": "careful" } },
                { "type": "template", "name": "careful", "template": "x" },
            ],
        }));
        assert_eq!(facts[0].standby_for, None);
        assert_eq!(facts[1].standby_for.as_deref(), Some("vote"));
    }

    #[test]
    fn a_validate_step_knows_where_its_feedback_goes() {
        let facts = facts_of(serde_json::json!({
            "version": 1, "name": "p",
            "steps": [
                { "type": "infer", "name": "answer", "model": "m", "template": "q" },
                { "type": "template", "name": "tidy", "template": "{{ input }}" },
                { "type": "validate", "name": "check", "rules": [{ "min_length": 3 }],
                  "feedback": { "step": "answer" } },
                { "type": "validate", "name": "plain", "rules": [{ "min_length": 3 }] },
            ],
        }));
        assert_eq!(
            facts[2].feedback,
            Some(Feedback {
                step: 0,
                max_attempts: 3
            })
        );
        assert_eq!(facts[3].feedback, None);
    }
}
