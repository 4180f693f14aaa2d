//! `redundant`: N candidates asked concurrently (so an engine can batch them), then a vote.
//!
//! A candidate whose call fails, or (with a schema) whose answer is not valid JSON for it, does
//! not vote: the vote goes on over the others, and the step's detail lists the ones that dropped
//! out (`failed`, `rejected`). Only when fewer than `min_candidates` are left does the step fail,
//! with the code of the first that dropped out (a failed call before an invalid answer), so the
//! executor's retry rules for that failure apply. How the vote went — its confidence, the winning
//! candidate, or that the fallback answered — goes into the step's record entry.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::Prompt;
use super::infer::SamplingSettings;
use crate::constraint::conform;
use crate::core::{Failure, FailureCode, TokenUsage};
use crate::inference::{Engine, Request};
use crate::orchestrate::events::CallKind;
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler, StepOutput};
use crate::orchestrate::record::{AnsweredBy, VoteRecord};
use crate::orchestrate::voting::{VotingMethod, vote};

/// Asks N times and votes; the output is `{value, confidence, candidates, votes}`.
pub struct Redundant {
    pub engine: Arc<dyn Engine>,
    pub prompt: Prompt,
    pub sampling: SamplingSettings,
    pub n: usize,
    /// The fewest candidates that must vote (the quorum).
    pub min_candidates: usize,
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

/// The candidates that answered, and the ones that dropped out.
#[derive(Default)]
struct Ballot {
    /// The answers that vote, with the number (from 1) of the candidate that gave each.
    voters: Vec<(usize, Value)>,
    /// Candidates whose call failed.
    failed: Vec<(usize, Failure)>,
    /// Candidates whose answer is not valid for the schema.
    rejected: Vec<(usize, Failure)>,
    /// The most tokens one candidate's call held (its prompt and its answer).
    largest_context: u64,
}

impl Ballot {
    /// The dropped-out candidates by kind, for the step's detail.
    fn detail(&self) -> Map<String, Value> {
        let listed = |dropped: &[(usize, Failure)]| -> Value {
            dropped
                .iter()
                .map(|(number, error)| json!({ "candidate": number, "error": error }))
                .collect()
        };
        let mut detail = Map::new();
        detail.insert("largest_context".into(), json!(self.largest_context));
        if !self.failed.is_empty() {
            detail.insert("failed".into(), listed(&self.failed));
        }
        if !self.rejected.is_empty() {
            detail.insert("rejected".into(), listed(&self.rejected));
        }
        detail
    }

