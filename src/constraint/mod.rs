//! Layer 2: turns what a model wrote into JSON that satisfies a schema, or says precisely why not.
//!
//! The `structured` step asks a model for JSON, and small models rarely write it cleanly: they
//! add prose and code fences, leave trailing commas, run out of tokens mid-object, or write
//! `"Positive"` where the schema allows `"positive"`. [`conform`] takes the text through three
//! stages, each usable alone:
//!
//! 1. [`parse_json_lenient`] — strict parsing, else repair ([`repair_json`]); what was fixed is
//!    kept for the run record.
//! 2. [`normalize_enum_values`] — near-miss strings snapped onto the schema's allowed values.
//! 3. [`schema_errors`] — validation, each error with its JSON pointer and a short message.
//!
//! On failure the message is written to be fed back to the model for a retry: short, and naming
//! every problem with its place. [`gbnf_to_lark`] translates llama.cpp grammars into the Lark
//! form the local decoder takes. Only [`crate::core`] is used here.

mod grammar;
mod normalize;
mod repair;
mod scan;
mod validate;

pub use grammar::{GrammarRejected, check_lark, gbnf_to_lark};
pub use normalize::normalize_enum_values;
pub use repair::{Repair, parse_json_lenient, repair_json};
pub use validate::{SchemaError, schema_errors};

use serde_json::Value;

use crate::core::{Failure, FailureCode};

/// Model output made to satisfy a schema, and what it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Conformed {
    /// The valid value.
    pub value: Value,
    /// What repair fixed in the text ("code fence", "trailing comma"…); empty if it was JSON.
    pub fixes: Vec<String>,
    /// The JSON pointers of strings snapped onto an allowed value.
    pub normalized: Vec<String>,
}

/// Parses `text` leniently, normalises enum values and validates against `schema`.
///
/// Fails with `CONSTRAINT_JSON_INVALID` when no JSON can be made of the text,
/// `CONSTRAINT_SCHEMA_VIOLATION` (listing every error with its path) when the value breaks the
/// schema — both worth a retry — and `CONFIG_INVALID_INPUT` when the schema itself is invalid.
pub fn conform(text: &str, schema: &Value) -> Result<Conformed, Failure> {
    let validator = validate::compile(schema)?;
    let Repair { mut value, fixes } = parse_json_lenient(text)?;
    let normalized = normalize_enum_values(&mut value, schema);
    let errors = validate::errors(&validator, &value);
    if errors.is_empty() {
        return Ok(Conformed {
            value,
            fixes,
            normalized,
        });
    }
    let mut message = String::from("the JSON does not match the schema:");
    for error in &errors {
        message.push_str("\n- ");
        message.push_str(&error.to_string());
    }
    let details: Vec<Value> = errors
        .iter()
        .map(|e| serde_json::json!({ "path": e.path, "message": e.message }))
        .collect();
    Err(
        Failure::new(FailureCode::ConstraintSchemaViolation, message)
            .with_details(serde_json::json!({ "schema_errors": details })),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["label", "items"],
            "additionalProperties": false,
            "properties": {
                "label": {"enum": ["positive", "negative", "very_positive"]},
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "qty": {"type": "integer", "minimum": 1}
                        }
                    }
                }
            }
        })
    }

    #[test]
    fn conforms_what_small_models_write() {
        let cases = [
            (
                "clean JSON",
                r#"{"label": "positive", "items": []}"#,
                json!({"label": "positive", "items": []}),
                vec![],
                vec![],
            ),
            (
                "fenced, sloppy and off-case",
                "Sure! Here you go:\n```json\n{label: 'Very Positive', items: [{'name': 'tea', \
                 'qty': 2,},],}\n```",
                json!({"label": "very_positive", "items": [{"name": "tea", "qty": 2}]}),
                vec![
                    "code fence",
                    "prose before",
                    "unquoted keys",
                    "single quotes",
                    "trailing comma",
                ],
                vec!["/label"],
            ),
            (
                "cut off by the token limit",
                r#"{"label": "NEGATIVE", "items": [{"name": "a"}, {"name": "b", "qty": 3"#,
                json!({"label": "negative", "items": [{"name": "a"}, {"name": "b", "qty": 3}]}),
                vec!["closed 3 brackets"],
                vec!["/label"],
            ),
        ];
        for (name, text, value, fixes, normalized) in cases {
            let expected = Conformed {
                value,
                fixes: fixes.into_iter().map(String::from).collect(),
                normalized: normalized.into_iter().map(String::from).collect(),
            };
            assert_eq!(conform(text, &schema()), Ok(expected), "{name}");
        }
    }

    #[test]
    fn says_precisely_why_not() {
        let cases = [
            (
                "every schema error, each with its place",
                r#"{"label": "great", "items": [{"qty": 0}, {"name": "x"}, {"name": 7}], "x": 1}"#,
                FailureCode::ConstraintSchemaViolation,
                "the JSON does not match the schema:\n\
                 - /label: \"great\" is not one of \"positive\", \"negative\", \"very_positive\"\n\
                 - /items/0: missing required property \"name\"\n\
                 - /items/0/qty: 0 is less than the minimum of 1\n\
                 - /items/2/name: 7 is not of type \"string\"\n\
                 - (root): unexpected property \"x\"",
            ),
            (
                "cut off before anything required",
                "```json\n{\"lab",
                FailureCode::ConstraintSchemaViolation,
                "the JSON does not match the schema:\n\
                 - (root): missing required property \"label\"\n\
                 - (root): missing required property \"items\"",
            ),
            (
                "no JSON at all",
                "I cannot help with that.",
                FailureCode::ConstraintJsonInvalid,
                "the output is not JSON, even after repair: expected value at line 1 column 1",
            ),
            (
                "nothing",
                "",
                FailureCode::ConstraintJsonInvalid,
                "the output is empty, not JSON",
            ),
        ];
        for (name, text, code, message) in cases {
            let failure = conform(text, &schema()).err();
            assert_eq!(
                failure.as_ref().map(|f| (f.code, f.retryable)),
                Some((code, true)),
                "{name}"
            );
            assert_eq!(
                failure.map(|f| f.message).as_deref(),
                Some(message),
                "{name}"
            );
        }
    }

    #[test]
    fn an_invalid_schema_fails_before_the_text_is_read() {
        let failure = conform("not even JSON", &json!({"type": 12})).err();
        assert_eq!(
            failure.as_ref().map(|f| f.code),
            Some(FailureCode::ConfigInvalidInput)
        );
        assert_eq!(failure.map(|f| f.retryable), Some(false));
    }
}
