//! `POST /v1/chat/completions`, OpenAI-compatible, so any OpenAI client can call a plan as if it
//! were a model: `model` names the plan, the last message is bound to the plan's first string
//! input, and the messages before it reach the plan's templates (and an agent step) as `history`.
//! Only `user` and `assistant` messages are taken (as `chat --load` takes them): a `system` or
//! `tool` message would speak for the plan's own prompts or tools, and is refused with 422.
//! The answer is a `chat.completion` whose message is the plan's output; with `"stream": true`,
//! `chat.completion.chunk` events and `data: [DONE]`: the text as the model writes it when the
//! plan's final step streams (an `infer` step whose answer is the plan's output), else the whole
//! answer in one chunk when the run ends.
//!
//! `GET /v1/models` lists the served plans as models (what chat UIs and client libraries ask
//! first) and `GET /v1/models/{id}` describes one; an unknown id gets OpenAI's 404 error.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::app::{
    App, CancelOnDrop, Refused, Streamed, json_response, lost_run, refuse, run_status,
};
use super::catalog::Served;
use super::metrics::Refusal;
use super::request_id::RequestId;
use super::trace_context::{Caller, with_trace_id};
use crate::core::{Failure, FailureCode, Message, Role};
use crate::orchestrate::RunRecord;
use crate::orchestrate::inputs::InputType;

/// The part of an OpenAI chat request a plan uses; other fields (temperature, …) are ignored:
/// the plan decides how its models are called.
#[derive(Deserialize)]
struct ChatRequest {
    model: String,
    messages: Vec<ChatMessage>,
    #[serde(default)]
    stream: bool,
}

#[derive(Deserialize)]
struct ChatMessage {
    role: Role,
    /// Text, or a list of parts of which the `text` ones are read.
    #[serde(default)]
    content: Value,
}

impl ChatMessage {
    fn text(&self) -> String {
        match &self.content {
            Value::String(text) => text.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        }
    }
}

fn invalid(message: impl Into<String>, help: &str) -> Refused {
    Refused::bad_request(Failure::new(FailureCode::ConfigInvalidInput, message).with_help(help))
}

pub async fn completions(
    State(app): State<App>,
    request_id: Option<Extension<RequestId>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let caller = Caller::of(request_id.map(|Extension(RequestId(id))| id), &headers);
    let request = match chat_request(body) {
        Ok(request) => request,
        Err(refused) => return refuse(&app, refused),
    };
    let served = match app.plan(&request.model) {
        Ok(served) => served,
        Err(refused) => return model_not_found(&app, refused),
    };
    let (inputs, history) = match prepare(&served, &request) {
        Ok(prepared) => prepared,
        Err(refused) => return refuse(&app, refused),
    };
    let stream = request.stream;
    let permit = match app.admit().await {
        Ok(permit) => permit,
        Err(refused) => return refuse(&app, refused),
    };
    let globals = Map::from_iter([("history".to_string(), history)]);
    let model = served.name.clone();
    if stream {
        let (sender, receiver) = mpsc::unbounded_channel();
        let (_, guard) = app.start(served, inputs, globals, caller, permit, Some(sender));
        let id = format!("chatcmpl-{}", app.runner.new_id());
        return Sse::new(chunks(id, model, receiver, guard)).into_response();
    }
    let (handle, _cancel_if_gone) = app.start(served, inputs, globals, caller, permit, None);
    let Ok(record) = handle.await else {
        return lost_run();
    };
    let status = run_status(&record);
    if status != StatusCode::OK {
        let body = json!({ "error": record.error, "record": record });
        return with_trace_id(json_response(status, &body), &record);
    }
    let body = json!({
        "id": completion_id(&record),
        "object": "chat.completion",
        "created": now(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": answer(&record) },
            "finish_reason": "stop",
        }],
        "usage": {
            "prompt_tokens": record.usage.prompt_tokens,
            "completion_tokens": record.usage.completion_tokens,
            "total_tokens": record.usage.total(),
        },
    });
    with_trace_id(json_response(status, &body), &record)
}

/// The body as a chat completion request (400 when it is not JSON or not one).
fn chat_request(body: Result<Bytes, BytesRejection>) -> Result<ChatRequest, Refused> {
    let body = App::json_body(body)?;
    serde_json::from_value(body).map_err(|e| {
        invalid(
            format!("not a chat completion request: {e}"),
            "send {\"model\": PLAN, \"messages\": [{\"role\": \"user\", \"content\": \"…\"}]}",
        )
    })
}

