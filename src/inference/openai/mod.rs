//! The OpenAI-compatible engine (`kind: openai`): a model served over HTTP by vLLM, a llama.cpp
//! server, Text Generation Inference, Ollama, LM Studio, mistralrs-server or OpenAI itself.
//!
//! Each request is one `POST {base_url}/chat/completions`, in the server's dialect ([`dialect`]:
//! named by the model's `compat:`, else negotiated and remembered across runs in the call
//! cache's store). A JSON schema is negotiated with the server ([`negotiate`]): a
//! `response_format` of type `json_schema` (or Text Generation Inference's `json`), else
//! `json_object` with the schema, else the schema described in the prompt; an error that says how
//! the server wants the request instead (another `response_format` shape, `max_completion_tokens`)
//! is learned from and the request sent again at once. Each answer says which mode produced it,
//! and an answer asked for under a decoding constraint that does not conform to the schema (a
//! server that ignored a schema it could not compile) says [`SchemaMode::Ignored`], so the caller
//! treats it as unconstrained. Grammars are not part of the API and are refused rather than
//! ignored. A server that refuses `tools` is remembered too: later requests with tools fail at
//! once with INFERENCE_REQUEST_REFUSED, for the agent to describe the tools in the prompt
//! instead. The model's pace ([`limit`]) is kept across every caller. Rate limits (429), server
//! errors (5xx) and refused connections are retried here, up to `max_retries` times, waiting as
//! the server asks (`Retry-After`, `retry-after-ms`, capped at a minute) or with an exponential
//! backoff from 200 ms — except an error that names a part of the request, which no retry can
//! fix; every other failure is returned at once with the code the executor's retry rules expect.
//! Streaming reads the server-sent events of `stream: true` ([`stream`]) — or, from a server that
//! ignores `stream` and answers with one JSON completion, that completion, its text given to the
//! sink whole; the wire format is in [`wire`], failures and waits in [`failure`]. Replies are read
//! defensively: a missing field is empty, a body past its size cap is cut off, nothing a server
//! sends panics. The API key is sent as a bearer token and never appears in a message: it and the
//! credentials of `base_url` are masked ([`Secrets`]) in every failure and notice the engine
//! gives, whatever the server echoed. Numbers a
//! server sends (token counts, `Retry-After`) are read saturating or capped: clippy's
//! `arithmetic_side_effects` is denied here.
#![deny(clippy::arithmetic_side_effects)]

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use reqwest::Url;
use serde_json::{Map, Value, json};

use super::{
    CacheStatus, Engine, EngineFuture, EngineIdentity, Grammar, ModelInfo, Request, Response,
    SchemaMode, Timings, TokenSink,
};
use crate::core::secret::Secrets;
use crate::core::{Failure, FailureCode, Memo, TraceParent};
use crate::model_store::Notice;

mod dialect;
mod failure;
mod limit;
mod negotiate;
mod stream;
#[cfg(test)]
mod tests;
mod wire;

pub use dialect::Compat;
pub use limit::{PaceTally, Pacing, RateLimit};

use dialect::{Dialect, Remembered};
use failure::{
    AttemptError, Retry, backoff, error_chain, exhausted_reset, malformed, read_body, too_long,
};
use limit::{CallPace, Limiter, WaitBudget};
use negotiate::{Lesson, Refused, describe_schema, response_format};
use wire::{PartialCall, WireReply, WireUsage, completions_url, wire_message, wire_tool};

/// How many lessons from error replies one request may act on (each asks again at once).
const MAX_LESSONS: u32 = 3;

/// How much of a successful reply (or stream) is read before giving up.
const MAX_BODY: usize = 32 * 1024 * 1024;

