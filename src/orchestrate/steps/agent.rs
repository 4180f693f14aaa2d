//! `agent`: the tool loop.
//!
//! The model sees the declared tools; each turn it either calls tools (several per turn are run in
//! order, their results appended as tool messages) or gives a final answer. A tool that fails is
//! reported to the model as an error result so it can recover. The loop fails with
//! ORCHESTRATION_ITERATION_LIMIT after `max_tool_iterations` rounds of tool calls. Memory (see
//! [`Memory`]) keeps the system prompt and the task, and trims the rest by whole exchanges;
//! retrieved context is shown on every turn but never stored. In `constrained` mode the model's tool calls are forced through a JSON Schema
//! ("final answer" or "call tool X with arguments"), for small models whose native format is weak.
//! In `prompt` mode the tools and that same JSON are described in the prompt and the calls read
//! from the answer (the schema still goes to the engine, enforced where it can), for servers that
//! refuse or ignore `tools`; `auto` starts native and switches to `prompt` for the rest of the
//! step when the server refuses the tools or the model's first turn answers without calling any.
//! Each turn's `inference` event lists the ids of the tool calls it made, and those calls' tool
//! events are children of its span.
//!
//! An agent whose answer is the plan's output streams it. A native round's text streams as it is
//! generated and is never withdrawn: a round that turns into a tool call has shown its text (its
//! line ended, so the next round's starts a line of its own), and is shown as the call (its tool
//! events). Where a tool call is only recognisable once the round
//! is decoded (`constrained`, `prompt`, and an `auto` round that may yet be asked again in the
//! prompt), a round's answer is sent whole once it is known to be final.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::Prompt;
use super::infer::SamplingSettings;
use super::memory::Memory;
use crate::constraint::parse_json_lenient;
use crate::core::{Failure, FailureCode, Message, Role, TokenUsage, ToolCall, ToolDefinition};
use crate::inference::{Engine, Request, Response, TokenSink};
use crate::orchestrate::events::{CallKind, SpanId, ToolResult};
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
    /// The tools and that JSON described in the prompt, the calls read from the answer (the
    /// JSON's schema is also sent as a constraint, enforced where the engine can).
    Prompt,
    /// Native, switching to `prompt` for the rest of the step when the server refuses the tools
    /// or the model's first turn calls none.
    Auto,
}

/// Why an `auto` agent left native tool calls for the prompt.
#[derive(Debug, Clone, Copy)]
enum Fallback {
    /// The server refused `tools`.
    Refused,
    /// The first turn answered without calling a tool.
    Ignored,
}

/// A tool-calling loop.
pub struct Agent {
    pub engine: Arc<dyn Engine>,
    pub prompt: Prompt,
    pub sampling: SamplingSettings,
    pub tools: Vec<Arc<ToolRuntime>>,
    pub max_tool_iterations: u32,
    /// Most messages kept besides the system prompt and the task; None keeps all.
    pub memory: Option<usize>,
    /// Ephemeral context template, shown before the user message on every turn.
    pub context: Option<String>,
    pub tool_calls: ToolCalls,
    /// Where the final answer streams (when the agent's answer is the plan's output).
    pub stream: Option<TokenSink>,
}

impl Agent {
    /// The tools that can run now, checked each time a turn lists them: a program can appear
    /// or vanish during a long batch. A call to one that cannot is refused `TOOL_UNAVAILABLE`.
    fn available(&self) -> Vec<&ToolRuntime> {
        self.tools
            .iter()
            .filter(|t| t.action.unavailable().is_none())
            .map(Arc::as_ref)
            .collect()
    }

