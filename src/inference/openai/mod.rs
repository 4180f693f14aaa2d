//! The OpenAI-compatible engine (`kind: openai`): a model served over HTTP by vLLM, a llama.cpp
//! server, mistralrs-server or OpenAI itself.
//!
//! Each request is one `POST {base_url}/chat/completions`. A JSON schema becomes a
//! `response_format` of type `json_schema`, which these servers enforce while decoding; grammars
//! are not part of the API and are refused rather than ignored. Rate limits (429), server errors
//! (5xx) and refused connections are retried here, up to `max_retries` times, waiting as the
//! server asks (`Retry-After`, capped at a minute) or with an exponential backoff from 200 ms;
//! every other failure is returned at once with the code the executor's retry rules expect.
//! Streaming reads the server-sent events of `stream: true` ([`stream`]); the wire format is in
//! [`wire`], failures and waits in [`failure`]. Replies are read defensively: a
//! missing field is empty, a body past its size cap is cut off, nothing a server sends panics.
//! The API key is sent as a bearer token and never appears in a message.

use std::fmt;
use std::time::{Duration, Instant};

use reqwest::Url;
use serde_json::{Map, Value, json};

use super::{
    CacheStatus, Engine, EngineFuture, EngineIdentity, Grammar, ModelInfo, Request, Response,
    Timings, TokenSink,
};
use crate::core::{Failure, FailureCode};

mod failure;
mod stream;
#[cfg(test)]
mod tests;
mod wire;

use failure::{AttemptError, Retry, backoff, error_chain, read_body, too_long};
use wire::{
    PartialCall, WireReply, WireUsage, completions_url, response_format, wire_message, wire_tool,
};

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
            config,
            url,
            client,
        })
    }

    /// The request body of the API for `request`.
    fn body(&self, request: &Request, stream: bool) -> Result<Value, Failure> {
        if let Some(grammar) = &request.grammar {
            let kind = match grammar {
                Grammar::Regex(_) => "regex",
                Grammar::Lark(_) => "Lark (or GBNF)",
            };
            return Err(Failure::new(
                FailureCode::ConstraintGrammarRejected,
                format!("the openai engine cannot enforce a {kind} grammar"),
            )
            .with_help(
                "grammars are not part of the OpenAI API: run this step on a local mistralrs \
                 model, or constrain it with a JSON schema instead",
            ));
        }
        let mut body = Map::new();
        body.insert("model".into(), json!(self.config.model));
        let messages = request.messages.iter().map(wire_message).collect();
        body.insert("messages".into(), Value::Array(messages));
        if !request.tools.is_empty() {
            let tools = request.tools.iter().map(wire_tool).collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(schema) = &request.json_schema {
            body.insert("response_format".into(), response_format(schema));
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
        Ok(Value::Object(body))
    }

    /// Sends `body`, retrying as the failure allows, and returns the first successful reply.
    async fn send(&self, body: &Value) -> Result<reqwest::Response, Failure> {
        let mut retries = 0;
        loop {
            let error = match self.attempt(body).await {
                Ok(response) => return Ok(response),
                Err(error) => error,
            };
            let wait = match error.retry {
                Retry::Never => None,
                Retry::After(wait) => Some(wait),
                Retry::Backoff => Some(backoff(retries)),
            };
            match wait {
                Some(wait) if retries < self.config.max_retries => {
                    tokio::time::sleep(wait).await;
                    retries += 1;
                }
                _ => return Err(error.failure),
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
        })?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(self.status_failure(response).await)
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
        })
    }
}

impl Engine for OpenAiEngine {
    fn infer(&self, request: Request) -> EngineFuture<'_> {
        Box::pin(timed(async move {
            let body = self.body(&request, false)?;
            let response = self.send(&body).await?;
            self.read_completion(response).await
        }))
    }

    fn infer_streaming(&self, request: Request, sink: TokenSink) -> EngineFuture<'_> {
        Box::pin(timed(async move {
            let body = self.body(&request, true)?;
            let response = self.send(&body).await?;
            self.read_stream(response, &sink).await
        }))
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
