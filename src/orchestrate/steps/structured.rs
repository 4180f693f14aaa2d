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
use super::ask_json::{JsonQuestion, ask_json};
use super::infer::SamplingSettings;
use crate::constraint::conform;
use crate::core::{Failure, Message, TokenUsage};
use crate::inference::{Engine, Request, SchemaMode};
use crate::orchestrate::events::CallKind;
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler, StepOutput};

/// Asks for schema-valid JSON, repairing and retrying as needed.
pub struct Structured {
    pub engine: Arc<dyn Engine>,
    pub prompt: Prompt,
    pub sampling: SamplingSettings,
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
            let question = JsonQuestion {
                engine: self.engine.as_ref(),
                request: Request {
                    json_schema: Some(self.schema.clone()),
                    ..self.sampling.request(messages)
                },
                max_attempts: self.max_attempts,
                call: CallKind::Attempt,
            };
            let answer = ask_json(
                ctx,
                question,
                |text| conform(text, &self.schema),
                |failure| {
                    format!(
                        "That answer is not valid: {}\nReply again with only the corrected JSON.",
                        failure.message
                    )
                },
            )
            .await??;
            usage += answer.usage;
            let mut detail = json!({
                "constrained": constrained && answer.schema_mode.is_none_or(SchemaMode::decoded),
                "repairs": answer.value.fixes,
                "normalized": answer.value.normalized,
                "retries": answer.attempts.len() - 1,
                "attempts": answer.attempts,
                "tool_phase": tools,
            });
            if let Some(mode) = answer.schema_mode {
                detail["schema_mode"] = json!(mode);
            }
            Ok(StepOutput {
                output: answer.value.value,
                usage,
                detail: Some(detail),
            })
        })
    }

    /// The first request's messages: the tool phase's when there is one.
    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        match &self.tool_phase {
            Some(phase) => phase.render(ctx),
            None => self.prompt.messages(ctx).map(Rendered::Messages),
        }
    }
}
