//! `type: rerank` — re-score candidates and keep the best.

use std::sync::Arc;

use crate::core::{Failure, FailureCode};
use crate::orchestrate::StepHandler;
use crate::orchestrate::steps::Rerank;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    Accepts, BuildContext, KeepSpec, ModelRole, OutputKind, References, StepCommon, StepConfig,
    TemplateSource,
};

/// Re-score candidates (the previous step's output) and keep the best `top_k` whose score is at
/// least `min_score`. Each candidate's earlier score is kept as `metadata.retrieval_score`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RerankStep {
    #[serde(flatten)]
    pub common: StepCommon,
    /// A scorer model (from `models:`, kind onnx); without one the keyword scorer is used. Scores: keyword 0 to 1 (the share of query words present); bi-encoder −1 to 1 (cosine similarity); cross-encoder 0 to 1 (the logit's sigmoid), or the raw, unbounded logit with `sigmoid: false`.
    #[serde(default)]
    pub model: Option<String>,
    /// The query to score against, a template; defaults to the query of the retrieve step upstream.
    #[serde(default)]
    pub query: Option<String>,
    /// Keep at most this many candidates.
    #[serde(default)]
    #[schemars(range(min = 1, max = 10000))]
    pub top_k: Option<u32>,
    /// Drop candidates scoring below this (inclusive: a score equal to it is kept).
    #[serde(default)]
    pub min_score: Option<f64>,
    #[serde(flatten)]
    pub keep: KeepSpec,
}

impl StepConfig for RerankStep {
    fn output(&self) -> OutputKind {
        OutputKind::Candidates
    }

    fn accepts(&self) -> Accepts {
        Accepts::Candidates
    }

    fn references<'a>(&'a self, refs: &mut References<'a>) {
        if let Some(model) = &self.model {
            refs.model(&["model"], model, ModelRole::Scorer);
        }
        if let Some(query) = &self.query {
            refs.template(&["query"], query, TemplateSource::Inline);
        }
    }

    fn build(&self, context: &mut dyn BuildContext) -> Result<Arc<dyn StepHandler>, Failure> {
        let query = match &self.query {
            Some(query) => query.clone(),
            None => context.facts().upstream_query.clone().ok_or_else(|| {
                Failure::new(
                    FailureCode::ConfigInvalidInput,
                    format!("rerank step `{}` has no `query` and no retrieve step upstream to take it from", context.step_name()),
                )
            })?,
        };
        Ok(Arc::new(Rerank {
            scorer: context.scorer(self.model.as_deref())?,
            query,
            min_score: self.min_score,
            keep: self.keep.keep(self.top_k.map(|k| k as usize)),
        }))
    }
}
