//! `type: judge` — a language model of the plan (it must be declared) grades the output against
//! a rubric.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AssertionCommon, AssertionKind, Checks};

/// A language model grades the output against a rubric, answering `{pass, score, reason}`
/// through a JSON Schema (constrained decoding on the local model).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct JudgeAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// What a good answer does (a template).
    pub rubric: String,
    /// A language model declared in the plan.
    pub model: String,
}

impl AssertionKind for JudgeAssertion {
    fn default_threshold(&self) -> f64 {
        0.5
    }

    fn check(&self, checks: &mut Checks<'_>) {
        checks.model_declared("model", &self.model);
    }
}
