//! What the executor runs: steps with their handlers, dependencies and execution settings, and
//! the contract a run is held to — the inputs it declares, the policy's step timeout and cost
//! limit — so that every command that starts a run (one run, a batch row, a chat turn, a sub-plan
//! agent) binds, times and bounds it the same way without reaching back into the plan file.
//!
//! Every model call a step makes goes through [`StepContext::infer`] (or its tool-loop form,
//! [`StepContext::infer_turn`]), which records it as an `inference` event, adds its cost to the
//! step's [`StepLedger`], and holds the run to its cost limit.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::emit::Events;
use super::events::{CallContent, CallKind, EventData, OnDrop, Sent, SpanId};
use super::inputs::{self, InputSpec};
use super::ledger::{Booking, StepLedger};
use super::record::RunRecord;
use super::resources::Resources;
use super::traces::TraceShape;
use crate::core::step_clock::StepClock;
use crate::core::{Cost, Failure, FailureCode, Message, TokenUsage};
use crate::inference::{
    CacheStatus, CallContext, Engine, Grammar, ModelInfo, PaceTally, Request, Response, SchemaMode,
    TokenSink,
};
use crate::prompt::Templates;
use crate::validate::RetryPolicy;

/// A runnable pipeline.
pub struct Pipeline {
    pub name: String,
    pub steps: Vec<StepNode>,
    /// Template of the run's result; None means the output of the last step in plan order.
    pub output: Option<String>,
    /// Constants templates read as `vars`.
    pub vars: Value,
    pub templates: Arc<Templates>,
    /// The inputs a run takes; [`Pipeline::bind`] and its siblings check values against them.
    pub inputs: IndexMap<String, InputSpec>,
    /// The timeout of steps that set none: the policy's `timeout_per_step`.
    pub step_timeout: Option<Duration>,
    /// Most a run's model calls may cost: the policy's `max_cost`.
    pub max_cost: Option<Cost>,
    /// What the session's trace exporter keeps of the plan for its runs' spans, made by the
    /// first traced run.
    pub trace_shape: OnceLock<TraceShape>,
    /// The plan's `reduce:`: what a batch of it runs once per group of its rows' lines.
    pub reduce: Option<Reduce>,
}

/// A plan's `reduce:`, built with the plan that names it (as a route's sub-plans are): after a
/// batch has run the plan once per row, the rows' output lines are grouped and this runs once
/// per group.
pub struct Reduce {
    pub pipeline: Arc<Pipeline>,
    pub group_by: GroupBy,
    /// The SHA-256 of the reduce plan's text and of everything its lockfile pins, which the
    /// reduce's output records; worked out only when a batch asks, since pinning reads every
    /// file the plan uses (the MCP servers' tools with the session's resources).
    pub plan_sha256: Box<dyn Fn(&Resources) -> String + Send + Sync>,
}

/// How a reduce groups rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupBy {
    /// A path into each row (`product`, `output.label`) or a template over it as `row`.
    pub key: String,
    /// Leave rows without the key out, instead of grouping them under `null`.
    pub skip_missing_key: bool,
    /// Reduce a group of more rows than this in chunks of it, then the partial results, until
    /// one is left.
    pub fold: Option<u64>,
}

impl Pipeline {
    /// The run's `inputs` from `-i NAME=VALUE` pairs over the values of an inputs file; every
    /// problem at once (`CONFIG_INVALID_INPUT`).
    pub fn bind(
        &self,
        pairs: &[(String, String)],
        file: Option<Map<String, Value>>,
    ) -> Result<Value, Failure> {
        inputs::resolve(&self.inputs, pairs, file)
    }

    /// The run's `inputs` from a batch row, each input from the column of its name or the
    /// column `map` names for it (`--map INPUT=COLUMN`).
    pub fn bind_row(
        &self,
        row: &Map<String, Value>,
        map: &[(String, String)],
    ) -> Result<Value, Failure> {
        inputs::from_row(&self.inputs, map, row)
    }

