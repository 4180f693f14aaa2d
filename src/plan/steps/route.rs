//! `type: route` — the orchestrator pattern: route, execute, synthesise.

use crate::orchestrate::steps::Route;
use crate::plan::build;
use std::sync::Arc;

use crate::core::Failure;
use crate::orchestrate::StepHandler;
use crate::plan::build::Builder;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{ModelRole, PromptSpec, References, Sampling, StepCommon, StepConfig, TemplateSource};

/// One model call picks which declared agents to run (one, several in parallel, or an ordered
/// sequence); the choice is checked against the agents' schemas and the policy before anything
/// runs; a second call synthesises the answer from their results.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RouteStep {
    #[serde(flatten)]
    pub common: StepCommon,
    /// The model that routes and synthesises, by its name in `models:`.
    pub model: String,
    /// The request to route, as a prompt file or inline template.
    #[serde(flatten)]
    pub prompt: PromptSpec,
    #[serde(flatten)]
    pub sampling: Sampling,
    /// Agents (by their names in `agents:`) the router may choose from.
    #[schemars(length(min = 1))]
    pub agents: Vec<String>,
    /// Most agents one route may run.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_agents: Option<u32>,
    /// An inline template for the synthesis call; it sees `results`, the agents' outputs.
    #[serde(default)]
    pub synthesis: Option<String>,
}

impl StepConfig for RouteStep {
    fn references<'a>(&'a self, refs: &mut References<'a>) {
        refs.model(&["model"], &self.model, ModelRole::Llm);
        self.prompt.references(refs);
        refs.sampling(&self.sampling);
        for (i, agent) in self.agents.iter().enumerate() {
            refs.agent(vec!["agents".into(), i.to_string()], agent);
        }
        if let Some(synthesis) = &self.synthesis {
            refs.template_at(
                vec!["synthesis".into()],
                synthesis,
                TemplateSource::Inline,
                &["results"],
            );
        }
    }

    fn build(&self, builder: &mut Builder<'_>) -> Result<Arc<dyn StepHandler>, Failure> {
        let agents = self
            .agents
            .iter()
            .map(|a| builder.agent(a))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Arc::new(Route {
            engine: builder.engine(&self.model)?,
            prompt: build::prompt(&self.prompt),
            sampling: build::sampling(&self.sampling),
            max_agents: self.max_agents.map_or(agents.len().max(1), |m| m as usize),
            agents,
            synthesis: self.synthesis.clone(),
            stream: builder.stream(),
        }))
    }
}
