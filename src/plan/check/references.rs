//! Checks on names and embedded documents a plan refers to: models of the right kind, declared
//! tools, JSON Schemas that compile (inline or in a file), tool and agent `parameters`.

use serde_json::Value;

use super::*;

/// Compiles a JSON Schema; the error's first line.
pub(super) fn compile_schema(value: &Value) -> Result<(), String> {
    compile_schema_at(value).map_err(|(message, _)| message)
}

/// Compiles a JSON Schema; on failure, the message and the path inside the schema at fault.
pub(super) fn compile_schema_at(value: &Value) -> Result<(), (String, Vec<String>)> {
    if let Err(error) = jsonschema::meta::validate(value) {
        let inner: Vec<String> = error
            .instance_path()
            .iter()
            .map(|s| match s {
                jsonschema::paths::LocationSegment::Property(p) => p.to_string(),
                jsonschema::paths::LocationSegment::Index(i) => i.to_string(),
            })
            .collect();
        return Err((first_line_of(&error.to_string()), inner));
    }
    jsonschema::validator_for(value)
        .map(|_| ())
        .map_err(|e| (first_line_of(&e.to_string()), Vec::new()))
}

impl Checker<'_> {
    pub(super) fn model_reference(&mut self, at: &[String], name: &str, role: ModelRole) {
        let span = self.span(at);
        let Some(model) = self.plan.models.get(name) else {
            let hint = suggestion(name, "models", self.plan.models.keys().map(String::as_str));
            self.emit(
                PlanError::UnknownModel { name: name.into() },
                span,
                "not declared in `models`",
            )
            .hint = Some(hint);
            return;
        };
        if !model.kind().serves(role) {
            let role_text = match role {
                ModelRole::Llm => "a language model (kind mistralrs, openai or scripted)",
                ModelRole::Scorer => "an ONNX scorer (kind onnx)",
                ModelRole::Embedder => "an ONNX bi-encoder (kind onnx, task bi-encoder)",
            };
            let kind = model.kind().described();
            let fitting: Vec<&str> = self
                .plan
                .models
                .iter()
                .filter(|(_, m)| m.kind().serves(role))
                .map(|(n, _)| n.as_str())
                .collect();
            let hint = if fitting.is_empty() {
                format!("declare {role_text} in `models` and name it here")
            } else {
                suggestion(name, "models of that kind", fitting.iter().copied())
            };
            self.emit(
                PlanError::WrongModelKind {
                    name: name.into(),
                    kind: kind.into(),
                    role: role_text.into(),
                },
                span,
                "wrong kind of model",
            )
            .hint = Some(hint);
        }
    }

    pub(super) fn tool_reference(&mut self, at: &[String], name: &str) {
        if !self.plan.tools.contains_key(name) {
            let span = self.span(at);
            let hint = suggestion(name, "tools", self.plan.tools.keys().map(String::as_str));
            self.emit(
                PlanError::UnknownTool { name: name.into() },
                span,
                "not declared in `tools`",
            )
            .hint = Some(hint);
        }
    }

    pub(super) fn schema_source(&mut self, at: &[String], schema: &SchemaSource) {
        match schema {
            SchemaSource::Inline(map) => {
                let value =
                    Value::Object(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
                self.json_schema(at, &value);
            }
            SchemaSource::File(file) => {
                let full = self.dir.join(file);
                let loaded = crate::core::file::read_bounded(&full, crate::core::file::TEXT_LIMIT)
                    .map_err(|e| e.reason())
                    .and_then(|text| {
                        serde_json::from_str::<Value>(&text).map_err(|e| e.to_string())
                    });
                match loaded {
                    Ok(value) => {
                        if let Err(message) = compile_schema(&value) {
                            let span = self.span(at);
                            self.emit(PlanError::InvalidSchema { message }, span, "in this file");
                        }
                    }
                    Err(reason) => {
                        let span = self.span(at);
                        self.emit(
                            PlanError::SchemaFile {
                                path: file.clone(),
                                reason,
                            },
                            span,
                            "cannot load",
                        );
                    }
                }
            }
        }
    }

    /// A tool's or agent's `parameters`: a JSON Schema whose `required` names only declared
    /// properties (the model is shown the properties; a required one it cannot see is a call
    /// that can never be made right).
    pub(super) fn parameters(&mut self, at: &[String], value: &Value) {
        self.json_schema(at, value);
        let Some(required) = value.get("required").and_then(Value::as_array) else {
            return;
        };
        let properties = value.get("properties").and_then(Value::as_object);
        for (i, name) in required.iter().enumerate() {
            let Some(name) = name.as_str() else { continue };
            if properties.is_none_or(|p| !p.contains_key(name)) {
                let mut full = at.to_vec();
                full.extend(["required".to_string(), i.to_string()]);
                let span = self.span(&full);
                let hint = suggestion(
                    name,
                    "properties",
                    properties
                        .into_iter()
                        .flat_map(|p| p.keys().map(String::as_str)),
                );
                self.emit(
                    PlanError::RequiredNotDeclared { name: name.into() },
                    span,
                    "not in `properties`",
                )
                .hint = Some(hint);
            }
        }
    }

    pub(super) fn json_schema(&mut self, at: &[String], value: &Value) {
        if let Err((message, inner)) = compile_schema_at(value) {
            let mut full = at.to_vec();
            full.extend(inner);
            let span = self.span(&full);
            self.emit(PlanError::InvalidSchema { message }, span, "invalid here");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_schemas_name_the_bad_part() {
        let bad =
            serde_json::json!({ "type": "object", "properties": { "x": { "type": "strnig" } } });
        let (message, inner) = compile_schema_at(&bad).expect_err("invalid");
        assert!(!message.is_empty());
        assert_eq!(inner, vec!["properties", "x", "type"]);
        assert!(compile_schema(&serde_json::json!({ "type": "string" })).is_ok());
    }
}