    /// The failure of a ballot below the quorum: the first failed call's code (else the first
    /// rejection's), and every candidate that dropped out in the message.
    fn below_quorum(&self, asked: usize, quorum: usize) -> Failure {
        let dropped: Vec<&(usize, Failure)> = self.failed.iter().chain(&self.rejected).collect();
        let reasons: Vec<String> = dropped
            .iter()
            .map(|(number, error)| format!("candidate {number}: {error}"))
            .collect();
        let first = dropped.first().map(|(_, error)| error);
        let code = first.map_or(FailureCode::OrchestrationNoConsensus, |e| e.code);
        let failure = Failure::new(
            code,
            format!(
                "only {} of the {asked} candidates could vote, fewer than min_candidates {quorum} ({})",
                self.voters.len(),
                reasons.join("; ")
            ),
        )
        .with_help("see why the candidates failed; a lower `voting.min_candidates` votes over fewer");
        match first {
            Some(error) => failure.retryable(error.retryable),
            None => failure,
        }
    }
}

impl StepHandler for Redundant {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            let messages = self.prompt.messages(ctx)?;
            let asked = self.n.max(1);
            // Asked together in this task (so an engine can batch them), each call recorded
            // as an `inference` event like any other model call.
            let calls = (0..asked).map(|i| {
                let base = self.sampling.request(messages.clone());
                let request = Request {
                    json_schema: self.schema.clone(),
                    temperature: cycled(&self.temperatures, i).or(base.temperature),
                    seed: cycled(&self.seeds, i).or(base.seed),
                    ..base
                };
                let vote = u32::try_from(i + 1).unwrap_or(u32::MAX);
                ctx.infer(self.engine.as_ref(), request, None, CallKind::Vote(vote))
            });
            let responses = futures_util::future::join_all(calls).await;
            let mut ballot = Ballot::default();
            // Every candidate's tokens, whether or not its answer votes.
            let mut ballot_usage = TokenUsage::default();
            for (number, response) in (1..).zip(responses) {
                if let Ok(response) = &response {
                    ballot_usage += response.usage;
                }
                let response = match response {
                    Ok(response) => response,
                    Err(failure) => {
                        ballot.failed.push((number, failure));
                        continue;
                    }
                };
                ballot.largest_context = ballot.largest_context.max(response.usage.total());
                match &self.schema {
                    None => ballot
                        .voters
                        .push((number, Value::String(response.text.trim().to_string()))),
                    Some(schema) => match conform(&response.text, schema) {
                        Ok(conformed) => ballot.voters.push((number, conformed.value)),
                        Err(failure) => ballot.rejected.push((number, failure)),
                    },
                }
            }
            if ballot.voters.is_empty() || ballot.voters.len() < self.min_candidates {
                return Err(ballot.below_quorum(asked, self.min_candidates));
            }
            let candidates: Vec<Value> = ballot.voters.iter().map(|(_, v)| v.clone()).collect();
            let result = vote(self.method, &candidates)?;
            let mut detail = ballot.detail();
            let mut record = VoteRecord {
                confidence: result.confidence,
                winner: result
                    .winner
                    .and_then(|i| u32::try_from(ballot.voters[i].0).ok()),
                answered_by: AnsweredBy::Vote,
                fallback: None,
                asked: u32::try_from(asked).unwrap_or(u32::MAX),
                voted: u32::try_from(candidates.len()).unwrap_or(u32::MAX),
                agreement: result.confidence * candidates.len() as f64 / asked as f64,
            };
            let voted = json!({
                "value": result.value,
                "confidence": result.confidence,
                "candidates": candidates,
                "votes": result.votes,
            });
            if let Some(min) = self.min_confidence
                && result.confidence < min
            {
                let Some((name, fallback)) = &self.fallback else {
                    return Err(Failure::new(
                        FailureCode::OrchestrationNoConsensus,
                        format!(
                            "the winning answer has confidence {:.2}, below min_confidence {min}",
                            result.confidence
                        ),
                    ));
                };
                let handed = fallback.run(ctx).await?;
                let mut usage = ballot_usage;
                usage += handed.usage;
                record.winner = None;
                record.answered_by = AnsweredBy::Fallback;
                record.fallback = Some(name.clone());
                ctx.ledger.vote(record);
                detail.insert("fallback".into(), json!(name));
                detail.insert("vote".into(), voted);
                detail.insert(
                    "fallback_detail".into(),
                    handed.detail.unwrap_or(Value::Null),
                );
                return Ok(StepOutput {
                    output: handed.output,
                    usage,
                    detail: Some(Value::Object(detail)),
                });
            }
            ctx.ledger.vote(record);
            Ok(StepOutput {
                output: voted,
                usage: ballot_usage,
                detail: (!detail.is_empty()).then_some(Value::Object(detail)),
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::Message;
    use crate::inference::{ScriptedConfig, ScriptedEngine, ScriptedReply};
    use crate::orchestrate::emit::Events;
    use crate::orchestrate::steps::PromptSource;

    fn redundant(fail_first: u32, replies: &[&str], n: usize, quorum: usize) -> Redundant {
        let engine = ScriptedEngine::new(ScriptedConfig {
            fail_first,
            replies: replies
                .iter()
                .map(|r| ScriptedReply::Text(r.to_string()))
                .collect(),
            ..ScriptedConfig::default()
        });
        Redundant {
            engine: Arc::new(engine),
            prompt: Prompt {
                user: PromptSource::Inline("pick".into()),
                system: None,
            },
            sampling: SamplingSettings::default(),
            n,
            min_candidates: quorum,
            temperatures: Vec::new(),
            seeds: Vec::new(),
            schema: Some(json!({ "enum": ["a", "b"] })),
            method: VotingMethod::Majority,
            min_confidence: None,
            fallback: None,
        }
    }

    fn context() -> StepContext {
        StepContext::detached("vote", &Events::recording())
    }

    #[tokio::test]
    async fn failed_and_invalid_candidates_drop_out_and_the_rest_vote() {
        let ctx = context();
        // 1 fails, 2 is not valid for the schema, 3 and 5 say "b", 4 says "a".
        let step = redundant(1, &["-", "\"c\"", "\"b\"", "\"a\"", "\"b\""], 5, 3);
        let output = step.run(&ctx).await.expect("3 voted, the quorum");
        assert_eq!(output.output["value"], "b");
        assert_eq!(output.output["candidates"], json!(["b", "a", "b"]));
        let detail = output.detail.expect("the dropped candidates");
        assert_eq!(detail["failed"][0]["candidate"], 1);
        assert_eq!(detail["rejected"][0]["candidate"], 2);
        let vote = ctx.ledger.last_vote().expect("the vote is recorded");
        assert_eq!(vote.winner, Some(3), "numbered as asked, not as voted");
        assert_eq!((vote.asked, vote.voted), (5, 3));
        assert!((vote.confidence - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(vote.answered_by, AnsweredBy::Vote);
    }

    #[tokio::test]
    async fn below_the_quorum_the_first_failed_call_s_code_wins_over_an_invalid_answer() {
        let ctx = context();
        let step = redundant(1, &["-", "\"c\"", "\"b\""], 3, 2);
        let failure = step.run(&ctx).await.expect_err("only one voted");
        assert_eq!(failure.code, FailureCode::InferenceEngineError);
        assert!(failure.retryable, "the engine failure's retry rule is kept");
        assert!(
            failure.message.starts_with(
                "only 1 of the 3 candidates could vote, fewer than min_candidates 2 (candidate 1: INFERENCE_ENGINE_ERROR"
            ) && failure.message.contains("; candidate 2: CONSTRAINT_"),
            "{}",
            failure.message
        );
        assert_eq!(ctx.ledger.last_vote(), None);
        let invalid_only = redundant(0, &["\"c\"", "\"d\"", "\"a\""], 3, 2);
        let failure = invalid_only.run(&context()).await.expect_err("one valid");
        assert_eq!(
            failure.code.category(),
            crate::core::FailureCategory::Constraint
        );
    }

    #[test]
    fn the_prompt_is_what_render_shows() {
        let step = redundant(0, &[], 3, 2);
        assert_eq!(
            step.render(&context()),
            Ok(Rendered::Messages(vec![Message::user("pick")]))
        );
    }
}
