//! Test files (`*.test.yaml`): a plan, the cases it is tried on, what its runs must satisfy, and
//! the variants of the plan to compare.
//!
//! A test file is loaded like a plan — spanned YAML tree, the schema generated from these types
//! (`schemas/test.schema.json`), located diagnostics — and then checked against the plan it
//! names: the plan must itself be valid, every assertion's `step` must exist (and be a `retrieve`
//! or `rerank` step for retrieval metrics), every template must parse, each assertion passes its
//! kind's own checks (see [`assertions`]: regular expressions and schemas compile, models are
//! declared), the dataset must exist, and every variant's overrides must name something in the
//! plan and leave a valid plan. Nothing runs and no model is loaded.

pub mod assertions;
pub mod overrides;
pub mod raw;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::diagnostic::{Diagnostic, PlanError, Source, suggestion};
use super::load::{Loaded, load_file};
use super::schema::DocumentKind;
use super::steps::StepType;
use super::yaml::Node;
use super::{Plan, load_plan, load_plan_with};
use crate::prompt::analyze_template;

pub use assertions::Assertion;
use assertions::Checks;
pub use raw::{RawCase, RawDataset, RawSuite, RawVariant};

/// An assertion as checked: its JSON as written (templates not yet rendered), the line it is on,
/// and its parsed form.
#[derive(Debug, Clone)]
pub struct AssertionSpec {
    pub json: Value,
    pub parsed: Assertion,
    /// 1-based line of the assertion in the test file.
    pub line: usize,
}

/// A case written in the test file, checked.
#[derive(Debug, Clone)]
pub struct CaseSpec {
    pub name: String,
    pub description: Option<String>,
    pub inputs: Map<String, Value>,
    pub assertions: Vec<AssertionSpec>,
    pub threshold: Option<f64>,
    pub line: usize,
}

/// The dataset, checked.
#[derive(Debug, Clone)]
pub struct DatasetSpec {
    pub file: PathBuf,
    pub id: Option<String>,
    pub inputs: Option<Map<String, Value>>,
    pub assertions: Vec<AssertionSpec>,
    pub threshold: Option<f64>,
    pub limit: Option<u64>,
    pub line: usize,
}

/// A variant, with its plan loaded and checked.
#[derive(Debug, Clone)]
pub struct VariantSpec {
    pub name: String,
    pub description: Option<String>,
    pub set: Vec<(String, Value)>,
    pub plan: Plan,
}

/// A test file that passed every check.
#[derive(Debug, Clone)]
pub struct Suite {
    pub path: PathBuf,
    pub source: Source,
    pub description: Option<String>,
    pub min_pass_rate: f64,
    /// The plan as written.
    pub plan: Plan,
    /// Assertions every case gets.
    pub shared: Vec<AssertionSpec>,
    pub cases: Vec<CaseSpec>,
    pub dataset: Option<DatasetSpec>,
    /// The variants; without any in the file, one named `plan`: the plan as written.
    pub variants: Vec<VariantSpec>,
}

/// Whether `path` names a test file (`*.test.yaml` or `*.test.yml`).
pub fn is_test_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".test.yaml") || n.ends_with(".test.yml"))
}

/// Loads a test file and runs every check on it and on the plan it names.
pub fn load_suite(path: &Path) -> Result<Suite, Vec<Diagnostic>> {
    let loaded: Loaded<RawSuite> = load_file(path, DocumentKind::Suite)?;
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut checker = Checker {
        loaded: &loaded,
        dir: &dir,
        diagnostics: Vec::new(),
    };
    let raw = &loaded.value;
    let plan_path = dir.join(&raw.plan);
    let plan = match load_plan(&plan_path, None) {
        Ok(plan) => plan,
        Err(problems) => {
            checker.plan_invalid(&plan_path, problems, &["plan"], None);
            return Err(checker.diagnostics);
        }
    };
    let shared = checker.assertions(&plan, &["assert"], &raw.assert);
    let cases = checker.cases(&plan);
    let dataset = raw
        .dataset
        .as_ref()
        .map(|dataset| checker.dataset(&plan, dataset));
    if raw.cases.is_empty() && raw.dataset.is_none() {
        checker.error(&[], PlanError::NoCases, "no `cases` and no `dataset`");
    }
    let variants = checker.variants(&plan, &plan_path);
    if !checker.diagnostics.is_empty() {
        return Err(checker.diagnostics);
    }
    Ok(Suite {
        path: path.to_path_buf(),
        source: loaded.source.clone(),
        description: raw.description.clone(),
        min_pass_rate: raw.min_pass_rate.unwrap_or(1.0),
        plan,
        shared,
        cases,
        dataset,
        variants,
    })
}

/// Collects the diagnostics of a test file's checks.
struct Checker<'a> {
    loaded: &'a Loaded<RawSuite>,
    dir: &'a Path,
    diagnostics: Vec<Diagnostic>,
}