    /// The run's `inputs` from a JSON object (a sub-plan agent's arguments).
    pub fn bind_object(&self, values: &Value) -> Result<Value, Failure> {
        inputs::resolve(&self.inputs, &[], values.as_object().cloned())
    }
}

/// One step: what runs, what it waits for, and how.
pub struct StepNode {
    pub name: String,
    /// The step type's name (`infer`, `tool`, …).
    pub kind: &'static str,
    /// Steps that must finish first (indices into `Pipeline::steps`).
    pub needs: Vec<usize>,
    /// Every step this one depends on, directly or not.
    pub upstream: Vec<usize>,
    /// The upstream steps its templates read (`steps.<name>`); only these are put in its scope,
    /// so a long chain does not copy every earlier output into every step.
    pub reads: Vec<usize>,
    /// Skip the step when this expression is false.
    pub when: Option<String>,
    pub retry: RetryPolicy,
    pub timeout: Option<Duration>,
    pub handler: Arc<dyn StepHandler>,
    /// The voting step this one is the fallback of: it does not run on its own (it is skipped)
    /// and runs only when that step hands over to it.
    pub standby_for: Option<String>,
    /// Whether the run goes on when this step fails for good: its output is null, its error is
    /// recorded and readable as `steps.<name>.error`, and the steps after it run.
    pub continue_on_error: bool,
    /// Where a failed check of this step sends the run back to (a validate step's `feedback`).
    pub feedback: Option<Feedback>,
}

/// A check that, when it fails, sends the run back to an upstream model step: that step runs
/// again with its earlier answer and what was wrong with it appended to its messages, the steps
/// between it and the check run again on the new answer, and the check runs again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feedback {
    /// The step to run again (an index into `Pipeline::steps`, upstream of the check).
    pub step: usize,
    /// Checks in all, the first included.
    pub max_attempts: u32,
}

/// Starts the runs nested in a step (a route's plan agents); the session's runner implements it.
pub trait NestedRuns: Send + Sync {
    /// Runs `pipeline` on bound `inputs` as a run nested in the step of `parent`.
    fn run<'a>(
        &'a self,
        pipeline: &'a Pipeline,
        inputs: Value,
        parent: &'a StepContext,
    ) -> NestedRun<'a>;
}

/// A nested run under way.
pub type NestedRun<'a> = Pin<Box<dyn Future<Output = RunRecord> + Send + 'a>>;

/// What a handler sees while it runs.
pub struct StepContext {
    /// The template context: `inputs`, `vars`, `steps`, and `input` when the step has one.
    pub scope: Value,
    pub templates: Arc<Templates>,
    pub events: Events,
    pub step: String,
    /// This attempt's span; events the handler emits are its children.
    pub span: SpanId,
    /// What the step has spent and how it voted, shared by its attempts.
    pub ledger: Arc<StepLedger>,
    /// Messages a model step appends after its prompt's: its earlier answers, each followed by
    /// what a check found wrong with it (empty unless a check sent the run back to this step).
    pub feedback: Vec<Message>,
    /// What starts the runs nested in this step (a route's plan agents), cancelled with it.
    pub nesting: Arc<dyn NestedRuns>,
    /// Which repeat of the same run this is (see [`super::RunRequest::sample`]); its model calls
    /// carry it.
    pub sample: Option<u32>,
    /// The clock of the attempt under way when the step has a timeout (else no step's): its
    /// model calls carry it, so their waits for a model to load are not charged to the timeout.
    pub clock: StepClock,
}

impl StepContext {
    /// The upstream output (`input`), or null.
    pub fn input(&self) -> &Value {
        self.scope.get("input").unwrap_or(&Value::Null)
    }

    /// Renders inline template text in this step's scope.
    pub fn render(&self, text: &str) -> Result<String, Failure> {
        self.templates.render_str(text, &self.scope)
    }

