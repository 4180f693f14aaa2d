//! What to send when a server turns part of a request down.
//!
//! Servers differ in what they accept: some take `response_format: {"type": "json_schema"}`,
//! llama.cpp's servers only `{"type": "json_object", "schema": …}`, some neither. A request with
//! a JSON schema is tried in [`SchemaMode`] order — `json_schema`, then `json_object` with the
//! schema, then no `response_format` at all with the schema described in the prompt (the caller's
//! repair and validation do the rest) — moving on only when the server's error names the response
//! format. An error that names another part of the request (`tools`, `stream_options`…) cannot be
//! fixed by sending the same request again, so it is never retried as transient — unless it says
//! how the server wants it instead ([`Lesson`]: Text Generation Inference's `response_format`
//! shape, `max_completion_tokens` for `max_tokens` or back), which changes the dialect and sends
//! the request again at once.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::dialect::{Dialect, SchemaShape, TokensField};
use crate::inference::SchemaMode;

/// The part of a request a server refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// `response_format` (or the `json_schema` inside it).
    ResponseFormat,
    /// `tools` or `tool_choice`.
    Tools,
    /// Another field the request carried.
    Field(&'static str),
}

impl Refused {
    /// The field, as the failure names it.
    pub(super) fn field(self) -> &'static str {
        match self {
            Refused::ResponseFormat => "response_format",
            Refused::Tools => "tools",
            Refused::Field(field) => field,
        }
    }
}

/// The words an error uses to name a part of the request, the field that part is sent as, and
/// what refusing it means. `model` and `messages` are left out (an error naming them is about
/// their content, not their presence), and so are `stream` and `stop`, words a transient
/// failure's message may well use.
const REFUSABLE: [(&str, &str, Refused); 9] = [
    (
        "response_format",
        "response_format",
        Refused::ResponseFormat,
    ),
    ("json_schema", "response_format", Refused::ResponseFormat),
    ("tools", "tools", Refused::Tools),
    ("tool_choice", "tools", Refused::Tools),
    // vLLM: `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser`.
    ("tool choice", "tools", Refused::Tools),
    (
        "stream_options",
        "stream_options",
        Refused::Field("stream_options"),
    ),
    ("seed", "seed", Refused::Field("seed")),
    ("max_tokens", "max_tokens", Refused::Field("max_tokens")),
    ("temperature", "temperature", Refused::Field("temperature")),
];

/// The part of `sent` that an error reply (status and body) refuses, when it names one. Statuses
/// that say something else — credentials, a missing model, a rate limit, a time-out — never do.
pub(super) fn refused_part(status: StatusCode, body: &str, sent: &Value) -> Option<Refused> {
    if !may_name_the_request(status) {
        return None;
    }
    let body = body.to_lowercase();
    REFUSABLE
        .iter()
        .find(|(word, field, _)| sent.get(field).is_some() && names_word(&body, word))
        .map(|&(_, _, refused)| refused)
}

/// Whether an error of this status may be about the request's fields: not one that says
/// something else (credentials, a missing model, a rate limit, a time-out).
fn may_name_the_request(status: StatusCode) -> bool {
    status.is_server_error()
        || (status.is_client_error()
            && !matches!(
                status,
                StatusCode::UNAUTHORIZED
                    | StatusCode::FORBIDDEN
                    | StatusCode::NOT_FOUND
                    | StatusCode::REQUEST_TIMEOUT
                    | StatusCode::TOO_MANY_REQUESTS
            ))
}

/// Whether `text` has `word` with no letter, digit or underscore on either side.
fn names_word(text: &str, word: &str) -> bool {
    let part_of_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at.saturating_add(word.len())..].chars().next();
        !before.is_some_and(part_of_name) && !after.is_some_and(part_of_name)
    })
}

/// The `response_format` of `mode` for `schema`, in `shape`; none in prompt mode.
pub(super) fn response_format(
    schema: &Value,
    mode: SchemaMode,
    shape: SchemaShape,
) -> Option<Value> {
    match (mode, shape) {
        (SchemaMode::JsonSchema, SchemaShape::OpenAi) => Some(json!({
            "type": "json_schema",
            "json_schema": { "name": "answer", "schema": schema, "strict": true },
        })),
        (SchemaMode::JsonSchema, SchemaShape::Tgi) => {
            Some(json!({ "type": "json", "value": schema }))
        }
        (SchemaMode::JsonObject, _) => Some(json!({ "type": "json_object", "schema": schema })),
        (SchemaMode::Prompt | SchemaMode::Ignored, _) => None,
    }
}

