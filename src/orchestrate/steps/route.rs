//! `route`: the orchestrator pattern — route, execute, synthesise — in exactly two model calls.
//!
//! 1. **Route**: one call at temperature 0, constrained to a JSON route (`single`, `parallel` or
//!    `sequential`, with each agent's arguments), is checked against the agents' argument schemas
//!    and the limits before anything runs; an invalid route is retried once with the errors, then
//!    fails with ORCHESTRATION_STEP_MISMATCH (the retry is the only extra call there can be).
//! 2. **Execute** with no model deciding anything: parallel agents run concurrently, sequential
//!    ones in order, each seeing the results before it as `results` — a template agent's template
//!    and a tool agent's argv templates read it, and a plan agent gets it as its input `results`
//!    when its plan declares one. A failed agent's error becomes its result; in a sequence, the
//!    agents after it are not run.
//! 3. **Synthesise**: one call turns the results into the answer.
//!
//! An agent runs a tool, another plan file, or a template sent to a model (the last two may call
//! models themselves; a template agent's call is recorded like the step's own, as `call: agent`). The route decision is kept in the run record (the step's detail) as a
//! plan trace.
//!
//! A route is visible while it runs: a `route_decision` event (mode, agents, rationale) comes
//! before the first agent starts, and each agent runs between `agent_start` and `agent_end`
//! events on a span of its own, which its tool call, model call or sub-plan run hang from.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::Prompt;
use super::ask_json::{JsonQuestion, ask_json};
use super::infer::SamplingSettings;
use crate::constraint::conform;
use crate::core::{Failure, FailureCode, Message, TokenUsage};
use crate::inference::{Engine, Request, TokenSink};
use crate::orchestrate::RunStatus;
use crate::orchestrate::events::{AgentOutcome, CallKind, EventData, OnDrop, SpanId, ToolResult};
use crate::orchestrate::pipeline::{
    Pipeline, Rendered, StepContext, StepFuture, StepHandler, StepOutput,
};
use crate::orchestrate::tools::ToolRuntime;

/// What an agent runs.
pub enum AgentAction {
    /// A declared tool, called with the agent's arguments (a command's argv sees `results`).
    Tool(Arc<ToolRuntime>),
    /// A template (seeing `args` and `results`) sent to a model.
    Model {
        template: String,
        engine: Arc<dyn Engine>,
    },
    /// Another plan, run with the agent's arguments as its inputs (checked against its declared
    /// inputs, defaults filled), plus `results` when it declares that input; the result is that
    /// plan's output.
    Plan(Arc<Pipeline>),
}

/// An agent a route may choose.
pub struct RouteAgent {
    pub name: String,
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: Value,
    pub action: AgentAction,
}

/// The route step.
pub struct Route {
    pub engine: Arc<dyn Engine>,
    pub prompt: Prompt,
    pub sampling: SamplingSettings,
    pub agents: Vec<Arc<RouteAgent>>,
    /// Most agents one route may run.
    pub max_agents: usize,
    /// Synthesis template (sees `results`); None uses a built-in one.
    pub synthesis: Option<String>,
    /// Where to stream the synthesised answer (the plan's final step only).
    pub stream: Option<TokenSink>,
}

/// A validated route.
struct Decision {
    mode: String,
    steps: Vec<(Arc<RouteAgent>, Value)>,
    trace: Value,
}

impl Route {
    fn route_schema(&self) -> Value {
        let branches: Vec<Value> = self
            .agents
            .iter()
            .map(|a| super::call_branch("agent", &a.name, &a.parameters))
            .collect();
        json!({
            "type": "object",
            "required": ["mode", "steps"],
            "additionalProperties": false,
            "properties": {
                "mode": { "enum": ["single", "parallel", "sequential"] },
                "steps": { "type": "array", "minItems": 1, "maxItems": self.max_agents, "items": { "oneOf": branches } },
                "rationale": { "type": "string", "maxLength": 200 }
            }
        })
    }