    /// Calls a model and records the call as an `inference` event (model, duration, usage,
    /// which of the step's calls it was, what was sent, what it cost, the tool calls it made).
    pub async fn infer(
        &self,
        engine: &dyn Engine,
        request: Request,
        stream: Option<TokenSink>,
        call: CallKind,
    ) -> Result<Response, Failure> {
        let (response, _) = self.call_model(engine, request, stream, call, Ok).await?;
        Ok(response)
    }

    /// [`infer`](Self::infer) for one turn of a tool loop: `read` turns the answer into what the
    /// step acts on (a constrained turn's JSON into its tool call or its final text) before the
    /// event is written, so the event lists the ids of the tool calls the turn made. The call's
    /// span comes back with the answer: those tool calls' events are its children.
    pub async fn infer_turn(
        &self,
        engine: &dyn Engine,
        request: Request,
        stream: Option<TokenSink>,
        call: CallKind,
        read: impl FnOnce(Response) -> Result<Response, Failure>,
    ) -> Result<(Response, SpanId), Failure> {
        self.call_model(engine, request, stream, call, read).await
    }

    /// Where text a step built to stream (`built`) goes: there, and to whoever watches the run
    /// alone (a server's client); None when the step was not built to stream.
    pub fn streamed(&self, built: Option<TokenSink>) -> Option<TokenSink> {
        match (built, self.events.tokens()) {
            (Some(built), Some(watched)) => {
                let watched = Arc::clone(watched);
                Some(Arc::new(move |piece: &str| {
                    built(piece);
                    watched(piece);
                }) as TokenSink)
            }
            (built, _) => built,
        }
    }

    /// What a model call of this step on span `span` is lent besides what it asks: its trace
    /// parent, the clock of the attempt making it, and a fresh tally of its waits for its
    /// model's pace.
    fn call_context(&self, span: SpanId) -> CallContext {
        CallContext {
            traceparent: self.events.traceparent(span),
            clock: self.clock.clone(),
            pacing: PaceTally::default(),
        }
    }

    /// `failure`, naming this step when it is a replay's miss: where the prompt (or what fed it)
    /// changed.
    fn named_miss(&self, failure: Failure) -> Failure {
        match failure.code {
            FailureCode::CacheMiss => Failure {
                message: format!("step `{}`: {}", self.step, failure.message),
                ..failure
            },
            _ => failure,
        }
    }

    /// When a model call first waited `load` for its model to load: the `model_load` event, a
    /// child of the call's `span`, and the wait for the call's own event.
    fn loaded(&self, info: &ModelInfo, load: Duration, span: SpanId) -> Option<u32> {
        if !load.is_zero() {
            let data = EventData::ModelLoad {
                model: info.name.clone(),
                model_key: info.key.clone(),
                engine: info.engine,
                duration_ms: load.as_secs_f64() * 1000.0,
            };
            self.events
                .emit(Some(&self.step), self.events.new_span(), Some(span), data);
        }
        whole_millis(load)
    }

