//! `structured`: JSON that satisfies a schema.
//!
//! The schema goes to the engine as a decoding constraint (enforced when the engine can); the
//! answer is then parsed leniently (repair), enum values normalised, and validated. An answer that
//! still fails is retried with the validation errors fed back to the model, up to `max_attempts`.
//! With `tools`, a tool loop runs first and its findings come before the request for JSON.
//! The output is the validated JSON; the record's detail says how it was obtained.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Prompt;
use super::agent::Agent;
use super::infer::Sampling;
use crate::constraint::conform;
use crate::core::{Failure, Message, TokenUsage};
use crate::inference::{Engine, Request};
use crate::orchestrate::events::ModelCall;
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler, StepOutput};

/// Asks for schema-valid JSON, repairing and retrying as needed.
pub struct Structured {
    pub engine: Arc<dyn Engine>,
    pub prompt: Prompt,
    pub sampling: Sampling,
    pub schema: Value,
    /// Attempts in all (at least 1).
    pub max_attempts: u32,
    /// The first phase when the step has tools: a tool loop whose final text (its findings)
    /// goes before the request for JSON.
    pub tool_phase: Option<Agent>,
}

impl StepHandler for Structured {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            let mut messages = self.prompt.messages(ctx)?;
            let constrained = self.engine.model_info().constrained_decoding;
            let mut usage = TokenUsage::default();
            let mut tools = Value::Null;
            if let Some(phase) = &self.tool_phase {
                let found = phase.run(ctx).await?;
                usage += found.usage;
                tools = found.detail.unwrap_or(Value::Null);
                messages.push(Message::assistant(match found.output {
                    Value::String(text) => text,
                    other => other.to_string(),
                }));
                messages.push(Message::user(
                    "Now give the answer as JSON that matches the schema, using what you found.",
                ));
            }
            let mut attempts = Vec::new();
            let mut last_failure = None;
            for attempt in 1..=self.max_attempts.max(1) {
                let request = Request {
                    json_schema: Some(self.schema.clone()),
                    ..self.sampling.request(messages.clone())
                };
                let response = ctx
                    .infer(
                        self.engine.as_ref(),
                        request,
                        None,
                        ModelCall::Attempt(attempt),
                    )
                    .await?;
                usage += response.usage;
                match conform(&response.text, &self.schema) {
                    Ok(conformed) => {
                        attempts.push(
                            json!({ "attempt": attempt, "usage": response.usage, "valid": true }),
                        );
                        let detail = json!({
                            "constrained": constrained,
                            "repairs": conformed.fixes,
                            "normalized": conformed.normalized,
                            "retries": attempt - 1,
                            "attempts": attempts,
                            "tool_phase": tools,
                        });
                        return Ok(StepOutput {
                            output: conformed.value,
                            usage,
                            detail: Some(detail),
                        });
                    }
                    Err(failure) => {
                        attempts.push(json!({ "attempt": attempt, "usage": response.usage, "valid": false, "error": failure }));
                        messages.push(Message::assistant(response.text));
                        messages.push(Message::user(format!(
                            "That answer is not valid: {}\nReply again with only the corrected JSON.",
                            failure.message
                        )));
                        last_failure = Some(failure);
                    }
                }
            }
            Err(last_failure.unwrap_or_else(|| {
                Failure::new(
                    crate::core::FailureCode::ConstraintJsonInvalid,
                    "the model gave no answer",
                )
            }))
        })
    }

    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        self.prompt.messages(ctx).map(Rendered::Messages)
    }
}
