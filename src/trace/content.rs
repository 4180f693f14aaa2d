//! What a model call's span says of its content — only when content capture is on: its messages
//! and answer as `gen_ai.input.messages` and `gen_ai.output.messages`, JSON in the GenAI
//! conventions' message format (role, parts), each text part cut to [`CONTENT_LIMIT`] bytes so
//! the JSON stays whole. Built here, from what the call's event kept, so a run that exports no
//! content builds no JSON.

use serde_json::{Value, json};

use super::CONTENT_LIMIT;
use crate::core::{Message, Role, ToolCall};
use crate::orchestrate::CallContent;

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

/// The answer in `content`, which ended for `finish_reason`, as `gen_ai.output.messages`
/// carries it.
pub fn output_messages(content: &CallContent, finish_reason: &str) -> String {
    let mut parts = Vec::new();
    if !content.text.is_empty() {
        parts.push(text(&content.text));
    }
    parts.extend(content.tool_calls.iter().map(tool_call));
    json!([{ "role": "assistant", "parts": parts, "finish_reason": finish_reason }]).to_string()
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

    #[test]
    fn messages_become_the_conventions_json_with_long_text_cut_whole() {
        let long = "é".repeat(CONTENT_LIMIT);
        let call = ToolCall {
            id: "call_1".into(),
            name: "calc".into(),
            arguments: json!({ "expression": "1+1" }),
        };
        let mut answered = Message::assistant("");
        answered.tool_calls = vec![call.clone()];
        let messages = [
            Message::system("be brief"),
            Message::user(long),
            answered,
            Message::tool_result("call_1", "2"),
        ];
        let input: Value = serde_json::from_str(&input_messages(&messages)).expect("json");
        assert_eq!(
            input[0],
            json!({ "role": "system", "parts": [{ "type": "text", "content": "be brief" }] })
        );
        let cut = input[1]["parts"][0]["content"].as_str().expect("text");
        assert_eq!(cut.len(), CONTENT_LIMIT);
        assert_eq!(
            input[2]["parts"],
            json!([{ "type": "tool_call", "id": "call_1", "name": "calc", "arguments": "{\"expression\":\"1+1\"}" }])
        );
        assert_eq!(
            input[3]["parts"],
            json!([{ "type": "tool_call_response", "id": "call_1", "response": "2" }])
        );
        let answer = CallContent {
            messages: Vec::new(),
            text: "4".into(),
            tool_calls: vec![call],
        };
        let output: Value =
            serde_json::from_str(&output_messages(&answer, "tool_call")).expect("json");
        assert_eq!(output[0]["role"], "assistant");
        assert_eq!(output[0]["finish_reason"], "tool_call");
        assert_eq!(
            output[0]["parts"][0],
            json!({ "type": "text", "content": "4" })
        );
        assert_eq!(output[0]["parts"][1]["name"], "calc");
    }
}
