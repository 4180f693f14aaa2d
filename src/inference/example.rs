//! A small, valid instance of a JSON Schema — what the scripted engine answers when asked for JSON,
//! so plans with structured steps can be dry-run without a model.

use serde_json::{Map, Value, json};

/// Deepest nesting followed; beyond it, `null`.
const MAX_DEPTH: usize = 16;

/// The simplest value the schema describes: the first `const`/`enum`/`examples`/`default`, else a
/// value of its (first) type with required properties filled in and minimum lengths met; `text`
/// in every free-text string (one without `pattern` or `format`, whose length bounds `text`
/// meets), else the shortest string allowed. With `text`, it is what an echo answers when asked
/// for JSON, so that a dry run's structured answers and agents' final answers say what they were
/// asked.
pub fn example_with_text(schema: &Value, text: &str) -> Value {
    Example { root: schema, text }.of(schema, 0)
}

/// A schema being exemplified, and the text its free strings get.
struct Example<'a> {
    root: &'a Value,
    text: &'a str,
}

impl Example<'_> {
    fn of(&self, schema: &Value, depth: usize) -> Value {
        example(self, schema, depth)
    }
}

fn example(at: &Example<'_>, schema: &Value, depth: usize) -> Value {
    let root = at.root;
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    let Some(object) = schema.as_object() else {
        return Value::Null;
    };
    if let Some(pointer) = object
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
    {
        return root
            .pointer(pointer)
            .map_or(Value::Null, |target| at.of(target, depth + 1));
    }
    if let Some(value) = object.get("const") {
        return value.clone();
    }
    for key in ["enum", "examples"] {
        if let Some(first) = object
            .get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.first())
        {
            return first.clone();
        }
    }
    if let Some(value) = object.get("default") {
        return value.clone();
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(first) = object
            .get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.first())
        {
            return at.of(first, depth + 1);
        }
    }
    let ty = match object.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if object.contains_key("properties") => "object",
        _ => "string",
    };
    let number = |key: &str| object.get(key).and_then(Value::as_f64);
    match ty {
        "object" => {
            let mut out = Map::new();
            let properties = object.get("properties").and_then(Value::as_object);
            for name in object
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(name) = name.as_str() {
                    let property = properties.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
                    out.insert(name.to_string(), at.of(property, depth + 1));
                }
            }
            Value::Object(out)
        }
        "array" => {
            let count = object.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = object
                .get("items")
                .map_or(Value::Null, |i| at.of(i, depth + 1));
            Value::Array(vec![item; usize::try_from(count.min(16)).unwrap_or(0)])
        }
        "integer" => json!(number("minimum").map_or(0, |m| m.ceil() as i64)),
        "number" => json!(number("minimum").unwrap_or(0.0)),
        "boolean" => json!(false),
        "null" => Value::Null,
        _ => {
            let length = object
                .get("minLength")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                .min(64);
            let chars = at.text.chars().count() as u64;
            let free = !object.contains_key("pattern") && !object.contains_key("format");
            let fits = chars >= length && number("maxLength").is_none_or(|max| chars as f64 <= max);
            if free && fits && !at.text.is_empty() {
                Value::String(at.text.to_string())
            } else {
                Value::String("x".repeat(usize::try_from(length).unwrap_or(0)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_validate_against_their_schema() {
        let schemas = [
            json!({ "type": "object", "required": ["sentiment", "topics", "rating"], "properties": {
                "sentiment": { "enum": ["positive", "negative"] },
                "topics": { "type": "array", "items": { "type": "string" }, "minItems": 1 },
                "rating": { "type": "integer", "minimum": 1, "maximum": 5 } } }),
            json!({ "type": "string", "minLength": 3 }),
            json!({ "$defs": { "n": { "type": "number", "minimum": 2.5 } }, "$ref": "#/$defs/n" }),
            json!({ "type": ["null", "boolean"] }),
            json!({ "oneOf": [{ "type": "integer" }, { "type": "string" }] }),
        ];
        for schema in schemas {
            let instance = example_with_text(&schema, "");
            assert!(
                jsonschema::is_valid(&schema, &instance),
                "{instance} does not satisfy {schema}"
            );
        }
    }

    #[test]
    fn free_strings_carry_the_text_and_constrained_ones_do_not() {
        let schema = json!({ "type": "object", "required": ["final", "code", "short", "kind"],
            "properties": {
                "final": { "type": "string" },
                "code": { "type": "string", "pattern": "^[A-Z]+$" },
                "short": { "type": "string", "maxLength": 2 },
                "kind": { "enum": ["a", "b"] } } });
        let instance = example_with_text(&schema, "What is 6 * 7?");
        assert_eq!(
            instance,
            json!({ "final": "What is 6 * 7?", "code": "", "short": "", "kind": "a" })
        );
    }

    #[test]
    fn self_referencing_schemas_stop() {
        let schema = json!({ "$ref": "#" });
        assert_eq!(example_with_text(&schema, ""), Value::Null);
    }
}
