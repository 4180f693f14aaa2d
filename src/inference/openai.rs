//! The OpenAI-compatible engine (`kind: openai`): a model served over HTTP by vLLM, a llama.cpp
//! server, mistralrs-server or OpenAI itself.
//!
//! Each request is one `POST {base_url}/chat/completions`. A JSON schema becomes a
//! `response_format` of type `json_schema`, which these servers enforce while decoding; grammars
//! are not part of the API and are refused rather than ignored. Rate limits (429), server errors
//! (5xx) and refused connections are retried here, up to `max_retries` times, waiting as the
//! server asks (`Retry-After`, capped at a minute) or with an exponential backoff from 200 ms;
//! every other failure is returned at once with the code the executor's retry rules expect.
//! Streaming reads the server-sent events of `stream: true`. Replies are read defensively: a
//! missing field is empty, a body past its size cap is cut off, nothing a server sends panics.
//! The API key is sent as a bearer token and never appears in a message.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Engine, EngineFuture, Grammar, ModelInfo, Request, Response, Timings, TokenSink};
use crate::core::{Failure, FailureCode, Message, TokenUsage, ToolCall, ToolDefinition};

/// The first backoff wait; each retry doubles it.
const BACKOFF_START: Duration = Duration::from_millis(200);
/// The longest wait between two attempts, whatever the server asks.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// How much of an error reply is read.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// How much of a successful reply (or stream) is read before giving up.
const MAX_BODY: usize = 32 * 1024 * 1024;
/// How many characters of a server's message go into a failure.
const MAX_MESSAGE_CHARS: usize = 500;

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

    /// A failure to reach the server or to read its reply.
    fn transport_failure(&self, err: &reqwest::Error) -> Failure {
        let cause = self.redact(&error_chain(err));
        if err.is_timeout() {
            Failure::new(
                FailureCode::InferenceTimeout,
                format!(
                    "{} did not answer within {:?}",
                    self.url, self.config.timeout
                ),
            )
        } else if err.is_connect() {
            Failure::new(
                FailureCode::InferenceModelUnavailable,
                format!("cannot connect to {}: {cause}", self.url),
            )
            .with_help("check that the server is running and that `base_url` points at it")
        } else {
            Failure::new(
                FailureCode::InferenceEngineError,
                format!("the request to {} failed: {cause}", self.url),
            )
        }
    }

    /// The failure for a reply whose status is not a success, and whether to try again.
    async fn status_failure(&self, mut response: reqwest::Response) -> AttemptError {
        let status = response.status();
        let wait = retry_after(response.headers());
        let mut body = read_body(&mut response, MAX_ERROR_BODY)
            .await
            .unwrap_or_default();
        body.truncate(MAX_ERROR_BODY);
        let retry = match status {
            StatusCode::TOO_MANY_REQUESTS => wait.map_or(Retry::Backoff, Retry::After),
            status if status.is_server_error() => Retry::Backoff,
            _ => Retry::Never,
        };
        AttemptError {
            failure: self.reply_failure(status, &body),
            retry,
        }
    }

    /// What a reply with this (unsuccessful) status and error body means.
    fn reply_failure(&self, status: StatusCode, body: &[u8]) -> Failure {
        let said = self.redact(&server_message(body));
        match status {
            StatusCode::TOO_MANY_REQUESTS => Failure::new(
                FailureCode::InferenceRateLimited,
                format!("{} is rate-limiting requests: {said}", self.url),
            ),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Failure::new(
                FailureCode::InferenceModelUnavailable,
                format!("{} refused the credentials ({status}): {said}", self.url),
            )
            .with_help(
                "check the API key in the environment variable the model's configuration \
                 names; it must be set and valid for this server",
            ),
            StatusCode::NOT_FOUND => Failure::new(
                FailureCode::InferenceModelUnavailable,
                format!(
                    "{} has no model `{}` (404): {said}",
                    self.config.base_url, self.config.model
                ),
            )
            .with_help(
                "check `base_url` (it usually ends in /v1) and that the server serves the model",
            ),
            StatusCode::BAD_REQUEST if mentions_context_limit(&String::from_utf8_lossy(body)) => {
                Failure::new(
                    FailureCode::InferenceContextExceeded,
                    format!("the prompt does not fit the model's context: {said}"),
                )
                .with_help("shorten the prompt, retrieve fewer passages, or lower max_tokens")
            }
            status if status.is_server_error() => Failure::new(
                FailureCode::InferenceEngineError,
                format!("{} failed ({status}): {said}", self.url),
            ),
            status => Failure::new(
                FailureCode::InferenceEngineError,
                format!("{} rejected the request ({status}): {said}", self.url),
            )
            .retryable(false),
        }
    }

    /// `text` with the API key, should a server echo it, masked.
    fn redact(&self, text: &str) -> String {
        match self.config.api_key.as_deref() {
            Some(key) if !key.is_empty() => text.replace(key, "<redacted>"),
            _ => text.to_string(),
        }
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
        })
    }

    /// Reads a streamed reply, passing text to `sink` as it arrives.
    async fn read_stream(
        &self,
        mut response: reqwest::Response,
        sink: &TokenSink,
    ) -> Result<Response, Failure> {
        let mut events = SseLines::default();
        let mut state = StreamState::default();
        let mut read = 0;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|err| self.transport_failure(&err))?
        {
            read += chunk.len();
            if read > MAX_BODY {
                return Err(too_long());
            }
            for data in events.push(&chunk) {
                if self.apply_event(&mut state, &data, sink)? == Flow::Done {
                    return Ok(state.finish());
                }
            }
        }
        for data in events.finish() {
            if self.apply_event(&mut state, &data, sink)? == Flow::Done {
                break;
            }
        }
        Ok(state.finish())
    }

    /// Applies one `data:` payload of the stream.
    fn apply_event(
        &self,
        state: &mut StreamState,
        data: &str,
        sink: &TokenSink,
    ) -> Result<Flow, Failure> {
        if data.trim() == "[DONE]" {
            return Ok(Flow::Done);
        }
        let chunk: WireReply = serde_json::from_str(data).map_err(|err| {
            Failure::new(
                FailureCode::InferenceEngineError,
                format!("the server streamed an event that is not a completion chunk: {err}"),
            )
        })?;
        if let Some(error) = &chunk.error {
            return Err(self.reported_error(error));
        }
        state.apply(chunk, sink);
        Ok(Flow::More)
    }

    /// An error the server reported inside a successful reply or a stream.
    fn reported_error(&self, error: &Value) -> Failure {
        let said = self.redact(&error_message(error).unwrap_or_else(|| error.to_string()));
        Failure::new(
            FailureCode::InferenceEngineError,
            format!("the server reported an error: {}", excerpt(&said)),
        )
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
        }
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

