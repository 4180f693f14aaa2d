//! `type: structured` — schema-valid JSON from a model (the seed's SpecializedLoop).

use schemars::JsonSchema;
use serde::Deserialize;

use super::{ModelRole, PromptSpec, References, Sampling, SchemaSource, StepCommon, StepConfig};

/// Ask a model for JSON that validates against `schema`: constrained decoding where the engine
/// supports it, then repair, enum normalisation and validation, retrying with the errors fed back.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct StructuredStep {
    #[serde(flatten)]
    pub common: StepCommon,
    /// The model to call, by its name in `models:`.
    pub model: String,
    #[serde(flatten)]
    pub prompt: PromptSpec,
    #[serde(flatten)]
    pub sampling: Sampling,
    /// The JSON Schema the answer must satisfy: inline, or a path to a `.json` file.
    pub schema: SchemaSource,
    /// Attempts in all when the answer does not validate (default 3).
    #[serde(default)]
    #[schemars(range(min = 1, max = 20))]
    pub max_attempts: Option<u32>,
    /// Tools the model may call in a first phase, before it gives the structured answer.
    #[serde(default)]
    pub tools: Vec<String>,
}

impl StepConfig for StructuredStep {
    fn references<'a>(&'a self, refs: &mut References<'a>) {
        refs.model(&["model"], &self.model, ModelRole::Llm);
        self.prompt.references(refs);
        refs.sampling(&self.sampling);
        refs.schema(&["schema"], &self.schema);
        for (i, tool) in self.tools.iter().enumerate() {
            refs.tool(vec!["tools".into(), i.to_string()], tool);
        }
    }
}
