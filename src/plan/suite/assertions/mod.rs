//! The assertions of a test file: what a case's run must satisfy, on the plan's output, on one
//! step's output, or on the run record (latency, tokens, cost, status, failure code).
//!
//! Each assertion is a mapping with a `type` and that type's fields, plus the fields every
//! assertion has ([`AssertionCommon`]: `step`, `weight`, `threshold`, `description`). String
//! values are templates: before a case is scored they are rendered with the case's `inputs` and,
//! for dataset cases, its `row` (a string that is one `{{ expression }}` keeps the expression's
//! JSON type, so `sources: "{{ row.sources }}"` can be a list).
//!
//! Each assertion kind lives in its own file: its config struct (whose doc comments become the
//! JSON Schema's help text) and an [`AssertionKind`] impl saying its default threshold, what it
//! needs of the plan, and which mistakes in its own fields loading the test file reports. How a
//! kind is scored lives a layer up, in `suite::score`, one file per kind there too (`similar`
//! and `judge` grade with what only a test's session builds). Adding a kind is its file here and
//! its scoring file there (each with its `mod` line), and one line in the [`for_each_assertion!`]
//! registry, which expands to the `type`-tagged [`Assertion`] enum, its dispatch and the list of
//! names, and (through the same macro) to the scoring dispatch in `suite::score`.

use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::plan::Plan;
use crate::plan::diagnostic::{PlanError, suggestion};

mod contains;
mod equals;
mod fails_with;
mod hit_at_k;
mod icontains;
mod is_json;
mod json_path;
mod json_schema;
mod judge;
mod max_cost;
mod max_latency;
mod max_tokens;
mod mrr;
mod not_contains;
mod one_of;
mod recall_at_k;
mod regex;
mod retrieval;
mod similar;
mod starts_with;
mod status;

pub use contains::ContainsAssertion;
pub use equals::EqualsAssertion;
pub use fails_with::FailsWithAssertion;
pub use hit_at_k::HitAtKAssertion;
pub use icontains::IcontainsAssertion;
pub use is_json::IsJsonAssertion;
pub use json_path::JsonPathAssertion;
pub use json_schema::JsonSchemaAssertion;
pub use judge::JudgeAssertion;
pub use max_cost::MaxCostAssertion;
pub use max_latency::MaxLatencyAssertion;
pub use max_tokens::MaxTokensAssertion;
pub use mrr::MrrAssertion;
pub use not_contains::NotContainsAssertion;
pub use one_of::OneOfAssertion;
pub use recall_at_k::RecallAtKAssertion;
pub use regex::RegexAssertion;
pub use retrieval::{Ranking, Sources};
pub use similar::SimilarAssertion;
pub use starts_with::StartsWithAssertion;
pub use status::{ExpectedStatus, StatusAssertion};

/// The registry of assertion kinds: `Variant(Config) = "type-name"`, each with its doc comment
/// (the schema's description of that `type`). It hands the list to `$callback`, a macro that
/// takes it in this shape: [`assertion_enum!`] here, the scoring dispatch in `suite::score`.
macro_rules! for_each_assertion {
    ($callback:ident) => {
        $callback! {
            /// The output equals `value`.
            Equals(EqualsAssertion) = "equals",
            /// The output contains `value`.
            Contains(ContainsAssertion) = "contains",
            /// The output contains `value`, ignoring case.
            Icontains(IcontainsAssertion) = "icontains",
            /// The output does not contain `value`.
            NotContains(NotContainsAssertion) = "not_contains",
            /// The output starts with `value` (leading whitespace ignored).
            StartsWith(StartsWithAssertion) = "starts_with",
            /// The output matches the regular expression `value` (anywhere; anchor it with `^…$`).
            Regex(RegexAssertion) = "regex",
            /// The output is JSON (a structured step's output always is).
            IsJson(IsJsonAssertion) = "is_json",
            /// The output is valid against the JSON Schema `value`.
            JsonSchema(JsonSchemaAssertion) = "json_schema",
            /// The value at `path` in the output's JSON equals `equals` and/or contains `contains`.
            JsonPath(JsonPathAssertion) = "json_path",
            /// The output equals one of `value`.
            OneOf(OneOfAssertion) = "one_of",
            /// The run (or `step`) took at most `value`.
            MaxLatency(MaxLatencyAssertion) = "max_latency",
            /// The run (or `step`) used at most `value` tokens.
            MaxTokens(MaxTokensAssertion) = "max_tokens",
            /// The run (or `step`) cost at most `value`.
            MaxCost(MaxCostAssertion) = "max_cost",
            /// The run (or `step`) failed with the failure code `value`.
            FailsWith(FailsWithAssertion) = "fails_with",
            /// The run (or `step`) ended as `value`.
            Status(StatusAssertion) = "status",
            /// 1 when a relevant source is among the first `k` candidates, else 0.
            HitAtK(HitAtKAssertion) = "hit_at_k",
            /// The share of the relevant sources found among the first `k` candidates.
            RecallAtK(RecallAtKAssertion) = "recall_at_k",
            /// 1 / the rank of the first relevant candidate (0 when none is in the first `k`).
            Mrr(MrrAssertion) = "mrr",
            /// The cosine similarity of the output's and `value`'s embeddings.
            Similar(SimilarAssertion) = "similar",
            /// A language model's grade of the output against `rubric`.
            Judge(JudgeAssertion) = "judge",
        }
    };
}

