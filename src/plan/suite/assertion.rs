//! The assertions of a test file: what a case's run must satisfy, on the plan's output, on one
//! step's output, or on the run record (latency, tokens, cost, status, failure code).
//!
//! Each assertion is a mapping with a `type` and that type's fields, plus the fields every
//! assertion has ([`AssertionCommon`]: `step`, `weight`, `threshold`, `description`). String
//! values are templates: before a case is scored they are rendered with the case's `inputs` and,
//! for dataset cases, its `row` (a string that is one `{{ expression }}` keeps the expression's
//! JSON type, so `sources: "{{ row.sources }}"` can be a list).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::plan::duration::DurationSpec;

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

/// A text the output is compared with.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct TextCheck {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// The text (a template).
    pub value: String,
}

/// A JSON value the output is compared with.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ValueCheck {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// The expected value: text (compared after trimming whitespace at both ends) or any JSON value (compared with the output parsed as JSON).
    pub value: Value,
}

/// A check with no parameter.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PlainCheck {
    #[serde(flatten)]
    pub common: AssertionCommon,
}

/// Values the output must be one of.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ChoiceCheck {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// The allowed values, compared as `equals` compares.
    #[schemars(length(min = 1))]
    pub value: Vec<Value>,
}

/// A JSON Schema the output must be valid against.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SchemaCheck {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// The schema, inline, or a `.json` file relative to the test file.
    pub value: Value,
}

/// A value at a path inside the output's JSON.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct JsonPathCheck {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// Where, as dotted keys and bracketed indices: `label`, `items[0].name`, `$.scores[2]`.
    pub path: String,
    /// The value there must equal this.
    #[serde(default)]
    pub equals: Option<Value>,
    /// The value there (as text) must contain this.
    #[serde(default)]
    pub contains: Option<String>,
}

/// The longest the run (or `step`) may take.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct LatencyCheck {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// A duration, e.g. `30s`, `500ms`.
    pub value: DurationSpec,
}

/// The most tokens the run (or `step`) may use, prompt and completion together.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct TokensCheck {
    #[serde(flatten)]
    pub common: AssertionCommon,
    pub value: u64,
}

/// The most the run's (or `step`'s) model calls may cost, in the models' `price` currency.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct CostCheck {
    #[serde(flatten)]
    pub common: AssertionCommon,
    #[schemars(range(min = 0.0))]
    pub value: f64,
}

/// The failure code the run (or `step`) must fail with, e.g. `VALIDATION_RULE_FAILED`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct FailureCheck {
    #[serde(flatten)]
    pub common: AssertionCommon,
    pub value: String,
}

/// How the run (or `step`) must end.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct StatusCheck {
    #[serde(flatten)]
    pub common: AssertionCommon,
    pub value: ExpectedStatus,
}

/// A run's or step's end state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExpectedStatus {
    /// The run completed (a step: it ran and succeeded).
    Complete,
    /// It failed.
    Error,
    /// A step whose `when` was false.
    Skipped,
}

/// A retrieval metric of a `retrieve` or `rerank` step's candidates against the sources that
/// should have been found.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RankCheck {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// Look at the first `k` candidates (default: all of them).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10000))]
    pub k: Option<u32>,
    /// The relevant sources: a candidate is relevant when its `source` is one of them, or ends with `/` and one of them (`batch.md` matches `../corpus/docs/batch.md`).
    pub sources: Sources,
}

/// One source or a list of them (a template may render to a list).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Sources {
    List(Vec<String>),
    One(String),
}

impl Sources {
    pub fn names(&self) -> Vec<String> {
        match self {
            Sources::List(names) => names.clone(),
            Sources::One(name) => vec![name.clone()],
        }
    }
}

/// Meaning close to a reference text: the cosine similarity of their embeddings.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SimilarCheck {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// The reference text (a template).
    pub value: String,
    /// A bi-encoder model declared in the plan (`kind: onnx, task: bi-encoder`); default: the embedded all-MiniLM-L6-v2.
    #[serde(default)]
    pub model: Option<String>,
}

/// A language model grades the output against a rubric, answering `{pass, score, reason}`
/// through a JSON Schema (constrained decoding on the local model).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct JudgeCheck {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// What a good answer does (a template).
    pub rubric: String,
    /// A language model declared in the plan.
    pub model: String,
}

