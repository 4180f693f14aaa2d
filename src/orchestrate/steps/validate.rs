//! `validate`: check the input against rules and pass it through.

use serde_json::json;

use crate::core::{Failure, FailureCode};
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler, StepOutput};
use crate::validate::{Rule, broken_rules};

/// Checks `input`; on success the output is the input unchanged.
pub struct Validate {
    pub rules: Vec<Rule>,
    /// minijinja expressions that must be true.
    pub expressions: Vec<String>,
}

impl StepHandler for Validate {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            let input = ctx.input().clone();
            let mut broken = broken_rules(&self.rules, &input);
            for expression in &self.expressions {
                if !ctx.templates.is_true(expression, &ctx.scope)? {
                    broken.push(format!("the output does not satisfy `{expression}`"));
                }
            }
            if !broken.is_empty() {
                let message = broken.join("; ");
                return Err(Failure::new(FailureCode::ValidationRuleFailed, message)
                    .with_details(json!({ "broken": broken })));
            }
            Ok(StepOutput {
                output: input,
                ..StepOutput::default()
            })
        })
    }

    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        Ok(Rendered::Text(ctx.input().to_string()))
    }
}
