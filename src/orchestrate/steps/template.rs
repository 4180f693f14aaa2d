//! `template`: render text, no model involved.

use serde_json::Value;

use super::PromptSource;
use crate::core::Failure;
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler, StepOutput};

/// Renders a template; the output is the text.
pub struct Template {
    pub source: PromptSource,
}

impl StepHandler for Template {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            Ok(StepOutput {
                output: Value::String(self.source.render(ctx)?),
                ..StepOutput::default()
            })
        })
    }

    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        self.source.render(ctx).map(Rendered::Text)
    }
}
