//! pagantic's requests in mistral.rs's terms and mistral.rs's answers in pagantic's: messages and
//! tool calls, sampling, the JSON schema's whitespace, responses (whole or streamed), token
//! counts and times, and engine errors as failure codes.

use std::time::Duration;

use mistralrs::{
    CalledFunction, ChatCompletionResponse, Model, RequestBuilder, SamplingParams, TextMessageRole,
    ToolCallResponse, ToolCallType,
};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::core::{Failure, FailureCode, Message, Role, TokenUsage, ToolCall};
use crate::inference::{Response, Timings};

/// The schema with llguidance told to allow no whitespace between JSON tokens (only `, ` and
/// `: `). With the default "any whitespace", the small model can spend its whole `max_tokens`
/// on newlines inside an object, leaving the JSON unfinished; compact JSON is shorter anyway.
pub(super) fn compact_json(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Value::Object(object) = &mut schema {
        object.entry("x-guidance").or_insert_with(|| {
            serde_json::json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
            })
        });
    }
    schema
}

pub(super) fn add_message(builder: RequestBuilder, message: &Message) -> RequestBuilder {
    match message.role {
        Role::System => builder.add_message(TextMessageRole::System, &message.content),
        Role::User => builder.add_message(TextMessageRole::User, &message.content),
        Role::Assistant if message.tool_calls.is_empty() => {
            builder.add_message(TextMessageRole::Assistant, &message.content)
        }
        Role::Assistant => {
            let calls = message
                .tool_calls
                .iter()
                .enumerate()
                .map(|(index, call)| ToolCallResponse {
                    index,
                    id: call.id.clone(),
                    tp: ToolCallType::Function,
                    function: CalledFunction {
                        name: call.name.clone(),
                        arguments: call.arguments.to_string(),
                    },
                })
                .collect();
            builder.add_message_with_tool_call(TextMessageRole::Assistant, &message.content, calls)
        }
        Role::Tool => builder.add_tool_message(
            &message.content,
            message.tool_call_id.as_deref().unwrap_or_default(),
        ),
    }
}

/// Greedy decoding for temperature 0 (or none); otherwise sampling from the whole distribution
/// at that temperature. mistral.rs's request builder starts from its deterministic parameters,
/// which keep only the top token (`top_k` 1), so setting a temperature alone still decoded
/// greedily: every "hot" candidate came out the same as the greedy one.
pub(super) fn sampling(temperature: Option<f64>) -> SamplingParams {
    match temperature {
        Some(t) if t > 0.0 => SamplingParams {
            temperature: Some(t),
            top_k: None,
            ..SamplingParams::deterministic()
        },
        _ => SamplingParams::deterministic(),
    }
}

pub(super) fn engine_failure(error: impl std::fmt::Display) -> Failure {
    let text = error.to_string();
    if text.contains("Invalid grammar") {
        Failure::new(FailureCode::ConstraintGrammarRejected, text)
            .with_help("fix the step's `constraint` (llguidance reports where it failed, above)")
    } else if text.contains("context") && (text.contains("length") || text.contains("exceed")) {
        Failure::new(FailureCode::InferenceContextExceeded, text)
            .with_help("shorten the prompt (fewer retrieved passages, a smaller max_tokens)")
    } else {
        Failure::new(FailureCode::InferenceEngineError, text)
    }
}

pub(super) fn to_response(response: ChatCompletionResponse) -> Response {
    let choice = response.choices.into_iter().next();
    let (text, tool_calls) = match choice {
        Some(choice) => {
            let calls = choice
                .message
                .tool_calls
                .unwrap_or_default()
                .into_iter()
                .map(|call| ToolCall {
                    id: call.id,
                    name: call.function.name,
                    arguments: serde_json::from_str(&call.function.arguments)
                        .unwrap_or(Value::String(call.function.arguments)),
                })
                .collect();
            (choice.message.content.unwrap_or_default(), calls)
        }
        None => (String::new(), Vec::new()),
    };
    let (usage, timings) = usage_and_timings(&response.usage);
    Response {
        text,
        tool_calls,
        usage,
        timings,
        ..Response::default()
    }
}

/// The token counts and times mistral.rs reports for a request.
fn usage_and_timings(usage: &mistralrs::Usage) -> (TokenUsage, Timings) {
    let usage_tokens = TokenUsage {
        prompt_tokens: usage.prompt_tokens as u64,
        completion_tokens: usage.completion_tokens as u64,
        reasoning_tokens: None,
    };
    let timings = Timings {
        prompt: engine_seconds(usage.total_prompt_time_sec),
        completion: engine_seconds(usage.total_completion_time_sec),
        ..Timings::default()
    };
    (usage_tokens, timings)
}

/// Streams the answer to `builder` from `model`, each piece of text to `pieces` (ignored once
/// its receiver is gone).
pub(super) async fn stream_answer(
    model: &Model,
    builder: RequestBuilder,
    pieces: mpsc::UnboundedSender<String>,
) -> Result<Response, Failure> {
    let mut stream = model
        .stream_chat_request(builder)
        .await
        .map_err(engine_failure)?;
    let mut text = String::new();
    let mut usage = TokenUsage::default();
    let mut timings = Timings::default();
    while let Some(event) = stream.next().await {
        match event {
            mistralrs::Response::Chunk(chunk) => {
                if let Some(piece) = chunk
                    .choices
                    .first()
                    .and_then(|c| c.delta.content.as_deref())
                {
                    let _ = pieces.send(piece.to_string());
                    text.push_str(piece);
                }
                if let Some(reported) = &chunk.usage {
                    (usage, timings) = usage_and_timings(reported);
                }
            }
            mistralrs::Response::Done(done) => return Ok(to_response(done)),
            mistralrs::Response::ModelError(message, _)
            | mistralrs::Response::CompletionModelError(message, _) => {
                return Err(engine_failure(message));
            }
            mistralrs::Response::InternalError(e) | mistralrs::Response::ValidationError(e) => {
                return Err(engine_failure(e));
            }
            _ => {}
        }
    }
    Ok(Response {
        text,
        usage,
        timings,
        ..Response::default()
    })
}

/// A time the engine reports, in seconds: a negative, infinite or absurd one reads as zero
/// rather than panicking.
fn engine_seconds(seconds: f32) -> Duration {
    Duration::try_from_secs_f32(seconds.max(0.0)).unwrap_or_default()
}
