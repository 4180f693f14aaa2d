//! Layer 1: the `Engine` trait every model backend implements, and the engines themselves.
//!
//! A step never talks to a backend directly: it builds a [`Request`] (messages, tools, decoding
//! constraints, sampling) and gets a [`Response`] (text, tool calls, usage, timings) or a
//! [`Failure`] with an inference code. Engines are shared (`Arc<dyn Engine>`) by every step and
//! batch row of a run, and must accept concurrent requests.

mod example;
mod local;
mod openai;
mod scripted;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::step_clock::StepClock;
use crate::core::{Failure, Message, Price, TokenUsage, ToolCall, ToolDefinition, TraceParent};

pub use example::example_with_text;
// `LocalModel`, `LocalSettings`, `LocalLoads`, `missing_local_engine`, and where the build has
// the local engine, `LocalConfig` and `LocalEngine`.
pub use local::*;
pub use openai::{Compat, OpenAiConfig, OpenAiEngine, PaceTally, Pacing, RateLimit};
pub use scripted::{ScriptedConfig, ScriptedEngine, ScriptedReply, ScriptedRule};

/// A decoding constraint given as a grammar (GBNF is translated to Lark before it gets here).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Grammar {
    Regex(String),
    Lark(String),
}

/// One call of a model.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Request {
    pub messages: Vec<Message>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
    /// The answer must be JSON valid against this schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<Value>,
    /// The answer must match this grammar.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grammar: Option<Grammar>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Which of several samples of the same request this is (a `redundant` step's candidate).
    /// Engines ignore it; a call cache keys sampled calls (temperature above 0) by it, so a
    /// re-run gets back the same candidates, not one answer repeated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<u32>,
    /// Which repeat of a whole run this call belongs to (a test case run several times with
    /// `--repeat`); like `candidate`, engines ignore it and a call cache keys sampled calls by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample: Option<u32>,
    /// What the run lends the call besides what it asks; never serialised, so a call cache
    /// never keys on it.
    #[serde(skip)]
    pub context: CallContext,
}

/// What a run lends one model call besides what the call asks: engines that reach a server or
/// wait for a model read it, and it says nothing about the answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallContext {
    /// The call's W3C `traceparent`, when the run exports traces: the `openai` engine sends it,
    /// so the server's own spans (vLLM exports OTLP) join the run's trace.
    pub traceparent: Option<TraceParent>,
    /// The clock of the step attempt making the call: waiting for a model to load or for its
    /// pace is off it.
    pub clock: StepClock,
    /// Where an engine that paces its model (`openai`) tallies what the call waited for the pace
    /// and the 429s it was answered; the run reads it when the call ends, answered or failed.
    pub pacing: PaceTally,
}

/// Time spent on one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Timings {
    /// Reading the prompt (prefill).
    pub prompt: Duration,
    /// Generating the answer (decode).
    pub completion: Duration,
    /// Waiting for the model to load before the call could start (a local model's first call,
    /// or a call that came while another loaded it): not the call's own time, so its duration
    /// and rate leave it out.
    #[serde(skip_serializing_if = "Duration::is_zero")]
    pub load: Duration,
}

/// What a model answered.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Response {
    pub text: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    pub usage: TokenUsage,
    pub timings: Timings,
    /// Whether a call cache was asked first, and whether it answered.
    #[serde(skip)]
    pub cache: CacheStatus,
    /// How the request's JSON schema was held to, where the engine had to choose (the `openai`
    /// engine negotiates it with the server); None from engines that enforce it as asked or were
    /// given none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_mode: Option<SchemaMode>,
}

/// How an engine held an answer to a request's JSON schema.
/// The modes come in the order an engine falls back through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaMode {
    /// Enforced while decoding as a JSON Schema (`response_format` of type `json_schema`).
    JsonSchema,
    /// Enforced while decoding as JSON with the schema attached (`response_format` of type
    /// `json_object` plus `schema`, as llama.cpp servers take it), and described in the prompt.
    JsonObject,
    /// Only described in the prompt: the answer is left to the caller's repair and validation.
    Prompt,
    /// Asked for while decoding, but the answer does not conform to the schema: the server
    /// ignored a schema it could not compile (some answer 200 regardless), so the answer counts
    /// as unconstrained and is left to the caller's repair and validation.
    Ignored,
}

impl SchemaMode {
    /// The mode's name, as events and details write it.
    pub fn name(self) -> &'static str {
        match self {
            SchemaMode::JsonSchema => "json_schema",
            SchemaMode::JsonObject => "json_object",
            SchemaMode::Prompt => "prompt",
            SchemaMode::Ignored => "ignored",
        }
    }

    /// Whether the schema held the answer while decoding: the server was asked to enforce it,
    /// and the answer conforms.
    pub fn decoded(self) -> bool {
        matches!(self, SchemaMode::JsonSchema | SchemaMode::JsonObject)
    }
}