/// One assertion; see the module docs.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Assertion {
    /// The output equals `value`.
    Equals(ValueCheck),
    /// The output contains `value`.
    Contains(TextCheck),
    /// The output contains `value`, ignoring case.
    Icontains(TextCheck),
    /// The output does not contain `value`.
    NotContains(TextCheck),
    /// The output starts with `value` (leading whitespace ignored).
    StartsWith(TextCheck),
    /// The output matches the regular expression `value` (anywhere; anchor it with `^…$`).
    Regex(TextCheck),
    /// The output is JSON (a structured step's output always is).
    IsJson(PlainCheck),
    /// The output is valid against the JSON Schema `value`.
    JsonSchema(SchemaCheck),
    /// The value at `path` in the output's JSON equals `equals` and/or contains `contains`.
    JsonPath(JsonPathCheck),
    /// The output equals one of `value`.
    OneOf(ChoiceCheck),
    /// The run (or `step`) took at most `value`.
    MaxLatency(LatencyCheck),
    /// The run (or `step`) used at most `value` tokens.
    MaxTokens(TokensCheck),
    /// The run (or `step`) cost at most `value`.
    MaxCost(CostCheck),
    /// The run (or `step`) failed with the failure code `value`.
    FailsWith(FailureCheck),
    /// The run (or `step`) ended as `value`.
    Status(StatusCheck),
    /// 1 when a relevant source is among the first `k` candidates, else 0.
    HitAtK(RankCheck),
    /// The share of the relevant sources found among the first `k` candidates.
    RecallAtK(RankCheck),
    /// 1 / the rank of the first relevant candidate (0 when none is in the first `k`).
    Mrr(RankCheck),
    /// The cosine similarity of the output's and `value`'s embeddings.
    Similar(SimilarCheck),
    /// A language model's grade of the output against `rubric`.
    Judge(JudgeCheck),
}

impl Assertion {
    /// The fields every assertion has.
    pub fn common(&self) -> &AssertionCommon {
        match self {
            Assertion::Equals(c) => &c.common,
            Assertion::Contains(c)
            | Assertion::Icontains(c)
            | Assertion::NotContains(c)
            | Assertion::StartsWith(c)
            | Assertion::Regex(c) => &c.common,
            Assertion::IsJson(c) => &c.common,
            Assertion::JsonSchema(c) => &c.common,
            Assertion::JsonPath(c) => &c.common,
            Assertion::OneOf(c) => &c.common,
            Assertion::MaxLatency(c) => &c.common,
            Assertion::MaxTokens(c) => &c.common,
            Assertion::MaxCost(c) => &c.common,
            Assertion::FailsWith(c) => &c.common,
            Assertion::Status(c) => &c.common,
            Assertion::HitAtK(c) | Assertion::RecallAtK(c) | Assertion::Mrr(c) => &c.common,
            Assertion::Similar(c) => &c.common,
            Assertion::Judge(c) => &c.common,
        }
    }

    /// The `type` name, as written in the file.
    pub fn name(&self) -> &'static str {
        match self {
            Assertion::Equals(_) => "equals",
            Assertion::Contains(_) => "contains",
            Assertion::Icontains(_) => "icontains",
            Assertion::NotContains(_) => "not_contains",
            Assertion::StartsWith(_) => "starts_with",
            Assertion::Regex(_) => "regex",
            Assertion::IsJson(_) => "is_json",
            Assertion::JsonSchema(_) => "json_schema",
            Assertion::JsonPath(_) => "json_path",
            Assertion::OneOf(_) => "one_of",
            Assertion::MaxLatency(_) => "max_latency",
            Assertion::MaxTokens(_) => "max_tokens",
            Assertion::MaxCost(_) => "max_cost",
            Assertion::FailsWith(_) => "fails_with",
            Assertion::Status(_) => "status",
            Assertion::HitAtK(_) => "hit_at_k",
            Assertion::RecallAtK(_) => "recall_at_k",
            Assertion::Mrr(_) => "mrr",
            Assertion::Similar(_) => "similar",
            Assertion::Judge(_) => "judge",
        }
    }

    /// The score this assertion needs to pass when the file sets no `threshold`.
    pub fn default_threshold(&self) -> f64 {
        match self {
            Assertion::Similar(_) => 0.8,
            Assertion::Judge(_) => 0.5,
            Assertion::Mrr(_) => 0.2,
            _ => 1.0,
        }
    }

    /// Whether it reads the candidates of a `retrieve` or `rerank` step.
    pub fn is_retrieval_metric(&self) -> bool {
        matches!(
            self,
            Assertion::HitAtK(_) | Assertion::RecallAtK(_) | Assertion::Mrr(_)
        )
    }
}
