//! `agent`: the tool loop.
//!
//! The model sees the declared tools; each turn it either calls tools (several per turn are run in
//! order, their results appended as tool messages) or gives a final answer. A tool that fails is
//! reported to the model as an error result so it can recover. The loop fails with
//! ORCHESTRATION_ITERATION_LIMIT after `max_tool_iterations` rounds of tool calls. Memory (see
//! [`Memory`]) keeps the system prompt and the task, and trims the rest by whole exchanges;
//! retrieved context is shown on every turn but never stored. In `constrained` mode the model's tool calls are forced through a JSON Schema
//! ("final answer" or "call tool X with arguments"), for small models whose native format is weak.
//! Each turn's `inference` event lists the ids of the tool calls it made, and those calls' tool
//! events are children of its span.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::Prompt;
use super::infer::Sampling;
use super::memory::Memory;
use crate::constraint::parse_json_lenient;
use crate::core::{Failure, FailureCode, Message, Role, TokenUsage, ToolCall, ToolDefinition};
use crate::inference::{Engine, Request, Response};
use crate::orchestrate::events::ModelCall;
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler, StepOutput};
use crate::orchestrate::tools::{ToolRuntime, record_refusal};

/// How an agent's tool calls are obtained from the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "ToolCallMode")]
pub enum ToolCalls {
    /// The model's own tool-call format.
    #[default]
    Native,
    /// A JSON grammar of "call tool X with args" or "final answer", enforced while decoding.
    Constrained,
}

/// A tool-calling loop.
pub struct Agent {
    pub engine: Arc<dyn Engine>,
    pub prompt: Prompt,
    pub sampling: Sampling,
    pub tools: Vec<Arc<ToolRuntime>>,
    pub max_tool_iterations: u32,
    /// Most messages kept besides the system prompt and the task; None keeps all.
    pub memory: Option<usize>,
    /// Ephemeral context template, shown before the user message on every turn.
    pub context: Option<String>,
    pub tool_calls: ToolCalls,
}

impl Agent {
    fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools
            .iter()
            .map(|t| ToolDefinition {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: if t.parameters.is_null() {
                    json!({ "type": "object" })
                } else {
                    t.parameters.clone()
                },
            })
            .collect()
    }

    /// The schema of one constrained turn. The final-answer form comes first, so the simplest
    /// instance of it (what a scripted dry run answers) ends the loop.
    /// Each tool is its own branch, so its arguments are held to its schema while decoding;
    /// without `tools`, only a final answer.
    fn turn_schema(&self, tools: bool) -> Value {
        let mut branches = vec![json!({
            "type": "object", "required": ["final"], "additionalProperties": false,
            "properties": { "final": { "type": "string" } }
        })];
        if tools {
            branches.extend(
                self.tools
                    .iter()
                    .map(|t| super::call_branch("tool", &t.name, &t.parameters)),
            );
        }
        json!({ "oneOf": branches })
    }

    /// What a turn starts with: the prompt, and a chat's earlier turns (`history`) between the
    /// system prompt and the task.
    fn memory(&self, ctx: &StepContext) -> Result<Memory, Failure> {
        let history = match ctx.scope.get("history") {
            Some(Value::Array(earlier)) => earlier
                .iter()
                .filter_map(|m| serde_json::from_value::<Message>(m.clone()).ok())
                .collect(),
            _ => Vec::new(),
        };
        Ok(Memory::new(
            self.prompt.messages(ctx)?,
            history,
            self.memory,
        ))
    }
}

