//! A variant's overrides: `STEP.FIELD: value` (or a path from the plan's top, such as
//! `models.llm.source`) set in the plan's JSON before it is checked, so a variant is an ordinary
//! plan that passes every check a plan does.

use serde_json::{Map, Value};

use crate::core::text::suggestion;

/// Top-level sections of a plan that an override can reach by path.
const SECTIONS: &[&str] = &[
    "models", "corpora", "vars", "inputs", "policy", "tools", "agents", "output",
];

/// Two step fields of which a step has exactly one: setting one removes the other.
const EXCLUSIVE: &[(&str, &str)] = &[("prompt", "template")];

/// Sets `key` (dotted) to `value` in `plan`, the JSON of a plan file.
pub fn apply(plan: &mut Value, key: &str, value: &Value) -> Result<(), OverrideError> {
    let segments: Vec<&str> = key.split('.').collect();
    let (first, rest) = match segments.split_first() {
        Some((first, rest)) if !rest.is_empty() && rest.iter().all(|s| !s.is_empty()) => {
            (*first, rest)
        }
        _ => return Err(OverrideError::NotAPath),
    };
    let target = if SECTIONS.contains(&first) {
        plan.get_mut(first)
            .ok_or_else(|| OverrideError::NoSection(first.to_string()))?
    } else {
        let steps = plan
            .get_mut("steps")
            .and_then(Value::as_array_mut)
            .ok_or(OverrideError::NoSteps)?;
        let names: Vec<String> = steps
            .iter()
            .filter_map(|s| s.get("name").and_then(Value::as_str).map(str::to_string))
            .collect();
        let step = steps
            .iter_mut()
            .find(|s| s.get("name").and_then(Value::as_str) == Some(first))
            .ok_or_else(|| OverrideError::NoStep {
                name: first.to_string(),
                suggestion: suggestion(first, "steps", names.iter().map(String::as_str)),
            })?;
        if let ([field], Value::Object(map)) = (rest, &mut *step) {
            for (a, b) in EXCLUSIVE {
                let other = if field == a {
                    Some(b)
                } else if field == b {
                    Some(a)
                } else {
                    None
                };
                if let Some(other) = other {
                    map.remove(*other);
                }
            }
        }
        step
    };
    set_path(target, rest, value.clone())
}

/// Sets the value at `path` under `target`, creating mappings on the way.
fn set_path(target: &mut Value, path: &[&str], value: Value) -> Result<(), OverrideError> {
    let Some((last, parents)) = path.split_last() else {
        return Err(OverrideError::NotAPath);
    };
    let mut node = target;
    for segment in parents {
        let map = node
            .as_object_mut()
            .ok_or_else(|| OverrideError::NotInAMapping(segment.to_string()))?;
        node = map
            .entry(segment.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    let map = node
        .as_object_mut()
        .ok_or_else(|| OverrideError::NotInAMapping(last.to_string()))?;
    map.insert(last.to_string(), value);
    Ok(())
}

/// Why an override cannot be set on the plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    /// The key is not `STEP.FIELD` or a dotted path with no empty part.
    #[error("write `STEP.FIELD` (e.g. `answer.prompt`) or a path such as `models.llm.source`")]
    NotAPath,
    /// The path starts at a top-level section the plan does not have.
    #[error("the plan has no `{0}`")]
    NoSection(String),
    /// The plan has no steps to set a field on.
    #[error("the plan has no steps")]
    NoSteps,
    /// No step has that name; `suggestion` is the "did you mean" text.
    #[error("the plan has no step `{name}` ({suggestion})")]
    NoStep { name: String, suggestion: String },
    /// A part of the path names a key inside something that is not a mapping.
    #[error("`{0}` is inside a value that is not a mapping")]
    NotInAMapping(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan() -> Value {
        json!({
            "models": { "llm": { "kind": "scripted" } },
            "steps": [ { "name": "answer", "type": "infer", "template": "hi" } ]
        })
    }

    #[test]
    fn a_step_field_is_set_and_its_exclusive_twin_removed() {
        let mut plan = plan();
        apply(&mut plan, "answer.prompt", &json!("answer_v2.j2")).expect("applies");
        assert_eq!(
            plan["steps"][0],
            json!({ "name": "answer", "type": "infer", "prompt": "answer_v2.j2" })
        );
        apply(&mut plan, "answer.retry.max_attempts", &json!(3)).expect("applies");
        assert_eq!(plan["steps"][0]["retry"], json!({ "max_attempts": 3 }));
    }

    #[test]
    fn sections_are_reached_by_path() {
        let mut plan = plan();
        apply(&mut plan, "models.llm.echo", &json!(true)).expect("applies");
        assert_eq!(plan["models"]["llm"]["echo"], json!(true));
    }

    #[test]
    fn unknown_steps_and_bare_names_are_refused() {
        let mut plan = plan();
        let error = apply(&mut plan, "anwser.prompt", &json!("x")).expect_err("refused");
        assert!(
            error.to_string().contains("did you mean `answer`?"),
            "{error}"
        );
        assert_eq!(
            apply(&mut plan, "answer", &json!("x")),
            Err(OverrideError::NotAPath)
        );
        assert_eq!(
            apply(&mut plan, "answer.", &json!("x")),
            Err(OverrideError::NotAPath)
        );
        assert_eq!(
            apply(&mut plan, "corpora.docs", &json!("x")),
            Err(OverrideError::NoSection("corpora".into()))
        );
        assert_eq!(
            apply(&mut plan, "answer.template.inner", &json!("x")),
            Err(OverrideError::NotInAMapping("inner".into()))
        );
    }
}