/// What an error reply teaches about the server's dialect: something to send differently,
/// after which the same request may go again at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lesson {
    /// The server wants a JSON Schema as Text Generation Inference takes it.
    TgiShape,
    /// The server wants `max_completion_tokens` rather than `max_tokens`.
    MaxCompletionTokens,
    /// The server does not know `max_completion_tokens`.
    MaxTokens,
}

impl Lesson {
    /// `dialect` as the lesson corrects it.
    pub(super) fn applied(self, dialect: Dialect) -> Dialect {
        match self {
            Lesson::TgiShape => Dialect {
                schema_shape: SchemaShape::Tgi,
                json_object: false,
                ..dialect
            },
            Lesson::MaxCompletionTokens => Dialect {
                tokens_field: TokensField::MaxCompletionTokens,
                ..dialect
            },
            Lesson::MaxTokens => Dialect {
                tokens_field: TokensField::MaxTokens,
                ..dialect
            },
        }
    }

    /// What the engine does from now on, as a notice says it.
    pub(super) fn described(self) -> &'static str {
        match self {
            Lesson::TgiShape => "sending JSON Schemas as `{\"type\": \"json\", \"value\": …}`",
            Lesson::MaxCompletionTokens => "sending `max_completion_tokens` for `max_tokens`",
            Lesson::MaxTokens => "sending `max_tokens` for `max_completion_tokens`",
        }
    }
}

/// What an error reply (status and body) to `sent` teaches, when it says how the server wants
/// the request instead:
/// - Text Generation Inference refuses OpenAI's `response_format` with a deserialisation error
///   naming the `value` it wants (`response_format: missing field `value``) or the variants it
///   knows (``unknown variant `json_schema`, expected `json` or `regex` ``);
/// - OpenAI's newer models refuse `max_tokens` naming `max_completion_tokens` ("Use
///   'max_completion_tokens' instead");
/// - a server that does not know `max_completion_tokens` names it (vLLM's "Extra inputs are not
///   permitted", or a deserialiser's unknown field).
pub(super) fn lesson(status: StatusCode, body: &str, sent: &Value) -> Option<Lesson> {
    if !may_name_the_request(status) {
        return None;
    }
    let body = body.to_lowercase();
    let format = sent.get("response_format");
    let openai_shaped = format.is_some_and(|format| format.get("value").is_none());
    if openai_shaped
        && (body.contains("missing field `value`")
            || (body.contains("unknown variant") && body.contains("expected `json`")))
    {
        return Some(Lesson::TgiShape);
    }
    let names_completion_tokens = names_word(&body, "max_completion_tokens");
    if sent.get("max_tokens").is_some() && names_completion_tokens {
        return Some(Lesson::MaxCompletionTokens);
    }
    if sent.get("max_completion_tokens").is_some() && names_completion_tokens {
        return Some(Lesson::MaxTokens);
    }
    None
}

