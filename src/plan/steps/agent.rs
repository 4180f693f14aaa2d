//! `type: agent` — a tool-calling loop.

use crate::orchestrate::steps::Agent;
use crate::plan::build;
use std::sync::Arc;

use crate::core::Failure;
use crate::orchestrate::StepHandler;
use crate::plan::build::Builder;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{ModelRole, PromptSpec, References, Sampling, StepCommon, StepConfig, TemplateSource};

/// The model calls declared tools, sees their results, and loops until it gives a final answer.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AgentStep {
    #[serde(flatten)]
    pub common: StepCommon,
    /// The model to call, by its name in `models:`.
    pub model: String,
    #[serde(flatten)]
    pub prompt: PromptSpec,
    #[serde(flatten)]
    pub sampling: Sampling,
    /// Tools the agent may call, by their names in `tools:`.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Most rounds of tool calls before the step fails with ORCHESTRATION_ITERATION_LIMIT (default 20).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub max_tool_iterations: Option<u32>,
    /// Most messages kept in the conversation memory (the system message is always kept).
    #[serde(default)]
    #[schemars(range(min = 2))]
    pub memory: Option<u32>,
    /// A template for retrieved context shown before the user message on every turn, never stored in memory.
    #[serde(default)]
    pub context: Option<String>,
    /// How tool calls are obtained: the model's native format, or forced through constrained decoding.
    #[serde(default)]
    pub tool_calls: ToolCallMode,
}

/// How an agent's tool calls are obtained from the model (defined beside the agent loop).
pub use crate::orchestrate::steps::ToolCalls as ToolCallMode;

impl StepConfig for AgentStep {
    fn references<'a>(&'a self, refs: &mut References<'a>) {
        refs.model(&["model"], &self.model, ModelRole::Llm);
        self.prompt.references(refs);
        refs.sampling(&self.sampling);
        for (i, tool) in self.tools.iter().enumerate() {
            refs.tool(vec!["tools".into(), i.to_string()], tool);
        }
        if let Some(context) = &self.context {
            refs.template(&["context"], context, TemplateSource::Inline);
        }
        if let Some(n) = self.max_tool_iterations {
            refs.max_tool_iterations = Some((vec!["max_tool_iterations".into()], n));
        }
    }

    fn build(&self, builder: &mut Builder<'_>) -> Result<Arc<dyn StepHandler>, Failure> {
        let tools = builder.offered_tools(&self.tools)?;
        Ok(Arc::new(Agent {
            engine: builder.engine(&self.model)?,
            prompt: build::prompt(&self.prompt),
            sampling: build::sampling(&self.sampling),
            tools,
            max_tool_iterations: self
                .max_tool_iterations
                .or(builder.policy_tool_iterations())
                .unwrap_or(20),
            memory: self.memory.map(|m| m as usize),
            context: self.context.clone(),
            tool_calls: self.tool_calls,
        }))
    }
}
