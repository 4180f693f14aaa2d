//! The Markdown of `README.md`, `CHANGELOG.md` and `docs/`, read as CommonMark by pulldown-cmark:
//! fenced code blocks (their language, what their info string says after it, and the line they
//! start on), headings (for link anchors) and links.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

use crate::root;

/// The Markdown files the checks read, relative to the repository root: the README, the
/// changelog and every page of `docs/`.
pub fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md"), PathBuf::from("CHANGELOG.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| Path::new("docs").join(path.file_name().expect("a file name")))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

/// The text of `file`, relative to the repository root.
pub fn read(file: &Path) -> String {
    std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// A fenced code block.
#[derive(Debug, Clone)]
pub struct Block {
    /// The info string's first word: `sh`, `yaml`, `console`, ….
    pub lang: String,
    /// The rest of the info string, trimmed: `not-run: needs a Slurm cluster`, ….
    pub directive: String,
    pub body: String,
    /// The line its opening fence is on (1-based).
    pub line: usize,
}

/// The fenced code blocks of a Markdown text, in order.
pub fn fenced_blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                let info = info.trim();
                let (lang, directive) = info.split_once(char::is_whitespace).unwrap_or((info, ""));
                open = Some(Block {
                    lang: lang.to_string(),
                    directive: directive.trim().to_string(),
                    body: String::new(),
                    line: line_of(text, range.start),
                });
            }
            Event::Text(piece) => {
                if let Some(block) = &mut open {
                    block.body.push_str(&piece);
                }
            }
            Event::End(TagEnd::CodeBlock) => blocks.extend(open.take()),
            _ => {}
        }
    }
    blocks
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// A link's destination and the line it is on.
pub struct Link {
    pub target: String,
    pub line: usize,
}

/// Every link of a Markdown text (inline, reference and autolinks alike).
pub fn links(text: &str) -> Vec<Link> {
    Parser::new(text)
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Start(Tag::Link { dest_url, .. }) => Some(Link {
                target: dest_url.to_string(),
                line: line_of(text, range.start),
            }),
            _ => None,
        })
        .collect()
}

/// The anchors GitHub gives a Markdown file's headings: the heading's text (code spans' too) in
/// lower case, everything but letters, digits, spaces, `-` and `_` dropped, spaces made `-`; a
/// repeated anchor gets `-1`, `-2`, ….
pub fn heading_anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    let mut heading: Option<String> = None;
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(piece) | Event::Code(piece) => {
                if let Some(heading) = &mut heading {
                    heading.push_str(&piece);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let Some(title) = heading.take() else {
                    continue;
                };
                let slug: String = title
                    .trim()
                    .to_lowercase()
                    .chars()
                    .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect();
                let count = seen.entry(slug.clone()).or_insert(0);
                anchors.insert(if *count == 0 {
                    slug
                } else {
                    format!("{slug}-{count}")
                });
                *count += 1;
            }
            _ => {}
        }
    }
    anchors
}

#[test]
fn heading_anchors_follow_github() {
    let anchors = heading_anchors(
        "# A, b\n## `RUST_BACKTRACE` and c\n```sh\n# not a heading\n```\n## run --batch\n## A, b\n",
    );
    let expected: BTreeSet<String> = ["a-b", "a-b-1", "rust_backtrace-and-c", "run---batch"]
        .map(String::from)
        .into();
    assert_eq!(anchors, expected);
}

#[test]
fn blocks_keep_their_language_directive_and_line() {
    let blocks = fenced_blocks(
        "text\n\n```sh not-run: needs a cluster\nsbatch x\n```\n\n- item\n\n  ```yaml\n  a: 1\n  ```\n",
    );
    let seen: Vec<(&str, &str, &str, usize)> = blocks
        .iter()
        .map(|b| {
            (
                b.lang.as_str(),
                b.directive.as_str(),
                b.body.as_str(),
                b.line,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("sh", "not-run: needs a cluster", "sbatch x\n", 3),
            ("yaml", "", "a: 1\n", 9)
        ]
    );
}
