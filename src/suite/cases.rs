//! The cases of a suite, one per inline case and one per dataset row, with the assertions each
//! one is scored by; and the rendering of templates in inputs and assertions (a string that is
//! one `{{ expression }}` keeps the expression's JSON type).

use serde_json::{Map, Value};

use crate::batch::input::{self, DEFAULT_MAX_ROW_BYTES};
use crate::core::Failure;
use crate::plan::suite::{AssertionSpec, Suite};
use crate::prompt::Templates;

/// Where a case's inputs come from.
#[derive(Debug, Clone)]
pub enum CaseInputs {
    /// Written in the test file (inline cases).
    Given(Map<String, Value>),
    /// A dataset row's columns, bound by name.
    Columns,
    /// A dataset's `inputs:` templates over the row.
    Templates(Map<String, Value>),
    /// The row could not be read.
    Broken(Failure),
}

/// One case to run.
#[derive(Debug, Clone)]
pub struct Case<'a> {
    pub name: String,
    /// Line of the case (or of the dataset) in the test file.
    pub line: usize,
    pub inputs: CaseInputs,
    /// The dataset row, which templates read as `row`.
    pub row: Option<Map<String, Value>>,
    pub assertions: Vec<&'a AssertionSpec>,
    pub threshold: Option<f64>,
}

/// The suite's cases whose name contains `filter` (all without one), inline cases first.
pub fn expand<'a>(suite: &'a Suite, filter: Option<&str>) -> Result<Vec<Case<'a>>, Failure> {
    let keep = |name: &str| filter.is_none_or(|f| name.contains(f));
    let mut cases = Vec::new();
    for case in &suite.cases {
        if keep(&case.name) {
            cases.push(Case {
                name: case.name.clone(),
                line: case.line,
                inputs: CaseInputs::Given(case.inputs.clone()),
                row: None,
                assertions: suite.shared.iter().chain(&case.assertions).collect(),
                threshold: case.threshold,
            });
        }
    }
    let Some(dataset) = &suite.dataset else {
        return Ok(cases);
    };
    let file = dataset.file.to_string_lossy().into_owned();
    let rows = input::open(&file, dataset.id.as_deref(), DEFAULT_MAX_ROW_BYTES)?;
    let limit = dataset.limit.map_or(usize::MAX, |l| l as usize);
    let stem = dataset
        .file
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    for row in rows.take(limit) {
        let (id, data, inputs) = match row {
            Ok(row) => {
                let inputs = match &dataset.inputs {
                    Some(templates) => CaseInputs::Templates(templates.clone()),
                    None => CaseInputs::Columns,
                };
                (row.id, Some(row.data), inputs)
            }
            Err(bad) => (bad.id, None, CaseInputs::Broken(bad.failure)),
        };
        let name = format!("{stem}:{id}");
        if keep(&name) {
            cases.push(Case {
                name,
                line: dataset.line,
                inputs,
                row: data,
                assertions: suite.shared.iter().chain(&dataset.assertions).collect(),
                threshold: dataset.threshold,
            });
        }
    }
    Ok(cases)
}

/// Renders every template among the strings of `value` with `context`.
pub fn render(value: &Value, context: &Value) -> Result<Value, Failure> {
    Ok(match value {
        Value::String(text) if text.contains("{{") || text.contains("{%") => {
            render_text(text, context)?
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| render(item, context))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), render(v, context)?)))
                .collect::<Result<_, Failure>>()?,
        ),
        other => other.clone(),
    })
}

fn render_text(text: &str, context: &Value) -> Result<Value, Failure> {
    let templates = Templates::new(None);
    let trimmed = text.trim();
    let single = trimmed
        .strip_prefix("{{")
        .and_then(|rest| rest.strip_suffix("}}"))
        .filter(|inner| !inner.contains("{{") && !inner.contains("}}"));
    match single {
        Some(expression) => templates.evaluate(expression, context),
        None => templates.render_str(text, context).map(Value::String),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_expression_keeps_its_type_and_text_renders() {
        let context =
            json!({ "row": { "sources": ["a.md", "b.md"], "label": "positive", "n": 3 } });
        let rendered = render(
            &json!({
                "sources": "{{ row.sources }}",
                "value": "label: {{ row.label }}",
                "k": "{{ row.n }}",
                "plain": "no template",
                "items": ["{{ row.label | upper }}"]
            }),
            &context,
        )
        .expect("renders");
        assert_eq!(
            rendered,
            json!({
                "sources": ["a.md", "b.md"],
                "value": "label: positive",
                "k": 3,
                "plain": "no template",
                "items": ["POSITIVE"]
            })
        );
        for missing in ["{{ row.nothing }}", "text {{ row.nothing }}"] {
            let failure = render(&json!(missing), &context).expect_err("strict");
            assert_eq!(failure.code, crate::core::FailureCode::ConfigTemplateError);
        }
    }
}
