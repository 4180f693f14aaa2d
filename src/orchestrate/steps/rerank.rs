//! `rerank`: re-score the upstream candidates and keep the best (the score each came with is kept
//! as `metadata.retrieval_score`).

use std::sync::Arc;

use super::{blocking, candidates_output};
use crate::core::{Candidate, Failure, FailureCode};
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler};
use crate::rerank::{Keep, Scorer, rerank};

/// Re-scores the candidates in `input` against the query; keeps those scoring `>= min_score`,
/// as `keep` allows (`top_k`, duplicates, a character budget). The record's detail names the
/// scorer, how many candidates it scored, and how many of those scores came from the call cache.
pub struct Rerank {
    pub scorer: Arc<dyn Scorer>,
    pub query: String,
    pub min_score: Option<f64>,
    pub keep: Keep,
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
            let (scorer, min_score, keep) = (Arc::clone(&self.scorer), self.min_score, self.keep);
            let scored = candidates.len();
            let (kept, cached) =
                blocking(move || rerank(scorer.as_ref(), &query, candidates, min_score, keep))
                    .await?;
            let mut output = candidates_output(kept)?;
            output.detail = Some(serde_json::json!({
                "scorer": self.scorer.name(),
                "scored": scored,
                "cached": cached,
            }));
            Ok(output)
        })
    }

    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        ctx.render(&self.query).map(Rendered::Text)
    }
}
