//! The document: one text with where it came from. It is what loading produces (a file, a JSON
//! Lines row, a document written inline) and, after chunking, the shape of every passage.

use serde_json::{Map, Value};

/// A text with its origin and free-form metadata.
///
/// After chunking, each passage is again a `Document`: its source is its document's and its
/// metadata is its document's plus a `chunk` index.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Document {
    /// The text.
    pub content: String,
    /// Where it came from: a path relative to the corpus directory, `<file>:<line>` for a JSON
    /// Lines row, or a name given inline. Shown with every candidate.
    pub source: String,
    /// Carried onto every passage and candidate made from this document.
    pub metadata: Map<String, Value>,
}

impl Document {
    /// A document without metadata.
    pub fn new(content: impl Into<String>, source: impl Into<String>) -> Self {
        Document {
            content: content.into(),
            source: source.into(),
            metadata: Map::new(),
        }
    }
}