    fn definitions(tools: &[&ToolRuntime]) -> Vec<ToolDefinition> {
        tools
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
    /// Each tool offered is its own branch, so its arguments are held to its schema while
    /// decoding; with none, only a final answer.
    fn turn_schema(tools: &[&ToolRuntime]) -> Value {
        let mut branches = vec![json!({
            "type": "object", "required": ["final"], "additionalProperties": false,
            "properties": { "final": { "type": "string" } }
        })];
        branches.extend(
            tools
                .iter()
                .map(|t| super::call_branch("tool", &t.name, &t.parameters)),
        );
        json!({ "oneOf": branches })
    }

    /// The request of one turn in `mode` (never `auto`): the tools offered natively, or the
    /// turn's JSON as a constraint (and, in prompt mode, described with the tools).
    fn turn_request(&self, mode: ToolCalls, messages: Vec<Message>, must_answer: bool) -> Request {
        let offered = if must_answer {
            Vec::new()
        } else {
            self.available()
        };
        match mode {
            ToolCalls::Native | ToolCalls::Auto => Request {
                tools: Self::definitions(&offered),
                ..self.sampling.request(messages)
            },
            ToolCalls::Constrained => Request {
                json_schema: Some(Self::turn_schema(&offered)),
                ..self.sampling.request(messages)
            },
            ToolCalls::Prompt => Request {
                json_schema: Some(Self::turn_schema(&offered)),
                ..self
                    .sampling
                    .request(described(plain_turns(messages), &offered))
            },
        }
    }
}

/// `messages` with the tools offered and the JSON of a turn described in a system message after
/// the pinned system prompt (only the final-answer form when none is offered).
fn described(mut messages: Vec<Message>, offered: &[&ToolRuntime]) -> Vec<Message> {
    let mut text = String::new();
    if !offered.is_empty() {
        text.push_str("You can call these tools:\n");
        for tool in offered {
            let parameters = if tool.parameters.is_null() {
                json!({ "type": "object" })
            } else {
                tool.parameters.clone()
            };
            text.push_str(&format!(
                "- `{}`: {} Arguments (JSON Schema): {parameters}\n",
                tool.name, tool.description
            ));
        }
        text.push_str(
            "Reply with only one JSON object and nothing else: \
                 {\"tool\": \"<tool name>\", \"arguments\": {…}} to call a tool (its result comes \
                 back in the next message), or {\"final\": \"<your answer>\"} once you can answer.",
        );
    } else {
        text.push_str(
            "Reply with only one JSON object and nothing else: {\"final\": \"<your answer>\"}.",
        );
    }
    let at = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    messages.insert(at, Message::system(text));
    messages
}

impl Agent {
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

impl Agent {
    /// Runs one tool call the model made; a tool it does not have is refused (and recorded).
    async fn call_tool(
        &self,
        call: &ToolCall,
        ctx: &StepContext,
        turn_span: SpanId,
    ) -> Result<Value, Failure> {
        match self.tools.iter().find(|t| t.name == call.name) {
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
        }
    }

    /// Runs one tool call: what the step's detail says of it, and the result message the model
    /// is shown (a failure as an error result, so it can recover).
    async fn run_call(
        &self,
        call: ToolCall,
        ctx: &StepContext,
        turn_span: SpanId,
    ) -> (Value, Message) {
        let result = self.call_tool(&call, ctx, turn_span).await;
        let content = match &result {
            Ok(Value::String(text)) => text.clone(),
            Ok(other) => other.to_string(),
            Err(failure) => format!("error: {failure}"),
        };
        let mut made = json!({ "id": call.id, "tool": call.name, "ok": result.is_ok() });
        match &result {
            Ok(value) => made["result"] = json!(ToolResult::of(value)),
            Err(failure) => made["error"] = json!(failure),
        }
        if let Some(sandbox) = self
            .tools
            .iter()
            .find(|t| t.name == call.name)
            .and_then(|tool| tool.enforcement())
        {
            made["sandbox"] = json!(sandbox);
        }
        (made, Message::tool_result(call.id, content))
    }

    /// Ends the line of a round's `text` shown as it was written, once the round has called
    /// tools: the next round's text (or the answer) starts a line of its own.
    fn end_shown_line(&self, text: &str) {
        if !text.is_empty()
            && !text.ends_with('\n')
            && let Some(sink) = &self.stream
        {
            sink("\n");
        }
    }

    /// Sends a final answer that was not streamed as it was generated, whole, where the agent
    /// streams.
    fn stream_final(&self, ctx: &StepContext, answer: &str) {
        if let Some(sink) = ctx
            .streamed(self.stream.clone())
            .filter(|_| !answer.is_empty())
        {
            sink(answer);
        }
    }