/// Where an OpenAI-compatible server is and how to call it.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// The API root, e.g. `http://127.0.0.1:8000/v1`; requests go to `{base_url}/chat/completions`.
    pub base_url: String,
    /// The model name the server knows.
    pub model: String,
    /// Sent as a bearer token. The plan names an environment variable; the caller reads it.
    pub api_key: Option<String>,
    /// The limit for one request, reading the answer included.
    pub timeout: Duration,
    /// How many times a rate-limited, failed (5xx) or refused request is tried again.
    pub max_retries: u32,
    /// Told when the engine settles for less than asked (a response format the server refused).
    pub notice: Option<Notice>,
    /// How fast the model may be called, by every caller of the engine together.
    pub rate_limit: RateLimit,
    /// The server's dialect, when named; else negotiated.
    pub compat: Option<Compat>,
    /// Where a negotiated dialect is kept across runs (the call cache's store).
    pub memo: Option<Arc<dyn Memo>>,
    /// The most tokens one call may hold, as the plan declares it (the API does not say);
    /// reported with each call, not enforced.
    pub context_window: Option<u64>,
}

impl OpenAiConfig {
    /// A configuration without a key, with a two-minute timeout and three retries.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Duration::from_secs(120),
            max_retries: 3,
            notice: None,
            rate_limit: RateLimit::default(),
            compat: None,
            memo: None,
            context_window: None,
        }
    }
}

/// Shows everything but the key.
impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("notice", &self.notice.is_some())
            .field("rate_limit", &self.rate_limit)
            .field("compat", &self.compat)
            .field("memo", &self.memo.is_some())
            .field("context_window", &self.context_window)
            .finish()
    }
}

/// An engine that calls an OpenAI-compatible chat completions endpoint.
#[derive(Debug)]
pub struct OpenAiEngine {
    config: OpenAiConfig,
    /// `{base_url}/chat/completions`.
    url: Url,
    client: reqwest::Client,
    /// What the server takes: named, remembered from an earlier run, or learned in this one.
    dialect: Mutex<Dialect>,
    /// Where what is learned is kept for later runs.
    remembered: Option<Remembered>,
    /// Whether the notice has said that the server ignored a schema (it says so once).
    said_ignored: AtomicBool,
    /// How many times the server refused each part of a request (by the part's field), so a
    /// refusal that comes again confirms what it taught.
    refusals: Mutex<Vec<(&'static str, u32)>>,
    /// The model's pace, shared by every request.
    limiter: Limiter,
    /// The API key and `base_url`'s credentials: masked in every failure and notice.
    secrets: Secrets,
}

impl OpenAiEngine {
    /// Checks the configuration and builds the HTTP client; nothing is sent yet.
    pub fn new(config: OpenAiConfig) -> Result<Self, Failure> {
        let url = completions_url(&config.base_url)?;
        if config.model.trim().is_empty() {
            return Err(Failure::new(
                FailureCode::ConfigInvalidInput,
                "the openai model has no model name",
            )
            .with_help("set `model` to a name the server serves (its /v1/models lists them)"));
        }
        let client = reqwest::Client::builder().build().map_err(|err| {
            Failure::new(
                FailureCode::InferenceModelUnavailable,
                format!("cannot build an HTTP client: {}", error_chain(&err)),
            )
        })?;
        // A named dialect is the start; negotiation then goes on from it, but only what it
        // learns without a name is worth keeping for the next run.
        let remembered = match (&config.memo, config.compat) {
            (Some(memo), None) => Some(Remembered::new(
                Arc::clone(memo),
                &config.base_url,
                &config.model,
            )),
            _ => None,
        };
        let dialect = match config.compat {
            Some(compat) => compat.dialect(),
            None => remembered
                .as_ref()
                .and_then(Remembered::recall)
                .unwrap_or_default(),
        };
        let mut secrets = Secrets::new().with_url(&config.base_url);
        if let Some(key) = &config.api_key {
            secrets = secrets.with(key);
        }
        Ok(OpenAiEngine {
            limiter: Limiter::new(&config.rate_limit),
            secrets,
            config,
            url,
            client,
            dialect: Mutex::new(dialect),
            remembered,
            said_ignored: AtomicBool::new(false),
            refusals: Mutex::new(Vec::new()),
        })
    }

