//! What a model call's span says of the call itself: why the answer ended, and — only when
//! content capture is on — its messages and answer as `gen_ai.input.messages` and
//! `gen_ai.output.messages`, JSON in the GenAI conventions' message format (role, parts), each
//! text part cut to [`CONTENT_LIMIT`] bytes so the JSON stays whole.

use serde_json::{Value, json};

use super::CONTENT_LIMIT;
use crate::core::{Message, Role, ToolCall};
use crate::inference::Response;
use crate::orchestrate::events::CallContent;

/// Why `response` ended, as the conventions name it: `tool_call` when it called tools,
/// `length` when it used all of `max_tokens`, `stop` otherwise. Engines do not report the
/// server's own reason, so it is read off the answer.
pub fn finish_reason(response: &Response, max_tokens: Option<u32>) -> &'static str {
    if !response.tool_calls.is_empty() {
        "tool_call"
    } else if max_tokens.is_some_and(|max| response.usage.completion_tokens >= u64::from(max)) {
        "length"
    } else {
        "stop"
    }
}

/// The request's messages, as `gen_ai.input.messages` carries them.
pub fn input_messages(messages: &[Message]) -> String {
    let messages: Vec<Value> = messages
        .iter()
        .map(|message| {
            let role = match message.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
                Role::Tool => "tool",
            };
            let mut parts = Vec::new();
            match &message.tool_call_id {
                Some(id) => parts.push(json!({
                    "type": "tool_call_response", "id": id, "response": bounded(&message.content),
                })),
                None if !message.content.is_empty() => parts.push(text(&message.content)),
                None => {}
            }
            parts.extend(message.tool_calls.iter().map(tool_call));
            json!({ "role": role, "parts": parts })
        })
        .collect();
    Value::Array(messages).to_string()
}

/// The answer, as `gen_ai.output.messages` carries it.
pub fn output_messages(response: &Response, finish_reason: &str) -> String {
    let mut parts = Vec::new();
    if !response.text.is_empty() {
        parts.push(text(&response.text));
    }
    parts.extend(response.tool_calls.iter().map(tool_call));
    json!([{ "role": "assistant", "parts": parts, "finish_reason": finish_reason }]).to_string()
}

/// A call's content for its span: the request's `messages` and the `response`.
pub fn captured(messages: &[Message], response: &Response, finish_reason: &str) -> CallContent {
    CallContent {
        input: input_messages(messages),
        output: output_messages(response, finish_reason),
    }
}

fn text(content: &str) -> Value {
    json!({ "type": "text", "content": bounded(content) })
}

fn tool_call(call: &ToolCall) -> Value {
    let arguments = call.arguments.to_string();
    let arguments = bounded(&arguments);
    json!({ "type": "tool_call", "id": call.id, "name": call.name, "arguments": arguments })
}

/// `text` cut to [`CONTENT_LIMIT`] bytes at a character boundary.
pub fn bounded(text: &str) -> &str {
    let cut = (0..=CONTENT_LIMIT.min(text.len()))
        .rev()
        .find(|&at| text.is_char_boundary(at))
        .unwrap_or(0);
    &text[..cut]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::TokenUsage;

    fn answer(text: &str, calls: Vec<ToolCall>, completion_tokens: u64) -> Response {
        Response {
            text: text.into(),
            tool_calls: calls,
            usage: TokenUsage {
                completion_tokens,
                ..TokenUsage::default()
            },
            ..Response::default()
        }
    }

    #[test]
    fn the_finish_reason_is_read_off_the_answer() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "calc".into(),
            arguments: json!({ "expression": "1+1" }),
        };
        assert_eq!(
            finish_reason(&answer("", vec![call], 9), Some(9)),
            "tool_call"
        );
        assert_eq!(
            finish_reason(&answer("abc", Vec::new(), 9), Some(9)),
            "length"
        );
        assert_eq!(
            finish_reason(&answer("abc", Vec::new(), 3), Some(9)),
            "stop"
        );
        assert_eq!(finish_reason(&answer("abc", Vec::new(), 3), None), "stop");
    }

    #[test]
    fn messages_become_the_conventions_json_with_long_text_cut_whole() {
        let long = "é".repeat(CONTENT_LIMIT);
        let messages = [Message::system("be brief"), Message::user(long)];
        let input: Value = serde_json::from_str(&input_messages(&messages)).expect("json");
        assert_eq!(
            input[0],
            json!({ "role": "system", "parts": [{ "type": "text", "content": "be brief" }] })
        );
        let cut = input[1]["parts"][0]["content"].as_str().expect("text");
        assert_eq!(cut.len(), CONTENT_LIMIT);
        let output: Value =
            serde_json::from_str(&output_messages(&answer("4", Vec::new(), 1), "stop"))
                .expect("json");
        assert_eq!(
            output,
            json!([{ "role": "assistant", "parts": [{ "type": "text", "content": "4" }], "finish_reason": "stop" }])
        );
    }
}
