//! `type: route` — the orchestrator pattern: route, execute, synthesise.

use crate::orchestrate::steps::Route;
use std::sync::Arc;

use crate::core::Failure;
use crate::orchestrate::StepHandler;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    BuildContext, ModelCall, OutputKind, References, StepCommon, StepConfig, TemplateSource,
};

/// One model call picks which declared agents to run (one, several in parallel, or an ordered
/// sequence); the choice is checked against the agents' schemas and the policy before anything
/// runs; a second call synthesises the answer from their results.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RouteStep {
    #[serde(flatten)]
    pub common: StepCommon,
    #[serde(flatten)]
    pub call: ModelCall,
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
    fn output(&self) -> OutputKind {
        OutputKind::Text
    }

    fn references<'a>(&'a self, refs: &mut References<'a>) {
        self.call.references(refs);
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

    fn build(&self, context: &mut dyn BuildContext) -> Result<Arc<dyn StepHandler>, Failure> {
        let agents = self
            .agents
            .iter()
            .map(|a| context.agent(a))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Arc::new(Route {
            engine: context.engine(&self.call.model)?,
            prompt: self.call.prompt(),
            sampling: self.call.sampling(),
            max_agents: self.max_agents.map_or(agents.len().max(1), |m| m as usize),
            agents,
            synthesis: self.synthesis.clone(),
            stream: context.stream(),
        }))
    }
}
