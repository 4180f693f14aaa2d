//! Candidates from a custom retriever: a tool (a vector database client, an HTTP search) whose
//! output stands in for a corpus search. The output is checked item by item, so a wrong shape
//! fails saying which item and which field is wrong instead of reaching `rerank` half-read.

use serde_json::{Map, Value};

use crate::core::text::excerpt;
use crate::core::{Candidate, Failure, FailureCode};

/// The shape a retriever tool must return, for the help line of every shape failure.
const SHAPE: &str = "a retriever tool returns a JSON list, best first, of objects `{\"content\": \
                     string, \"source\": string, \"score\": number (optional), \"metadata\": object \
                     (optional)}` (a command tool prints it); other fields belong in `metadata`";

/// The candidates in `output`, the result of retriever tool `tool`: a JSON list, or text holding
/// one (what a command tool prints). Items keep the tool's order; a missing `score` is 0.
///
/// Fails with `TOOL_BAD_OUTPUT` on anything else, naming the item (`[2].content`) and what it
/// holds.
pub fn external_candidates(tool: &str, output: &Value) -> Result<Vec<Candidate>, Failure> {
    let bad = |what: String| {
        Failure::new(
            FailureCode::ToolBadOutput,
            format!("retriever tool `{tool}` {what}"),
        )
        .with_help(SHAPE)
    };
    let parsed;
    let items = match output {
        Value::Array(items) => items,
        Value::String(text) => {
            parsed = serde_json::from_str::<Value>(text).map_err(|e| {
                bad(format!(
                    "printed text that is not JSON ({e}): `{}`",
                    excerpt(text.trim(), 80)
                ))
            })?;
            match &parsed {
                Value::Array(items) => items,
                other => return Err(bad(format!("printed {}, not a list", kind(other)))),
            }
        }
        other => return Err(bad(format!("returned {}, not a list", kind(other)))),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            candidate(item).map_err(|why| bad(format!("returned a bad item: [{i}]{why}")))
        })
        .collect()
}

/// One item as a candidate, or what is wrong with it (a field path suffix, then the reason).
fn candidate(item: &Value) -> Result<Candidate, String> {
    let Value::Object(fields) = item else {
        return Err(format!(" is {}, not an object", kind(item)));
    };
    if let Some(unknown) = fields
        .keys()
        .find(|k| !["content", "source", "score", "metadata"].contains(&k.as_str()))
    {
        return Err(format!(
            " has the unknown field `{unknown}` (fields: content, source, score, metadata)"
        ));
    }
    let text = |field: &str| match fields.get(field) {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(other) => Err(format!(".{field} is {}, not a string", kind(other))),
        None => Err(format!(" has no `{field}`")),
    };
    let score = match fields.get("score") {
        None | Some(Value::Null) => 0.0,
        Some(Value::Number(n)) => n.as_f64().unwrap_or_default(),
        Some(other) => return Err(format!(".score is {}, not a number", kind(other))),
    };
    let metadata = match fields.get("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(metadata)) => metadata.clone(),
        Some(other) => return Err(format!(".metadata is {}, not an object", kind(other))),
    };
    Ok(Candidate {
        content: text("content")?,
        source: text("source")?,
        score,
        metadata,
    })
}

/// What kind of JSON value this is, for messages ("a number", "null").
fn kind(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string \"{}\"", excerpt(s, 40)),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_list_or_text_holding_one_becomes_candidates_in_the_tools_order() {
        let list = json!([
            { "content": "second best", "source": "b", "score": 0.2 },
            { "content": "no score", "source": "c", "metadata": { "id": 7 } },
        ]);
        for output in [list.clone(), Value::String(format!("{list}\n"))] {
            let found = external_candidates("search", &output).expect("a good shape");
            assert_eq!(found.len(), 2);
            assert_eq!((found[0].source.as_str(), found[0].score), ("b", 0.2));
            assert_eq!(
                (found[1].content.as_str(), found[1].score),
                ("no score", 0.0)
            );
            assert_eq!(found[1].metadata["id"], 7);
        }
        assert_eq!(external_candidates("search", &json!([])), Ok(Vec::new()));
    }

    #[test]
    fn a_bad_shape_names_the_item_and_field() {
        let cases = [
            (json!("Aero 14 laptop"), "printed text that is not JSON"),
            (
                json!("{\"content\": \"x\"}"),
                "printed an object, not a list",
            ),
            (json!({ "dry_run": true }), "returned an object, not a list"),
            (json!([1]), "[0] is the number 1, not an object"),
            (json!([{ "source": "a" }]), "[0] has no `content`"),
            (
                json!([{ "content": "a", "source": "a" }, { "content": 3, "source": "b" }]),
                "[1].content is the number 3, not a string",
            ),
            (json!([{ "content": "a" }]), "[0] has no `source`"),
            (
                json!([{ "content": "a", "source": "a", "score": "high" }]),
                "[0].score is the string \"high\", not a number",
            ),
            (
                json!([{ "content": "a", "source": "a", "metadata": [] }]),
                "[0].metadata is a list, not an object",
            ),
            (
                json!([{ "text": "a", "source": "a" }]),
                "[0] has the unknown field `text`",
            ),
        ];
        for (output, expected) in cases {
            let failure = external_candidates("search", &output).expect_err("a bad shape");
            assert_eq!(failure.code, FailureCode::ToolBadOutput);
            assert!(!failure.retryable);
            assert!(
                failure.message.starts_with("retriever tool `search` ")
                    && failure.message.contains(expected),
                "{output}: {}",
                failure.message
            );
            assert!(
                failure
                    .help
                    .as_deref()
                    .is_some_and(|h| h.contains("metadata"))
            );
        }
    }
}