/// What a call cache did for one call.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum CacheStatus {
    /// No cache was asked (none is in use, or this model or step opted out).
    #[default]
    Unused,
    /// The cache had no answer: the model answered, and the answer was stored.
    Miss,
    /// The cache answered; `original` is how long the call it replays took.
    Hit { original: Duration },
}

/// What, besides the request, decides an engine's answers: what a call cache puts in its key.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineIdentity {
    /// The engine kind and the settings that change its answers (model name, server, options).
    pub settings: Value,
    /// A model file whose content decides the answers: a cache keys by its SHA-256.
    pub file: Option<PathBuf>,
}

/// What an engine is and can do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelInfo {
    /// The model's name (file, id, or `scripted`).
    pub name: String,
    /// The engine kind: `mistralrs`, `openai`, `scripted`.
    pub engine: &'static str,
    /// Whether `json_schema` and `grammar` are enforced while decoding.
    pub constrained_decoding: bool,
    /// What its calls cost, when the plan declares a price ([`Declared`]); None: unpriced.
    pub price: Option<Price>,
    /// The model's key in the plan's `models:` ([`Declared`]), which tells two models of one
    /// plan apart where their engine and file are the same; None for an engine used on its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The most tokens one call may hold, prompt and answer together, when the engine knows
    /// (a local model's `context_length`, else its GGUF file's, once read; an `openai` model's
    /// declared `context_window`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
}

/// A boxed future, so engines can be used as trait objects.
pub type EngineFuture<'a> = Pin<Box<dyn Future<Output = Result<Response, Failure>> + Send + 'a>>;

/// Receives generated text piece by piece while a streamed request runs.
pub type TokenSink = Arc<dyn Fn(&str) + Send + Sync>;

/// A model backend.
pub trait Engine: Send + Sync {
    /// Runs one request.
    fn infer(&self, request: Request) -> EngineFuture<'_>;

    /// Runs one request, passing text to `sink` as it is generated. Engines that cannot stream
    /// pass the whole answer at the end.
    fn infer_streaming(&self, request: Request, sink: TokenSink) -> EngineFuture<'_> {
        Box::pin(async move {
            let response = self.infer(request).await?;
            sink(&response.text);
            Ok(response)
        })
    }

    /// What this engine is.
    fn model_info(&self) -> ModelInfo;

    /// What decides its answers besides the request; None when its answers do not follow from
    /// the request alone (then no cache may stand in for it).
    fn identity(&self) -> Option<EngineIdentity> {
        None
    }
}

/// An engine as a plan declares it: answers as the engine it wraps, and its [`ModelInfo`] says
/// its key in the plan's `models:` and, when the plan gives one, its price.
pub struct Declared {
    engine: Arc<dyn Engine>,
    key: String,
    price: Option<Price>,
}

impl Declared {
    pub fn new(engine: Arc<dyn Engine>, key: &str, price: Option<Price>) -> Self {
        Declared {
            engine,
            key: key.to_string(),
            price,
        }
    }
}

impl Engine for Declared {
    fn infer(&self, request: Request) -> EngineFuture<'_> {
        self.engine.infer(request)
    }

    fn infer_streaming(&self, request: Request, sink: TokenSink) -> EngineFuture<'_> {
        self.engine.infer_streaming(request, sink)
    }

    fn model_info(&self) -> ModelInfo {
        let inner = self.engine.model_info();
        ModelInfo {
            price: self.price.or(inner.price),
            key: Some(self.key.clone()),
            ..inner
        }
    }

    fn identity(&self) -> Option<EngineIdentity> {
        self.engine.identity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_declared_engine_answers_as_its_engine_and_states_its_key_and_price() {
        let price = Price {
            prompt_per_million: 1.0,
            completion_per_million: 2.0,
        };
        let inner: Arc<dyn Engine> = Arc::new(ScriptedEngine::new(ScriptedConfig::echo()));
        let priced = Declared::new(Arc::clone(&inner), "writer", Some(price));
        let request = Request {
            messages: vec![Message::user("hello there")],
            ..Request::default()
        };
        let answer = priced.infer(request.clone()).await.expect("answers");
        assert_eq!(answer, inner.infer(request).await.expect("answers"));
        assert_eq!(inner.model_info().price, None);
        assert_eq!(
            priced.model_info(),
            ModelInfo {
                price: Some(price),
                key: Some("writer".into()),
                ..inner.model_info()
            }
        );
    }
}
