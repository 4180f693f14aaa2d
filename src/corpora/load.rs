//! Reading a corpus's documents: text files by glob pattern, a JSON Lines file, and documents
//! given inline — always in the same order, so the same corpus gives the same passages, the same
//! ties and the same results on every machine.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use glob::{MatchOptions, Pattern};

use super::{ChunkOptions, Document, JsonlOptions, jsonl};
use crate::core::file::{DATA_LIMIT, read_bytes_bounded};
use crate::core::{Failure, FailureCode};

/// Where a corpus's documents come from and how they are cut.
///
/// Documents are read in this order: the files of each pattern in turn (each pattern's matches
/// sorted by path; a file matched twice is read once), then the JSON Lines rows, then the inline
/// documents.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CorpusSource {
    /// The directory relative paths are relative to (the plan file's); empty for the current
    /// directory.
    pub base_dir: PathBuf,
    /// Glob patterns of UTF-8 text files, each file one document named by its path relative to
    /// `base_dir` (`../corpus/a.md`). `*` matches within one path component, `**` any number of
    /// directories; neither matches a leading dot (hidden files and directories), which must be
    /// written literally. Every pattern must match at least one file.
    pub file_patterns: Vec<String>,
    /// Documents given inline.
    pub documents: Vec<Document>,
    /// A JSON Lines file of documents.
    pub jsonl: Option<JsonlOptions>,
    /// How documents are cut into passages; `None` keeps each document whole.
    pub chunk: Option<ChunkOptions>,
}

/// Shell-like matching: `*` and `?` stay within a path component; wildcards skip hidden files.
const MATCH_OPTIONS: MatchOptions = MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: true,
};

/// Every document of `source`, in the order documented on [`CorpusSource`].
pub(super) fn documents(source: &CorpusSource) -> Result<Vec<Document>, Failure> {
    let mut documents = files(&source.base_dir, &source.file_patterns)?;
    if let Some(options) = &source.jsonl {
        let shown = options.path.to_string_lossy();
        let text = read_text(&source.base_dir.join(&options.path), &shown)?;
        documents.extend(jsonl::parse(&text, &shown, options)?);
    }
    documents.extend(source.documents.iter().cloned());
    Ok(documents)
}

fn files(base_dir: &Path, patterns: &[String]) -> Result<Vec<Document>, Failure> {
    let mut seen = HashSet::new();
    let mut documents = Vec::new();
    for pattern in patterns {
        let matched = matches(base_dir, pattern)?;
        if matched.is_empty() {
            return Err(
                file_error(format!("corpus pattern `{pattern}` matches no file"))
                    .with_help(format!("patterns are relative to {}", shown_dir(base_dir))),
            );
        }
        for path in matched {
            if !seen.insert(path.clone()) {
                continue;
            }
            let source = path
                .strip_prefix(base_dir)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            let content = read_text(&path, &source)?;
            documents.push(Document::new(content, source));
        }
    }
    Ok(documents)
}