    /// Runs `request` as [`complete`](Self::complete) does, timed: what it waited for the
    /// model's pace and the 429s it was answered go in the tally of its call context, answered
    /// or failed, and the whole call but that wait counts as completion.
    async fn timed(&self, request: Request, sink: Option<&TokenSink>) -> Result<Response, Failure> {
        let started = Instant::now();
        let context = &request.context;
        let mut pace = CallPace::new(context.clock.clone(), context.pacing.clone());
        let before = pace.so_far();
        let answered = self.masked(self.complete(&request, sink, &mut pace).await);
        let waited = pace.so_far().since(before).waited;
        let mut response = answered?;
        response.timings = Timings {
            completion: started.elapsed().saturating_sub(waited),
            ..Timings::default()
        };
        Ok(response)
    }

    /// Runs `request`, streamed to `sink` when there is one (and the dialect keeps tool calls
    /// in a stream), falling back through the schema modes as the server refuses them and
    /// asking again at once when an error teaches how the server wants the request. What it
    /// waited for the model's pace and the 429s it was answered are tallied in `pace`.
    async fn complete(
        &self,
        request: &Request,
        sink: Option<&TokenSink>,
        pace: &mut CallPace,
    ) -> Result<Response, Failure> {
        refuse_grammar(request)?;
        let mut dialect = self.dialect();
        if !request.tools.is_empty() && !dialect.tools {
            return Err(self.refusal(Refused::Tools, "it refused them before"));
        }
        let _in_flight = self.limiter.in_flight(pace).await;
        let traceparent = request.context.traceparent.as_ref();
        let tokens = estimated_tokens(request);
        let mut budget = self.limiter.budget();
        let mut mode = request.json_schema.as_ref().map(|_| dialect.schema_mode);
        let mut lessons = 0;
        loop {
            let stream = sink.filter(|_| request.tools.is_empty() || dialect.stream_tools);
            let body = self.body(request, mode, stream.is_some(), &dialect);
            let error = match self
                .send(&body, tokens, traceparent, pace, &mut budget)
                .await
            {
                Ok(reply) => {
                    let response = self.answer(reply, request, mode, sink).await?;
                    self.limiter.used(tokens, response.usage.total());
                    return Ok(response);
                }
                Err(error) => error,
            };
            if let Some(lesson) = error.lesson.filter(|_| lessons < MAX_LESSONS) {
                lessons = lessons.saturating_add(1);
                let learned = self.learn(lesson, &error.failure);
                self.remember(lesson.described(), error.from_the_request);
                if learned != dialect {
                    dialect = learned;
                    continue;
                }
            }
            match (
                error.refused,
                mode.and_then(|mode| dialect.fallback_after(mode)),
            ) {
                (Some(Refused::ResponseFormat), Some(next)) => {
                    self.settle(mode.unwrap_or(next), next, &error.failure);
                    self.remember(Refused::ResponseFormat.field(), error.from_the_request);
                    mode = Some(next);
                }
                (Some(Refused::Tools), _) => {
                    self.update(|dialect| dialect.tools = false);
                    self.remember(Refused::Tools.field(), error.from_the_request);
                    return Err(error.failure);
                }
                _ => return Err(error.failure),
            }
        }
    }

    /// Reads a successful reply: streamed to `sink`, or whole (its text given to the sink in one
    /// piece, from a server that ignores `stream` or a request not streamed). An answer asked
    /// for in a decoded `mode` that does not conform to the schema was not held to it: it says
    /// [`SchemaMode::Ignored`].
    async fn answer(
        &self,
        reply: reqwest::Response,
        request: &Request,
        mode: Option<SchemaMode>,
        sink: Option<&TokenSink>,
    ) -> Result<Response, Failure> {
        let mut response = match sink {
            Some(sink) if !is_json(&reply) => self.read_stream(reply, sink).await?,
            Some(sink) => {
                let response = self.read_completion(reply).await?;
                if !response.text.is_empty() {
                    sink(&response.text);
                }
                response
            }
            None => self.read_completion(reply).await?,
        };
        response.schema_mode = match (mode, &request.json_schema) {
            (Some(mode), Some(schema)) if mode.decoded() && !conforms(&response.text, schema) => {
                if !self.said_ignored.swap(true, Ordering::Relaxed) {
                    self.say(&format!(
                        "the server answered a `{}` request with text that does not conform \
                         to the schema (it ignored the schema); such answers are treated as \
                         unconstrained",
                        mode.name()
                    ));
                }
                Some(SchemaMode::Ignored)
            }
            (mode, _) => mode,
        };
        Ok(response)
    }

