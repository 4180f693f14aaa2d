//! Schema validation with messages short enough to feed back to a model.
//!
//! Validation is jsonschema's (draft 2020-12 unless the schema names another with `$schema`).
//! Its messages quote the whole failing value, which for an object can be longer than the answer
//! itself, and list only three allowed values of an enum; here each error is its JSON pointer and
//! one short sentence that quotes at most a preview of the value and every allowed value.

use std::fmt;

use jsonschema::error::ValidationErrorKind;
use jsonschema::{ValidationError, Validator};
use serde_json::Value;

use crate::core::{Failure, FailureCode};

/// Longest JSON text of a value quoted whole in a message.
const PREVIEW_CHARS: usize = 40;

/// Most allowed values listed in a message.
const MAX_LISTED: usize = 20;

/// One way a value breaks its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    /// Where, as a JSON pointer into the value (`/items/2/label`; `""` for the value itself).
    pub path: String,
    /// What is wrong, in one short sentence.
    pub message: String,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(root)"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)
    }
}

/// Every way `value` breaks `schema`, in the validator's order; empty when it is valid. Fails
/// (`CONFIG_INVALID_INPUT`) only when the schema itself is invalid.
pub fn schema_errors(value: &Value, schema: &Value) -> Result<Vec<SchemaError>, Failure> {
    Ok(errors(&compile(schema)?, value))
}

/// Compiles a schema; an invalid one is a configuration failure, which no retry can fix.
pub(super) fn compile(schema: &Value) -> Result<Validator, Failure> {
    jsonschema::validator_for(schema).map_err(|error| {
        let at = error.instance_path();
        let place = if at.is_empty() {
            String::new()
        } else {
            format!(" at {at}")
        };
        Failure::new(
            FailureCode::ConfigInvalidInput,
            format!("invalid JSON Schema{place}: {}", describe(&error)),
        )
    })
}

/// Every way `value` breaks the compiled schema.
pub(super) fn errors(validator: &Validator, value: &Value) -> Vec<SchemaError> {
    validator
        .iter_errors(value)
        .map(|error| SchemaError {
            path: error.instance_path().to_string(),
            message: describe(&error),
        })
        .collect()
}

/// One short sentence for an error.
fn describe(error: &ValidationError<'_>) -> String {
    let value = preview(error.instance());
    match error.kind() {
        ValidationErrorKind::Enum { options } => {
            let options = options.as_array().map(Vec::as_slice).unwrap_or_default();
            format!("{value} is not one of {}", listed(options))
        }
        ValidationErrorKind::Constant { expected_value } => {
            format!("{value} is not {}", preview(expected_value))
        }
        ValidationErrorKind::Required { property } => {
            format!("missing required property {property}")
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            let names: Vec<Value> = unexpected.iter().cloned().map(Value::from).collect();
            let noun = if names.len() == 1 {
                "property"
            } else {
                "properties"
            };
            format!("unexpected {noun} {}", listed(&names))
        }
        _ => error.masked_with(value).to_string(),
    }
}

/// A value as compact JSON; when long, a cut-short string (`"Lorem ipsum…"`) or the size of an
/// object or array.
fn preview(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= PREVIEW_CHARS {
        return text;
    }
    match value {
        Value::String(s) => {
            let head: String = s.chars().take(PREVIEW_CHARS - 3).collect();
            format!("{}…\"", Value::from(head).to_string().trim_end_matches('"'))
        }
        Value::Object(map) => counted("an object with", map.len(), "property", "properties"),
        Value::Array(items) => counted("an array of", items.len(), "item", "items"),
        _ => text,
    }
}

/// `an array of 1 item`, `an array of 2 items`.
fn counted(what: &str, n: usize, one: &str, many: &str) -> String {
    format!("{what} {n} {}", if n == 1 { one } else { many })
}

