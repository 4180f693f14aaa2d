//! `type: redundant` — N candidates and a vote.

use crate::orchestrate::steps::Redundant;
pub use crate::orchestrate::voting::VotingMethod;
use std::sync::Arc;

use crate::core::Failure;
use crate::orchestrate::StepHandler;
use crate::plan::diagnostic::PlanError;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    BuildContext, ModelCall, OutputKind, References, SchemaSource, StepCommon, StepConfig,
};

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
    /// The fewest candidates that must vote (default: a majority of `n`). Candidates whose call
    /// failed, and with a `schema` those whose answer is not valid for it, do not vote; the vote
    /// goes on over the rest, and the step fails only when fewer than this many are left.
    #[serde(default)]
    #[schemars(range(min = 1, max = 64))]
    pub min_candidates: Option<u32>,
    /// Fail (or hand over to `fallback`) when the winner's confidence is below this share.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub min_confidence: Option<f64>,
    /// A step to run instead when confidence is below `min_confidence`: it is held in standby
    /// (it does not run on its own) and its output becomes this step's.
    #[serde(default)]
    pub fallback: Option<String>,
}

impl RedundantStep {
    /// Candidates asked for.
    fn n(&self) -> u32 {
        self.n.unwrap_or(3)
    }

    /// The quorum: `min_candidates`, else a majority of `n`.
    fn min_candidates(&self) -> u32 {
        self.voting.min_candidates.unwrap_or(self.n() / 2 + 1)
    }
}

impl StepConfig for RedundantStep {
    /// The vote: an object with the winning `value`, its `confidence`, the candidates and
    /// their votes; a fallback's output is whatever that step gives.
    fn output(&self) -> OutputKind {
        match self.voting.fallback {
            Some(_) => OutputKind::Unknown,
            None => OutputKind::Json(Some("object".into())),
        }
    }

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
        let n = self.n();
        if let Some(min) = self.voting.min_candidates
            && min > n
        {
            refs.problem(
                &["voting", "min_candidates"],
                PlanError::MinCandidates { min, n },
                "more than the candidates asked for",
            );
        }
        if let Some(max) = self.call.sampling.max_tokens {
            refs.max_tokens = Some((vec!["max_tokens".into()], u64::from(max) * u64::from(n)));
        }
    }

    fn build(&self, context: &mut dyn BuildContext) -> Result<Arc<dyn StepHandler>, Failure> {
        Ok(Arc::new(Redundant {
            engine: context.engine(&self.call.model)?,
            prompt: self.call.prompt(),
            sampling: self.call.sampling(),
            n: self.n() as usize,
            min_candidates: self.min_candidates() as usize,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn step(n: Option<u32>, min_candidates: Option<u32>) -> RedundantStep {
        let mut step = serde_json::json!({
            "name": "vote", "model": "m", "template": "q",
            "voting": { "method": "majority" }
        });
        if let Some(n) = n {
            step["n"] = n.into();
        }
        if let Some(min) = min_candidates {
            step["voting"]["min_candidates"] = min.into();
        }
        serde_json::from_value(step).expect("a redundant step")
    }

    fn references_of(step: &RedundantStep) -> References<'_> {
        let mut refs = References::default();
        step.references(&mut refs);
        refs
    }

    #[test]
    fn the_quorum_defaults_to_a_majority_of_n() {
        assert_eq!(step(None, None).min_candidates(), 2);
        assert_eq!(step(Some(4), None).min_candidates(), 3);
        assert_eq!(step(Some(5), None).min_candidates(), 3);
        assert_eq!(step(Some(1), None).min_candidates(), 1);
        assert_eq!(step(Some(5), Some(1)).min_candidates(), 1);
    }

    #[test]
    fn a_quorum_above_n_is_reported_at_min_candidates() {
        let over = step(Some(3), Some(4));
        let refs = references_of(&over);
        assert_eq!(refs.problems.len(), 1);
        let (at, error, _) = &refs.problems[0];
        assert_eq!(at, &["voting", "min_candidates"]);
        assert!(matches!(error, PlanError::MinCandidates { min: 4, n: 3 }));
        assert!(references_of(&step(Some(3), Some(3))).problems.is_empty());
    }
}