    async fn call_model(
        &self,
        engine: &dyn Engine,
        mut request: Request,
        stream: Option<TokenSink>,
        call: CallKind,
        read: impl FnOnce(Response) -> Result<Response, Failure>,
    ) -> Result<(Response, SpanId), Failure> {
        self.ledger.check_budget()?;
        if let CallKind::Vote(candidate) = call {
            request.candidate = Some(candidate);
        }
        request.sample = self.sample;
        let info = engine.model_info();
        let mut sent = sent(&request, &info);
        // Prompts reach the trace, and only the trace, when the session captures content.
        let captured = self
            .events
            .captures_content()
            .then(|| request.messages.clone());
        let span = self.events.new_span();
        request.context = self.call_context(span);
        let pacing = request.context.pacing.clone();
        let started = Instant::now();
        // A run watched alone (a server's client) gets the text of the steps built to stream too.
        let stream = self.streamed(stream);
        // A call stopped before it answered (the run cancelled, the step's timeout) still
        // leaves its event, marked `cut_off`.
        let cut_off = OnDrop::new({
            let (info, call, sent) = (info.clone(), call.clone(), sent.clone());
            move || {
                let data = EventData::cut_off(info, started.elapsed(), call, sent);
                self.events
                    .emit(Some(&self.step), span, Some(self.span), data);
            }
        });
        let answered = match stream {
            Some(sink) => engine.infer_streaming(request, sink).await,
            None => engine.infer(request).await,
        };
        cut_off.disarm();
        let answered = answered.map_err(|failure| self.named_miss(failure));
        // The call's own time: what it waited for the model's rate limit (answered or failed),
        // and for the model to load, is reported apart.
        let rate_limit = pacing.get();
        let load = answered
            .as_ref()
            .map(|r| r.timings.load)
            .unwrap_or_default();
        let own_time = started
            .elapsed()
            .saturating_sub(rate_limit.waited.saturating_add(load));
        let duration_ms = own_time.as_secs_f64() * 1000.0;
        let model_load_ms = self.loaded(&info, load, span);
        // A call the engine failed is a model call too: its event says why.
        let (mut finish_reason, mut content) = (None, None);
        let (usage, cost, cache, read, error) = match answered {
            Ok(response) => {
                let reason = finish_reason_of(&response, sent.max_tokens);
                content = captured.map(|messages| Arc::new(CallContent::of(messages, &response)));
                finish_reason = Some(reason);
                let usage = response.usage;
                let cache = response.cache;
                sent.schema_mode = response.schema_mode;
                sent.constrained &= response.schema_mode.is_none_or(SchemaMode::decoded);
                // A call the cache answered reached no model: it cost nothing.
                let cost = match cache {
                    CacheStatus::Hit { .. } => info.price.map(|_| Cost::from_amount(0.0)),
                    _ => info.price.map(|price| price.cost(usage)),
                };
                (usage, cost, cache, read(response), None)
            }
            Err(failure) => (
                TokenUsage::default(),
                None,
                CacheStatus::Unused,
                Err(failure.clone()),
                Some(failure),
            ),
        };
        let cached = matches!(cache, CacheStatus::Hit { .. });
        let tool_call_ids = match &read {
            Ok(response) => response.tool_calls.iter().map(|c| c.id.clone()).collect(),
            Err(_) => Vec::new(),
        };
        let answered = error.is_none();
        self.ledger
            .book_call(&call, Booking::new(usage, cost, cache, rate_limit));
        let tokens_per_second = (!cached && duration_ms > 0.0 && usage.completion_tokens > 0)
            .then(|| usage.completion_tokens as f64 / (duration_ms / 1000.0));
        let data = EventData::Inference {
            model: info.name,
            model_key: info.key,
            engine: info.engine,
            duration_ms,
            usage,
            tokens_per_second,
            rate_limit_wait_ms: whole_millis(rate_limit.waited),
            model_load_ms,
            // Asked again now: a local model knows its file's only once a call has loaded it.
            context_window: engine.model_info().context_window,
            call,
            sent,
            cost,
            tool_call_ids,
            error: error.map(Box::new),
            cached,
            cut_off: false,
            finish_reason,
            content,
        };
        self.events
            .emit(Some(&self.step), span, Some(self.span), data);
        if answered {
            self.ledger.check_budget()?;
        }
        read.map(|response| (response, span))
    }
}

/// A wait in whole milliseconds (saturating), for an event; None when there was none.
fn whole_millis(wait: Duration) -> Option<u32> {
    (!wait.is_zero()).then(|| u32::try_from(wait.as_millis()).unwrap_or(u32::MAX))
}

/// Why `response` ended, as the GenAI conventions name it: `tool_call` when it called tools,
/// `length` when it used all of `max_tokens`, `stop` otherwise. Engines do not report the
/// server's own reason, so it is read off the answer.
fn finish_reason_of(response: &Response, max_tokens: Option<u32>) -> &'static str {
    if !response.tool_calls.is_empty() {
        "tool_call"
    } else if max_tokens.is_some_and(|max| response.usage.completion_tokens >= u64::from(max)) {
        "length"
    } else {
        "stop"
    }
}

