//! `type: redundant` — N candidates and a vote.

use crate::orchestrate::steps::Redundant;
pub use crate::orchestrate::voting::VotingMethod;
use std::sync::Arc;

use crate::core::Failure;
use crate::orchestrate::StepHandler;
use crate::plan::diagnostic::PlanError;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{BuildContext, ModelCall, References, SchemaSource, StepCommon, StepConfig};

/// Ask the model N times (concurrently) and vote on the answers.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RedundantStep {
    #[serde(flatten)]
    pub common: StepCommon,
    #[serde(flatten)]
    pub call: ModelCall,
    /// How many candidates to ask for (default 3).
    #[serde(default)]
    #[schemars(range(min = 1, max = 64))]
    pub n: Option<u32>,
    /// Per-candidate temperatures (cycled when shorter than `n`).
    #[serde(default)]
    pub temperatures: Option<Vec<f64>>,
    /// Per-candidate seeds (cycled when shorter than `n`).
    #[serde(default)]
    pub seeds: Option<Vec<u64>>,
    /// When set, each candidate is structured JSON valid against this schema (needed by `field_majority`).
    #[serde(default)]
    pub schema: Option<SchemaSource>,
    /// How the candidates are combined.
    #[serde(default)]
    pub voting: Voting,
}

/// Voting settings.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Voting {
    /// The voting method (default `majority`).
    #[serde(default)]
    pub method: VotingMethod,
    /// Fail (or hand over to `fallback`) when the winner's confidence is below this share.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub min_confidence: Option<f64>,
    /// A step to run instead when confidence is below `min_confidence`: it is held in standby
    /// (it does not run on its own) and its output becomes this step's.
    #[serde(default)]
    pub fallback: Option<String>,
}

impl StepConfig for RedundantStep {
    fn references<'a>(&'a self, refs: &mut References<'a>) {
        self.call.references(refs);
        if let Some(schema) = &self.schema {
            refs.schema(&["schema"], schema);
        }
        if self.voting.method == VotingMethod::FieldMajority && self.schema.is_none() {
            refs.problem(
                &["voting", "method"],
                PlanError::FieldMajoritySchema,
                "no `schema` on this step",
            );
        }
        if let Some(fallback) = &self.voting.fallback {
            refs.step(&["voting", "fallback"], fallback);
        }
        if let Some(max) = self.call.sampling.max_tokens {
            let n = u64::from(self.n.unwrap_or(3));
            refs.max_tokens = Some((vec!["max_tokens".into()], u64::from(max) * n));
        }
    }

    fn build(&self, context: &mut dyn BuildContext) -> Result<Arc<dyn StepHandler>, Failure> {
        Ok(Arc::new(Redundant {
            engine: context.engine(&self.call.model)?,
            prompt: self.call.prompt(),
            sampling: self.call.sampling(),
            n: self.n.unwrap_or(3) as usize,
            temperatures: self.temperatures.clone().unwrap_or_default(),
            seeds: self.seeds.clone().unwrap_or_default(),
            schema: self
                .schema
                .as_ref()
                .map(|s| context.schema(s))
                .transpose()?,
            method: self.voting.method,
            min_confidence: self.voting.min_confidence,
            fallback: self
                .voting
                .fallback
                .as_ref()
                .map(|name| Ok::<_, Failure>((name.clone(), context.fallback(name)?)))
                .transpose()?,
        }))
    }
}
