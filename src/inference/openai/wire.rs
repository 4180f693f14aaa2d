//! The chat-completions wire format: requests built from our messages and tools, and replies
//! read defensively (every field optional, so an odd server cannot make a reply unreadable).

use reqwest::Url;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::core::message::saturating_count;
use crate::core::{Failure, FailureCode, Message, TokenUsage, ToolCall, ToolDefinition};

/// `{base_url}/chat/completions`, or why `base_url` is unusable.
pub(super) fn completions_url(base_url: &str) -> Result<Url, Failure> {
    let invalid = |why: String| {
        Failure::new(
            FailureCode::ConfigInvalidInput,
            format!(
                "`base_url` {:?} {why}",
                crate::core::secret::without_credentials(base_url)
            ),
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
pub(super) fn wire_message(message: &Message) -> Value {
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
pub(super) fn wire_tool_call(call: &ToolCall) -> Value {
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
pub(super) fn wire_tool(tool: &ToolDefinition) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    })
}

/// A chat completion, or one chunk of a streamed one. Every field may be missing.
#[derive(Deserialize)]
pub(super) struct WireReply {
    pub(super) choices: Option<Vec<WireChoice>>,
    pub(super) usage: Option<WireUsage>,
    pub(super) error: Option<Value>,
}

#[derive(Deserialize)]
pub(super) struct WireChoice {
    /// In a whole completion.
    pub(super) message: Option<WireMessage>,
    /// In a chunk of a stream.
    pub(super) delta: Option<WireMessage>,
}

#[derive(Deserialize)]
pub(super) struct WireMessage {
    pub(super) content: Option<String>,
    pub(super) tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
pub(super) struct WireToolCall {
    /// Which call a streamed piece belongs to.
    pub(super) index: Option<usize>,
    pub(super) id: Option<String>,
    pub(super) function: Option<WireFunction>,
}

#[derive(Deserialize)]
pub(super) struct WireFunction {
    pub(super) name: Option<String>,
    /// A JSON string per the API (a piece of one when streamed); some servers send an object.
    pub(super) arguments: Option<Value>,
}

/// The counts a server reports: read saturating (a count past 64 bits, negative or `null` fails
/// nothing).
#[derive(Deserialize)]
pub(super) struct WireUsage {
    #[serde(default, deserialize_with = "saturating_count")]
    pub(super) prompt_tokens: u64,
    #[serde(default, deserialize_with = "saturating_count")]
    pub(super) completion_tokens: u64,
    /// What the completion tokens were spent on, when the server says (`reasoning_tokens`).
    #[serde(default)]
    pub(super) completion_tokens_details: Option<WireCompletionDetails>,
}

/// A server's breakdown of the completion tokens; only the reasoning is kept.
#[derive(Deserialize)]
pub(super) struct WireCompletionDetails {
    #[serde(default, deserialize_with = "saturating_count")]
    pub(super) reasoning_tokens: u64,
}

/// A tool call being put together from its streamed pieces (or given whole).
#[derive(Default)]
pub(super) struct PartialCall {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) arguments: String,
}

impl WireUsage {
    pub(super) fn into_usage(self) -> TokenUsage {
        TokenUsage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            // A count of 0 is no reasoning reported (servers send it for every model).
            reasoning_tokens: self
                .completion_tokens_details
                .map(|details| details.reasoning_tokens)
                .filter(|&tokens| tokens > 0),
        }
    }
}

impl PartialCall {
    pub(super) fn from_wire(call: WireToolCall) -> Self {
        let mut partial = PartialCall::default();
        partial.extend(call);
        partial
    }

    /// Adds a streamed piece: the id and name when given, the arguments appended.
    pub(super) fn extend(&mut self, call: WireToolCall) {
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
    pub(super) fn finish(self, index: usize) -> ToolCall {
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
