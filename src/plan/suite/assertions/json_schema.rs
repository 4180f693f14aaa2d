//! `type: json_schema` — the output is valid against a JSON Schema, written inline or kept in a
//! `.json` file. Loading the test file reads the file, puts its schema in the assertion in place
//! of the file's name, and compiles the schema.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{AssertionCommon, AssertionKind, Checks};
use crate::plan::diagnostic::PlanError;

/// A JSON Schema the output must be valid against.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct JsonSchemaAssertion {
    #[serde(flatten)]
    pub common: AssertionCommon,
    /// The schema, inline, or a `.json` file relative to the test file.
    pub value: Value,
}

impl AssertionKind for JsonSchemaAssertion {
    fn check(&self, checks: &mut Checks<'_>) {
        let schema = match &self.value {
            Value::String(file) => match read_schema_file(checks, file) {
                Ok(schema) => schema,
                Err(reason) => {
                    checks.report(
                        "value",
                        PlanError::SchemaFile {
                            path: file.clone(),
                            reason,
                        },
                        "cannot be loaded",
                        None,
                    );
                    return;
                }
            },
            inline => inline.clone(),
        };
        if let Err(e) = jsonschema::validator_for(&schema) {
            checks.report(
                "value",
                PlanError::InvalidSchema {
                    message: e.to_string(),
                },
                "not a valid JSON Schema",
                None,
            );
        }
        checks.replace("value", schema);
    }
}

/// The JSON in `file`, relative to the test file; the error says why it cannot be had.
fn read_schema_file(checks: &Checks<'_>, file: &str) -> Result<Value, String> {
    let text =
        crate::core::file::read_bounded(&checks.dir.join(file), crate::core::file::TEXT_LIMIT)
            .map_err(|e| e.reason())?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}