/// `{base_url}/chat/completions`, or why `base_url` is unusable.
fn completions_url(base_url: &str) -> Result<Url, Failure> {
    let invalid = |why: String| {
        Failure::new(
            FailureCode::ConfigInvalidInput,
            format!("`base_url` {base_url:?} {why}"),
        )
        .with_help("give the API root, e.g. http://127.0.0.1:8000/v1")
    };
    let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
    let url = Url::parse(&url).map_err(|err| invalid(format!("is not a URL: {err}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("is not an http or https URL".into()));
    }
    Ok(url)
}

/// A message as the API takes it.
fn wire_message(message: &Message) -> Value {
    let mut wire = Map::new();
    wire.insert("role".into(), json!(message.role));
    let content = if message.content.is_empty() && !message.tool_calls.is_empty() {
        Value::Null
    } else {
        json!(message.content)
    };
    wire.insert("content".into(), content);
    if !message.tool_calls.is_empty() {
        let calls = message.tool_calls.iter().map(wire_tool_call).collect();
        wire.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(id) = &message.tool_call_id {
        wire.insert("tool_call_id".into(), json!(id));
    }
    Value::Object(wire)
}

/// A tool call as the API takes it: the arguments as a JSON string. Arguments kept as a string
/// (because the model wrote invalid JSON) are sent back as they were written.
fn wire_tool_call(call: &ToolCall) -> Value {
    let arguments = match &call.arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    json!({
        "id": call.id,
        "type": "function",
        "function": { "name": call.name, "arguments": arguments },
    })
}

/// A tool definition as the API takes it.
fn wire_tool(tool: &ToolDefinition) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    })
}

/// The `response_format` that makes the server decode JSON valid against `schema`.
fn response_format(schema: &Value) -> Value {
    json!({
        "type": "json_schema",
        "json_schema": { "name": "answer", "schema": schema, "strict": true },
    })
}

/// Whether to try again after a failed attempt, and when.
enum Retry {
    Never,
    /// After the wait the server asked for (already capped).
    After(Duration),
    /// After the exponential backoff for this retry.
    Backoff,
}

/// A failed attempt.
struct AttemptError {
    failure: Failure,
    retry: Retry,
}

/// The wait before retry number `retries` (from 0): 200 ms, 400 ms, 800 ms…, at most a minute.
fn backoff(retries: u32) -> Duration {
    BACKOFF_START
        .saturating_mul(2u32.saturating_pow(retries))
        .min(MAX_WAIT)
}

/// The wait a `Retry-After` header asks for, when given in seconds.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds).min(MAX_WAIT))
}

/// Whether an error reply says the prompt is too long for the model.
fn mentions_context_limit(text: &str) -> bool {
    let text = text.to_lowercase();
    [
        "context length",
        "context_length",
        "maximum context",
        "context window",
    ]
    .iter()
    .any(|phrase| text.contains(phrase))
}

