//! JSON Lines documents: one JSON object per line, its text in one field, optionally its name in
//! another; every other field becomes metadata. Errors name the file and the line, since these
//! files are often generated and long.

use std::path::PathBuf;

use serde_json::Value;

use super::Document;
use crate::core::{Failure, FailureCode};

/// Where to find documents in a JSON Lines file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonlOptions {
    /// The file; a relative path is relative to [`CorpusSource::base_dir`](super::CorpusSource).
    pub path: PathBuf,
    /// The field holding the text; [`JsonlOptions::new`] sets `content`.
    pub content_field: String,
    /// The field naming the document. A string is used as is, a number as written; without the
    /// field (or where a row lacks it or holds `null`) the source is `<path>:<line>`.
    pub source_field: Option<String>,
}

impl JsonlOptions {
    /// Options reading the text from `content`, naming documents `<path>:<line>`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        JsonlOptions {
            path: path.into(),
            content_field: "content".to_owned(),
            source_field: None,
        }
    }
}

/// The documents of a JSON Lines text read from `shown` (the path as the user wrote it). Blank
/// lines are skipped; line numbers count from 1 and include them.
pub(super) fn parse(
    text: &str,
    shown: &str,
    options: &JsonlOptions,
) -> Result<Vec<Document>, Failure> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut documents = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let number = index + 1;
        let document = row(line, &format!("{shown}:{number}"), options).map_err(|problem| {
            Failure::new(
                FailureCode::ConfigFileError,
                format!("`{shown}` line {number}: {problem}"),
            )
            .with_help(format!(
                "each line must be a JSON object with a string `{}` field",
                options.content_field
            ))
        })?;
        documents.push(document);
    }
    Ok(documents)
}

/// One row as a document; `place` (`<path>:<line>`) is the default source. The error says what
/// is wrong with the row.
fn row(line: &str, place: &str, options: &JsonlOptions) -> Result<Document, String> {
    let value: Value =
        serde_json::from_str(line).map_err(|e| format!("not JSON: {}", problem(&e)))?;
    let Value::Object(mut fields) = value else {
        return Err("not a JSON object".to_owned());
    };
    let content = match fields.shift_remove(&options.content_field) {
        Some(Value::String(content)) => content,
        Some(_) => return Err(format!("field `{}` is not a string", options.content_field)),
        None => return Err(format!("no `{}` field", options.content_field)),
    };
    let source = match &options.source_field {
        None => place.to_owned(),
        Some(field) => match fields.shift_remove(field) {
            None | Some(Value::Null) => place.to_owned(),
            Some(Value::String(source)) => source,
            Some(Value::Number(number)) => number.to_string(),
            Some(_) => return Err(format!("field `{field}` is not a string or a number")),
        },
    };
    Ok(Document {
        content,
        source,
        metadata: fields,
    })
}

/// serde_json's message without its "at line 1 column N" (always line 1: one row is parsed at a
/// time), with the column kept.
fn problem(error: &serde_json::Error) -> String {
    let message = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    match message.strip_suffix(&suffix) {
        Some(bare) => format!("{bare} (column {})", error.column()),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(source_field: Option<&str>) -> JsonlOptions {
        JsonlOptions {
            source_field: source_field.map(str::to_owned),
            ..JsonlOptions::new("data/docs.jsonl")
        }
    }

    /// Content, source, and metadata as JSON.
    type Row = (&'static str, &'static str, &'static str);

    #[test]
    fn rows_become_documents() {
        let text = "\u{feff}{\"content\": \"one\", \"id\": \"a\", \"lang\": \"en\"}\n\
                    \n   \n\
                    {\"content\": \"two\", \"id\": 7, \"tags\": [\"x\"], \"lang\": \"fr\"}\r\n\
                    {\"content\": \"three\", \"id\": null}\n\
                    {\"content\": \"four\"}";
        // (source field, expected (content, source, metadata as JSON) of each document)
        let cases: &[(Option<&str>, &[Row])] = &[
            (
                Some("id"),
                &[
                    ("one", "a", r#"{"lang":"en"}"#),
                    ("two", "7", r#"{"tags":["x"],"lang":"fr"}"#),
                    ("three", "data/docs.jsonl:5", "{}"),
                    ("four", "data/docs.jsonl:6", "{}"),
                ],
            ),
            (
                None,
                &[
                    ("one", "data/docs.jsonl:1", r#"{"id":"a","lang":"en"}"#),
                    (
                        "two",
                        "data/docs.jsonl:4",
                        r#"{"id":7,"tags":["x"],"lang":"fr"}"#,
                    ),
                    ("three", "data/docs.jsonl:5", r#"{"id":null}"#),
                    ("four", "data/docs.jsonl:6", "{}"),
                ],
            ),
        ];
        for (source_field, expected) in cases {
            let documents =
                parse(text, "data/docs.jsonl", &options(*source_field)).expect("valid JSON Lines");
            let found: Vec<(&str, &str, String)> = documents
                .iter()
                .map(|d| {
                    let metadata = serde_json::to_string(&d.metadata).expect("serialisable");
                    (d.content.as_str(), d.source.as_str(), metadata)
                })
                .collect();
            let expected: Vec<(&str, &str, String)> = expected
                .iter()
                .map(|(c, s, m)| (*c, *s, (*m).to_owned()))
                .collect();
            assert_eq!(found, expected, "source field {source_field:?}");
        }
    }

    #[test]
    fn a_custom_content_field() {
        let options = JsonlOptions {
            content_field: "text".to_owned(),
            ..JsonlOptions::new("d.jsonl")
        };
        let documents =
            parse(r#"{"text": "hi", "content": 1}"#, "d.jsonl", &options).expect("valid");
        assert_eq!(documents[0].content, "hi");
        assert_eq!(documents[0].metadata["content"], 1);
    }

    #[test]
    fn bad_rows_are_named_by_line() {
        let good = r#"{"content": "ok"}"#;
        let cases: &[(&str, Option<&str>, &str)] = &[
            (
                "{\"content\": \"ok\"",
                None,
                "`d.jsonl` line 2: not JSON: EOF while parsing an object (column 16)",
            ),
            ("[\"content\"]", None, "`d.jsonl` line 2: not a JSON object"),
            ("\"text\"", None, "`d.jsonl` line 2: not a JSON object"),
            (
                "{\"text\": \"ok\"}",
                None,
                "`d.jsonl` line 2: no `content` field",
            ),
            (
                "{\"content\": 3}",
                None,
                "`d.jsonl` line 2: field `content` is not a string",
            ),
            (
                "{\"content\": null}",
                None,
                "`d.jsonl` line 2: field `content` is not a string",
            ),
            (
                "{\"content\": \"x\", \"id\": [1]}",
                Some("id"),
                "`d.jsonl` line 2: field `id` is not a string or a number",
            ),
        ];
        for (bad, source_field, expected) in cases {
            let text = format!("{good}\n{bad}\n{good}");
            let options = JsonlOptions {
                source_field: source_field.map(str::to_owned),
                ..JsonlOptions::new("d.jsonl")
            };
            let failure = parse(&text, "d.jsonl", &options).expect_err(bad);
            assert_eq!(failure.code, FailureCode::ConfigFileError);
            assert_eq!(failure.message, *expected, "{bad}");
            assert!(failure.help.is_some());
        }
    }
}