    /// The step's detail once the agent answered: its rounds and tool calls, and under `auto`
    /// which way of calling tools was used and why it fell back.
    fn detail(&self, rounds: u32, calls_made: Vec<Value>, fallback: Option<Fallback>) -> Value {
        let mut detail = json!({ "rounds": rounds, "tool_calls": calls_made });
        if self.tool_calls == ToolCalls::Auto {
            let used = if fallback.is_some() {
                "prompt"
            } else {
                "native"
            };
            detail["tool_calls_mode"] = json!(used);
        }
        if let Some(why) = fallback {
            detail["fallback"] = json!(match why {
                Fallback::Refused => "the server refused the tools",
                Fallback::Ignored => "the first turn called no tool",
            });
        }
        detail
    }
}

/// The model repeated a call whose result it holds: it is given that result again and asked
/// for its answer.
fn ask_for_the_answer(memory: &mut Memory, said: String) {
    let last_result = memory
        .rounds()
        .iter()
        .rev()
        .find(|m| m.role == Role::Tool)
        .map(|m| m.content.clone())
        .unwrap_or_default();
    memory.push(Message::assistant(said));
    memory.push(Message::user(format!(
        "You already made that call. The last tool result was: {last_result}\nUse it: give your final answer to the task now."
    )));
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
            let mut fallback = None;
            let mut round = 0;
            while round <= self.max_tool_iterations {
                let mode = match (self.tool_calls, fallback) {
                    (ToolCalls::Auto, Some(_)) => ToolCalls::Prompt,
                    (mode, _) => mode,
                };
                let messages = with_context(memory.messages(), context.as_deref());
                let request = self.turn_request(mode, messages, must_answer);
                // `auto` asks the turn again in prompt mode when the server refuses the tools,
                // or when a first turn that was offered tools answers without calling one: such
                // a turn's text is provisional until it calls a tool, so it is not streamed.
                let can_fall_back = mode == ToolCalls::Auto && fallback.is_none();
                let provisional = can_fall_back
                    && calls_made.is_empty()
                    && !must_answer
                    && !self.tools.is_empty();
                let live = match mode {
                    ToolCalls::Native => self.stream.clone(),
                    ToolCalls::Auto if !provisional => self.stream.clone(),
                    _ => None,
                };
                let streamed_live = live.is_some();
                // A constrained turn is read into its tool call (or final text) before the
                // call's event is written, so the event lists the call's id like a native one.
                let turn = ctx
                    .infer_turn(
                        self.engine.as_ref(),
                        request,
                        live,
                        CallKind::Round(round + 1),
                        |response| match mode {
                            ToolCalls::Native | ToolCalls::Auto => Ok(response),
                            ToolCalls::Constrained | ToolCalls::Prompt => {
                                constrained_turn(response, ctx)
                            }
                        },
                    )
                    .await;
                let (response, turn_span) = match turn {
                    Err(failure)
                        if can_fall_back
                            && failure.code == FailureCode::InferenceRequestRefused =>
                    {
                        fallback = Some(Fallback::Refused);
                        continue;
                    }
                    turn => turn?,
                };
                usage += response.usage;
                if provisional && response.tool_calls.is_empty() {
                    fallback = Some(Fallback::Ignored);
                    continue;
                }
                if response.tool_calls.is_empty() {
                    if !streamed_live {
                        self.stream_final(ctx, &response.text);
                    }
                    let detail = self.detail(round + 1, calls_made, fallback);
                    return Ok(StepOutput {
                        output: Value::String(response.text),
                        usage,
                        detail: Some(detail),
                    });
                }
                if streamed_live {
                    self.end_shown_line(&response.text);
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
                    ask_for_the_answer(&mut memory, response.text);
                    round += 1;
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
                    let (made, result) = self.run_call(call, ctx, turn_span).await;
                    calls_made.push(made);
                    memory.push(result);
                }
                memory.trim();
                round += 1;
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

    /// The first round's messages, exactly: the chat's earlier turns, the ephemeral context and
    /// (in prompt mode) the description of the tools included.
    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        let context = self.context.as_ref().map(|c| ctx.render(c)).transpose()?;
        let messages = with_context(self.memory(ctx)?.messages(), context.as_deref());
        Ok(Rendered::Messages(
            self.turn_request(self.tool_calls, messages, false).messages,
        ))
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

/// The messages as plain text turns, for a model that was never offered tools natively: an
/// assistant's calls stay as the JSON it wrote, and each result becomes a user message naming
/// the tool it came from.
fn plain_turns(messages: Vec<Message>) -> Vec<Message> {
    let mut names = std::collections::HashMap::new();
    messages
        .into_iter()
        .map(|message| match message.role {
            Role::Assistant if !message.tool_calls.is_empty() => {
                for call in &message.tool_calls {
                    names.insert(call.id.clone(), call.name.clone());
                }
                Message::assistant(message.content)
            }
            Role::Tool => {
                let tool = message
                    .tool_call_id
                    .as_ref()
                    .and_then(|id| names.get(id))
                    .map_or("the tool", String::as_str);
                Message::user(format!("Result of `{tool}`: {}", message.content))
            }
            _ => message,
        })
        .collect()
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
    use crate::orchestrate::emit::Events;
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

    /// Gives its replies (answers or failures) in turn and keeps every request.
    struct Recording {
        replies: Mutex<VecDeque<Result<Response, Failure>>>,
        seen: Mutex<Vec<Request>>,
    }

    impl Recording {
        fn new(replies: impl IntoIterator<Item = Result<Response, Failure>>) -> Arc<Self> {
            Arc::new(Recording {
                replies: Mutex::new(replies.into_iter().collect()),
                seen: Mutex::new(Vec::new()),
            })
        }

        fn requests(&self) -> Vec<Request> {
            self.seen.lock().expect("the requests").clone()
        }
    }

    impl Engine for Recording {
        fn infer(&self, request: Request) -> EngineFuture<'_> {
            Box::pin(async move {
                if let Ok(mut seen) = self.seen.lock() {
                    seen.push(request);
                }
                let reply = self.replies.lock().ok().and_then(|mut r| r.pop_front());
                reply.unwrap_or_else(|| {
                    Err(Failure::new(FailureCode::InferenceEngineError, "no reply"))
                })
            })
        }

        fn model_info(&self) -> ModelInfo {
            ModelInfo {
                name: "recording".into(),
                engine: "scripted",
                constrained_decoding: false,
                price: None,
                key: None,
                context_window: None,
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

    /// A calculator agent on `engine`, asked to add things.
    fn calculator_agent(engine: Arc<Recording>, tool_calls: ToolCalls) -> Agent {
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
        Agent {
            engine,
            prompt: Prompt {
                user: PromptSource::Inline("TASK: add things".into()),
                system: Some("You calculate.".into()),
            },
            sampling: SamplingSettings::default(),
            tools: vec![Arc::new(calculator)],
            max_tool_iterations: 5,
            memory: None,
            context: None,
            tool_calls,
            stream: None,
        }
    }

    #[tokio::test]
    async fn a_short_memory_keeps_the_task_and_each_call_with_its_result() {
        let engine = Recording::new([
            Ok(calculate("c1", "1+1")),
            Ok(calculate("c2", "2+2")),
            Ok(turn("4")),
        ]);
        let agent = Agent {
            memory: Some(2),
            ..calculator_agent(Arc::clone(&engine), ToolCalls::Native)
        };
        let ctx = context();
        let output = agent.run(&ctx).await.expect("the agent answers");
        assert_eq!(output.output, "4");
        let seen: Vec<Vec<Message>> = engine.requests().into_iter().map(|r| r.messages).collect();
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

    #[tokio::test]
    async fn in_prompt_mode_the_tools_are_described_and_the_calls_read_from_the_text() {
        let engine = Recording::new([
            Ok(turn(
                r#"{"tool": "calculator", "arguments": {"expression": "1+1"}}"#,
            )),
            Ok(turn(
                r#"{"tool": "calculator", "arguments": {"formula": "2+2"}}"#,
            )),
            Ok(turn(r#"{"final": "2"}"#)),
        ]);
        let agent = calculator_agent(Arc::clone(&engine), ToolCalls::Prompt);
        let output = agent.run(&context()).await.expect("the agent answers");
        assert_eq!(output.output, "2");
        let detail = output.detail.expect("a detail");
        // The second call's arguments are checked against the tool's schema like a native one's.
        assert_eq!(detail["tool_calls"][0]["ok"], true);
        assert_eq!(detail["tool_calls"][1]["ok"], false);
        assert_eq!(
            detail["tool_calls"][1]["error"]["code"],
            "TOOL_INVALID_ARGUMENTS"
        );
        let requests = engine.requests();
        assert_eq!(requests.len(), 3);
        let first = &requests[0];
        assert!(first.tools.is_empty(), "no tools offered natively");
        let offered: Vec<&ToolRuntime> = agent.tools.iter().map(Arc::as_ref).collect();
        assert_eq!(first.json_schema, Some(Agent::turn_schema(&offered)));
        assert_eq!(first.messages[0].content, "You calculate.");
        assert_eq!(first.messages[1].role, Role::System);
        assert!(
            first.messages[1].content.contains("- `calculator`: "),
            "{}",
            first.messages[1].content
        );
        assert!(first.messages[1].content.contains(r#"{"final": "#));
        // Later turns carry the calls as the JSON written and the results as plain messages.
        let second: Vec<(Role, &str)> = requests[1]
            .messages
            .iter()
            .skip(3)
            .map(|m| (m.role, m.content.as_str()))
            .collect();
        assert_eq!(
            second,
            [
                (
                    Role::Assistant,
                    r#"{"tool": "calculator", "arguments": {"expression": "1+1"}}"#
                ),
                (Role::User, r#"Result of `calculator`: {"result":2}"#),
            ]
        );
        assert!(requests[1].messages.iter().all(|m| m.tool_calls.is_empty()));
    }

    #[tokio::test]
    async fn auto_falls_back_to_the_prompt_when_the_tools_are_refused() {
        let refused = Failure::new(FailureCode::InferenceRequestRefused, "no `tools` here");
        let engine = Recording::new([
            Err(refused),
            Ok(turn(
                r#"{"tool": "calculator", "arguments": {"expression": "3*3"}}"#,
            )),
            Ok(turn(r#"{"final": "9"}"#)),
        ]);
        let agent = calculator_agent(Arc::clone(&engine), ToolCalls::Auto);
        let output = agent.run(&context()).await.expect("the agent answers");
        assert_eq!(output.output, "9");
        let detail = output.detail.expect("a detail");
        assert_eq!(detail["tool_calls_mode"], "prompt");
        assert_eq!(detail["fallback"], "the server refused the tools");
        assert_eq!(detail["rounds"], 2, "the refused call is not a round");
        let requests = engine.requests();
        assert_eq!(requests[0].tools.len(), 1, "native first");
        assert!(requests[1].tools.is_empty() && requests[1].json_schema.is_some());
    }

    #[tokio::test]
    async fn auto_asks_again_in_the_prompt_when_the_first_turn_calls_no_tool() {
        let engine = Recording::new([
            Ok(turn("It is probably 10.")),
            Ok(turn(
                r#"{"tool": "calculator", "arguments": {"expression": "3*3"}}"#,
            )),
            Ok(turn(r#"{"final": "9"}"#)),
        ]);
        let output = calculator_agent(Arc::clone(&engine), ToolCalls::Auto)
            .run(&context())
            .await
            .expect("the agent answers");
        assert_eq!(output.output, "9");
        let detail = output.detail.expect("a detail");
        assert_eq!(detail["fallback"], "the first turn called no tool");
        assert_eq!(engine.requests().len(), 3);

        // A native turn that calls a tool keeps the step native.
        let engine = Recording::new([Ok(calculate("c1", "3*3")), Ok(turn("9"))]);
        let output = calculator_agent(Arc::clone(&engine), ToolCalls::Auto)
            .run(&context())
            .await
            .expect("the agent answers");
        let detail = output.detail.expect("a detail");
        assert_eq!(detail["tool_calls_mode"], "native");
        assert!(detail.get("fallback").is_none());
        assert!(engine.requests().iter().all(|r| r.json_schema.is_none()));
    }

    /// What an agent built to stream sends to its sink, piece by piece.
    fn streamed(agent: Agent) -> (Agent, Arc<Mutex<Vec<String>>>) {
        let pieces = Arc::new(Mutex::new(Vec::new()));
        let sink: TokenSink = {
            let pieces = Arc::clone(&pieces);
            Arc::new(move |piece: &str| pieces.lock().expect("pieces").push(piece.into()))
        };
        let agent = Agent {
            stream: Some(sink),
            ..agent
        };
        (agent, pieces)
    }

    #[tokio::test]
    async fn native_rounds_stream_as_written_and_read_rounds_once_final() {
        let said = Response {
            text: "Adding.".into(),
            ..calculate("c1", "2+2")
        };
        let engine = Recording::new([Ok(said), Ok(turn("4"))]);
        let (agent, pieces) = streamed(calculator_agent(engine, ToolCalls::Native));
        agent.run(&context()).await.expect("the agent answers");
        // The round that called the tool ends its line before the answer.
        assert_eq!(*pieces.lock().expect("pieces"), ["Adding.", "\n", "4"]);

        let engine = Recording::new([
            Ok(turn(
                r#"{"tool": "calculator", "arguments": {"expression": "2+2"}}"#,
            )),
            Ok(turn(r#"{"final": "4"}"#)),
        ]);
        let (agent, pieces) = streamed(calculator_agent(engine, ToolCalls::Prompt));
        agent.run(&context()).await.expect("the agent answers");
        assert_eq!(*pieces.lock().expect("pieces"), ["4"]);

        // `auto`'s first round may be discarded: it is not shown, the answer asked again is.
        let engine = Recording::new([
            Ok(turn("It is probably 10.")),
            Ok(turn(r#"{"final": "9"}"#)),
        ]);
        let (agent, pieces) = streamed(calculator_agent(engine, ToolCalls::Auto));
        agent.run(&context()).await.expect("the agent answers");
        assert_eq!(*pieces.lock().expect("pieces"), ["9"]);
    }
}
