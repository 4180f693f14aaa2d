//! `infer`: one model call.

use std::sync::Arc;

use serde_json::Value;

use super::Prompt;
use crate::core::{Failure, Message};
use crate::inference::{Engine, Grammar, Request, TokenSink};
use crate::orchestrate::events::CallKind;
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler, StepOutput};

/// The sampling settings of a model call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SamplingSettings {
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
}

impl SamplingSettings {
    /// A request for `messages` with these settings.
    pub fn request(&self, messages: Vec<Message>) -> Request {
        Request {
            messages,
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            seed: self.seed,
            stop: self.stop.clone(),
            ..Request::default()
        }
    }
}

/// Calls a model with a rendered prompt; the output is its text.
pub struct Infer {
    pub engine: Arc<dyn Engine>,
    pub prompt: Prompt,
    pub sampling: SamplingSettings,
    pub json_schema: Option<Value>,
    pub grammar: Option<Grammar>,
    /// Where to stream the answer as it is generated (the plan's final step only).
    pub stream: Option<TokenSink>,
}

impl Infer {
    fn request(&self, ctx: &StepContext) -> Result<Request, Failure> {
        Ok(Request {
            json_schema: self.json_schema.clone(),
            grammar: self.grammar.clone(),
            ..self.sampling.request(self.prompt.messages(ctx)?)
        })
    }
}

impl StepHandler for Infer {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            let request = self.request(ctx)?;
            let response = ctx
                .infer(
                    self.engine.as_ref(),
                    request,
                    self.stream.clone(),
                    CallKind::Single,
                )
                .await?;
            Ok(StepOutput {
                output: Value::String(response.text),
                usage: response.usage,
                detail: None,
            })
        })
    }

    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        self.prompt.messages(ctx).map(Rendered::Messages)
    }
}