pub(crate) use for_each_assertion;

/// Expands the registry into the [`Assertion`] enum and its dispatch.
macro_rules! assertion_enum {
    ($($(#[doc = $doc:literal])* $variant:ident($config:ty) = $name:literal,)+) => {
        /// One assertion; see the module docs.
        #[derive(Debug, Clone, Deserialize, JsonSchema)]
        #[serde(tag = "type")]
        pub enum Assertion {
            $($(#[doc = $doc])* #[serde(rename = $name)] $variant($config),)+
        }

        impl Assertion {
            /// Every `type` name, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// The `type` name, as written in the file.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Assertion::$variant(_) => $name,)+
                }
            }

            /// The fields every assertion has.
            pub fn common(&self) -> &AssertionCommon {
                match self {
                    $(Assertion::$variant(config) => &config.common,)+
                }
            }

            /// The kind's own behaviour.
            pub fn kind(&self) -> &dyn AssertionKind {
                match self {
                    $(Assertion::$variant(config) => config,)+
                }
            }
        }
    };
}

for_each_assertion!(assertion_enum);

impl Assertion {
    /// The score this assertion needs to pass when the file sets no `threshold`.
    pub fn default_threshold(&self) -> f64 {
        self.kind().default_threshold()
    }

    /// Whether it reads the candidates of a `retrieve` or `rerank` step.
    pub fn is_retrieval_metric(&self) -> bool {
        self.kind().is_retrieval_metric()
    }

    /// Whether it expects the run (or its step) to fail (`fails_with`, `status`).
    pub fn expects_failure(&self) -> bool {
        self.kind().expects_failure()
    }
}

/// Implemented by every assertion kind's config.
pub trait AssertionKind {
    /// The score it needs to pass when the file sets no `threshold`.
    fn default_threshold(&self) -> f64 {
        1.0
    }
    /// Whether it reads the candidates of a `retrieve` or `rerank` step (so its `step` must be
    /// one).
    fn is_retrieval_metric(&self) -> bool {
        false
    }
    /// Whether it expects the run (or its step) to fail, so that a case whose run failed can
    /// still pass.
    fn expects_failure(&self) -> bool {
        false
    }
    /// Checks its own fields against the plan and the test file, reporting mistakes to `checks`.
    fn check(&self, _checks: &mut Checks<'_>) {}
}

/// Fields every assertion has, whatever its type.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct AssertionCommon {
    /// The step whose output is checked (default: the plan's output). For `max_latency`, `max_tokens` and `max_cost`, the step's figures instead of the whole run's.
    #[serde(default)]
    pub step: Option<String>,
    /// How much this assertion counts in the case's weighted score (default 1).
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1000.0))]
    pub weight: Option<f64>,
    /// The score (0 to 1) this assertion needs to pass (default 1; `similar` 0.8, `judge` 0.5, `mrr` 0.2).
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub threshold: Option<f64>,
    /// What the assertion is for (shown in reports).
    #[serde(default)]
    pub description: Option<String>,
}

/// The text the text assertions (`contains`, `regex`, …) compare the output with.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ExpectedText {
    /// The text (a template).
    pub value: String,
}

/// A mistake an assertion finds in one of its own fields.
#[derive(Debug)]
pub struct Problem {
    /// The field, inside the assertion.
    pub field: &'static str,
    pub error: PlanError,
    /// The label under the field.
    pub label: &'static str,
    /// A help line, such as "did you mean …?".
    pub hint: Option<String>,
}

/// What an assertion's own checks read, and the problems they found.
pub struct Checks<'a> {
    plan: &'a Plan,
    /// The test file's directory: files an assertion names are relative to it.
    dir: &'a Path,
    /// The assertion as written (templates not yet rendered), which is what a case scores.
    json: &'a mut Value,
    problems: Vec<Problem>,
}

impl<'a> Checks<'a> {
    /// Checks of one assertion, written as `json`, of a test file in `dir` naming `plan`.
    pub fn new(plan: &'a Plan, dir: &'a Path, json: &'a mut Value) -> Self {
        Checks {
            plan,
            dir,
            json,
            problems: Vec::new(),
        }
    }

    /// The problems found, in the order they were reported.
    pub fn into_problems(self) -> Vec<Problem> {
        self.problems
    }

    /// Reports a mistake in `field`.
    fn report(
        &mut self,
        field: &'static str,
        error: PlanError,
        label: &'static str,
        hint: Option<String>,
    ) {
        self.problems.push(Problem {
            field,
            error,
            label,
            hint,
        });
    }

    /// Reports `name`, written in `field`, when the plan declares no model of that name.
    fn model_declared(&mut self, field: &'static str, name: &str) {
        let plan = self.plan;
        let models = &plan.raw.models;
        if models.contains_key(name) {
            return;
        }
        let hint = suggestion(name, "models", models.keys().map(String::as_str));
        self.report(
            field,
            PlanError::UnknownModel {
                name: name.to_string(),
            },
            "not a model of the plan",
            Some(hint),
        );
    }

    /// Replaces `field` of the assertion as scored (a file's content in place of its name).
    fn replace(&mut self, field: &str, value: Value) {
        self.json[field] = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_schema_enum() {
        let schema = crate::plan::schema::suite_schema();
        let names: Vec<&str> = schema["$defs"]["Assertion"]["properties"]["type"]["enum"]
            .as_array()
            .map(|values| values.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(names, Assertion::NAMES);
    }
}