    /// `answered` with the engine's secrets masked in its failure, whatever the server echoed.
    fn masked(&self, answered: Result<Response, Failure>) -> Result<Response, Failure> {
        answered.map_err(|failure| self.secrets.failure(failure))
    }

    /// The dialect as it stands.
    fn dialect(&self) -> Dialect {
        *self.dialect.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the dialect with `change` for the rest of the process, and returns it.
    fn update(&self, change: impl FnOnce(&mut Dialect)) -> Dialect {
        let mut dialect = self.dialect.lock().unwrap_or_else(PoisonError::into_inner);
        change(&mut dialect);
        *dialect
    }

    /// Keeps the dialect as it stands for later runs, after the server refused `part` (or
    /// taught the lesson it names): confirmed when the refusal was about the request (a 4xx),
    /// or when the same refusal came before, in this process or in an earlier one; otherwise
    /// kept unconfirmed, which the next process does not start from.
    fn remember(&self, part: &'static str, from_the_request: bool) {
        let Some(remembered) = &self.remembered else {
            return;
        };
        let seen = {
            let mut refusals = self.refusals.lock().unwrap_or_else(PoisonError::into_inner);
            match refusals.iter_mut().find(|(refused, _)| *refused == part) {
                Some((_, count)) => {
                    *count = count.saturating_add(1);
                    *count
                }
                None => {
                    refusals.push((part, 1));
                    1
                }
            }
        };
        remembered.keep(&self.dialect(), from_the_request || seen > 1);
    }

    /// Applies what an error taught, saying so when it changed anything; the dialect after.
    fn learn(&self, lesson: Lesson, why: &Failure) -> Dialect {
        let before = self.dialect();
        let after = self.update(|dialect| *dialect = lesson.applied(*dialect));
        if after != before {
            self.say(&format!(
                "the server refused a request ({}); {} from now on",
                why.message,
                lesson.described()
            ));
        }
        after
    }

    /// Remembers that the server refused `refused` and that `next` comes next, saying so (once,
    /// however many requests were refused at the same time).
    fn settle(&self, refused: SchemaMode, next: SchemaMode, why: &Failure) {
        let mut moved = false;
        self.update(|dialect| {
            if next > dialect.schema_mode {
                dialect.schema_mode = next;
                moved = true;
            }
        });
        if moved {
            self.say(&format!(
                "the server refused a `{}` response format ({}); asking with `{}` from now on",
                refused.name(),
                why.message,
                next.name()
            ));
        }
    }

    /// Tells the notice, when there is one, about the model.
    fn say(&self, line: &str) {
        if let Some(notice) = &self.config.notice {
            let line = format!("model `{}`: {line}", self.config.model);
            notice(&self.secrets.redact(&line));
        }
    }

    /// The request body of the API for `request`, its schema (if any) sent in `mode`, in the
    /// server's dialect.
    fn body(
        &self,
        request: &Request,
        mode: Option<SchemaMode>,
        stream: bool,
        dialect: &Dialect,
    ) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(self.config.model));
        let mut messages = request.messages.iter().map(wire_message).collect();
        if let (Some(schema), Some(mode)) = (&request.json_schema, mode) {
            describe_schema(&mut messages, schema, mode);
            if let Some(format) = response_format(schema, mode, dialect.schema_shape) {
                body.insert("response_format".into(), format);
            }
        }
        body.insert("messages".into(), Value::Array(messages));
        if !request.tools.is_empty() {
            let tools = request.tools.iter().map(wire_tool).collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(max_tokens) = request.max_tokens {
            body.insert(dialect.tokens_field.name().into(), json!(max_tokens));
        }
        if let Some(temperature) = request.temperature {
            body.insert("temperature".into(), json!(temperature));
        }
        if let Some(seed) = request.seed {
            body.insert("seed".into(), json!(seed));
        }
        if !request.stop.is_empty() {
            body.insert("stop".into(), json!(request.stop));
        }
        if stream {
            body.insert("stream".into(), json!(true));
            body.insert("stream_options".into(), json!({ "include_usage": true }));
        }
        Value::Object(body)
    }

