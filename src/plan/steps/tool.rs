//! `type: tool` — one call of a declared tool.

use std::sync::Arc;

use crate::core::Failure;
use crate::orchestrate::StepHandler;
use crate::orchestrate::steps::Tool as ToolHandler;
use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{BuildContext, OutputKind, References, StepCommon, StepConfig, TemplateSource};

/// Call one declared tool. String arguments are templates; the arguments are validated against the
/// tool's `parameters` schema before it runs.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ToolStep {
    #[serde(flatten)]
    pub common: StepCommon,
    /// The tool to call, by its name in `tools:`.
    pub tool: String,
    /// Arguments; string values are minijinja templates.
    #[serde(default)]
    pub args: IndexMap<String, Value>,
}

impl StepConfig for ToolStep {
    fn output(&self) -> OutputKind {
        OutputKind::OfTool(self.tool.clone())
    }

    fn references<'a>(&'a self, refs: &mut References<'a>) {
        refs.tool(vec!["tool".into()], &self.tool);
        for (name, value) in &self.args {
            if let Value::String(text) = value {
                refs.template_at(
                    vec!["args".into(), name.clone()],
                    text,
                    TemplateSource::Inline,
                    &[],
                );
            }
        }
    }

    fn build(&self, context: &mut dyn BuildContext) -> Result<Arc<dyn StepHandler>, Failure> {
        Ok(Arc::new(ToolHandler {
            tool: context.tool(&self.tool)?,
            args: self.args.clone(),
        }))
    }
}
