//! `rerank`: re-score the upstream candidates and keep the best.

use std::sync::Arc;

use super::{blocking, candidates_output};
use crate::core::{Candidate, Failure, FailureCode};
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler};
use crate::rerank::{Scorer, rerank};

/// Re-scores the candidates in `input` against the query; keeps `top_k` scoring `>= min_score`.
/// The record's detail names the scorer and how many candidates it scored.
pub struct Rerank {
    pub scorer: Arc<dyn Scorer>,
    pub query: String,
    pub top_k: Option<usize>,
    pub min_score: Option<f64>,
}

impl StepHandler for Rerank {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            let query = ctx.render(&self.query)?;
            let candidates: Vec<Candidate> =
                serde_json::from_value(ctx.input().clone()).map_err(|e| {
                    Failure::new(
                        FailureCode::ConfigInvalidInput,
                        format!(
                            "step `{}` expects candidates from a retrieve step as its input: {e}",
                            ctx.step
                        ),
                    )
                })?;
            let (scorer, top_k, min_score) = (Arc::clone(&self.scorer), self.top_k, self.min_score);
            let scored = candidates.len();
            let kept =
                blocking(move || rerank(scorer.as_ref(), &query, candidates, top_k, min_score))
                    .await?;
            let mut output = candidates_output(kept)?;
            output.detail = Some(serde_json::json!({
                "scorer": self.scorer.name(),
                "scored": scored,
            }));
            Ok(output)
        })
    }

    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        ctx.render(&self.query).map(Rendered::Text)
    }
}