/// The wire messages with the schema described, when `mode` does not hand it to the decoder as a
/// JSON Schema: appended to the first system message, or in a system message of its own first.
/// (`json_object` servers that ignore the attached schema still see it, and OpenAI's asks that
/// the messages mention JSON.)
pub(super) fn describe_schema(messages: &mut Vec<Value>, schema: &Value, mode: SchemaMode) {
    if mode == SchemaMode::JsonSchema {
        return;
    }
    let instruction =
        format!("Reply with only JSON, no other text, valid against this JSON Schema:\n{schema}");
    let first_system = messages
        .first_mut()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"));
    match first_system.and_then(|m| m.get_mut("content")) {
        Some(Value::String(content)) => {
            content.push_str("\n\n");
            content.push_str(&instruction);
        }
        _ => messages.insert(0, json!({ "role": "system", "content": instruction })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_error_naming_a_field_the_request_carried_refuses_it() {
        let sent = json!({ "model": "m", "messages": [], "response_format": {}, "tools": [] });
        let said = |text: &str| refused_part(StatusCode::INTERNAL_SERVER_ERROR, text, &sent);
        assert_eq!(
            said("('body', 'response_format', 'type'): Input should be 'text'"),
            Some(Refused::ResponseFormat)
        );
        assert_eq!(said("unknown JSON_SCHEMA"), Some(Refused::ResponseFormat));
        assert_eq!(
            said("`tool_choice` auto needs a parser"),
            Some(Refused::Tools)
        );
        assert_eq!(said("tools are not supported"), Some(Refused::Tools));
        assert_eq!(
            said(r#""auto" tool choice requires --enable-auto-tool-choice"#),
            Some(Refused::Tools)
        );
        // Not as a whole word, or not sent: not a refusal.
        assert_eq!(said("the toolset crashed"), None);
        assert_eq!(said("bad seed"), None);
        assert_eq!(said("out of memory"), None);
        let seeded = json!({ "seed": 1 });
        assert_eq!(
            refused_part(StatusCode::BAD_REQUEST, "'seed' unsupported", &seeded),
            Some(Refused::Field("seed"))
        );
        for status in [StatusCode::UNAUTHORIZED, StatusCode::TOO_MANY_REQUESTS] {
            assert_eq!(refused_part(status, "response_format", &sent), None);
        }
    }

    #[test]
    fn the_modes_fall_back_in_order_and_each_sends_what_it_says() {
        let schema = json!({ "type": "object" });
        let dialect = Dialect::default();
        let mut mode = SchemaMode::JsonSchema;
        let format = |mode| response_format(&schema, mode, SchemaShape::OpenAi);
        let mut formats = vec![format(mode)];
        while let Some(next) = dialect.fallback_after(mode) {
            assert!(next > mode);
            mode = next;
            formats.push(format(mode));
        }
        assert_eq!(
            formats,
            [
                Some(json!({
                    "type": "json_schema",
                    "json_schema": { "name": "answer", "schema": schema, "strict": true },
                })),
                Some(json!({ "type": "json_object", "schema": schema })),
                None,
            ]
        );
        assert_eq!(
            response_format(&schema, SchemaMode::JsonSchema, SchemaShape::Tgi),
            Some(json!({ "type": "json", "value": schema }))
        );
    }

    /// The error bodies replayed here are the shapes the servers' own issue trackers quote.
    #[test]
    fn error_bodies_teach_the_dialect() {
        let openai_format = json!({ "response_format": { "type": "json_schema" } });
        let taught = |status: u16, body: &str, sent: &Value| {
            lesson(StatusCode::from_u16(status).expect("a status"), body, sent)
        };
        // Text Generation Inference, older and newer.
        assert_eq!(
            taught(
                422,
                "Failed to deserialize the JSON body into the target type: response_format: \
                 missing field `value` at line 1 column 168",
                &openai_format
            ),
            Some(Lesson::TgiShape)
        );
        assert_eq!(
            taught(
                422,
                "Failed to deserialize the JSON body into the target type: response_format: \
                 unknown variant `json_schema`, expected `json` or `regex` at line 1 column 90",
                &openai_format
            ),
            Some(Lesson::TgiShape)
        );
        let tgi_format = json!({ "response_format": { "type": "json", "value": {} } });
        assert_eq!(
            taught(422, "missing field `value`", &tgi_format),
            None,
            "already in TGI's shape"
        );
        // OpenAI's newer models.
        let capped = json!({ "max_tokens": 5 });
        let openai = r#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}"#;
        assert_eq!(
            taught(400, openai, &capped),
            Some(Lesson::MaxCompletionTokens)
        );
        // A server that does not know the newer field (vLLM's pydantic error).
        let newer = json!({ "max_completion_tokens": 5 });
        assert_eq!(
            taught(
                400,
                "1 validation error for ChatCompletionRequest\nmax_completion_tokens\n  \
                 Extra inputs are not permitted [type=extra_forbidden]",
                &newer
            ),
            Some(Lesson::MaxTokens)
        );
        assert_eq!(taught(429, "slow down", &capped), None);
        assert_eq!(taught(400, "bad max_tokens", &capped), None);
        // A lesson changes only what it names.
        let tgi = Lesson::TgiShape.applied(Dialect::default());
        assert_eq!(
            (tgi.schema_shape, tgi.json_object, tgi.tokens_field),
            (SchemaShape::Tgi, false, TokensField::MaxTokens)
        );
    }

    #[test]
    fn the_schema_is_described_to_the_model_unless_the_decoder_holds_it() {
        let schema = json!({ "type": "integer" });
        let mut with_system = vec![
            json!({ "role": "system", "content": "be brief" }),
            json!({ "role": "user", "content": "a number" }),
        ];
        describe_schema(&mut with_system, &schema, SchemaMode::JsonSchema);
        assert_eq!(with_system[0]["content"], "be brief");
        describe_schema(&mut with_system, &schema, SchemaMode::Prompt);
        assert_eq!(with_system.len(), 2);
        let content = with_system[0]["content"].as_str().unwrap_or_default();
        assert!(content.starts_with("be brief\n\nReply with only JSON"));
        assert!(content.ends_with(r#"{"type":"integer"}"#));
        let mut without = vec![json!({ "role": "user", "content": "a number" })];
        describe_schema(&mut without, &schema, SchemaMode::JsonObject);
        assert_eq!(without.len(), 2);
        assert_eq!(without[0]["role"], "system");
    }
}
