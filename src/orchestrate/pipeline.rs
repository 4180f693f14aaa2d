//! What the executor runs: steps with their handlers, dependencies and execution settings, and
//! the contract a run is held to — the inputs it declares and the policy's step timeout — so that
//! every command that starts a run (one run, a batch row, a chat turn, a sub-plan agent) binds
//! and times it the same way without reaching back into the plan file.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::events::{EventData, Events, ModelCall, SpanId};
use super::inputs::{self, InputSpec};
use crate::core::{Failure, Message, TokenUsage};
use crate::inference::{Engine, Request, Response, TokenSink};
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

/// What a handler sees while it runs.
pub struct StepContext {
    /// The template context: `inputs`, `vars`, `steps`, and `input` when the step has one.
    pub scope: Value,
    pub templates: Arc<Templates>,
    pub events: Events,
    pub step: String,
    /// This attempt's span; events the handler emits are its children.
    pub span: SpanId,
    /// Messages a model step appends after its prompt's: its earlier answers, each followed by
    /// what a check found wrong with it (empty unless a check sent the run back to this step).
    pub feedback: Vec<Message>,
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

    /// Calls a model and records the call as an `inference` event (model, duration, usage, and
    /// which of the step's calls it was).
    pub async fn infer(
        &self,
        engine: &dyn Engine,
        request: Request,
        stream: Option<TokenSink>,
        call: ModelCall,
    ) -> Result<Response, Failure> {
        let span = self.events.new_span();
        let started = Instant::now();
        let response = match stream {
            Some(sink) => engine.infer_streaming(request, sink).await?,
            None => engine.infer(request).await?,
        };
        let info = engine.model_info();
        let data = EventData::Inference {
            model: info.name,
            engine: info.engine,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            usage: response.usage,
            call,
        };
        self.events
            .emit(Some(&self.step), span, Some(self.span), data);
        Ok(response)
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
