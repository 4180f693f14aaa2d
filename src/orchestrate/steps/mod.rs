//! The step handlers, one file per step type. Each is a plain struct built by the plan layer
//! (which resolves names to engines, corpora, scorers and tools) and implementing
//! [`StepHandler`](super::StepHandler).

mod agent;
mod ask_json;
mod infer;
mod memory;
mod redundant;
mod rerank;
mod retrieve;
mod route;
mod structured;
mod template;
mod tool;
mod validate;

pub use agent::{Agent, ToolCalls};
pub use infer::{Infer, SamplingSettings};
pub use redundant::Redundant;
pub use rerank::Rerank;
pub use retrieve::{Retrieve, RetrieveSource};
pub use route::{AgentAction, Route, RouteAgent};
pub use structured::Structured;
pub use template::Template;
pub use tool::Tool;
pub use validate::Validate;

use serde_json::{Value, json};

use super::pipeline::{StepContext, StepOutput};
use crate::core::{Candidate, Failure, FailureCode, Message};

/// Where a prompt's text comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptSource {
    /// A file in the plan's `prompts/`.
    File(String),
    /// Inline template text.
    Inline(String),
}

impl PromptSource {
    /// Renders the prompt in the step's scope.
    pub fn render(&self, ctx: &StepContext) -> Result<String, Failure> {
        match self {
            PromptSource::File(name) => ctx.templates.render_file(name, &ctx.scope),
            PromptSource::Inline(text) => ctx.render(text),
        }
    }
}

/// A model step's prompt: the user message and an optional system message, both templates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub user: PromptSource,
    pub system: Option<String>,
}

impl Prompt {
    /// The messages this prompt renders to in the step's scope, then the step's feedback (its
    /// earlier answers and what was wrong with them), if a check sent the run back to it.
    pub fn messages(&self, ctx: &StepContext) -> Result<Vec<Message>, Failure> {
        let mut messages = Vec::with_capacity(2 + ctx.feedback.len());
        if let Some(system) = &self.system {
            messages.push(Message::system(ctx.render(system)?));
        }
        messages.push(Message::user(self.user.render(ctx)?));
        messages.extend(ctx.feedback.iter().cloned());
        Ok(messages)
    }
}

/// A list of candidates as a step output.
fn candidates_output(candidates: Vec<Candidate>) -> Result<StepOutput, Failure> {
    let output = serde_json::to_value(candidates).map_err(|e| {
        Failure::new(
            FailureCode::ConfigInvalidInput,
            format!("cannot encode candidates: {e}"),
        )
    })?;
    Ok(StepOutput {
        output,
        ..StepOutput::default()
    })
}

/// One branch of a "call X with these arguments" choice, for a decoder constraint: `key` must be
/// `name` and `arguments` must match `parameters` (no schema: any object), with arguments that
/// `parameters` does not declare refused — under a constraint a small model otherwise pads them
/// with schema keywords or invents its own names.
fn call_branch(key: &str, name: &str, parameters: &Value) -> Value {
    let mut arguments = if parameters.is_null() {
        json!({ "type": "object" })
    } else {
        parameters.clone()
    };
    if let Value::Object(schema) = &mut arguments
        && schema.contains_key("properties")
    {
        schema
            .entry("additionalProperties")
            .or_insert(Value::Bool(false));
    }
    json!({
        "type": "object",
        "required": [key, "arguments"],
        "additionalProperties": false,
        "properties": { key: { "const": name }, "arguments": arguments }
    })
}

/// Runs CPU-heavy model work off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    tokio::task::spawn_blocking(work).await.map_err(|e| {
        Failure::new(
            FailureCode::InferenceEngineError,
            format!("the scoring task failed: {e}"),
        )
    })?
}
