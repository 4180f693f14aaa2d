//! `type: structured` — schema-valid JSON from a model.

use crate::orchestrate::steps::{Agent, Structured, ToolCalls};
use std::sync::Arc;

use crate::core::Failure;
use crate::orchestrate::StepHandler;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    BuildContext, ModelCall, OutputKind, References, SchemaSource, StepCommon, StepConfig,
};

/// Ask a model for JSON that validates against `schema`: constrained decoding where the engine
/// supports it, then repair, enum normalisation and validation, retrying with the errors fed back.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct StructuredStep {
    #[serde(flatten)]
    pub common: StepCommon,
    #[serde(flatten)]
    pub call: ModelCall,
    /// The JSON Schema the answer must satisfy: inline, or a path to a `.json` file.
    pub schema: SchemaSource,
    /// Attempts in all when the answer does not validate (default 3).
    #[serde(default)]
    #[schemars(range(min = 1, max = 20))]
    pub max_attempts: Option<u32>,
    /// Tools the model may call in a first phase (a tool loop, bounded by the policy's
    /// `max_tool_iterations`, default 20); its findings are then in front of the model when it
    /// gives the structured answer.
    #[serde(default)]
    pub tools: Vec<String>,
}

impl StepConfig for StructuredStep {
    fn output(&self) -> OutputKind {
        OutputKind::of_schema(&self.schema)
    }

    fn references<'a>(&'a self, refs: &mut References<'a>) {
        self.call.references(refs);
        refs.schema(&["schema"], &self.schema);
        for (i, tool) in self.tools.iter().enumerate() {
            refs.tool(vec!["tools".into(), i.to_string()], tool);
        }
    }

    fn build(&self, context: &mut dyn BuildContext) -> Result<Arc<dyn StepHandler>, Failure> {
        let engine = context.engine(&self.call.model)?;
        let tool_phase = if self.tools.is_empty() {
            None
        } else {
            let tools = context.offered_tools(&self.tools)?;
            Some(Agent {
                engine: Arc::clone(&engine),
                prompt: self.call.prompt(),
                sampling: self.call.sampling(),
                tools,
                max_tool_iterations: context.policy_tool_iterations().unwrap_or(20),
                memory: None,
                context: None,
                // Forced through the decoder where the engine can, native tool calls elsewhere.
                tool_calls: if engine.model_info().constrained_decoding {
                    ToolCalls::Constrained
                } else {
                    ToolCalls::Native
                },
                // Its answer feeds the structured phase: it is never the plan's output.
                stream: None,
            })
        };
        Ok(Arc::new(Structured {
            engine,
            prompt: self.call.prompt(),
            sampling: self.call.sampling(),
            schema: context.schema(&self.schema)?,
            max_attempts: self.max_attempts.unwrap_or(3),
            tool_phase,
        }))
    }
}
