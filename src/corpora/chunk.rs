//! Chunking: cutting documents into the passages retrieval ranks.
//!
//! Passages are what a search returns and what a prompt quotes, so they must be short enough to
//! fit a context window and whole enough to read. Lengths are counted in characters (Unicode
//! scalar values), never bytes, and a cut never falls inside a character.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Document;

/// Where passages are cut.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChunkBy {
    /// Blank-line paragraphs, packed up to `max_chars`.
    // Packed together, joined by a blank line; a paragraph longer than `max_chars` is cut as by
    // `size`.
    #[default]
    Paragraph,
    /// Fixed-size pieces of `max_chars`.
    // Cut at the last whitespace within reach, or exactly at `max_chars` when a word is longer.
    Size,
}

/// How documents are cut into passages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkOptions {
    /// The longest passage, in characters. Zero is treated as one.
    pub max_chars: usize,
    /// Where passages are cut.
    pub by: ChunkBy,
}

/// The passages of `documents`, in order.
///
/// Without options each document is one passage. With them, each passage keeps its document's
/// source and metadata, plus `chunk`: its index within the document (overriding a `chunk` field
/// of the document's own). Passages holding only whitespace are dropped either way.
pub(super) fn passages(documents: Vec<Document>, options: Option<&ChunkOptions>) -> Vec<Document> {
    let Some(options) = options else {
        return documents
            .into_iter()
            .filter(|document| !document.content.trim().is_empty())
            .collect();
    };
    let mut passages = Vec::new();
    for document in documents {
        for (index, content) in split(&document.content, options).into_iter().enumerate() {
            let mut metadata = document.metadata.clone();
            metadata.insert("chunk".to_owned(), Value::from(index));
            passages.push(Document {
                content,
                source: document.source.clone(),
                metadata,
            });
        }
    }
    passages
}

/// The non-empty pieces of `text`, each at most `options.max_chars` characters.
fn split(text: &str, options: &ChunkOptions) -> Vec<String> {
    let max = options.max_chars.max(1);
    match options.by {
        ChunkBy::Size => by_size(text, max).into_iter().map(str::to_owned).collect(),
        ChunkBy::Paragraph => by_paragraph(text, max),
    }
}

/// What joins two paragraphs packed into one passage. ASCII, so its length in bytes is its length
/// in characters.
const PARAGRAPH_BREAK: &str = "\n\n";

fn by_paragraph(text: &str, max: usize) -> Vec<String> {
    let mut passages = Vec::new();
    let mut current = String::new();
    let mut current_chars = 0;
    for paragraph in paragraphs(text) {
        let chars = paragraph.chars().count();
        if chars > max {
            if !current.is_empty() {
                passages.push(std::mem::take(&mut current));
            }
            passages.extend(by_size(&paragraph, max).into_iter().map(str::to_owned));
        } else if current.is_empty() {
            current = paragraph;
            current_chars = chars;
        } else if current_chars + PARAGRAPH_BREAK.len() + chars <= max {
            current.push_str(PARAGRAPH_BREAK);
            current.push_str(&paragraph);
            current_chars += PARAGRAPH_BREAK.len() + chars;
        } else {
            passages.push(std::mem::replace(&mut current, paragraph));
            current_chars = chars;
        }
    }
    if !current.is_empty() {
        passages.push(current);
    }
    passages
}

/// Runs of non-blank lines, trailing whitespace of each line removed. A line holding only
/// whitespace counts as blank.
fn paragraphs(text: &str) -> Vec<String> {
    let mut paragraphs = Vec::new();
    let mut lines: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if !lines.is_empty() {
                paragraphs.push(lines.join("\n"));
                lines.clear();
            }
        } else {
            lines.push(line.trim_end());
        }
    }
    if !lines.is_empty() {
        paragraphs.push(lines.join("\n"));
    }
    paragraphs
}

/// Pieces of at most `max` (≥ 1) characters, trimmed, none empty.
fn by_size(text: &str, max: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let (piece, tail) = cut(rest, max);
        pieces.push(piece);
        rest = tail.trim_start();
    }
    pieces
}