/// `"a", "b", "c"`, with at most [`MAX_LISTED`] shown.
fn listed(values: &[Value]) -> String {
    let shown: Vec<String> = values.iter().take(MAX_LISTED).map(preview).collect();
    let mut text = shown.join(", ");
    if values.len() > MAX_LISTED {
        text.push_str(&format!(" (and {} more)", values.len() - MAX_LISTED));
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn review() -> Value {
        json!({
            "type": "object",
            "required": ["label", "score"],
            "additionalProperties": false,
            "properties": {
                "label": {"enum": ["positive", "negative"]},
                "score": {"type": "integer", "minimum": 0, "maximum": 10},
                "tags": {
                    "type": "array",
                    "maxItems": 2,
                    "items": {"type": "string", "maxLength": 12}
                },
                "kind": {"const": "review"}
            }
        })
    }

    #[test]
    fn each_error_has_its_pointer_and_a_short_message() {
        let long = "a".repeat(100);
        let cases = [
            ("valid", json!({"label": "positive", "score": 3}), vec![]),
            (
                "enum, every value listed",
                json!({"label": "Postive", "score": 3}),
                vec![(
                    "/label",
                    r#""Postive" is not one of "positive", "negative""#,
                )],
            ),
            (
                "missing properties",
                json!({}),
                vec![
                    ("", r#"missing required property "label""#),
                    ("", r#"missing required property "score""#),
                ],
            ),
            (
                "type and range",
                json!({"label": "negative", "score": "7"}),
                vec![("/score", r#""7" is not of type "integer""#)],
            ),
            (
                "maximum",
                json!({"label": "negative", "score": 11}),
                vec![("/score", "11 is greater than the maximum of 10")],
            ),
            (
                "unexpected properties",
                json!({"label": "negative", "score": 1, "why": 1, "how": 2}),
                vec![("", r#"unexpected properties "why", "how""#)],
            ),
            (
                "const",
                json!({"label": "negative", "score": 1, "kind": "essay"}),
                vec![("/kind", r#""essay" is not "review""#)],
            ),
            (
                "a long value is cut short",
                json!({"label": "negative", "score": 1, "tags": ["ok", long]}),
                vec![(
                    "/tags/1",
                    r#""aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa…" is longer than 12 characters"#,
                )],
            ),
            (
                "a long array is summarised",
                json!({
                    "label": "negative", "score": 1,
                    "tags": ["alpha", "beta", "gamma", "delta", "epsilon"]
                }),
                vec![("/tags", "an array of 5 items has more than 2 items")],
            ),
            (
                "the whole value of the wrong type",
                json!([{"label": "positive", "score": 3, "tags": ["x", "y"], "kind": "review"}]),
                vec![("", r#"an array of 1 item is not of type "object""#)],
            ),
        ];
        for (name, value, expected) in cases {
            let found = schema_errors(&value, &review());
            let expected: Vec<SchemaError> = expected
                .into_iter()
                .map(|(path, message)| SchemaError {
                    path: path.into(),
                    message: message.into(),
                })
                .collect();
            assert_eq!(found, Ok(expected), "{name}");
        }
    }

    #[test]
    fn long_enums_are_listed_up_to_a_limit() {
        let members: Vec<String> = (0..25).map(|i| format!("c{i}")).collect();
        let found = schema_errors(&json!("x"), &json!({"enum": members}));
        let message = found
            .ok()
            .and_then(|e| e.first().map(|e| e.message.clone()));
        assert_eq!(
            message.as_deref(),
            Some(
                "\"x\" is not one of \"c0\", \"c1\", \"c2\", \"c3\", \"c4\", \"c5\", \"c6\", \"c7\", \
                 \"c8\", \"c9\", \"c10\", \"c11\", \"c12\", \"c13\", \"c14\", \"c15\", \"c16\", \
                 \"c17\", \"c18\", \"c19\" (and 5 more)"
            )
        );
    }

    #[test]
    fn draft_2020_12_is_the_default() {
        let schema = json!({"prefixItems": [{"type": "string"}], "items": false});
        let errors = schema_errors(&json!([1, 2]), &schema).unwrap_or_default();
        let mut paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        paths.sort_unstable();
        assert_eq!(paths, ["/0", "/1"]);
    }

    #[test]
    fn an_invalid_schema_is_a_configuration_failure() {
        let failure = schema_errors(&json!(1), &json!({"type": "strin"})).err();
        assert_eq!(
            failure.as_ref().map(|f| f.code),
            Some(FailureCode::ConfigInvalidInput)
        );
        assert_eq!(failure.as_ref().map(|f| f.retryable), Some(false));
        let message = failure.map(|f| f.message).unwrap_or_default();
        assert!(
            message.starts_with("invalid JSON Schema at /type: "),
            "{message}"
        );
    }

    #[test]
    fn errors_display_with_their_place() {
        let at = |path: &str| SchemaError {
            path: path.into(),
            message: "is wrong".into(),
        };
        assert_eq!(at("").to_string(), "(root): is wrong");
        assert_eq!(at("/items/2/label").to_string(), "/items/2/label: is wrong");
    }
}