    fn router_messages(&self, ctx: &StepContext) -> Result<Vec<Message>, Failure> {
        let catalogue: Vec<String> = self
            .agents
            .iter()
            .map(|a| {
                format!(
                    "- {}: {} (arguments: {})",
                    a.name, a.description, a.parameters
                )
            })
            .collect();
        let mut messages = vec![Message::system(format!(
            "You route a request to agents. Available agents:\n{}\n\
             Answer with JSON: {{\"mode\": \"single\" | \"parallel\" | \"sequential\", \
             \"steps\": [{{\"agent\": NAME, \"arguments\": {{…}}}}], \"rationale\": WHY}}. \
             Use `single` for one agent, `parallel` for independent agents, `sequential` when a later \
             agent needs an earlier one's result. At most {} steps.",
            catalogue.join("\n"),
            self.max_agents
        ))];
        messages.extend(self.prompt.messages(ctx)?);
        Ok(messages)
    }

    /// Checks a route against the agents, their schemas and the limits.
    fn decide(&self, text: &str) -> Result<Decision, Failure> {
        let conformed = conform(text, &self.route_schema())?;
        let value = conformed.value;
        let mode = value["mode"].as_str().unwrap_or_default().to_string();
        let mut steps = Vec::new();
        let mut problems = Vec::new();
        for (i, step) in value["steps"].as_array().into_iter().flatten().enumerate() {
            let name = step["agent"].as_str().unwrap_or_default();
            match self.agents.iter().find(|a| a.name == name) {
                Some(agent) => steps.push((Arc::clone(agent), step["arguments"].clone())),
                None => problems.push(format!("step {}: there is no agent `{name}`", i + 1)),
            }
        }
        if mode == "single" && steps.len() != 1 {
            problems.push(format!(
                "mode `single` needs exactly one step, got {}",
                steps.len()
            ));
        }
        if steps.len() > self.max_agents {
            problems.push(format!(
                "{} steps exceed the limit of {}",
                steps.len(),
                self.max_agents
            ));
        }
        if !problems.is_empty() {
            return Err(Failure::new(
                FailureCode::OrchestrationStepMismatch,
                problems.join("; "),
            ));
        }
        Ok(Decision {
            mode,
            steps,
            trace: value,
        })
    }

    async fn run_agent(
        agent: &RouteAgent,
        args: &Value,
        results: &[Value],
        ctx: &StepContext,
    ) -> Result<(Value, TokenUsage), Failure> {
        match &agent.action {
            AgentAction::Tool(tool) => {
                let call_id = format!("call_{}", ctx.events.new_span());
                let output = tool
                    .call_after(args, results, &call_id, ctx, ctx.span)
                    .await?;
                Ok((output, TokenUsage::default()))
            }
            AgentAction::Model { template, engine } => {
                let mut scope = json!({ "args": args, "results": results });
                for &root in crate::prompt::roots::ROUTE_AGENT {
                    scope[root] = ctx.scope[root].clone();
                }
                let prompt = ctx.templates.render_str(template, &scope)?;
                let request = Request {
                    messages: vec![Message::user(prompt)],
                    ..Request::default()
                };
                let call = CallKind::Agent(agent.name.clone());
                let response = ctx.infer(engine.as_ref(), request, None, call).await?;
                Ok((Value::String(response.text), response.usage))
            }
            AgentAction::Plan(pipeline) => {
                let inputs = pipeline.bind_object(&with_results(pipeline, args, results))?;
                let record = ctx.nesting.run(pipeline, inputs, ctx).await;
                // The sub-plan's calls were booked to this run's ledger and held to its limit as
                // they were made; what they cost and used is this step's.
                ctx.ledger.add_nested(record.cost, record.usage);
                match record.status {
                    RunStatus::Complete => Ok((record.output.unwrap_or(Value::Null), record.usage)),
                    _ => Err(record.error.unwrap_or_else(|| {
                        Failure::new(
                            FailureCode::OrchestrationDependencyFailed,
                            format!("agent `{}`: its plan was cancelled", agent.name),
                        )
                    })),
                }
            }
        }
    }
}

/// A plan agent's inputs: its arguments, and the earlier agents' results as `results` when its
/// plan declares that input (set here, whatever the router sent under that name).
fn with_results(pipeline: &Pipeline, args: &Value, results: &[Value]) -> Value {
    let mut inputs = args.clone();
    if pipeline.inputs.contains_key("results")
        && let Value::Object(fields) = &mut inputs
    {
        fields.insert("results".into(), Value::Array(results.to_vec()));
    }
    inputs
}