/// Splits `text` (which does not start with whitespace) after at most `max` (≥ 1) characters: at
/// the last whitespace within reach — the character just past the limit included — else exactly
/// after `max` characters. The first part is never empty, so cutting always makes progress.
fn cut(text: &str, max: usize) -> (&str, &str) {
    let mut last_space = None;
    for (offset, (at, c)) in text.char_indices().enumerate() {
        if offset > 0 && c.is_whitespace() {
            last_space = Some(at);
        }
        if offset == max {
            let (piece, tail) = text.split_at(last_space.unwrap_or(at));
            return (piece.trim_end(), tail);
        }
    }
    (text.trim_end(), "")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(max_chars: usize, by: ChunkBy) -> ChunkOptions {
        ChunkOptions { max_chars, by }
    }

    #[test]
    fn size_cuts_at_whitespace_within_the_limit() {
        let cases: &[(&str, usize, &[&str])] = &[
            ("", 5, &[]),
            ("   \n\t ", 5, &[]),
            // Exactly at the limit: one piece.
            ("abcde", 5, &["abcde"]),
            // One over, no whitespace: a hard cut.
            ("abcdef", 5, &["abcde", "f"]),
            // The whitespace just past the limit is a clean cut.
            ("hello world", 5, &["hello", "world"]),
            // Prefer the last whitespace within reach over a hard cut.
            ("aa bb cc", 5, &["aa bb", "cc"]),
            ("a bbbbbbb", 3, &["a", "bbb", "bbb", "b"]),
            // Surrounding whitespace is trimmed; inner newlines are whitespace too.
            ("  one\ntwo  ", 3, &["one", "two"]),
            // Characters, not bytes: é and ö are two bytes each.
            ("héllo wörld", 5, &["héllo", "wörld"]),
            ("日本語テキスト", 3, &["日本語", "テキス", "ト"]),
            ("🦀🦀🦀 🦀", 2, &["🦀🦀", "🦀", "🦀"]),
            // A limit of zero is treated as one.
            ("ab", 0, &["a", "b"]),
        ];
        for (text, max, expected) in cases {
            assert_eq!(
                split(text, &options(*max, ChunkBy::Size)),
                *expected,
                "{text:?} by {max}"
            );
        }
    }

    #[test]
    fn paragraphs_pack_up_to_the_limit() {
        let cases: &[(&str, usize, &[&str])] = &[
            ("", 10, &[]),
            ("one", 10, &["one"]),
            // "aaa\n\nbbb" is exactly 8 characters: packed together.
            ("aaa\n\nbbb", 8, &["aaa\n\nbbb"]),
            // One character short: two passages.
            ("aaa\n\nbbb", 7, &["aaa", "bbb"]),
            // Lines of one paragraph stay together; whitespace-only lines separate paragraphs;
            // CRLF and trailing spaces are normalised.
            ("l1\r\nl2  \r\n \t \r\nl3", 5, &["l1\nl2", "l3"]),
            // Runs of blank lines are one break.
            ("a\n\n\n\nb", 10, &["a\n\nb"]),
            // A paragraph longer than the limit is cut by size, alone; packing resumes after it.
            (
                "x\n\nlong long long\n\ny\n\nz",
                9,
                &["x", "long long", "long", "y\n\nz"],
            ),
            ("ünï\n\ncødé", 9, &["ünï\n\ncødé"]),
        ];
        for (text, max, expected) in cases {
            assert_eq!(
                split(text, &options(*max, ChunkBy::Paragraph)),
                *expected,
                "{text:?} by {max}"
            );
        }
    }

    #[test]
    fn no_piece_is_empty_or_longer_than_the_limit() {
        let texts = [
            "The quick brown fox\n\njumps over the lazy dog.\n\n\nÜberlange Wörter wie Donaudampfschifffahrt",
            "  \u{3000}全角\u{3000}スペース\u{3000}と改行\r\n\r\n続き ",
            "a\u{301}\u{301} combining marks stay as chars",
        ];
        for text in texts {
            for max in 1..=12 {
                for by in [ChunkBy::Size, ChunkBy::Paragraph] {
                    for piece in split(text, &options(max, by)) {
                        assert!(!piece.trim().is_empty(), "{by:?} {max}: empty piece");
                        assert!(
                            piece.chars().count() <= max,
                            "{by:?} {max}: {piece:?} is too long"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn passages_carry_source_metadata_and_chunk_index() {
        let mut tagged = Document::new("first\n\nsecond", "a.md");
        tagged.metadata.insert("lang".into(), "en".into());
        tagged.metadata.insert("chunk".into(), "overridden".into());
        let documents = vec![
            tagged,
            Document::new(" \n ", "blank.md"),
            Document::new("third", "b.md"),
        ];

        let chunked = passages(documents.clone(), Some(&options(6, ChunkBy::Paragraph)));
        let seen: Vec<(&str, &str, Value, Option<&Value>)> = chunked
            .iter()
            .map(|p| {
                (
                    p.content.as_str(),
                    p.source.as_str(),
                    p.metadata["chunk"].clone(),
                    p.metadata.get("lang"),
                )
            })
            .collect();
        let en = Value::from("en");
        assert_eq!(
            seen,
            [
                ("first", "a.md", Value::from(0), Some(&en)),
                ("second", "a.md", Value::from(1), Some(&en)),
                ("third", "b.md", Value::from(0), None),
            ]
        );

        // Without options: one passage per document, untouched; blank documents dropped.
        let whole = passages(documents, None);
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[0].content, "first\n\nsecond");
        assert_eq!(whole[0].metadata["chunk"], "overridden");
    }
}
