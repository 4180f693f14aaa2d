//! `redundant`: N candidates asked concurrently (so an engine can batch them), then a vote.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Prompt;
use super::infer::Sampling;
use crate::constraint::conform;
use crate::core::{Failure, FailureCode, TokenUsage};
use crate::inference::{Engine, Request};
use crate::orchestrate::events::ModelCall;
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler, StepOutput};
use crate::orchestrate::voting::{VotingMethod, vote};

/// Asks N times and votes; the output is `{value, confidence, candidates, votes}`.
pub struct Redundant {
    pub engine: Arc<dyn Engine>,
    pub prompt: Prompt,
    pub sampling: Sampling,
    pub n: usize,
    /// Per-candidate temperatures, cycled; empty means the step's temperature.
    pub temperatures: Vec<f64>,
    /// Per-candidate seeds, cycled; empty means the step's seed.
    pub seeds: Vec<u64>,
    /// When set, each candidate must be JSON valid against it (invalid ones do not vote).
    pub schema: Option<Value>,
    pub method: VotingMethod,
    pub min_confidence: Option<f64>,
    /// The step (name, handler) that answers instead when confidence is below `min_confidence`.
    pub fallback: Option<(String, Arc<dyn StepHandler>)>,
}

impl StepHandler for Redundant {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            let messages = self.prompt.messages(ctx)?;
            // Asked together in this task (so an engine can batch them), each call recorded
            // as an `inference` event like any other model call.
            let calls = (0..self.n.max(1)).map(|i| {
                let base = self.sampling.request(messages.clone());
                let request = Request {
                    json_schema: self.schema.clone(),
                    temperature: cycled(&self.temperatures, i).or(base.temperature),
                    seed: cycled(&self.seeds, i).or(base.seed),
                    ..base
                };
                let vote = u32::try_from(i + 1).unwrap_or(u32::MAX);
                ctx.infer(self.engine.as_ref(), request, None, ModelCall::Vote(vote))
            });
            let responses = futures_util::future::join_all(calls).await;
            let mut usage = TokenUsage::default();
            let mut candidates = Vec::new();
            let mut rejected = Vec::new();
            for (i, response) in responses.into_iter().enumerate() {
                let response = response?;
                usage += response.usage;
                match &self.schema {
                    None => candidates.push(Value::String(response.text.trim().to_string())),
                    Some(schema) => match conform(&response.text, schema) {
                        Ok(conformed) => candidates.push(conformed.value),
                        Err(failure) => {
                            rejected.push(json!({ "candidate": i + 1, "error": failure }))
                        }
                    },
                }
            }
            if candidates.is_empty() {
                return Err(Failure::new(
                    FailureCode::ConstraintSchemaViolation,
                    format!(
                        "none of the {} candidates was valid JSON for the schema",
                        self.n
                    ),
                ));
            }
            let result = vote(self.method, &candidates)?;
            if let Some(min) = self.min_confidence
                && result.confidence < min
            {
                if let Some((name, fallback)) = &self.fallback {
                    let vote = json!({
                        "value": result.value,
                        "confidence": result.confidence,
                        "candidates": candidates,
                        "votes": result.votes,
                    });
                    let handed = fallback.run(ctx).await?;
                    let mut usage = usage;
                    usage += handed.usage;
                    return Ok(StepOutput {
                        output: handed.output,
                        usage,
                        detail: Some(
                            json!({ "fallback": name, "vote": vote, "fallback_detail": handed.detail }),
                        ),
                    });
                }
                return Err(Failure::new(
                    FailureCode::OrchestrationNoConsensus,
                    format!(
                        "the winning answer has confidence {:.2}, below min_confidence {min}",
                        result.confidence
                    ),
                ));
            }
            Ok(StepOutput {
                output: json!({
                    "value": result.value,
                    "confidence": result.confidence,
                    "candidates": candidates,
                    "votes": result.votes,
                }),
                usage,
                detail: (!rejected.is_empty()).then(|| json!({ "rejected": rejected })),
            })
        })
    }

    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        self.prompt.messages(ctx).map(Rendered::Messages)
    }
}

/// The `i`-th element, cycling through `values`; None when there are none.
fn cycled<T: Copy>(values: &[T], i: usize) -> Option<T> {
    (!values.is_empty()).then(|| values[i % values.len()])
}