/// What `request` sends, as its `inference` event records it (before the engine answers).
fn sent(request: &Request, info: &ModelInfo) -> Sent {
    let constraint = match (&request.json_schema, &request.grammar) {
        (Some(_), _) => Some("json_schema"),
        (None, Some(Grammar::Regex(_))) => Some("regex"),
        (None, Some(Grammar::Lark(_))) => Some("lark"),
        (None, None) => None,
    };
    Sent {
        messages: request.messages.len(),
        tools: request.tools.len(),
        constraint,
        constrained: constraint.is_some() && info.constrained_decoding,
        temperature: request.temperature,
        schema_mode: None,
        max_tokens: request.max_tokens,
    }
}

#[cfg(test)]
impl StepContext {
    /// A context for running a handler on its own in a unit test: step `step`, an empty scope,
    /// no prompt files, events going to `events`, no cost limit, no feedback.
    pub fn detached(step: &str, events: &Events) -> StepContext {
        StepContext {
            scope: Value::Object(Map::new()),
            templates: Arc::new(Templates::new(None)),
            events: events.clone(),
            step: step.to_string(),
            span: events.run_span(),
            ledger: Arc::default(),
            feedback: Vec::new(),
            nesting: super::session::detached_nesting(),
            sample: None,
            clock: StepClock::default(),
        }
    }
}

/// A step's result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepOutput {
    pub output: Value,
    pub usage: TokenUsage,
    /// How the output was obtained (attempts, repairs, votes…), for the run record.
    pub detail: Option<Value>,
}

/// What a step would send, for `pagantic render`.
#[derive(Debug, Clone, PartialEq)]
pub enum Rendered {
    /// The messages of a model call.
    Messages(Vec<Message>),
    /// Text (a template step, a query, tool arguments).
    Text(String),
}

/// A boxed future, so handlers can be trait objects.
pub type StepFuture<'a> = Pin<Box<dyn Future<Output = Result<StepOutput, Failure>> + Send + 'a>>;

/// Runs one kind of step.
pub trait StepHandler: Send + Sync {
    /// Runs the step once.
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a>;
    /// What the step would send, without sending it.
    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure>;
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::{Price, ToolCall};
    use crate::inference::{Declared, ScriptedConfig, ScriptedEngine, ScriptedReply};
    use crate::orchestrate::ledger::RunLedger;

    /// One unit per prompt token, two per completion token.
    const PRICE: Price = Price {
        prompt_per_million: 1e6,
        completion_per_million: 2e6,
    };

    fn context(events: &Events, max_cost: Option<f64>) -> StepContext {
        StepContext {
            ledger: Arc::new(StepLedger::new(Arc::new(RunLedger::new(
                max_cost.map(Cost::from_amount),
                None,
            )))),
            ..StepContext::detached("ask", events)
        }
    }

    fn priced(replies: &[&str]) -> Declared {
        let engine = ScriptedEngine::new(ScriptedConfig {
            replies: replies
                .iter()
                .map(|r| ScriptedReply::Text(r.to_string()))
                .collect(),
            ..ScriptedConfig::default()
        });
        Declared::new(Arc::new(engine), "priced", Some(PRICE))
    }

    fn request(text: &str) -> Request {
        Request {
            messages: vec![Message::system("be brief"), Message::user(text)],
            json_schema: Some(json!({ "type": "string" })),
            temperature: Some(0.3),
            ..Request::default()
        }
    }

    /// An engine whose every call first waits `LOAD` for its model to load, and says so.
    struct Loading;

    const LOAD: Duration = Duration::from_millis(50);