/// The plan's inputs from the last message and the history from the ones before it.
fn prepare(served: &Served, request: &ChatRequest) -> Result<(Value, Value), Refused> {
    let message_input = served
        .pipeline
        .inputs
        .iter()
        .find(|(_, spec)| spec.kind == InputType::String)
        .map(|(name, _)| name.clone())
        .ok_or_else(|| {
            invalid(
                format!("plan `{}` has no string input for the message", served.name),
                "declare a string input; the last message is bound to the first one",
            )
        })?;
    let Some((last, earlier)) = request.messages.split_last() else {
        return Err(invalid("`messages` is empty", "send at least one message"));
    };
    refuse_foreign_roles(&request.messages)?;
    let message = Map::from_iter([(message_input, Value::String(last.text()))]);
    let inputs = served
        .pipeline
        .bind_object(&Value::Object(message))
        .map_err(Refused::bad_request)?;
    let history: Vec<Message> = earlier
        .iter()
        .map(|m| Message {
            role: m.role,
            content: m.text(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        })
        .collect();
    Ok((inputs, serde_json::to_value(history).unwrap_or_default()))
}

/// An unknown plan on an OpenAI route, in OpenAI's shape (`model_not_found`, 404), its message
/// naming the plans served, so that an OpenAI client shows why.
fn model_not_found(app: &App, refused: Refused) -> Response {
    app.metrics.refused(refused.why);
    let error = json!({
        "message": refused.failure.message,
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    });
    json_response(refused.status, &json!({ "error": error }))
}

/// `GET /v1/models`: every served plan as a model.
pub async fn models(State(app): State<App>) -> Response {
    let data: Vec<Value> = app.catalog.all().values().map(model).collect();
    json_response(StatusCode::OK, &json!({ "object": "list", "data": data }))
}

/// `GET /v1/models/{id}`: the plan served as `id`, or OpenAI's `model_not_found` error (404).
pub async fn one_model(State(app): State<App>, Path(id): Path<String>) -> Response {
    match app.plan(&id) {
        Ok(served) => json_response(StatusCode::OK, &model(&served)),
        Err(refused) => model_not_found(&app, refused),
    }
}

/// A plan as an OpenAI model object; `created` is when its plan file last changed.
fn model(served: &Arc<Served>) -> Value {
    let created = std::fs::metadata(&served.path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    json!({
        "id": served.name,
        "object": "model",
        "created": created,
        "owned_by": "pagantic",
    })
}

/// Refuses (422) a `system` or `tool` message: the plan writes its agents' instructions and
/// runs their tools itself, so a client may only say what a user or an assistant said — the
/// rule `chat --load` holds transcripts to.
fn refuse_foreign_roles(messages: &[ChatMessage]) -> Result<(), Refused> {
    let Some((position, message)) = messages
        .iter()
        .enumerate()
        .find(|(_, message)| matches!(message.role, Role::System | Role::Tool))
    else {
        return Ok(());
    };
    let role = match message.role {
        Role::System => "system",
        _ => "tool",
    };
    Err(Refused {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        why: Refusal::BadRequest,
        failure: Failure::new(
            FailureCode::ConfigInvalidInput,
            format!(
                "message {} has the role `{role}`: a client may send only `user` and `assistant` messages",
                position.saturating_add(1)
            ),
        )
        .with_help(
            "the plan's own prompts instruct its model; send the conversation as user and assistant turns",
        ),
    })
}

/// The answer's text: the plan's output as it is when text, else as JSON.
fn answer(record: &RunRecord) -> String {
    match &record.output {
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

fn completion_id(record: &RunRecord) -> String {
    format!("chatcmpl-{}", record.run_id)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Where a streamed answer is.
struct Chunking {
    receiver: mpsc::UnboundedReceiver<Streamed>,
    /// Cancels the run if the client goes away before its end.
    _cancel_if_gone: CancelOnDrop,
    /// Whether the assistant's role was sent.
    started: bool,
    /// Whether text arrived as the model wrote it (then the record's output is not sent again).
    streamed: bool,
}

/// The chunks of a streamed answer: the assistant's role at once, then the text as the plan's
/// streamed step writes it — or, when its final step does not stream, the whole answer when the
/// run ends —, the end (or the error), then `[DONE]`.
fn chunks(
    id: String,
    model: String,
    receiver: mpsc::UnboundedReceiver<Streamed>,
    guard: CancelOnDrop,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let created = now();
    let chunk = move |delta: Value, finish: Option<&str>| {
        let data = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        });
        SseEvent::default().data(data.to_string())
    };
    let state = Chunking {
        receiver,
        _cancel_if_gone: guard,
        started: false,
        streamed: false,
    };
    futures_util::stream::unfold(Some(state), move |state| {
        let chunk = chunk.clone();
        async move {
            let mut state = state?;
            if !state.started {
                state.started = true;
                let start = chunk(json!({ "role": "assistant", "content": "" }), None);
                return Some((vec![start], Some(state)));
            }
            loop {
                match state.receiver.recv().await? {
                    Streamed::Event(_) => continue,
                    Streamed::Token(text) => {
                        state.streamed = true;
                        let piece = chunk(json!({ "content": text }), None);
                        return Some((vec![piece], Some(state)));
                    }
                    Streamed::Record(record) => {
                        let mut events = Vec::new();
                        if run_status(&record) == StatusCode::OK {
                            if !state.streamed {
                                events.push(chunk(json!({ "content": answer(&record) }), None));
                            }
                            events.push(chunk(json!({}), Some("stop")));
                        } else {
                            let error = json!({ "error": record.error });
                            events.push(SseEvent::default().data(error.to_string()));
                        }
                        events.push(SseEvent::default().data("[DONE]"));
                        return Some((events, None));
                    }
                }
            }
        }
    })
    .flat_map(|events| futures_util::stream::iter(events.into_iter().map(Ok::<_, Infallible>)))
}