/// The body of a reply, reading at most a little past `limit` bytes.
async fn read_body(
    response: &mut reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    while body.len() <= limit {
        match response.chunk().await? {
            Some(chunk) => body.extend_from_slice(&chunk),
            None => break,
        }
    }
    Ok(body)
}

fn too_long() -> Failure {
    Failure::new(
        FailureCode::InferenceEngineError,
        format!(
            "the server's answer is longer than {} MiB",
            MAX_BODY / 1024 / 1024
        ),
    )
}

/// What an error reply says: the `error.message` of the API when there is one, else the text.
fn server_message(body: &[u8]) -> String {
    let text = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|value| error_message(&value))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    if text.is_empty() {
        "(no message)".into()
    } else {
        excerpt(&text)
    }
}

/// The message in `{"error": {"message": …}}`, `{"error": "…"}`, `{"message": …}` or
/// `{"detail": "…"}`, the shapes OpenAI-compatible servers use.
fn error_message(value: &Value) -> Option<String> {
    let error = value.get("error").unwrap_or(value);
    [error.get("message"), Some(error), value.get("detail")]
        .into_iter()
        .flatten()
        .find_map(|v| v.as_str().map(str::to_string))
}

/// The first characters of `text`.
fn excerpt(text: &str) -> String {
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// An error and its causes, joined.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A chat completion, or one chunk of a streamed one. Every field may be missing.
#[derive(Deserialize)]
struct WireReply {
    choices: Option<Vec<WireChoice>>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChoice {
    /// In a whole completion.
    message: Option<WireMessage>,
    /// In a chunk of a stream.
    delta: Option<WireMessage>,
}

#[derive(Deserialize)]
struct WireMessage {
    content: Option<String>,
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    /// Which call a streamed piece belongs to.
    index: Option<usize>,
    id: Option<String>,
    function: Option<WireFunction>,
}

#[derive(Deserialize)]
struct WireFunction {
    name: Option<String>,
    /// A JSON string per the API (a piece of one when streamed); some servers send an object.
    arguments: Option<Value>,
}

#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

impl WireUsage {
    fn into_usage(self) -> TokenUsage {
        TokenUsage {
            prompt_tokens: self.prompt_tokens.unwrap_or(0),
            completion_tokens: self.completion_tokens.unwrap_or(0),
        }
    }
}

/// A tool call being put together from its streamed pieces (or given whole).
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

impl PartialCall {
    fn from_wire(call: WireToolCall) -> Self {
        let mut partial = PartialCall::default();
        partial.extend(call);
        partial
    }

    /// Adds a streamed piece: the id and name when given, the arguments appended.
    fn extend(&mut self, call: WireToolCall) {
        if let Some(id) = call.id.filter(|id| !id.is_empty()) {
            self.id = id;
        }
        let Some(function) = call.function else {
            return;
        };
        if let Some(name) = function.name.filter(|name| !name.is_empty()) {
            self.name = name;
        }
        match function.arguments {
            Some(Value::String(piece)) => self.arguments.push_str(&piece),
            Some(Value::Null) | None => {}
            Some(other) => self.arguments.push_str(&other.to_string()),
        }
    }

    /// The finished call, numbered `index` when the server gave it no id. Arguments that are
    /// not JSON are kept as a JSON string, for validation to report.
    fn finish(self, index: usize) -> ToolCall {
        let arguments = if self.arguments.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str(&self.arguments).unwrap_or(Value::String(self.arguments))
        };
        ToolCall {
            id: if self.id.is_empty() {
                format!("call_{index}")
            } else {
                self.id
            },
            name: self.name,
            arguments,
        }
    }
}

/// Whether a stream goes on.
#[derive(Debug, PartialEq)]
enum Flow {
    More,
    Done,
}

/// What a stream has said so far.
#[derive(Default)]
struct StreamState {
    text: String,
    /// By the index the server gives each call.
    tool_calls: BTreeMap<usize, PartialCall>,
    usage: TokenUsage,
}

impl StreamState {
    fn apply(&mut self, chunk: WireReply, sink: &TokenSink) {
        if let Some(usage) = chunk.usage {
            self.usage = usage.into_usage();
        }
        let delta = chunk
            .choices
            .unwrap_or_default()
            .into_iter()
            .next()
            .and_then(|choice| choice.delta);
        let Some(delta) = delta else {
            return;
        };
        if let Some(piece) = delta.content.filter(|piece| !piece.is_empty()) {
            sink(&piece);
            self.text.push_str(&piece);
        }
        for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let index = call.index.unwrap_or(position);
            self.tool_calls.entry(index).or_default().extend(call);
        }
    }

    fn finish(self) -> Response {
        Response {
            text: self.text,
            tool_calls: self
                .tool_calls
                .into_values()
                .enumerate()
                .map(|(i, call)| call.finish(i))
                .collect(),
            usage: self.usage,
            timings: Timings::default(),
        }
    }
}

