//! Loading a plan or policy file: text → spanned YAML tree → schema check → typed value.
//!
//! Each stage collects every problem it can find before stopping, and a later stage runs only on
//! what the earlier one accepted: a tree that breaks the schema is never deserialised, so serde
//! sees only well-shaped values. Loading reads files and nothing else: no model, no network.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::diagnostic::{Diagnostic, PlanError, QUOTE_TEMPLATES, Source};
use super::schema::{self, DocumentKind, describe_place};
use super::yaml::{self, MAX_DEPTH, MAX_NODES, Node, YamlError};

/// A parsed, schema-valid document, with its source and tree kept for locating later problems.
#[derive(Debug, Clone)]
pub struct Loaded<T> {
    pub value: T,
    pub source: Source,
    pub root: Node,
}

/// Reads `path` and loads it as a document of `kind`.
pub fn load_file<T: DeserializeOwned>(
    path: &Path,
    kind: DocumentKind,
) -> Result<Loaded<T>, Vec<Diagnostic>> {
    load_file_edited(path, kind, |_| {})
}

/// Reads `path` and loads it as a document of `kind`, with `edit` applied to its JSON before the
/// schema check (a test file's variant setting fields of a plan). Diagnostics still point into the
/// file: at the edited node, or the nearest one that exists there.
pub fn load_file_edited<T: DeserializeOwned>(
    path: &Path,
    kind: DocumentKind,
    edit: impl FnOnce(&mut Value),
) -> Result<Loaded<T>, Vec<Diagnostic>> {
    let name = path.display().to_string();
    let limit = crate::core::file::TEXT_LIMIT;
    let bytes = crate::core::file::read_bytes_bounded(path, limit).map_err(|e| {
        vec![Diagnostic::new(PlanError::ReadFailed {
            path: name.clone(),
            reason: e.reason(),
        })]
    })?;
    load_bytes_edited(&name, bytes, kind, edit)
}

/// Loads a document of `kind` from bytes, naming it `name` in diagnostics.
pub fn load_bytes<T: DeserializeOwned>(
    name: &str,
    bytes: Vec<u8>,
    kind: DocumentKind,
) -> Result<Loaded<T>, Vec<Diagnostic>> {
    load_bytes_edited(name, bytes, kind, |_| {})
}

fn load_bytes_edited<T: DeserializeOwned>(
    name: &str,
    bytes: Vec<u8>,
    kind: DocumentKind,
    edit: impl FnOnce(&mut Value),
) -> Result<Loaded<T>, Vec<Diagnostic>> {
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(error) => {
            let at = error.utf8_error().valid_up_to();
            let source = Source::new(name, String::from_utf8_lossy(error.as_bytes()).into_owned());
            return Err(vec![Diagnostic::at(
                PlanError::NotUtf8,
                &source,
                at..at + 1,
                "not UTF-8",
            )]);
        }
    };
    let source = Source::new(name, text);
    let root = yaml::parse(&source.text).map_err(|e| vec![yaml_diagnostic(e, &source)])?;
    let mut instance = root.to_json();
    edit(&mut instance);
    let problems = schema::validate(kind, &root, &instance, &source);
    if !problems.is_empty() {
        return Err(problems);
    }
    let value = deserialize(kind, &root, instance, &source)?;
    Ok(Loaded {
        value,
        source,
        root,
    })
}

/// Deserialises a schema-valid value; the rare errors serde still finds (a number too large for
/// its field, say) are located through the path serde reports.
fn deserialize<T: DeserializeOwned>(
    kind: DocumentKind,
    root: &Node,
    instance: Value,
    source: &Source,
) -> Result<T, Vec<Diagnostic>> {
    serde_path_to_error::deserialize(instance).map_err(|error| {
        let path: Vec<String> = error
            .path()
            .iter()
            .filter_map(|segment| match segment {
                serde_path_to_error::Segment::Seq { index } => Some(index.to_string()),
                serde_path_to_error::Segment::Map { key } => Some(key.clone()),
                serde_path_to_error::Segment::Enum { .. }
                | serde_path_to_error::Segment::Unknown => None,
            })
            .collect();
        let node = root.locate(&path).node;
        let place = describe_place(kind, root, &path);
        vec![Diagnostic::at(
            PlanError::SchemaViolation {
                place,
                message: error.inner().to_string(),
            },
            source,
            node.span.clone(),
            "here",
        )]
    })
}

/// The first tab from the start of the line holding `at` through the line after it.
fn tab_near(text: &str, at: usize) -> Option<usize> {
    let at = at.min(text.len());
    let line_start = text.get(..at)?.rfind('\n').map_or(0, |i| i + 1);
    let tab = line_start + text[line_start..].find('\t')?;
    (text[line_start..tab].matches('\n').count() <= 1).then_some(tab)
}

fn yaml_diagnostic(error: YamlError, source: &Source) -> Diagnostic {
    match error {
        YamlError::Syntax { message, at } => match tab_near(&source.text, at) {
            // The parser stops where the tab broke the structure, often the line before.
            Some(tab) if message.contains("tab") => Diagnostic::at(
                PlanError::YamlSyntax { message },
                source,
                tab..tab + 1,
                "a tab",
            )
            .with_hint("YAML indents with spaces only: replace the tab with spaces"),
            _ => {
                let end = (at + 1).min(source.text.len()).max(at);
                Diagnostic::at(PlanError::YamlSyntax { message }, source, at..end, "here")
            }
        },
        YamlError::DuplicateKey { key, first, second } => Diagnostic::at(
            PlanError::DuplicateKey { key },
            source,
            second,
            "defined again here",
        )
        .with_label(first, "first defined here"),
        YamlError::ComplexKey { at } => {
            let unquoted_template = source
                .text
                .get(..at.start)
                .is_some_and(|before| before.ends_with('{'));
            let diagnostic = Diagnostic::at(PlanError::ComplexKey, source, at, "not a string key");
            if unquoted_template {
                diagnostic.with_hint(QUOTE_TEMPLATES)
            } else {
                diagnostic
            }
        }
        YamlError::UnsupportedTag { tag, at } => Diagnostic::at(
            PlanError::UnsupportedTag { tag },
            source,
            at,
            "unsupported tag",
        ),
        YamlError::BadScalar { message, at } => {
            Diagnostic::at(PlanError::BadScalar { message }, source, at, "here")
        }
        YamlError::TooDeep { at } => Diagnostic::at(
            PlanError::TooDeep { max: MAX_DEPTH },
            source,
            at,
            "too deep",
        ),
        YamlError::TooLarge { at } => Diagnostic::at(
            PlanError::TooLarge { max: MAX_NODES },
            source,
            at,
            "limit reached here",
        ),
        YamlError::MultipleDocuments { at } => Diagnostic::at(
            PlanError::MultipleDocuments,
            source,
            at,
            "a second document starts here",
        ),
        YamlError::Empty => Diagnostic::at(PlanError::Empty, source, 0..0, "nothing here"),
    }
}