    /// Sends `body` (about `tokens` tokens) when the model's pace allows, retrying as the failure
    /// allows, and returns the first successful reply. A wait the server asks for (on a 429, or
    /// an exhausted quota on any reply) holds back every request of the model; a 429 also
    /// spaces the model's requests out. Those waits are taken from the call's `budget`: one
    /// past it ends the call, as a transient rate limit.
    async fn send(
        &self,
        body: &Value,
        tokens: u32,
        traceparent: Option<&TraceParent>,
        pace: &mut CallPace,
        budget: &mut WaitBudget,
    ) -> Result<reqwest::Response, AttemptError> {
        let mut retries = 0;
        let server = self.url.as_str();
        loop {
            self.limiter
                .admit(tokens, pace, budget, server)
                .await
                .map_err(AttemptError::final_failure)?;
            let error = match self.attempt(body, traceparent).await {
                Ok(response) => {
                    self.limiter.answered();
                    if let Some(wait) = exhausted_reset(response.headers()) {
                        self.limiter.hold(wait);
                    }
                    return Ok(response);
                }
                Err(error) => error,
            };
            let rate_limited = error.failure.code == FailureCode::InferenceRateLimited;
            if rate_limited {
                let asked = match error.retry {
                    Retry::After(wait) => Some(wait),
                    _ => None,
                };
                self.limiter.refused(asked, pace);
            }
            let wait = match error.retry {
                Retry::Never => None,
                Retry::After(wait) => {
                    self.limiter.hold(wait);
                    Some(wait)
                }
                Retry::Backoff => Some(backoff(retries)),
            };
            match wait {
                Some(wait) if retries < self.config.max_retries => {
                    self.limiter
                        .wait_to_retry(wait, rate_limited, pace, budget, server)
                        .await
                        .map_err(AttemptError::final_failure)?;
                    retries = retries.saturating_add(1);
                }
                _ => return Err(error),
            }
        }
    }

    /// One POST (with the call's `traceparent`, when the run exports traces): a successful
    /// reply, or the failure and whether to try again.
    async fn attempt(
        &self,
        body: &Value,
        traceparent: Option<&TraceParent>,
    ) -> Result<reqwest::Response, AttemptError> {
        let mut builder = self
            .client
            .post(self.url.clone())
            .timeout(self.config.timeout)
            .json(body);
        if let Some(key) = &self.config.api_key {
            builder = builder.bearer_auth(key);
        }
        if let Some(traceparent) = traceparent {
            builder = builder.header("traceparent", traceparent.to_string());
        }
        let response = builder.send().await.map_err(|err| AttemptError {
            retry: if err.is_connect() && !err.is_timeout() {
                Retry::Backoff
            } else {
                Retry::Never
            },
            failure: self.transport_failure(&err),
            refused: None,
            lesson: None,
            from_the_request: false,
        })?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(self.status_failure(response, body).await)
    }

