//! `type: template` — render text with no model involved.

use std::sync::Arc;

use crate::core::Failure;
use crate::orchestrate::StepHandler;
use crate::orchestrate::steps::Template;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{BuildContext, OutputKind, PromptSpec, References, StepCommon, StepConfig};

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
    fn output(&self) -> OutputKind {
        OutputKind::Text
    }

    fn references<'a>(&'a self, refs: &mut References<'a>) {
        self.prompt.references(refs);
    }

    fn build(&self, _: &mut dyn BuildContext) -> Result<Arc<dyn StepHandler>, Failure> {
        Ok(Arc::new(Template {
            source: self.prompt.runtime().user,
        }))
    }
}