/// Splits a server-sent event stream into the payloads of its `data:` lines, whatever the
/// boundaries of the chunks it arrives in.
#[derive(Default)]
struct SseLines {
    /// Bytes after the last newline seen.
    pending: Vec<u8>,
}

impl SseLines {
    /// The payloads of the lines `bytes` completes.
    fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let Some(last_newline) = self.pending.iter().rposition(|&b| b == b'\n') else {
            return Vec::new();
        };
        let rest = self.pending.split_off(last_newline + 1);
        let complete = std::mem::replace(&mut self.pending, rest);
        data_payloads(&complete)
    }

    /// The payload of a last line that had no newline.
    fn finish(self) -> Vec<String> {
        data_payloads(&self.pending)
    }
}

/// The payloads of the `data:` lines in `bytes`; comments, other fields and blank lines are
/// skipped.
fn data_payloads(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let data = line.strip_prefix(b"data:")?;
            let data = data.strip_prefix(b" ").unwrap_or(data);
            Some(String::from_utf8_lossy(data).into_owned())
        })
        .filter(|data| !data.trim().is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// How long a stub server lives at most.
    const STUB_LIFETIME: Duration = Duration::from_secs(10);

    /// One canned HTTP reply.
    #[derive(Clone)]
    struct Reply {
        status: u16,
        headers: Vec<(&'static str, String)>,
        /// Written one piece at a time, with a pause between pieces.
        pieces: Vec<Vec<u8>>,
        /// An event stream: no content length, the end of the body is the end of the connection.
        stream: bool,
        /// Read the request and never answer.
        silent: bool,
    }

    impl Reply {
        fn json(status: u16, body: Value) -> Self {
            Reply::text(status, &body.to_string())
        }

        fn text(status: u16, body: &str) -> Self {
            Reply {
                status,
                headers: vec![("content-type", "application/json".into())],
                pieces: vec![body.as_bytes().to_vec()],
                stream: false,
                silent: false,
            }
        }

        fn header(mut self, name: &'static str, value: &str) -> Self {
            self.headers.push((name, value.into()));
            self
        }

        /// An event stream, written in pieces cut at these byte offsets.
        fn sse(text: &str, cuts: &[usize]) -> Self {
            let mut pieces = Vec::new();
            let mut from = 0;
            for &cut in cuts.iter().chain([&text.len()]) {
                pieces.push(text.as_bytes()[from..cut].to_vec());
                from = cut;
            }
            Reply {
                status: 200,
                headers: vec![("content-type", "text/event-stream".into())],
                pieces,
                stream: true,
                silent: false,
            }
        }

        fn silent() -> Self {
            Reply {
                silent: true,
                ..Reply::text(200, "")
            }
        }
    }

    /// A request the stub received.
    struct Received {
        /// Header names lower-cased.
        headers: Vec<(String, String)>,
        body: Value,
    }

    impl Received {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }
    }

    /// A one-request-per-connection HTTP server on 127.0.0.1 answering from a queue; when the
    /// queue is empty it answers 418. It stops after `STUB_LIFETIME` or with the test.
    struct Stub {
        base_url: String,
        received: Arc<Mutex<Vec<Received>>>,
    }

    impl Stub {
        async fn start(replies: Vec<Reply>) -> Stub {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let base_url = format!("http://{}/v1", listener.local_addr().expect("address"));
            let received = Arc::new(Mutex::new(Vec::new()));
            let queue = Arc::new(Mutex::new(VecDeque::from(replies)));
            let log = Arc::clone(&received);
            tokio::spawn(tokio::time::timeout(STUB_LIFETIME, async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let reply = queue.lock().expect("queue").pop_front();
                    tokio::spawn(serve(stream, reply, Arc::clone(&log)));
                }
            }));
            Stub { base_url, received }
        }

        fn config(&self) -> OpenAiConfig {
            OpenAiConfig {
                timeout: Duration::from_secs(5),
                ..OpenAiConfig::new(&self.base_url, "test-model")
            }
        }

        fn engine(&self) -> OpenAiEngine {
            OpenAiEngine::new(self.config()).expect("engine")
        }

        fn bodies(&self) -> Vec<Value> {
            let received = self.received.lock().expect("log");
            received.iter().map(|r| r.body.clone()).collect()
        }
    }

    async fn serve(stream: TcpStream, reply: Option<Reply>, log: Arc<Mutex<Vec<Received>>>) {
        let mut reader = BufReader::new(stream);
        let Some(received) = read_request(&mut reader).await else {
            return;
        };
        log.lock().expect("log").push(received);
        let reply = reply.unwrap_or_else(|| Reply::text(418, "no canned reply left"));
        if reply.silent {
            tokio::time::sleep(STUB_LIFETIME).await;
            return;
        }
        let stream = reader.get_mut();
        let mut head = format!("HTTP/1.1 {} Stub\r\nconnection: close\r\n", reply.status);
        for (name, value) in &reply.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if !reply.stream {
            let length: usize = reply.pieces.iter().map(Vec::len).sum();
            head.push_str(&format!("content-length: {length}\r\n"));
        }
        head.push_str("\r\n");
        let _ = stream.write_all(head.as_bytes()).await;
        for piece in &reply.pieces {
            let _ = stream.write_all(piece).await;
            let _ = stream.flush().await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = stream.shutdown().await;
    }

    async fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Received> {
        let mut line = String::new();
        reader.read_line(&mut line).await.ok()?;
        assert!(
            line.starts_with("POST /v1/chat/completions "),
            "request line {line:?}"
        );
        let mut headers = Vec::new();
        loop {
            line.clear();
            reader.read_line(&mut line).await.ok()?;
            let Some((name, value)) = line.trim_end().split_once(':') else {
                break;
            };
            headers.push((name.to_lowercase(), value.trim().to_string()));
        }
        let length = headers
            .iter()
            .find(|(name, _)| name == "content-length")
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await.ok()?;
        let body = serde_json::from_slice(&body).expect("the engine sends JSON");
        Some(Received { headers, body })
    }

    fn ask(text: &str) -> Request {
        Request {
            messages: vec![Message::system("be brief"), Message::user(text)],
            ..Request::default()
        }
    }

    fn answer(content: Value) -> Value {
        json!({
            "choices": [{ "index": 0, "message": { "role": "assistant", "content": content } }],
            "usage": { "prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15 },
        })
    }

    async fn failure(engine: &OpenAiEngine, request: Request) -> Failure {
        engine.infer(request).await.expect_err("a failure")
    }

    #[tokio::test]
    async fn a_plain_answer_with_usage_and_the_request_it_came_from() {
        let stub = Stub::start(vec![Reply::json(
            200,
            answer(json!("{\"city\":\"Paris\"}")),
        )])
        .await;
        let schema = json!({ "type": "object", "properties": { "city": { "type": "string" } } });
        let request = Request {
            json_schema: Some(schema.clone()),
            max_tokens: Some(64),
            temperature: Some(0.0),
            seed: Some(7),
            stop: vec!["\n\n".into()],
            ..ask("capital of France?")
        };
        let response = stub.engine().infer(request).await.expect("an answer");
        assert_eq!(response.text, "{\"city\":\"Paris\"}");
        assert_eq!(
            response.usage,
            TokenUsage {
                prompt_tokens: 12,
                completion_tokens: 3
            }
        );
        assert!(response.tool_calls.is_empty());
        assert_eq!(
            stub.bodies(),
            vec![json!({
                "model": "test-model",
                "messages": [
                    { "role": "system", "content": "be brief" },
                    { "role": "user", "content": "capital of France?" },
                ],
                "response_format": {
                    "type": "json_schema",
                    "json_schema": { "name": "answer", "schema": schema, "strict": true },
                },
                "max_tokens": 64,
                "temperature": 0.0,
                "seed": 7,
                "stop": ["\n\n"],
            })]
        );
        let received = stub.received.lock().expect("log");
        assert_eq!(received[0].header("authorization"), None);
    }

    #[tokio::test]
    async fn the_key_is_sent_as_a_bearer_token() {
        let stub = Stub::start(vec![Reply::json(200, answer(json!("hi")))]).await;
        let engine = OpenAiEngine::new(OpenAiConfig {
            api_key: Some("sk-test-42".into()),
            ..stub.config()
        })
        .expect("engine");
        engine.infer(ask("hello")).await.expect("an answer");
        let received = stub.received.lock().expect("log");
        assert_eq!(
            received[0].header("authorization"),
            Some("Bearer sk-test-42")
        );
        assert!(!format!("{engine:?}").contains("sk-test-42"));
    }

    #[tokio::test]
    async fn tools_are_offered_and_tool_calls_parsed() {
        let reply = json!({
            "choices": [{ "message": { "role": "assistant", "content": null, "tool_calls": [
                { "id": "call_a", "type": "function",
                  "function": { "name": "weather", "arguments": "{\"city\":\"Oslo\"}" } },
                { "id": "call_b", "type": "function",
                  "function": { "name": "weather", "arguments": "{city: Bergen" } },
            ] } }],
        });
        let stub = Stub::start(vec![Reply::json(200, reply)]).await;
        let parameters =
            json!({ "type": "object", "properties": { "city": { "type": "string" } } });
        let earlier_call = ToolCall {
            id: "call_0".into(),
            name: "weather".into(),
            arguments: json!({ "city": "Rome" }),
        };
        let mut messages = ask("weather in Oslo and Bergen?").messages;
        messages.push(Message {
            tool_calls: vec![earlier_call],
            ..Message::assistant("")
        });
        messages.push(Message::tool_result("call_0", "sunny"));
        let request = Request {
            messages,
            tools: vec![ToolDefinition {
                name: "weather".into(),
                description: "The weather in a city.".into(),
                parameters: parameters.clone(),
            }],
            ..Request::default()
        };
        let response = stub.engine().infer(request).await.expect("an answer");
        assert_eq!(response.text, "");
        assert_eq!(
            response.tool_calls,
            vec![
                ToolCall {
                    id: "call_a".into(),
                    name: "weather".into(),
                    arguments: json!({ "city": "Oslo" }),
                },
                ToolCall {
                    id: "call_b".into(),
                    name: "weather".into(),
                    arguments: json!("{city: Bergen"),
                },
            ]
        );
        assert_eq!(response.usage, TokenUsage::default(), "no usage given");
        let body = &stub.bodies()[0];
        assert_eq!(
            body["tools"],
            json!([{ "type": "function", "function": {
                "name": "weather", "description": "The weather in a city.", "parameters": parameters,
            } }])
        );
        assert_eq!(
            body["messages"][2],
            json!({ "role": "assistant", "content": null, "tool_calls": [
                { "id": "call_0", "type": "function",
                  "function": { "name": "weather", "arguments": "{\"city\":\"Rome\"}" } },
            ] })
        );
        assert_eq!(
            body["messages"][3],
            json!({ "role": "tool", "content": "sunny", "tool_call_id": "call_0" })
        );
    }

    #[tokio::test]
    async fn a_rate_limit_is_retried_after_the_wait_the_server_asks() {
        let stub = Stub::start(vec![
            Reply::json(429, json!({ "error": { "message": "slow down" } }))
                .header("retry-after", "0"),
            Reply::json(200, answer(json!("ok"))),
        ])
        .await;
        let response = stub.engine().infer(ask("hi")).await.expect("an answer");
        assert_eq!(response.text, "ok");
        assert_eq!(stub.bodies().len(), 2);
    }

    #[tokio::test]
    async fn server_errors_are_retried_with_backoff_up_to_max_retries() {
        let error = || Reply::text(500, "boom");
        let stub = Stub::start(vec![
            error(),
            error(),
            Reply::json(200, answer(json!("ok"))),
        ])
        .await;
        let response = stub.engine().infer(ask("hi")).await.expect("an answer");
        assert_eq!(response.text, "ok");
        assert_eq!(stub.bodies().len(), 3);

        let stub = Stub::start(vec![error(), error(), error()]).await;
        let engine = OpenAiEngine::new(OpenAiConfig {
            max_retries: 1,
            ..stub.config()
        })
        .expect("engine");
        let failure = failure(&engine, ask("hi")).await;
        assert_eq!(failure.code, FailureCode::InferenceEngineError);
        assert!(failure.message.contains("500"), "{}", failure.message);
        assert!(failure.message.contains("boom"), "{}", failure.message);
        assert_eq!(stub.bodies().len(), 2, "one try and one retry");
    }

    #[tokio::test]
    async fn statuses_map_to_failure_codes() {
        let key = "sk-secret-123";
        let cases = [
            (
                Reply::json(
                    401,
                    json!({ "error": { "message": format!("Incorrect API key: {key}") } }),
                ),
                FailureCode::InferenceModelUnavailable,
                "refused the credentials",
            ),
            (
                Reply::json(404, json!({ "detail": "Not Found" })),
                FailureCode::InferenceModelUnavailable,
                "has no model `test-model`",
            ),
            (
                Reply::json(
                    400,
                    json!({ "object": "error", "message":
                    "This model's maximum context length is 2048 tokens." }),
                ),
                FailureCode::InferenceContextExceeded,
                "maximum context length is 2048",
            ),
            (
                Reply::json(422, json!({ "error": "temperature must be positive" })),
                FailureCode::InferenceEngineError,
                "temperature must be positive",
            ),
        ];
        for (reply, code, says) in cases {
            let stub = Stub::start(vec![reply]).await;
            let engine = OpenAiEngine::new(OpenAiConfig {
                api_key: Some(key.into()),
                ..stub.config()
            })
            .expect("engine");
            let failure = failure(&engine, ask("hi")).await;
            assert_eq!(failure.code, code, "{failure:?}");
            assert!(failure.message.contains(says), "{failure:?}");
            assert!(!format!("{failure:?}").contains(key), "{failure:?}");
            assert_eq!(stub.bodies().len(), 1, "not retried: {failure:?}");
            if code == FailureCode::InferenceEngineError {
                assert!(!failure.retryable, "a rejected request is not retryable");
            }
        }
    }

    #[tokio::test]
    async fn a_refused_connection_is_an_unavailable_model() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base_url = format!("http://{}/v1", listener.local_addr().expect("address"));
        drop(listener);
        let engine = OpenAiEngine::new(OpenAiConfig {
            max_retries: 1,
            ..OpenAiConfig::new(&base_url, "m")
        })
        .expect("engine");
        let failure = failure(&engine, ask("hi")).await;
        assert_eq!(failure.code, FailureCode::InferenceModelUnavailable);
        assert!(failure.message.contains(&base_url), "{}", failure.message);
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        let stub = Stub::start(vec![Reply::silent()]).await;
        let engine = OpenAiEngine::new(OpenAiConfig {
            timeout: Duration::from_millis(300),
            ..stub.config()
        })
        .expect("engine");
        let failure = failure(&engine, ask("hi")).await;
        assert_eq!(failure.code, FailureCode::InferenceTimeout, "{failure:?}");
        assert_eq!(stub.bodies().len(), 1, "a timeout is not retried here");
    }

    #[tokio::test]
    async fn a_grammar_is_refused_before_any_request() {
        let stub = Stub::start(vec![]).await;
        let request = Request {
            grammar: Some(Grammar::Regex("[0-9]+".into())),
            ..ask("a number")
        };
        let failure = failure(&stub.engine(), request).await;
        assert_eq!(failure.code, FailureCode::ConstraintGrammarRejected);
        assert!(failure.message.contains("regex"), "{}", failure.message);
        assert!(failure.help.is_some_and(|h| h.contains("mistralrs")));
        assert!(stub.bodies().is_empty());
    }

    #[tokio::test]
    async fn odd_replies_fail_cleanly() {
        let huge = "x".repeat(1024 * 1024);
        let cases = [
            (Reply::text(200, "not json"), "not a chat completion"),
            (Reply::text(200, "{}"), "no choice"),
            (
                Reply::json(200, json!({ "choices": "many" })),
                "not a chat completion",
            ),
            (
                Reply::json(200, json!({ "error": { "message": "overloaded" } })),
                "overloaded",
            ),
            (Reply::text(500, &huge), "xxxx…"),
        ];
        for (reply, says) in cases {
            let stub = Stub::start(vec![reply]).await;
            let engine = OpenAiEngine::new(OpenAiConfig {
                max_retries: 0,
                ..stub.config()
            })
            .expect("engine");
            let failure = failure(&engine, ask("hi")).await;
            assert_eq!(failure.code, FailureCode::InferenceEngineError);
            assert!(failure.message.contains(says), "{failure:?}");
            assert!(failure.message.len() < 1000, "the message is cut short");
        }
        let empty = json!({ "choices": [{ "message": {} }] });
        let stub = Stub::start(vec![Reply::json(200, empty)]).await;
        let response = stub
            .engine()
            .infer(ask("hi"))
            .await
            .expect("an empty answer");
        assert_eq!(response.text, "");
    }

    #[tokio::test]
    async fn a_stream_split_anywhere_reaches_the_sink_in_order() {
        let stream = concat!(
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"Par\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"is \\u00e9\"}}]}\r\n\r\n",
            ": keep-alive\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"té\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4}}\n\n",
            "data: [DONE]\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"after done\"}}]}\n\n",
        );
        let at = |text: &str, offset: usize| stream.find(text).expect("in the stream") + offset;
        // Cuts inside a line, a JSON string, a CRLF, the two bytes of an `é`, and `data:`.
        let cuts = [
            at("Par", 0) - 1,
            at("\"content\":\"is", 4),
            at("\r\n\r\n", 1),
            at("té", 2),
            at("data: [DONE]", 2),
        ];
        let stub = Stub::start(vec![Reply::sse(stream, &cuts)]).await;
        let pieces = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&pieces);
        let sink: TokenSink =
            Arc::new(move |piece| seen.lock().expect("pieces").push(piece.to_string()));
        let response = stub
            .engine()
            .infer_streaming(ask("capital?"), sink)
            .await
            .expect("an answer");
        assert_eq!(*pieces.lock().expect("pieces"), ["Par", "is é", "té"]);
        assert_eq!(response.text, "Paris été");
        assert_eq!(
            response.usage,
            TokenUsage {
                prompt_tokens: 9,
                completion_tokens: 4
            }
        );
        let body = &stub.bodies()[0];
        assert_eq!(body["stream"], json!(true));
        assert_eq!(body["stream_options"], json!({ "include_usage": true }));
    }

    #[tokio::test]
    async fn streamed_tool_calls_are_put_together_by_index() {
        let chunk = |calls: Value| {
            format!(
                "data: {}\n\n",
                json!({ "choices": [{ "delta": { "tool_calls": calls } }] })
            )
        };
        let events = [
            chunk(json!([{ "index": 0, "id": "call_x", "type": "function",
                "function": { "name": "weather", "arguments": "" } }])),
            chunk(
                json!([{ "index": 1, "id": "call_y", "function": { "name": "time", "arguments": "{\"tz\"" } }]),
            ),
            chunk(json!([{ "index": 0, "function": { "arguments": "{\"city\":" } }])),
            chunk(json!([{ "index": 0, "function": { "arguments": "\"Oslo\"}" } }])),
            chunk(json!([{ "index": 1, "function": { "arguments": ":\"UTC\"}" } }])),
        ];
        let stream = events.concat() + "data: [DONE]\n\n";
        let cuts: Vec<usize> = (1..stream.len()).step_by(40).collect();
        let stub = Stub::start(vec![Reply::sse(&stream, &cuts)]).await;
        let sink: TokenSink = Arc::new(|_| {});
        let response = stub
            .engine()
            .infer_streaming(ask("weather?"), sink)
            .await
            .expect("an answer");
        assert_eq!(response.text, "");
        assert_eq!(
            response.tool_calls,
            vec![
                ToolCall {
                    id: "call_x".into(),
                    name: "weather".into(),
                    arguments: json!({ "city": "Oslo" }),
                },
                ToolCall {
                    id: "call_y".into(),
                    name: "time".into(),
                    arguments: json!({ "tz": "UTC" }),
                },
            ]
        );
    }

    #[tokio::test]
    async fn a_stream_error_event_is_a_failure() {
        let stream = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"Par\"}}]}\n\n",
            "data: {\"error\":{\"message\":\"the engine died\"}}\n\n",
        );
        let stub = Stub::start(vec![Reply::sse(stream, &[])]).await;
        let sink: TokenSink = Arc::new(|_| {});
        let failure = stub
            .engine()
            .infer_streaming(ask("capital?"), sink)
            .await
            .expect_err("a failure");
        assert_eq!(failure.code, FailureCode::InferenceEngineError);
        assert!(failure.message.contains("the engine died"), "{failure:?}");
    }

    #[test]
    fn sse_lines_survive_any_split() {
        let stream =
            "data: {\"a\":1}\r\n\r\nevent: x\n: comment\ndata:{\"b\":\"é\"}\n\ndata: [DONE]";
        for size in 1..stream.len() {
            let mut lines = SseLines::default();
            let mut payloads = Vec::new();
            for piece in stream.as_bytes().chunks(size) {
                payloads.extend(lines.push(piece));
            }
            payloads.extend(lines.finish());
            assert_eq!(
                payloads,
                ["{\"a\":1}", "{\"b\":\"é\"}", "[DONE]"],
                "split every {size} bytes"
            );
        }
    }

    #[test]
    fn retry_waits() {
        let header = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(RETRY_AFTER, value.parse().expect("header value"));
            retry_after(&headers)
        };
        assert_eq!(header("2"), Some(Duration::from_secs(2)));
        assert_eq!(header(" 0 "), Some(Duration::ZERO));
        assert_eq!(header("3600"), Some(MAX_WAIT), "capped at a minute");
        assert_eq!(
            header("Wed, 21 Oct 2015 07:28:00 GMT"),
            None,
            "falls back to backoff"
        );
        assert_eq!(header("-1"), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
        let waits: Vec<u128> = (0..4).map(|n| backoff(n).as_millis()).collect();
        assert_eq!(waits, [200, 400, 800, 1600]);
        assert_eq!(backoff(40), MAX_WAIT);
    }

    #[test]
    fn a_base_url_must_be_an_http_url_and_a_model_named() {
        let url = completions_url("http://127.0.0.1:8000/v1/").expect("a URL");
        assert_eq!(url.as_str(), "http://127.0.0.1:8000/v1/chat/completions");
        for (base_url, model) in [
            ("127.0.0.1:8000", "m"),
            ("ftp://host/v1", "m"),
            ("http://h/v1", " "),
        ] {
            let failure =
                OpenAiEngine::new(OpenAiConfig::new(base_url, model)).expect_err(base_url);
            assert_eq!(failure.code, FailureCode::ConfigInvalidInput, "{base_url}");
        }
    }

    #[test]
    fn model_info_names_the_model() {
        let engine =
            OpenAiEngine::new(OpenAiConfig::new("http://127.0.0.1:1/v1", "qwen")).expect("engine");
        assert_eq!(
            engine.model_info(),
            ModelInfo {
                name: "qwen".into(),
                engine: "openai",
                constrained_decoding: true
            }
        );
    }
}
