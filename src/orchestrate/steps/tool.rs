//! `tool`: call one declared tool with templated arguments.

use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::{Map, Value, json};

use crate::core::Failure;
use crate::orchestrate::events::ToolResult;
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler, StepOutput};
use crate::orchestrate::tools::ToolRuntime;

/// Renders the arguments (string values are templates) and calls the tool.
pub struct Tool {
    pub tool: Arc<ToolRuntime>,
    pub args: IndexMap<String, Value>,
}

impl Tool {
    fn arguments(&self, ctx: &StepContext) -> Result<Value, Failure> {
        let mut rendered = Map::new();
        for (name, value) in &self.args {
            let value = match value {
                Value::String(text) => Value::String(ctx.render(text)?),
                other => other.clone(),
            };
            rendered.insert(name.clone(), value);
        }
        Ok(Value::Object(rendered))
    }
}

impl StepHandler for Tool {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            let args = self.arguments(ctx)?;
            let call_id = format!("call_{}", ctx.events.new_span());
            let output = self.tool.call(&args, &call_id, ctx, ctx.span).await?;
            let mut detail = json!({ "tool": self.tool.name, "result": ToolResult::of(&output) });
            if let Some(sandbox) = self.tool.enforcement() {
                detail["sandbox"] = json!(sandbox);
            }
            Ok(StepOutput {
                output,
                detail: Some(detail),
                ..StepOutput::default()
            })
        })
    }

    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        let args = self.arguments(ctx)?;
        Ok(Rendered::Text(format!("{} {}", self.tool.name, args)))
    }
}
