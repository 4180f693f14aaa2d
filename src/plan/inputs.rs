//! A run's inputs: `-i name=value` pairs and an inputs file, checked against the plan's
//! declarations (types, required, defaults, allowed values) before anything runs.

use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::diagnostic::suggestion;
use super::model::{InputSpec, InputType};
use crate::core::{Failure, FailureCode};

/// Builds the `inputs` object: file values, then `-i` values over them, then defaults; every
/// problem is reported at once.
pub fn resolve(
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

/// Splits `name=value`.
pub fn split_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("expected NAME=VALUE, got `{text}`")),
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
    fn pairs_split_at_the_first_equals_sign() {
        assert_eq!(split_pair("q=a=b"), Ok(("q".into(), "a=b".into())));
        assert!(split_pair("=x").is_err());
        assert!(split_pair("novalue").is_err());
    }
}
