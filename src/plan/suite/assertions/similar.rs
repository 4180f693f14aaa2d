//! `type: similar` — the output means about what a reference text means: the cosine similarity
//! of their embeddings, by the plan's bi-encoder when one is named (it must be declared).

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AssertionCommon, AssertionKind, Checks};

/// Meaning close to a reference text: the cosine similarity of their embeddings.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SimilarAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// The reference text (a template).
    pub value: String,
    /// A bi-encoder model declared in the plan (`kind: onnx, task: bi-encoder`); default: the embedded all-MiniLM-L6-v2.
    #[serde(default)]
    pub model: Option<String>,
}

impl AssertionKind for SimilarAssertion {
    fn default_threshold(&self) -> f64 {
        0.8
    }

    fn check(&self, checks: &mut Checks<'_>) {
        if let Some(model) = &self.model {
            checks.model_declared("model", model);
        }
    }
}