impl Checker<'_> {
    fn node(&self, path: &[&str]) -> &Node {
        self.loaded.root.locate(path.iter().copied()).node
    }

    fn line(&self, path: &[&str]) -> usize {
        self.loaded.source.line_col(self.node(path).span.start).0
    }

    /// A diagnostic on the node at `path` (or, when the path ends at a key, on that key).
    fn error(&mut self, path: &[&str], error: PlanError, label: &str) -> &mut Diagnostic {
        let span = self.node(path).span.clone();
        self.diagnostics
            .push(Diagnostic::at(error, &self.loaded.source, span, label));
        let last = self.diagnostics.len() - 1;
        &mut self.diagnostics[last]
    }

    /// Checks the cases written out: unique names, and their assertions against `plan`.
    fn cases(&mut self, plan: &Plan) -> Vec<CaseSpec> {
        let mut names = HashSet::new();
        let mut cases = Vec::new();
        for (index, case) in self.loaded.value.cases.iter().enumerate() {
            let at = index.to_string();
            if !names.insert(case.name.as_str()) {
                self.error(
                    &["cases", at.as_str(), "name"],
                    PlanError::DuplicateCase {
                        name: case.name.clone(),
                    },
                    "a second case of this name",
                );
            }
            cases.push(CaseSpec {
                name: case.name.clone(),
                description: case.description.clone(),
                inputs: case.inputs.clone(),
                assertions: self.assertions(plan, &["cases", at.as_str(), "assert"], &case.assert),
                threshold: case.threshold,
                line: self.line(&["cases", at.as_str()]),
            });
        }
        cases
    }

    /// Checks the dataset: its file must be readable, its input templates must parse, and its
    /// assertions must fit `plan`.
    fn dataset(&mut self, plan: &Plan, dataset: &RawDataset) -> DatasetSpec {
        let file = self.dir.join(&dataset.file);
        if let Err(e) = std::fs::metadata(&file) {
            self.error(
                &["dataset", "file"],
                PlanError::DatasetUnreadable {
                    path: file.display().to_string(),
                    reason: e.to_string(),
                },
                "cannot be read",
            );
        }
        if let Some(inputs) = &dataset.inputs {
            for (name, value) in inputs {
                self.templates(&["dataset", "inputs", name], value);
            }
        }
        DatasetSpec {
            file,
            id: dataset.id.clone(),
            inputs: dataset.inputs.clone(),
            assertions: self.assertions(plan, &["dataset", "assert"], &dataset.assert),
            threshold: dataset.threshold,
            limit: dataset.limit,
            line: self.line(&["dataset"]),
        }
    }

    /// The plan (or a variant's version of it) is invalid: one diagnostic here, then its own.
    fn plan_invalid(
        &mut self,
        plan_path: &Path,
        problems: Vec<Diagnostic>,
        at: &[&str],
        variant: Option<&str>,
    ) {
        let count = problems.len();
        let plural = if count == 1 { "" } else { "s" };
        let (error, label) = match variant {
            None => (
                PlanError::TestPlanInvalid {
                    path: plan_path.display().to_string(),
                    count,
                    plural,
                },
                "this plan",
            ),
            Some(variant) => (
                PlanError::VariantInvalid {
                    variant: variant.to_string(),
                    count,
                    plural,
                },
                "this variant",
            ),
        };
        self.error(at, error, label);
        self.diagnostics.extend(problems);
    }

    /// Checks the assertions at `path` (a list) against `plan`.
    fn assertions(
        &mut self,
        plan: &Plan,
        path: &[&str],
        assertions: &[Assertion],
    ) -> Vec<AssertionSpec> {
        let list = self.node(path).clone();
        assertions
            .iter()
            .zip(list.items())
            .enumerate()
            .map(|(index, (assertion, node))| {
                let at = index.to_string();
                let mut here: Vec<&str> = path.to_vec();
                here.push(&at);
                let mut json = node.to_json();
                self.assertion(plan, &here, assertion, &mut json);
                AssertionSpec {
                    json,
                    parsed: assertion.clone(),
                    line: self.loaded.source.line_col(node.span.start).0,
                }
            })
            .collect()
    }

    /// Checks one assertion: its templates, the step it names, and its kind's own fields (which
    /// may complete `json`, the assertion as a case scores it).
    fn assertion(&mut self, plan: &Plan, at: &[&str], assertion: &Assertion, json: &mut Value) {
        self.templates(at, json);
        self.assertion_step(plan, at, assertion);
        let mut checks = Checks::new(plan, self.dir, json);
        assertion.kind().check(&mut checks);
        for problem in checks.into_problems() {
            let mut field = at.to_vec();
            field.push(problem.field);
            self.error(&field, problem.error, problem.label).hint = problem.hint;
        }
    }

    /// An assertion's `step` must be a step of the plan; a retrieval metric needs one, and it
    /// must be a `retrieve` or `rerank` step.
    fn assertion_step(&mut self, plan: &Plan, at: &[&str], assertion: &Assertion) {
        let Some(step) = &assertion.common().step else {
            if assertion.is_retrieval_metric() {
                self.error(
                    at,
                    PlanError::NotRetrievalStep {
                        step: "(the plan's output)".into(),
                        kind: "output".into(),
                        assertion: assertion.name().to_string(),
                    },
                    "needs `step:`",
                );
            }
            return;
        };
        let mut field = at.to_vec();
        field.push("step");
        let steps = &plan.raw.steps;
        let Some(found) = steps.iter().find(|s| &s.common().name == step) else {
            let names = steps.iter().map(|s| s.common().name.as_str());
            self.error(
                &field,
                PlanError::UnknownAssertionStep { name: step.clone() },
                "no such step in the plan",
            )
            .hint = Some(suggestion(step, "steps", names));
            return;
        };
        let step_type = found.step_type();
        if assertion.is_retrieval_metric()
            && !matches!(step_type, StepType::Retrieve | StepType::Rerank)
        {
            self.error(
                &field,
                PlanError::NotRetrievalStep {
                    step: step.clone(),
                    kind: step_type.name().to_string(),
                    assertion: assertion.name().to_string(),
                },
                "not a retrieve or rerank step",
            );
        }
    }

    /// Every template among the strings of `value` must parse.
    fn templates(&mut self, at: &[&str], value: &Value) {
        match value {
            Value::String(text) if text.contains("{{") || text.contains("{%") => {
                if let Err(e) = analyze_template(text) {
                    self.error(
                        at,
                        PlanError::TemplateSyntax { message: e.message },
                        "does not parse",
                    );
                }
            }
            Value::Array(items) => items.iter().for_each(|item| self.templates(at, item)),
            Value::Object(map) => {
                for (key, item) in map {
                    let mut here = at.to_vec();
                    here.push(key);
                    self.templates(&here, item);
                }
            }
            _ => {}
        }
    }

    /// Checks the variants and loads each one's plan; without variants, the plan as written.
    fn variants(&mut self, plan: &Plan, plan_path: &Path) -> Vec<VariantSpec> {
        let raw = &self.loaded.value;
        if raw.variants.is_empty() {
            return vec![VariantSpec {
                name: "plan".into(),
                description: None,
                set: Vec::new(),
                plan: plan.clone(),
            }];
        }
        let plan_json = match super::yaml::parse(&plan.source.text) {
            Ok(root) => root.to_json(),
            Err(_) => Value::Null,
        };
        let mut names = HashSet::new();
        let mut variants = Vec::new();
        for (index, variant) in raw.variants.iter().enumerate() {
            let at = index.to_string();
            if !names.insert(variant.name.as_str()) {
                self.error(
                    &["variants", at.as_str(), "name"],
                    PlanError::DuplicateVariant {
                        name: variant.name.clone(),
                    },
                    "a second variant of this name",
                );
                continue;
            }
            if !self.overrides_apply(&at, variant, &plan_json) {
                continue;
            }
            let set: Vec<(String, Value)> = variant
                .set
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            match load_plan_with(plan_path, &set) {
                Ok(plan) => variants.push(VariantSpec {
                    name: variant.name.clone(),
                    description: variant.description.clone(),
                    set,
                    plan,
                }),
                Err(problems) => self.plan_invalid(
                    plan_path,
                    problems,
                    &["variants", at.as_str(), "name"],
                    Some(&variant.name),
                ),
            }
        }
        variants
    }

    /// Whether every override of the variant at index `at` can be set on the plan (as JSON);
    /// each one that cannot is reported on its key.
    fn overrides_apply(&mut self, at: &str, variant: &RawVariant, plan_json: &Value) -> bool {
        let mut trial = plan_json.clone();
        let mut applies = true;
        for (key, value) in &variant.set {
            let Err(reason) = overrides::apply(&mut trial, key, value) else {
                continue;
            };
            applies = false;
            let key_span = self
                .loaded
                .root
                .locate(["variants", at, "set"])
                .node
                .entry(key)
                .map(|e| e.key_span.clone());
            let span = key_span.unwrap_or_else(|| self.node(&["variants", at]).span.clone());
            self.diagnostics.push(Diagnostic::at(
                PlanError::BadOverride {
                    key: key.clone(),
                    reason: reason.to_string(),
                },
                &self.loaded.source,
                span,
                "cannot be set",
            ));
        }
        applies
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_files_are_told_apart_by_name() {
        assert!(is_test_file(Path::new("plans/rag.test.yaml")));
        assert!(is_test_file(Path::new("x.test.yml")));
        assert!(!is_test_file(Path::new("plans/rag.yaml")));
        assert!(!is_test_file(Path::new("plans/test.yaml")));
    }
}