/// The regular files `pattern` matches under `base_dir`, sorted. Directories are skipped.
pub fn matches(base_dir: &Path, pattern: &str) -> Result<Vec<PathBuf>, Failure> {
    let Some(base) = base_dir.to_str() else {
        return Err(file_error(format!(
            "cannot match corpus pattern `{pattern}`: the directory `{}` is not UTF-8",
            base_dir.display()
        )));
    };
    // The directory is taken literally, whatever glob characters its name holds; an absolute
    // pattern replaces it.
    let full = Path::new(&Pattern::escape(base)).join(pattern);
    let entries = glob::glob_with(&full.to_string_lossy(), MATCH_OPTIONS)
        .map_err(|e| file_error(format!("invalid corpus pattern `{pattern}`: {}", e.msg)))?;
    let mut found = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| {
            file_error(format!(
                "cannot read `{}` while matching corpus pattern `{pattern}`: {}",
                e.path().display(),
                e.error()
            ))
        })?;
        if path.is_file() {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// The UTF-8 text of `path`, shown in errors as `shown` (a regular file of at most
/// [`DATA_LIMIT`] bytes).
fn read_text(path: &Path, shown: &str) -> Result<String, Failure> {
    let bytes = read_bytes_bounded(path, DATA_LIMIT).map_err(|e| {
        file_error(format!("cannot read corpus file `{shown}`: {}", e.reason())).with_help(e.help())
    })?;
    String::from_utf8(bytes).map_err(|e| {
        file_error(format!(
            "corpus file `{shown}` is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
        .with_help("convert it to UTF-8, or leave it out of the corpus's patterns")
    })
}

fn shown_dir(dir: &Path) -> String {
    if dir.as_os_str().is_empty() {
        "the current directory".to_owned()
    } else {
        format!("`{}`", dir.display())
    }
}

fn file_error(message: String) -> Failure {
    Failure::new(FailureCode::ConfigFileError, message)
}

#[cfg(test)]
pub(super) mod tests {
    use std::fs;

    use super::*;

    /// A fresh directory of its own under the system temp dir, removed on drop (the guard).
    pub(in crate::corpora) struct TempDir(tempfile::TempDir);

    impl TempDir {
        pub(in crate::corpora) fn new(name: &str) -> TempDir {
            let guard = tempfile::Builder::new()
                .prefix(&format!("pagantic-{name}-"))
                .tempdir()
                .expect("temp dir");
            TempDir(guard)
        }

        pub(in crate::corpora) fn path(&self) -> PathBuf {
            self.0.path().to_path_buf()
        }

        pub(in crate::corpora) fn write(&self, relative: &str, content: impl AsRef<[u8]>) {
            let path = self.path().join(relative);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).expect("parent dir");
            }
            fs::write(path, content).expect("write");
        }
    }

    fn source(base_dir: PathBuf, patterns: &[&str]) -> CorpusSource {
        CorpusSource {
            base_dir,
            file_patterns: patterns.iter().map(|p| (*p).to_owned()).collect(),
            ..CorpusSource::default()
        }
    }

    fn sources(documents: &[Document]) -> Vec<&str> {
        documents.iter().map(|d| d.source.as_str()).collect()
    }

    #[test]
    fn files_are_read_sorted_and_named_relative_to_the_base_dir() {
        let temp = TempDir::new("files");
        temp.write("corpus/docs/b.md", "bee");
        temp.write("corpus/docs/a.md", "ay");
        temp.write("corpus/docs/sub/c.md", "sea");
        temp.write("corpus/docs/.hidden.md", "hidden");
        temp.write("corpus/docs/notes.txt", "notes");
        temp.write("plans/local.md", "local");
        fs::create_dir_all(temp.path().join("plans/dir.md")).expect("dir");

        let cases: &[(&[&str], &[&str])] = &[
            (
                &["../corpus/docs/**/*.md"],
                &[
                    "../corpus/docs/a.md",
                    "../corpus/docs/b.md",
                    "../corpus/docs/sub/c.md",
                ],
            ),
            // `*` stays within a component; a directory matching the pattern is skipped.
            (
                &["../corpus/docs/*.md", "*.md"],
                &["../corpus/docs/a.md", "../corpus/docs/b.md", "local.md"],
            ),
            // Patterns keep their order; a file matched twice is read once.
            (
                &["local.md", "../corpus/docs/*", "../corpus/docs/a.md"],
                &[
                    "local.md",
                    "../corpus/docs/a.md",
                    "../corpus/docs/b.md",
                    "../corpus/docs/notes.txt",
                ],
            ),
            // Hidden files only when named literally.
            (
                &["../corpus/docs/.hidden.md"],
                &["../corpus/docs/.hidden.md"],
            ),
        ];
        for (patterns, expected) in cases {
            let found = documents(&source(temp.path().join("plans"), patterns)).expect("loads");
            assert_eq!(sources(&found), *expected, "{patterns:?}");
        }

        let found =
            documents(&source(temp.path().join("plans"), &["../corpus/docs/a.md"])).expect("loads");
        assert_eq!(found, [Document::new("ay", "../corpus/docs/a.md")]);
    }

    #[test]
    fn a_base_dir_with_glob_characters_is_taken_literally() {
        let temp = TempDir::new("literal");
        temp.write("we[ir]d/*/a.txt", "star");
        temp.write("we[ir]d/x/a.txt", "x");
        let found = documents(&source(temp.path().join("we[ir]d"), &["*/a.txt"])).expect("loads");
        assert_eq!(sources(&found), ["*/a.txt", "x/a.txt"]);
    }

    #[test]
    fn files_then_jsonl_then_inline_documents() {
        let temp = TempDir::new("order");
        temp.write("a.md", "file");
        temp.write("data/rows.jsonl", "{\"content\": \"row\"}\n");
        let corpus = CorpusSource {
            jsonl: Some(JsonlOptions::new("data/rows.jsonl")),
            documents: vec![Document::new("inline", "faq")],
            ..source(temp.path(), &["a.md"])
        };
        let first = documents(&corpus).expect("loads");
        assert_eq!(sources(&first), ["a.md", "data/rows.jsonl:1", "faq"]);
        assert_eq!(documents(&corpus).expect("loads again"), first);
    }

    #[test]
    fn unreadable_inputs_name_what_is_wrong() {
        let temp = TempDir::new("errors");
        temp.write("good.md", "fine");
        temp.write("latin1.txt", b"caf\xe9");
        temp.write("bad.jsonl", "{\"content\": \"ok\"}\n{\"content\": 1}\n");
        fs::create_dir_all(temp.path().join("only-dirs/sub.md")).expect("dir");

        let cases: &[(&[&str], Option<&str>, &str)] = &[
            (
                &["good.md", "missing/*.md"],
                None,
                "corpus pattern `missing/*.md` matches no file",
            ),
            (
                &["only-dirs/*.md"],
                None,
                "corpus pattern `only-dirs/*.md` matches no file",
            ),
            (
                &["*.txt"],
                None,
                "corpus file `latin1.txt` is not UTF-8 text (invalid byte at offset 3)",
            ),
            (
                &["[x"],
                None,
                "invalid corpus pattern `[x`: invalid range pattern",
            ),
            (
                &[],
                Some("absent.jsonl"),
                "cannot read corpus file `absent.jsonl`: ",
            ),
            (
                &[],
                Some("bad.jsonl"),
                "`bad.jsonl` line 2: field `content` is not a string",
            ),
        ];
        for (patterns, jsonl, expected) in cases {
            let corpus = CorpusSource {
                jsonl: jsonl.map(JsonlOptions::new),
                ..source(temp.path(), patterns)
            };
            let failure = documents(&corpus).expect_err(expected);
            assert_eq!(failure.code, FailureCode::ConfigFileError);
            assert!(
                failure.message.starts_with(expected),
                "{patterns:?}: {}",
                failure.message
            );
        }
    }
}
