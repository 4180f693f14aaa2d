//! `type: agent` — a tool-calling loop.

use crate::orchestrate::steps::Agent;
use std::sync::Arc;

use crate::core::Failure;
use crate::orchestrate::StepHandler;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    BuildContext, ModelCall, OutputKind, References, StepCommon, StepConfig, TemplateSource,
};

/// The model calls declared tools, sees their results, and loops until it gives a final answer.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AgentStep {
    #[serde(flatten)]
    pub common: StepCommon,
    #[serde(flatten)]
    pub call: ModelCall,
    /// Tools the agent may call, by their names in `tools:`.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Most rounds of tool calls before the step fails with ORCHESTRATION_ITERATION_LIMIT (default 20).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub max_tool_iterations: Option<u32>,
    /// Most messages kept besides the system prompt and the task (both always kept); the oldest whole exchanges go first, an assistant's tool calls together with their results.
    #[serde(default)]
    #[schemars(range(min = 2))]
    pub memory: Option<u32>,
    /// A template for retrieved context shown before the user message on every turn, never stored in memory.
    #[serde(default)]
    pub context: Option<String>,
    /// How tool calls are obtained: `native` (the server's own format), `constrained` (a JSON turn forced while decoding), `prompt` (tools described in the prompt, calls read from the reply) or `auto` (native, falling back to prompt when the server refuses or ignores the tools).
    #[serde(default)]
    pub tool_calls: ToolCallMode,
}

/// How an agent's tool calls are obtained from the model (defined beside the agent loop).
pub use crate::orchestrate::steps::ToolCalls as ToolCallMode;

impl StepConfig for AgentStep {
    fn output(&self) -> OutputKind {
        OutputKind::Text
    }

    fn references<'a>(&'a self, refs: &mut References<'a>) {
        self.call.references(refs);
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

    fn build(&self, context: &mut dyn BuildContext) -> Result<Arc<dyn StepHandler>, Failure> {
        let tools = context.offered_tools(&self.tools)?;
        Ok(Arc::new(Agent {
            engine: context.engine(&self.call.model)?,
            prompt: self.call.prompt(),
            sampling: self.call.sampling(),
            tools,
            max_tool_iterations: self
                .max_tool_iterations
                .or(context.policy_tool_iterations())
                .unwrap_or(20),
            memory: self.memory.map(|m| m as usize),
            context: self.context.clone(),
            tool_calls: self.tool_calls,
            stream: context.stream(),
        }))
    }
}