    /// Reads a whole (non-streamed) reply. A success that is not a chat completion (not JSON,
    /// not UTF-8, no choice, past the size cap) is the server's bug, not a passing condition:
    /// it fails for good ([`malformed`]).
    async fn read_completion(&self, mut response: reqwest::Response) -> Result<Response, Failure> {
        let body = read_body(&mut response, MAX_BODY)
            .await
            .map_err(|err| self.transport_failure(&err))?;
        if body.len() > MAX_BODY {
            return Err(too_long());
        }
        let reply: WireReply = serde_json::from_slice(&body).map_err(|err| {
            malformed(format!(
                "the server's answer is not a chat completion: {err}"
            ))
        })?;
        if let Some(error) = &reply.error {
            return Err(self.reported_error(error));
        }
        let Some(message) = reply
            .choices
            .unwrap_or_default()
            .into_iter()
            .next()
            .and_then(|choice| choice.message)
        else {
            return Err(malformed(
                "the server's answer has no choice with a message".to_string(),
            ));
        };
        let tool_calls = message.tool_calls.unwrap_or_default();
        Ok(Response {
            text: message.content.unwrap_or_default(),
            tool_calls: tool_calls
                .into_iter()
                .enumerate()
                .map(|(i, call)| PartialCall::from_wire(call).finish(i))
                .collect(),
            usage: reply.usage.map(WireUsage::into_usage).unwrap_or_default(),
            timings: Timings::default(),
            cache: CacheStatus::Unused,
            schema_mode: None,
        })
    }
}

/// Every failure leaves the engine through [`OpenAiEngine::masked`], with its secrets masked.
impl Engine for OpenAiEngine {
    fn infer(&self, request: Request) -> EngineFuture<'_> {
        Box::pin(self.timed(request, None))
    }

    fn infer_streaming(&self, request: Request, sink: TokenSink) -> EngineFuture<'_> {
        Box::pin(async move { self.timed(request, Some(&sink)).await })
    }

    fn model_info(&self) -> ModelInfo {
        ModelInfo {
            name: self.config.model.clone(),
            engine: "openai",
            constrained_decoding: true,
            price: None,
            key: None,
            context_window: self.config.context_window,
        }
    }

    fn identity(&self) -> Option<EngineIdentity> {
        Some(EngineIdentity {
            settings: serde_json::json!({
                "engine": "openai",
                "base_url": self.config.base_url,
                "model": self.config.model,
            }),
            file: None,
        })
    }
}

/// Whether a reply is one JSON document (`Content-Type: application/json` or another JSON
/// type) rather than an event stream.
fn is_json(reply: &reqwest::Response) -> bool {
    reply
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.to_ascii_lowercase().contains("json"))
}

/// The tokens a request may cost, before it is sent: its prompt at about four characters a
/// token, plus the most it may generate.
fn estimated_tokens(request: &Request) -> u32 {
    let chars = request.messages.iter().fold(0usize, |sum, message| {
        sum.saturating_add(message.content.len())
    });
    u32::try_from(chars / 4)
        .unwrap_or(u32::MAX)
        .saturating_add(request.max_tokens.unwrap_or(0))
}

/// Whether `text` is JSON valid against `schema` as it stands, with no repair. A schema that does
/// not compile cannot be held to either: nothing conforms to it.
fn conforms(text: &str, schema: &Value) -> bool {
    let Ok(value) = serde_json::from_str::<Value>(text.trim()) else {
        return false;
    };
    jsonschema::validator_for(schema).is_ok_and(|validator| validator.is_valid(&value))
}

/// Refuses a grammar: the API has no way to enforce one.
fn refuse_grammar(request: &Request) -> Result<(), Failure> {
    let Some(grammar) = &request.grammar else {
        return Ok(());
    };
    let kind = match grammar {
        Grammar::Regex(_) => "regex",
        Grammar::Lark(_) => "Lark (or GBNF)",
    };
    Err(Failure::new(
        FailureCode::ConstraintGrammarRejected,
        format!("the openai engine cannot enforce a {kind} grammar"),
    )
    .with_help(
        "grammars are not part of the OpenAI API: run this step on a local mistralrs \
         model, or constrain it with a JSON schema instead",
    ))
}
