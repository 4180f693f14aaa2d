//! `type: validate` — deterministic checks on the previous step's output, and where a failed
//! check sends the run back to (`feedback`).

use std::sync::Arc;

use crate::core::Failure;
use crate::orchestrate::StepHandler;
use crate::orchestrate::steps::Validate;
use crate::validate::Rule;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{BuildContext, OutputKind, References, StepCommon, StepConfig, TemplateSource};

/// Check the input against rules; on success the input passes through unchanged, on failure the
/// step fails with VALIDATION_RULE_FAILED naming every broken rule.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ValidateStep {
    #[serde(flatten)]
    pub common: StepCommon,
    /// The rules, each a one-key mapping such as `{ min_length: 20 }`.
    #[schemars(length(min = 1))]
    pub rules: Vec<ValidateRule>,
    /// On failure, send the run back to a model step upstream: it runs again with its earlier answer and the broken rules appended to its messages, the steps between it and this one run again, and the rules are checked again.
    #[serde(default)]
    pub feedback: Option<FeedbackSpec>,
}

/// Where a failed validation sends the run back to, and how often.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedbackSpec {
    /// The step to run again: an `infer`, `structured`, `redundant`, `agent` or `route` step upstream of this one.
    pub step: String,
    /// Checks in all, the first included (default 3).
    #[serde(default = "default_feedback_attempts")]
    #[schemars(range(min = 1, max = 20))]
    pub max_attempts: u32,
}

fn default_feedback_attempts() -> u32 {
    3
}

/// One validation rule.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ValidateRule {
    /// The text has at least this many characters.
    MinLength(u32),
    /// The text has at most this many characters.
    MaxLength(u32),
    /// The text matches this regular expression.
    Regex(String),
    /// The text contains this string.
    Contains(String),
    /// The text does not contain this string.
    NotContains(String),
    /// The text (trimmed) is one of these values.
    Enum(Vec<String>),
    /// The input validates against this JSON Schema (text that parses as JSON is checked as that JSON, other text as a string).
    JsonSchema(Value),
    /// A minijinja expression over `input`, `inputs`, `steps` and `vars` that must be true.
    Expr(String),
}

impl StepConfig for ValidateStep {
    fn output(&self) -> OutputKind {
        OutputKind::Input
    }

    fn references<'a>(&'a self, refs: &mut References<'a>) {
        for (i, rule) in self.rules.iter().enumerate() {
            let at = |key: &str| vec!["rules".to_string(), i.to_string(), key.to_string()];
            match rule {
                ValidateRule::Regex(regex) => refs.regexes.push((at("regex"), regex)),
                ValidateRule::JsonSchema(schema) => {
                    refs.schema_values.push((at("json_schema"), schema))
                }
                ValidateRule::Expr(expr) => {
                    refs.template_at(at("expr"), expr, TemplateSource::Expression, &[])
                }
                ValidateRule::MinLength(_)
                | ValidateRule::MaxLength(_)
                | ValidateRule::Contains(_)
                | ValidateRule::NotContains(_)
                | ValidateRule::Enum(_) => {}
            }
        }
    }

    fn build(&self, _: &mut dyn BuildContext) -> Result<Arc<dyn StepHandler>, Failure> {
        let mut rules = Vec::new();
        let mut expressions = Vec::new();
        for rule in &self.rules {
            match rule {
                ValidateRule::MinLength(n) => rules.push(Rule::MinLength(*n as usize)),
                ValidateRule::MaxLength(n) => rules.push(Rule::MaxLength(*n as usize)),
                ValidateRule::Regex(pattern) => rules.push(Rule::regex(pattern)?),
                ValidateRule::Contains(text) => rules.push(Rule::Contains(text.clone())),
                ValidateRule::NotContains(text) => rules.push(Rule::NotContains(text.clone())),
                ValidateRule::Enum(values) => rules.push(Rule::OneOf(values.clone())),
                ValidateRule::JsonSchema(schema) => rules.push(Rule::json_schema(schema)?),
                ValidateRule::Expr(expression) => expressions.push(expression.clone()),
            }
        }
        Ok(Arc::new(Validate { rules, expressions }))
    }
}
