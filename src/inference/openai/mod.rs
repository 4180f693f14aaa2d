//! The OpenAI-compatible engine (`kind: openai`): a model served over HTTP by vLLM, a llama.cpp
//! server, mistralrs-server or OpenAI itself.
//!
//! Each request is one `POST {base_url}/chat/completions`. A JSON schema is negotiated with the
//! server ([`negotiate`]): a `response_format` of type `json_schema`, else `json_object` with the
//! schema, else the schema described in the prompt; what the server accepted is remembered for
//! the engine's life (one engine per model per process) and each answer says which mode produced
//! it. Grammars are not part of the API and are refused rather than ignored. A server that refuses
//! `tools` is remembered too: later requests with tools fail at once with
//! INFERENCE_REQUEST_REFUSED, for the agent to describe the tools in the prompt instead. Rate
//! limits (429), server errors (5xx) and refused connections are retried here, up to
//! `max_retries` times, waiting as the server asks (`Retry-After`, capped at a minute) or with an
//! exponential backoff from 200 ms — except an error that names a part of the request, which no
//! retry can fix; every other failure is returned at once with the code the executor's retry
//! rules expect. Streaming reads the server-sent events of `stream: true` ([`stream`]) — or,
//! from a server that ignores `stream` and answers with one JSON completion, that completion,
//! its text given to the sink whole; the wire format is in [`wire`], failures and waits in
//! [`failure`]. Replies are read defensively: a
//! missing field is empty, a body past its size cap is cut off, nothing a server sends panics.
//! The API key is sent as a bearer token and never appears in a message. Numbers a server sends
//! (token counts, `Retry-After`) are read saturating or capped: clippy's
//! `arithmetic_side_effects` is denied here.
#![deny(clippy::arithmetic_side_effects)]

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use reqwest::Url;
use serde_json::{Map, Value, json};

use super::{
    CacheStatus, Engine, EngineFuture, EngineIdentity, Grammar, ModelInfo, Notice, Request,
    Response, SchemaMode, Timings, TokenSink,
};
use crate::core::{Failure, FailureCode};

mod failure;
mod limit;
mod negotiate;
mod stream;
#[cfg(test)]
mod tests;
mod wire;

pub use limit::RateLimit;

