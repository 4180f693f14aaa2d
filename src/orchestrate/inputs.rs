//! A pipeline's inputs: what it declares, and binding given values to those declarations.
//!
//! The declarations are part of the plan file (their doc comments are schema text), but they are
//! the contract of the runnable [`Pipeline`](super::Pipeline): every way of starting a run —
//! `-i` pairs with an inputs file, a batch row, a sub-plan agent's arguments — binds its values
//! here, so types, required inputs, defaults and allowed values are checked the same way before
//! anything runs.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::core::{Failure, FailureCode, text::suggestion};

/// One declared input.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// The input's type (default `string`).
    #[serde(rename = "type", default)]
    pub kind: InputType,
    /// What the input means (shown in `--help`-style listings and errors).
    #[serde(default)]
    pub description: Option<String>,
    /// Whether a run must supply it; defaults to true unless `default` is given.
    #[serde(default)]
    pub required: Option<bool>,
    /// The value used when a run does not supply one.
    #[serde(default)]
    pub default: Option<Value>,
    /// The only values accepted.
    #[serde(rename = "enum", default)]
    pub allowed: Option<Vec<Value>>,
}

/// JSON types an input may have.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InputType {
    #[default]
    String,
    Number,
    Integer,
    Boolean,
    Array,
    Object,
}

impl InputType {
    /// Whether `value` has this type.
    pub fn accepts(self, value: &Value) -> bool {
        match self {
            InputType::String => value.is_string(),
            InputType::Number => value.is_number(),
            InputType::Integer => value.is_i64() || value.is_u64(),
            InputType::Boolean => value.is_boolean(),
            InputType::Array => value.is_array(),
            InputType::Object => value.is_object(),
        }
    }

    /// The name used in YAML.
    pub fn name(self) -> &'static str {
        match self {
            InputType::String => "string",
            InputType::Number => "number",
            InputType::Integer => "integer",
            InputType::Boolean => "boolean",
            InputType::Array => "array",
            InputType::Object => "object",
        }
    }
}

/// Builds the `inputs` object: file values, then `-i` values over them, then defaults; every
/// problem is reported at once.
pub(super) fn resolve(
    declared: &IndexMap<String, InputSpec>,
    pairs: &[(String, String)],
    file: Option<Map<String, Value>>,
) -> Result<Value, Failure> {
    let mut problems = Vec::new();
    let mut given: Map<String, Value> = file.unwrap_or_default();
    for (name, text) in pairs {
        let value = match declared.get(name) {
            Some(spec) => match parse(spec.kind, text) {
                Ok(value) => value,
                Err(reason) => {
                    problems.push(format!("-i {name}: {reason}"));
                    continue;
                }
            },
            // Reported below with the other unknown names.
            None => Value::String(text.clone()),
        };
        given.insert(name.clone(), value);
    }
    let mut resolved = Map::new();
    for (name, value) in &given {
        if !declared.contains_key(name) {
            problems.push(format!(
                "`{name}` is not an input of this plan ({})",
                suggestion(name, "inputs", declared.keys().map(String::as_str))
            ));
            continue;
        }
        resolved.insert(name.clone(), value.clone());
    }
    for (name, spec) in declared {
        let value = match (resolved.get(name), &spec.default) {
            (Some(value), _) => value.clone(),
            (None, Some(default)) => default.clone(),
            (None, None) if spec.required.unwrap_or(true) => {
                let about = spec
                    .description
                    .as_deref()
                    .map_or(String::new(), |d| format!(" ({d})"));
                problems.push(format!(
                    "missing input `{name}`{about}: give it with -i {name}=…"
                ));
                continue;
            }
            (None, None) => continue,
        };
        if !spec.kind.accepts(&value) {
            problems.push(format!(
                "input `{name}` must be of type {}, got {value}",
                spec.kind.name()
            ));
        } else if let Some(allowed) = &spec.allowed
            && !allowed.contains(&value)
        {
            let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
            problems.push(format!(
                "input `{name}` must be one of {}, got {value}",
                list.join(", ")
            ));
        }
        resolved.insert(name.clone(), value);
    }
    if problems.is_empty() {
        Ok(Value::Object(resolved))
    } else {
        Err(Failure::new(
            FailureCode::ConfigInvalidInput,
            problems.join("\n"),
        ))
    }
}