/// One agent's entry in the results the synthesis sees. A failed agent does not fail the
/// request: its entry carries the error (also as `output` text, so templates that print
/// `r.output` still render), and the answer can say what could not be done.
fn agent_result(
    name: &str,
    args: &Value,
    outcome: Result<(Value, TokenUsage), Failure>,
    usage: &mut TokenUsage,
) -> Value {
    match outcome {
        Ok((output, used)) => {
            *usage += used;
            json!({ "agent": name, "arguments": args, "output": output })
        }
        Err(failure) => json!({
            "agent": name,
            "arguments": args,
            "output": format!("error: {}", failure.message),
            "error": failure,
        }),
    }
}

/// A sequential agent not run because an earlier one failed (a later step may depend on it:
/// an order must not be placed after its stock check failed).
fn skipped_result(name: &str, args: &Value, failed: &str) -> Value {
    json!({
        "agent": name,
        "arguments": args,
        "output": format!("not run: agent `{failed}` before it failed"),
        "skipped": true,
    })
}

impl Route {
    /// Asks the router for a route, retrying an invalid one once with its errors.
    async fn route(&self, ctx: &StepContext) -> Result<(Decision, TokenUsage, usize), Failure> {
        let question = JsonQuestion {
            engine: self.engine.as_ref(),
            request: Request {
                json_schema: Some(self.route_schema()),
                temperature: Some(0.0),
                ..self.sampling.request(self.router_messages(ctx)?)
            },
            // An invalid route is retried once, with the errors: the only extra call.
            max_attempts: 2,
            call: |attempt| CallKind::Route { attempt },
        };
        let routed = ask_json(
            ctx,
            question,
            |text| self.decide(text),
            |failure| {
                format!(
                    "That route is invalid: {}. Reply with a corrected route.",
                    failure.message
                )
            },
        )
        .await?
        .map_err(|failure| {
            Failure::new(
                FailureCode::OrchestrationStepMismatch,
                format!("the router gave no valid route: {}", failure.message),
            )
        })?;
        Ok((routed.value, routed.usage, routed.attempts.len()))
    }

    /// Runs the decided agents (after a `route_decision` event saying which): a sequence in
    /// order, each seeing the results before it, the others concurrently. Their results in
    /// the route's order; what they used is added to `usage`.
    async fn run_agents(
        decision: &Decision,
        ctx: &StepContext,
        usage: &mut TokenUsage,
    ) -> Vec<Value> {
        on_a_span_of_its_own(
            ctx,
            EventData::RouteDecision {
                mode: decision.mode.clone(),
                agents: decision.steps.iter().map(|(a, _)| a.name.clone()).collect(),
                rationale: decision.trace["rationale"].as_str().map(str::to_string),
            },
        );
        let mut results: Vec<Value> = Vec::new();
        if decision.mode == "sequential" {
            let mut failed: Option<String> = None;
            for (index, (agent, args)) in decision.steps.iter().enumerate() {
                if let Some(earlier) = &failed {
                    skipped(agent, index, earlier, ctx);
                    results.push(skipped_result(&agent.name, args, earlier));
                    continue;
                }
                let outcome = run_traced(agent, index, args, &results, ctx).await;
                if outcome.is_err() {
                    failed = Some(agent.name.clone());
                }
                results.push(agent_result(&agent.name, args, outcome, usage));
            }
        } else {
            let mut running = JoinSet::new();
            for (index, (agent, args)) in decision.steps.iter().enumerate() {
                let (agent, args) = (Arc::clone(agent), args.clone());
                let shared = sharing(ctx, ctx.span);
                running.spawn(async move {
                    let outcome = run_traced(&agent, index, &args, &[], &shared).await;
                    (index, agent.name.clone(), args, outcome)
                });
            }
            let mut finished = running.join_all().await;
            finished.sort_by_key(|(index, ..)| *index);
            for (_, name, args, outcome) in finished {
                results.push(agent_result(&name, &args, outcome, usage));
            }
        }
        results
    }
}