impl StepHandler for Agent {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            let mut memory = self.memory(ctx)?;
            let context = self.context.as_ref().map(|c| ctx.render(c)).transpose()?;
            let mut usage = TokenUsage::default();
            let mut calls_made = Vec::new();
            // Calls already made (tool and arguments): a model that repeats one is not given the
            // same result again but asked for its answer, with the tools withdrawn for that turn
            // (small models otherwise loop on a call whose result they already hold).
            let mut seen = HashSet::new();
            let mut must_answer = false;
            for round in 0..=self.max_tool_iterations {
                let messages = with_context(memory.messages(), context.as_deref());
                let request = Request {
                    tools: match self.tool_calls {
                        ToolCalls::Native if !must_answer => self.definitions(),
                        _ => Vec::new(),
                    },
                    json_schema: (self.tool_calls == ToolCalls::Constrained)
                        .then(|| self.turn_schema(!must_answer)),
                    ..self.sampling.request(messages)
                };
                // A constrained turn is read into its tool call (or final text) before the
                // call's event is written, so the event lists the call's id like a native one.
                let (response, turn_span) = ctx
                    .infer_turn(
                        self.engine.as_ref(),
                        request,
                        ModelCall::Round(round + 1),
                        |response| match self.tool_calls {
                            ToolCalls::Native => Ok(response),
                            ToolCalls::Constrained => constrained_turn(response, ctx),
                        },
                    )
                    .await?;
                usage += response.usage;
                if response.tool_calls.is_empty() {
                    return Ok(StepOutput {
                        output: Value::String(response.text),
                        usage,
                        detail: Some(json!({ "rounds": round + 1, "tool_calls": calls_made })),
                    });
                }
                let calls = response.tool_calls.clone();
                if round == self.max_tool_iterations {
                    break;
                }
                let repeated = calls
                    .iter()
                    .all(|c| seen.contains(&(c.name.clone(), c.arguments.to_string())));
                if repeated && !must_answer {
                    must_answer = true;
                    let last_result = memory
                        .rounds()
                        .iter()
                        .rev()
                        .find(|m| m.role == Role::Tool)
                        .map(|m| m.content.clone())
                        .unwrap_or_default();
                    memory.push(Message::assistant(response.text));
                    memory.push(Message::user(format!(
                        "You already made that call. The last tool result was: {last_result}\nUse it: give your final answer to the task now."
                    )));
                    continue;
                }
                seen.extend(
                    calls
                        .iter()
                        .map(|c| (c.name.clone(), c.arguments.to_string())),
                );
                must_answer = false;
                memory.push(Message {
                    tool_calls: calls.clone(),
                    ..Message::assistant(response.text)
                });
                for call in calls {
                    let result = match self.tools.iter().find(|t| t.name == call.name) {
                        Some(tool) => tool.call(&call.arguments, &call.id, ctx, turn_span).await,
                        None => {
                            let failure = Failure::new(
                                FailureCode::ToolNotFound,
                                format!("there is no tool `{}`", call.name),
                            );
                            let (id, name, args) = (&call.id, &call.name, &call.arguments);
                            record_refusal(ctx, turn_span, id, name, args, &failure);
                            Err(failure)
                        }
                    };
                    let content = match &result {
                        Ok(Value::String(text)) => text.clone(),
                        Ok(other) => other.to_string(),
                        Err(failure) => format!("error: {failure}"),
                    };
                    let mut made =
                        json!({ "id": call.id, "tool": call.name, "ok": result.is_ok() });
                    if let Err(failure) = &result {
                        made["error"] = json!(failure);
                    }
                    calls_made.push(made);
                    memory.push(Message::tool_result(call.id, content));
                }
                memory.trim();
            }
            Err(Failure::new(
                FailureCode::OrchestrationIterationLimit,
                format!(
                    "the agent was still calling tools after {} rounds",
                    self.max_tool_iterations
                ),
            )
            .with_help("raise max_tool_iterations, or make the task or the tools clearer"))
        })
    }

    /// The first round's messages, exactly: the chat's earlier turns and the ephemeral context
    /// included.
    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        let context = self.context.as_ref().map(|c| ctx.render(c)).transpose()?;
        Ok(Rendered::Messages(with_context(
            self.memory(ctx)?.messages(),
            context.as_deref(),
        )))
    }
}

/// A round's messages: `context` (retrieved passages, rendered afresh for the turn and never
/// stored) goes in a system message just before the last user message.
fn with_context(mut messages: Vec<Message>, context: Option<&str>) -> Vec<Message> {
    if let Some(context) = context {
        let at = messages
            .iter()
            .rposition(|m| m.role == Role::User)
            .unwrap_or(messages.len());
        messages.insert(at, Message::system(format!("Context:\n{context}")));
    }
    messages
}