/// The inputs of a batch row: each input from the column of its name (or the column `map`
/// names for it); text in a non-text input is parsed as JSON (CSV gives only text).
pub(super) fn from_row(
    declared: &IndexMap<String, InputSpec>,
    map: &[(String, String)],
    row: &Map<String, Value>,
) -> Result<Value, Failure> {
    let mut given = Map::new();
    for (name, spec) in declared {
        let column = map
            .iter()
            .find(|(input, _)| input == name)
            .map_or(name.as_str(), |(_, c)| c.as_str());
        let Some(value) = row.get(column) else {
            continue;
        };
        let value = match (spec.kind, value) {
            (InputType::String, _) => value.clone(),
            (_, Value::String(text)) => {
                serde_json::from_str(text).unwrap_or_else(|_| value.clone())
            }
            _ => value.clone(),
        };
        given.insert(name.clone(), value);
    }
    resolve(declared, &[], Some(given))
}

/// The declarations as a JSON Schema of the inputs object (what a server lists for a plan): one
/// property per input with its type, description, default and allowed values; `required` names
/// the inputs a run must supply.
pub fn json_schema(declared: &IndexMap<String, InputSpec>) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, spec) in declared {
        let mut property = Map::new();
        property.insert("type".into(), Value::from(spec.kind.name()));
        if let Some(description) = &spec.description {
            property.insert("description".into(), Value::from(description.as_str()));
        }
        if let Some(default) = &spec.default {
            property.insert("default".into(), default.clone());
        }
        if let Some(allowed) = &spec.allowed {
            property.insert("enum".into(), Value::Array(allowed.clone()));
        }
        properties.insert(name.clone(), Value::Object(property));
        if spec.default.is_none() && spec.required.unwrap_or(true) {
            required.push(Value::from(name.as_str()));
        }
    }
    serde_json::json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// Parses `-i` text as the input's type: strings as they are, everything else as JSON.
fn parse(kind: InputType, text: &str) -> Result<Value, String> {
    match kind {
        InputType::String => Ok(Value::String(text.to_string())),
        other => serde_json::from_str::<Value>(text)
            .ok()
            .filter(|v| other.accepts(v))
            .ok_or_else(|| format!("`{text}` is not a valid {}", other.name())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn declared() -> IndexMap<String, InputSpec> {
        serde_json::from_value(json!({
            "question": { "type": "string" },
            "count": { "type": "integer", "default": 3 },
            "mode": { "type": "string", "enum": ["fast", "slow"], "default": "fast" },
            "tags": { "type": "array", "required": false }
        }))
        .expect("specs")
    }

    #[test]
    fn the_declarations_become_a_json_schema_with_the_inputs_a_run_must_give_required() {
        let schema = json_schema(&declared());
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "question": { "type": "string" },
                    "count": { "type": "integer", "default": 3 },
                    "mode": { "type": "string", "default": "fast", "enum": ["fast", "slow"] },
                    "tags": { "type": "array" }
                },
                "required": ["question"],
                "additionalProperties": false
            })
        );
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn typed_values_defaults_and_optional_inputs() {
        let value = resolve(
            &declared(),
            &pairs(&[("question", "why?"), ("count", "5")]),
            None,
        )
        .expect("valid");
        assert_eq!(
            value,
            json!({ "question": "why?", "count": 5, "mode": "fast" })
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let failure = resolve(
            &declared(),
            &pairs(&[("count", "many"), ("mode", "medium"), ("qestion", "x")]),
            None,
        )
        .expect_err("invalid");
        assert_eq!(failure.code, FailureCode::ConfigInvalidInput);
        assert_eq!(
            failure.message,
            "-i count: `many` is not a valid integer\n\
             `qestion` is not an input of this plan (did you mean `question`?)\n\
             missing input `question`: give it with -i question=…\n\
             input `mode` must be one of \"fast\", \"slow\", got \"medium\""
        );
    }

    #[test]
    fn command_line_values_override_the_inputs_file() {
        let file = json!({ "question": "from file", "count": 1 })
            .as_object()
            .cloned();
        let value =
            resolve(&declared(), &pairs(&[("question", "from flag")]), file).expect("valid");
        assert_eq!(value["question"], "from flag");
        assert_eq!(value["count"], 1);
    }

    #[test]
    fn row_columns_bind_by_name_or_map_and_text_parses_for_typed_inputs() {
        let row = json!({ "q": "why?", "count": "7", "extra": 1 });
        let value = from_row(
            &declared(),
            &pairs(&[("question", "q")]),
            row.as_object().expect("object"),
        )
        .expect("valid");
        assert_eq!(
            value,
            json!({ "question": "why?", "count": 7, "mode": "fast" })
        );
        let failure = from_row(&declared(), &[], row.as_object().expect("object"))
            .expect_err("question is missing");
        assert!(failure.message.contains("missing input `question`"));
    }
}