/// `ctx` for work of this step under `span`: the same scope, templates, ledger, nesting and
/// clock, the events it emits children of `span`.
fn sharing(ctx: &StepContext, span: SpanId) -> StepContext {
    StepContext {
        scope: ctx.scope.clone(),
        templates: Arc::clone(&ctx.templates),
        events: ctx.events.clone(),
        step: ctx.step.clone(),
        span,
        ledger: Arc::clone(&ctx.ledger),
        feedback: ctx.feedback.clone(),
        nesting: Arc::clone(&ctx.nesting),
        sample: ctx.sample,
        clock: ctx.clock.clone(),
    }
}

/// Runs the agent at `index` of the route between its `agent_start` and `agent_end` events, on a
/// span of its own that its tool call, model call or sub-plan run hang from. An agent stopped
/// while it runs (the run cancelled, the step's timeout) still ends, `cancelled`.
async fn run_traced(
    agent: &RouteAgent,
    index: usize,
    args: &Value,
    results: &[Value],
    ctx: &StepContext,
) -> Result<(Value, TokenUsage), Failure> {
    let span = ctx.events.new_span();
    let emit = |data| ctx.events.emit(Some(&ctx.step), span, Some(ctx.span), data);
    emit(EventData::AgentStart {
        agent: agent.name.clone(),
        index,
        args: args.clone(),
    });
    let started = Instant::now();
    let elapsed_ms = || started.elapsed().as_secs_f64() * 1000.0;
    let end = |outcome| EventData::AgentEnd {
        agent: agent.name.clone(),
        index,
        outcome,
        duration_ms: elapsed_ms(),
    };
    let cancelled = OnDrop::new(|| emit(end(AgentOutcome::Cancelled)));
    let outcome = Route::run_agent(agent, args, results, &sharing(ctx, span)).await;
    cancelled.disarm();
    emit(end(match &outcome {
        Ok((output, _)) => AgentOutcome::Ok {
            result: ToolResult::of(output),
        },
        Err(error) => AgentOutcome::Failed {
            error: error.clone(),
        },
    }));
    outcome
}

/// Records `data` as an event of this step, on a span of its own.
fn on_a_span_of_its_own(ctx: &StepContext, data: EventData) {
    let span = ctx.events.new_span();
    ctx.events.emit(Some(&ctx.step), span, Some(ctx.span), data);
}

/// Records that the agent at `index` was not run because agent `failed` before it failed.
fn skipped(agent: &RouteAgent, index: usize, failed: &str, ctx: &StepContext) {
    on_a_span_of_its_own(
        ctx,
        EventData::AgentEnd {
            agent: agent.name.clone(),
            index,
            outcome: AgentOutcome::Skipped {
                after: failed.to_string(),
            },
            duration_ms: 0.0,
        },
    );
}

impl StepHandler for Route {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            let (decision, mut usage, mut model_calls) = self.route(ctx).await?;
            let results = Self::run_agents(&decision, ctx, &mut usage).await;
            let synthesis_prompt = match &self.synthesis {
                Some(template) => {
                    let mut scope = ctx.scope.clone();
                    scope["results"] = Value::Array(results.clone());
                    ctx.templates.render_str(template, &scope)?
                }
                None => format!(
                    "Answer the request using only these results; if they do not hold the answer (an agent failed or found nothing), say so instead of guessing.\nResults:\n{}\n\nRequest: {}",
                    serde_json::to_string_pretty(&results).unwrap_or_default(),
                    self.prompt.user.render(ctx)?
                ),
            };
            let mut synthesis_messages: Vec<Message> = self
                .prompt
                .system
                .iter()
                .map(|s| ctx.render(s).map(Message::system))
                .collect::<Result<_, _>>()?;
            synthesis_messages.push(Message::user(synthesis_prompt));
            let answer = ctx
                .infer(
                    self.engine.as_ref(),
                    self.sampling.request(synthesis_messages),
                    self.stream.clone(),
                    CallKind::Synthesis,
                )
                .await?;
            model_calls += 1;
            usage += answer.usage;
            Ok(StepOutput {
                output: Value::String(answer.text),
                usage,
                detail: Some(
                    json!({ "route": decision.trace, "results": results, "model_calls": model_calls }),
                ),
            })
        })
    }

    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        self.router_messages(ctx).map(Rendered::Messages)
    }
}
