//! `validate`: check the input against rules and pass it through.

use crate::core::{Failure, FailureCode};
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler, StepOutput};
use crate::validate::{Rule, check_all};

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
            let mut broken = Vec::new();
            if let Err(failure) = check_all(&self.rules, &input) {
                broken.push(failure.message);
            }
            for expression in &self.expressions {
                if !ctx.templates.is_true(expression, &ctx.scope)? {
                    broken.push(format!("the output does not satisfy `{expression}`"));
                }
            }
            if !broken.is_empty() {
                return Err(Failure::new(
                    FailureCode::ValidationRuleFailed,
                    broken.join("; "),
                ));
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