use failure::{AttemptError, Retry, backoff, error_chain, read_body, too_long};
use limit::Limiter;
use negotiate::{Refused, describe_schema, fallback_after, response_format};
use wire::{PartialCall, WireReply, WireUsage, completions_url, wire_message, wire_tool};

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
    /// The first schema mode to try: what the server last accepted.
    schema_mode: Mutex<SchemaMode>,
    /// Whether the server refused `tools`.
    tools_refused: AtomicBool,
    /// The model's pace, shared by every request.
    limiter: Limiter,
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
        Ok(OpenAiEngine {
            limiter: Limiter::new(&config.rate_limit),
            config,
            url,
            client,
            schema_mode: Mutex::new(SchemaMode::JsonSchema),
            tools_refused: AtomicBool::new(false),
        })
    }

    /// Runs `request`, streamed to `sink` when there is one, falling back through the schema
    /// modes as the server refuses them.
    async fn complete(
        &self,
        request: &Request,
        sink: Option<&TokenSink>,
    ) -> Result<Response, Failure> {
        refuse_grammar(request)?;
        if !request.tools.is_empty() && self.tools_refused.load(Ordering::Relaxed) {
            return Err(self.refusal(Refused::Tools, "it refused them before"));
        }
        let _in_flight = self.limiter.in_flight().await;
        let tokens = estimated_tokens(request);
        let mut mode = request.json_schema.as_ref().map(|_| self.schema_mode());
        loop {
            let body = self.body(request, mode, sink.is_some());
            let error = match self.send(&body, tokens).await {
                Ok(reply) => {
                    let mut response = match sink {
                        Some(sink) if !is_json(&reply) => self.read_stream(reply, sink).await?,
                        // A server that ignores `stream` answers with one whole completion:
                        // its text goes to the sink in one piece.
                        Some(sink) => {
                            let response = self.read_completion(reply).await?;
                            if !response.text.is_empty() {
                                sink(&response.text);
                            }
                            response
                        }
                        None => self.read_completion(reply).await?,
                    };
                    response.schema_mode = mode;
                    return Ok(response);
                }
                Err(error) => error,
            };
            match (error.refused, mode.and_then(fallback_after)) {
                (Some(Refused::ResponseFormat), Some(next)) => {
                    self.settle(mode.unwrap_or(next), next, &error.failure);
                    mode = Some(next);
                }
                (Some(Refused::Tools), _) => {
                    self.tools_refused.store(true, Ordering::Relaxed);
                    return Err(error.failure);
                }
                _ => return Err(error.failure),
            }
        }
    }

    /// The schema mode to start with.
    fn schema_mode(&self) -> SchemaMode {
        *self
            .schema_mode
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers that the server refused `refused` and that `next` comes next, saying so (once,
    /// however many requests were refused at the same time).
    fn settle(&self, refused: SchemaMode, next: SchemaMode, why: &Failure) {
        let mut current = self
            .schema_mode
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if next <= *current {
            return;
        }
        *current = next;
        if let Some(notice) = &self.config.notice {
            notice(&format!(
                "model `{}`: the server refused a `{}` response format ({}); \
                 asking with `{}` from now on",
                self.config.model,
                refused.name(),
                why.message,
                next.name()
            ));
        }
    }

    /// The request body of the API for `request`, its schema (if any) sent in `mode`.
    fn body(&self, request: &Request, mode: Option<SchemaMode>, stream: bool) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(self.config.model));
        let mut messages = request.messages.iter().map(wire_message).collect();
        if let (Some(schema), Some(mode)) = (&request.json_schema, mode) {
            describe_schema(&mut messages, schema, mode);
            if let Some(format) = response_format(schema, mode) {
                body.insert("response_format".into(), format);
            }
        }
        body.insert("messages".into(), Value::Array(messages));
        if !request.tools.is_empty() {
            let tools = request.tools.iter().map(wire_tool).collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(max_tokens) = request.max_tokens {
            body.insert("max_tokens".into(), json!(max_tokens));
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
    /// allows, and returns the first successful reply. A `Retry-After` holds back every request
    /// of the model.
    async fn send(&self, body: &Value, tokens: u32) -> Result<reqwest::Response, AttemptError> {
        let mut retries = 0;
        loop {
            self.limiter.admit(tokens).await;
            let error = match self.attempt(body).await {
                Ok(response) => return Ok(response),
                Err(error) => error,
            };
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
                    tokio::time::sleep(wait).await;
                    retries = retries.saturating_add(1);
                }
                _ => return Err(error),
            }
        }
    }

    /// One POST: a successful reply, or the failure and whether to try again.
    async fn attempt(&self, body: &Value) -> Result<reqwest::Response, AttemptError> {
        let mut builder = self
            .client
            .post(self.url.clone())
            .timeout(self.config.timeout)
            .json(body);
        if let Some(key) = &self.config.api_key {
            builder = builder.bearer_auth(key);
        }
        let response = builder.send().await.map_err(|err| AttemptError {
            retry: if err.is_connect() && !err.is_timeout() {
                Retry::Backoff
            } else {
                Retry::Never
            },
            failure: self.transport_failure(&err),
            refused: None,
        })?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(self.status_failure(response, body).await)
    }

    /// Reads a whole (non-streamed) reply.
    async fn read_completion(&self, mut response: reqwest::Response) -> Result<Response, Failure> {
        let body = read_body(&mut response, MAX_BODY)
            .await
            .map_err(|err| self.transport_failure(&err))?;
        if body.len() > MAX_BODY {
            return Err(too_long());
        }
        let reply: WireReply = serde_json::from_slice(&body).map_err(|err| {
            Failure::new(
                FailureCode::InferenceEngineError,
                format!("the server's answer is not a chat completion: {err}"),
            )
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
            return Err(Failure::new(
                FailureCode::InferenceEngineError,
                "the server's answer has no choice with a message",
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

impl Engine for OpenAiEngine {
    fn infer(&self, request: Request) -> EngineFuture<'_> {
        Box::pin(timed(async move { self.complete(&request, None).await }))
    }

    fn infer_streaming(&self, request: Request, sink: TokenSink) -> EngineFuture<'_> {
        Box::pin(timed(
            async move { self.complete(&request, Some(&sink)).await },
        ))
    }

    fn model_info(&self) -> ModelInfo {
        ModelInfo {
            name: self.config.model.clone(),
            engine: "openai",
            constrained_decoding: true,
            price: None,
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

/// Times a call; the whole call counts as completion.
async fn timed(call: impl Future<Output = Result<Response, Failure>>) -> Result<Response, Failure> {
    let started = Instant::now();
    let mut response = call.await?;
    response.timings = Timings {
        prompt: Duration::ZERO,
        completion: started.elapsed(),
    };
    Ok(response)
}
