//! A small, valid instance of a JSON Schema — what the scripted engine answers when asked for JSON,
//! so plans with structured steps can be dry-run without a model.

use serde_json::{Map, Value, json};

/// Deepest nesting followed; beyond it, `null`.
const MAX_DEPTH: usize = 16;

/// The simplest value the schema describes: the first `const`/`enum`/`examples`/`default`, else a
/// value of its (first) type with required properties filled in and minimum lengths met.
pub fn example_for_schema(schema: &Value) -> Value {
    example(schema, schema, 0)
}

fn example(root: &Value, schema: &Value, depth: usize) -> Value {
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
            .map_or(Value::Null, |target| example(root, target, depth + 1));
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
            return example(root, first, depth + 1);
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
                    out.insert(name.to_string(), example(root, property, depth + 1));
                }
            }
            Value::Object(out)
        }
        "array" => {
            let count = object.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = object
                .get("items")
                .map_or(Value::Null, |i| example(root, i, depth + 1));
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
            Value::String("x".repeat(usize::try_from(length).unwrap_or(0)))
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
            let instance = example_for_schema(&schema);
            assert!(
                jsonschema::is_valid(&schema, &instance),
                "{instance} does not satisfy {schema}"
            );
        }
    }

    #[test]
    fn self_referencing_schemas_stop() {
        let schema = json!({ "$ref": "#" });
        assert_eq!(example_for_schema(&schema), Value::Null);
    }
}