    impl Engine for Loading {
        fn infer(&self, _request: Request) -> crate::inference::EngineFuture<'_> {
            Box::pin(async {
                tokio::time::sleep(LOAD).await;
                let mut response = Response {
                    text: "loaded".into(),
                    ..Response::default()
                };
                response.usage.completion_tokens = 10;
                response.timings.load = LOAD;
                Ok(response)
            })
        }

        fn model_info(&self) -> ModelInfo {
            ModelInfo {
                name: "local".into(),
                engine: "mistralrs",
                constrained_decoding: true,
                price: None,
                key: None,
                context_window: None,
            }
        }
    }

    /// A call that first waited for its model to load reports the load apart: a `model_load`
    /// event, `model_load_ms` on its own event, and a `duration_ms` (and so a rate) without it.
    #[tokio::test]
    async fn a_model_s_load_is_reported_apart_from_the_call() {
        let events = Events::recording();
        let ctx = context(&events, None);
        let started = Instant::now();
        ctx.infer(&Loading, request("go"), None, CallKind::Attempt(1))
            .await
            .expect("an answer");
        let took = started.elapsed().as_secs_f64() * 1000.0;
        let lines: Vec<Value> = events
            .recorded()
            .into_iter()
            .map(|event| serde_json::to_value(event).expect("json"))
            .collect();
        assert_eq!(lines[0]["kind"], "model_load", "{lines:?}");
        assert_eq!(lines[0]["data"]["duration_ms"], 50.0);
        let call = &lines[1]["data"];
        assert_eq!(call["model_load_ms"], 50, "{call}");
        let own = call["duration_ms"].as_f64().expect("a duration");
        assert!(
            own + 50.0 <= took,
            "the load is not the call's: {own} of {took}"
        );
        let rate = call["tokens_per_second"].as_f64().expect("a rate");
        assert!((rate * own / 1000.0 - 10.0).abs() < 1e-6, "{call}");
    }

    #[tokio::test]
    async fn a_call_the_engine_fails_is_still_an_inference_event_with_its_error() {
        let events = Events::recording();
        let ctx = context(&events, None);
        let engine = ScriptedEngine::new(ScriptedConfig {
            fail_first: 1,
            ..ScriptedConfig::echo()
        });
        let failure = ctx
            .infer(&engine, request("go"), None, CallKind::Attempt(1))
            .await
            .expect_err("the first call fails");
        assert_eq!(
            ctx.ledger.run().model_calls(),
            1,
            "the failed call is counted"
        );
        let line = serde_json::to_value(events.recorded().pop().expect("an event")).expect("json");
        assert_eq!(line["kind"], "inference");
        assert_eq!(line["data"]["attempt"], 1);
        assert_eq!(line["data"]["messages"], 2);
        assert_eq!(line["data"]["error"]["code"], json!(failure.code));
        assert_eq!(line["data"]["usage"]["completion_tokens"], 0);
    }

    #[tokio::test]
    async fn a_call_s_event_says_what_was_sent_and_what_it_cost_and_the_ledger_adds_it_up() {
        let events = Events::recording();
        let ctx = context(&events, None);
        let engine = priced(&["one two three"]);
        for _ in 0..2 {
            // "be brief" + "hello there": 4 prompt tokens, 3 completion tokens: 4 + 6 = 10.
            ctx.infer(&engine, request("hello there"), None, CallKind::Single)
                .await
                .expect("answers");
        }
        let event = events
            .recorded()
            .into_iter()
            .find(|e| matches!(e.data, EventData::Inference { .. }))
            .expect("an inference event");
        let data = serde_json::to_value(&event.data).expect("json")["data"].clone();
        assert_eq!(data["messages"], 2);
        assert_eq!(data["tools"], 0);
        assert_eq!(data["constraint"], "json_schema");
        assert_eq!(
            data["constrained"], false,
            "the scripted engine only checks"
        );
        assert_eq!(data["temperature"], 0.3);
        assert_eq!(data["cost"], 10.0);
        assert_eq!(event.parent_span, Some(ctx.span));
        assert_eq!(ctx.ledger.cost().map(Cost::amount), Some(20.0));
        assert_eq!(ctx.ledger.run().cost().map(Cost::amount), Some(20.0));
    }

    #[tokio::test]
    async fn the_call_that_takes_the_run_over_max_cost_fails_and_no_call_follows() {
        let events = Events::recording();
        let ctx = context(&events, Some(15.0));
        let engine = priced(&["one two three"]);
        ctx.infer(&engine, request("hello there"), None, CallKind::Round(1))
            .await
            .expect("10 of 15");
        let over = ctx
            .infer(&engine, request("hello there"), None, CallKind::Round(2))
            .await
            .expect_err("20 > 15");
        assert_eq!(over.code, FailureCode::OrchestrationCostExceeded);
        assert_eq!(
            over.message,
            "the run's model calls have cost 20, over its max_cost of 15"
        );
        // Another step of the same run is refused before it calls at all.
        let other = StepContext {
            ledger: Arc::new(StepLedger::new(Arc::clone(ctx.ledger.run()))),
            ..StepContext::detached("other", &events)
        };
        let refused = other
            .infer(&engine, request("hi"), None, CallKind::Single)
            .await
            .expect_err("the budget is spent");
        assert_eq!(refused.code, FailureCode::OrchestrationCostExceeded);
        assert_eq!(ctx.ledger.run().model_calls(), 2);
        assert_eq!(other.ledger.cost(), None, "it spent nothing");
    }

    #[tokio::test]
    async fn a_turn_read_into_tool_calls_lists_their_ids_and_returns_its_span() {
        let events = Events::recording();
        let ctx = context(&events, None);
        let engine = ScriptedEngine::new(ScriptedConfig::echo());
        let (response, span) = ctx
            .infer_turn(
                &engine,
                request("go"),
                None,
                CallKind::Round(1),
                |response| {
                    Ok(Response {
                        tool_calls: vec![ToolCall {
                            id: "call_7".into(),
                            name: "calc".into(),
                            arguments: json!({}),
                        }],
                        ..response
                    })
                },
            )
            .await
            .expect("answers");
        assert_eq!(response.tool_calls.len(), 1);
        let event = events.recorded().pop().expect("the inference event");
        assert_eq!(event.span, span);
        match event.data {
            EventData::Inference {
                tool_call_ids,
                cost,
                ..
            } => {
                assert_eq!(tool_call_ids, ["call_7"]);
                assert_eq!(cost, None, "an unpriced model");
            }
            other => panic!("not an inference event: {other:?}"),
        }
        // A turn that cannot be read still leaves its event.
        let failed = ctx
            .infer_turn(&engine, request("go"), None, CallKind::Round(2), |_| {
                Err(Failure::new(
                    FailureCode::ConstraintJsonInvalid,
                    "not a turn",
                ))
            })
            .await
            .expect_err("unreadable");
        assert_eq!(failed.code, FailureCode::ConstraintJsonInvalid);
        assert_eq!(ctx.ledger.run().model_calls(), 2);
    }

    #[test]
    fn the_finish_reason_is_read_off_the_answer() {
        let answer = |calls: usize, completion_tokens: u64| Response {
            text: "abc".into(),
            tool_calls: (0..calls)
                .map(|n| ToolCall {
                    id: format!("call_{n}"),
                    name: "calc".into(),
                    arguments: json!({}),
                })
                .collect(),
            usage: TokenUsage {
                completion_tokens,
                ..TokenUsage::default()
            },
            ..Response::default()
        };
        assert_eq!(finish_reason_of(&answer(1, 9), Some(9)), "tool_call");
        assert_eq!(finish_reason_of(&answer(0, 9), Some(9)), "length");
        assert_eq!(finish_reason_of(&answer(0, 3), Some(9)), "stop");
        assert_eq!(finish_reason_of(&answer(0, 3), None), "stop");
    }
}
