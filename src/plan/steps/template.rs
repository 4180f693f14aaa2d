//! `type: template` — render text with no model involved.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{PromptSpec, References, StepCommon, StepConfig};

/// Render a template (inline `template:` or a `prompt:` file); the output is the rendered text.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct TemplateStep {
    #[serde(flatten)]
    pub common: StepCommon,
    #[serde(flatten)]
    pub prompt: PromptSpec,
}

impl StepConfig for TemplateStep {
    fn references<'a>(&'a self, refs: &mut References<'a>) {
        self.prompt.references(refs);
    }
}