/// Reads a constrained turn — `{"final": …}` or `{"tool": …, "arguments": {…}}` — into the
/// response a native turn would have been: the final text, or one tool call. A turn cut off by
/// `max_tokens` (the grammar holds until then) is closed by the JSON repair, so a long final
/// answer arrives truncated rather than lost.
fn constrained_turn(response: Response, ctx: &StepContext) -> Result<Response, Failure> {
    let value = parse_json_lenient(response.text.trim())
        .map_err(|failure| {
            Failure::new(
                FailureCode::ConstraintJsonInvalid,
                format!("the agent's turn is not JSON: {}", failure.message),
            )
        })?
        .value;
    if let Some(answer) = value.get("final").and_then(Value::as_str) {
        return Ok(Response {
            text: answer.to_string(),
            tool_calls: Vec::new(),
            ..response
        });
    }
    match (
        value.get("tool").and_then(Value::as_str),
        value.get("arguments"),
    ) {
        (Some(tool), Some(arguments)) => Ok(Response {
            tool_calls: vec![ToolCall {
                id: format!("call_{}", ctx.events.new_span()),
                name: tool.to_string(),
                arguments: arguments.clone(),
            }],
            ..response
        }),
        _ => Err(Failure::new(
            FailureCode::ConstraintSchemaViolation,
            format!("the agent's turn is neither a final answer nor a tool call: {value}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use crate::inference::{EngineFuture, ModelInfo};
    use crate::orchestrate::events::Events;
    use crate::orchestrate::steps::PromptSource;
    use crate::orchestrate::tools::{SideEffects, ToolAction};
    use crate::tool::Builtin;

    fn context() -> StepContext {
        StepContext::detached("agent", &Events::recording())
    }

    fn turn(text: &str) -> Response {
        Response {
            text: text.into(),
            ..Response::default()
        }
    }

    #[test]
    fn a_constrained_turn_reads_as_the_native_turn_it_stands_for() {
        let ctx = context();
        let call = constrained_turn(
            turn(r#"{"tool": "calc", "arguments": {"expression": "1+1"}}"#),
            &ctx,
        )
        .expect("a call");
        assert_eq!(call.tool_calls.len(), 1);
        assert_eq!(call.tool_calls[0].name, "calc");
        assert_eq!(call.tool_calls[0].arguments, json!({ "expression": "1+1" }));
        assert!(call.tool_calls[0].id.starts_with("call_"));
        assert!(
            call.text.contains("\"tool\""),
            "the raw turn stays in memory"
        );
        let last = constrained_turn(turn(r#"{"final": "2"}"#), &ctx).expect("an answer");
        assert_eq!((last.text.as_str(), last.tool_calls.len()), ("2", 0));
        let neither = constrained_turn(turn(r#"{"thought": "hm"}"#), &ctx).expect_err("neither");
        assert_eq!(neither.code, FailureCode::ConstraintSchemaViolation);
    }

    /// Gives its replies in turn and keeps every request's messages.
    struct Recording {
        replies: Mutex<VecDeque<Response>>,
        seen: Mutex<Vec<Vec<Message>>>,
    }

    impl Engine for Recording {
        fn infer(&self, request: Request) -> EngineFuture<'_> {
            Box::pin(async move {
                if let Ok(mut seen) = self.seen.lock() {
                    seen.push(request.messages);
                }
                let reply = self.replies.lock().ok().and_then(|mut r| r.pop_front());
                reply.ok_or_else(|| Failure::new(FailureCode::InferenceEngineError, "no reply"))
            })
        }

        fn model_info(&self) -> ModelInfo {
            ModelInfo {
                name: "recording".into(),
                engine: "scripted",
                constrained_decoding: false,
                price: None,
            }
        }
    }

    fn calculate(id: &str, expression: &str) -> Response {
        Response {
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "calculator".into(),
                arguments: json!({ "expression": expression }),
            }],
            ..Response::default()
        }
    }

    #[tokio::test]
    async fn a_short_memory_keeps_the_task_and_each_call_with_its_result() {
        let engine = Arc::new(Recording {
            replies: Mutex::new(VecDeque::from([
                calculate("c1", "1+1"),
                calculate("c2", "2+2"),
                Response {
                    text: "4".into(),
                    ..Response::default()
                },
            ])),
            seen: Mutex::new(Vec::new()),
        });
        let (description, parameters) = Builtin::Calculator.definition();
        let calculator = ToolRuntime::new(
            "calculator".into(),
            description.into(),
            parameters,
            SideEffects::None,
            true,
            ToolAction::Builtin(Builtin::Calculator),
        )
        .expect("a valid tool");
        let agent = Agent {
            engine: engine.clone(),
            prompt: Prompt {
                user: PromptSource::Inline("TASK: add things".into()),
                system: Some("You calculate.".into()),
            },
            sampling: Sampling::default(),
            tools: vec![Arc::new(calculator)],
            max_tool_iterations: 5,
            memory: Some(2),
            context: None,
            tool_calls: ToolCalls::Native,
        };
        let ctx = context();
        let output = agent.run(&ctx).await.expect("the agent answers");
        assert_eq!(output.output, "4");
        let seen = engine.seen.lock().expect("the requests").clone();
        assert_eq!(seen.len(), 3);
        let last: Vec<(Role, &str)> = seen[2]
            .iter()
            .map(|m| (m.role, m.content.as_str()))
            .collect();
        // The system prompt and the task stay; of the rounds, only the latest call and its
        // result (two messages) fit.
        assert_eq!(
            last,
            [
                (Role::System, "You calculate."),
                (Role::User, "TASK: add things"),
                (Role::Assistant, ""),
                (Role::Tool, r#"{"result":4}"#),
            ]
        );
        assert_eq!(seen[2][2].tool_calls[0].id, "c2");
        assert_eq!(seen[2][3].tool_call_id.as_deref(), Some("c2"));
    }
}
