//! Batch output: append-only JSON Lines, one line per row, each written whole and flushed as soon
//! as its row finishes — so a crash (even SIGKILL) loses at most the rows in flight — and the
//! bookkeeping `--resume` needs: which rows an earlier run already wrote, read as a stream with
//! every line bounded, like any file a user is handed.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::input::bounded_lines;
use super::merge::MAX_LINE_BYTES;
use crate::core::{Failure, FailureCode};

fn output_failure(path: &Path, e: impl std::fmt::Display) -> Failure {
    Failure::new(
        FailureCode::ConfigFileError,
        format!("cannot write {}: {e}", path.display()),
    )
}

/// Where rows go.
pub enum Sink {
    Stdout,
    File { path: PathBuf, file: File },
}

impl Sink {
    /// Writes one row's line (its JSON, without the newline) and flushes it.
    pub fn write_line(&mut self, mut text: String) -> Result<(), Failure> {
        text.push('\n');
        match self {
            Sink::Stdout => {
                let mut stdout = std::io::stdout().lock();
                stdout
                    .write_all(text.as_bytes())
                    .and_then(|()| stdout.flush())
                    .map_err(|e| output_failure(Path::new("stdout"), e))
            }
            Sink::File { path, file } => {
                // One write per line: a line is either all there or (after a kill) cut and
                // dropped by the next resume.
                file.write_all(text.as_bytes())
                    .and_then(|()| file.flush())
                    .map_err(|e| output_failure(path, e))
            }
        }
    }
}

/// Rows an earlier run finished, read back from its output.
#[derive(Debug, Default)]
pub struct Previous {
    /// Ids of rows to skip.
    pub done: HashSet<String>,
    /// Those of them that failed (for good, or with `--retry-errors` never): the batch still
    /// ends failed.
    pub failed: HashSet<String>,
    /// How many lines were dropped: a cut last line, rows that failed retryably (a rate limit, a
    /// server error: see `transient` in the line), or with `--retry-errors` every failed row.
    pub dropped: usize,
}

/// Opens `path` for appending. With `resume`, first reads which rows it holds (dropping a cut
/// last line, a line past [`MAX_LINE_BYTES`](super::merge::MAX_LINE_BYTES) or not UTF-8, the rows
/// that failed retryably, and with `retry_errors` every failed row, rewriting the file
/// atomically); without it, an existing non-empty file is an error rather than something
/// silently overwritten. The file is read as a stream, twice when lines are dropped: memory holds
/// one line and the ids, never the file.
pub fn open(path: &Path, resume: bool, retry_errors: bool) -> Result<(Sink, Previous), Failure> {
    let mut previous = Previous::default();
    if path.exists() && std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) > 0 {
        if !resume {
            return Err(Failure::new(
                FailureCode::ConfigInvalidInput,
                format!("{} already exists", path.display()),
            )
            .with_help("use --resume to skip the rows it holds, or choose another --out"));
        }
        for line in kept_lines(path, retry_errors)? {
            match line {
                Kept::Row(_, value) => {
                    if let Some(id) = value["row"].as_str() {
                        previous.done.insert(id.to_string());
                        if value["status"] != "ok" {
                            previous.failed.insert(id.to_string());
                        }
                    }
                }
                Kept::Dropped => previous.dropped += 1,
                Kept::Blank => {}
            }
        }
        if previous.dropped > 0 {
            rewrite(path, retry_errors)?;
        }
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| output_failure(path, e))?;
    Ok((
        Sink::File {
            path: path.to_path_buf(),
            file,
        },
        previous,
    ))
}

/// A line of an output being resumed, as the resume takes it.
enum Kept {
    /// A row's line it keeps: its text and what it says.
    Row(String, Value),
    /// A line whose row runs again: cut, past the bound, not a row, or a failure to retry.
    Dropped,
    Blank,
}

/// The lines of the output at `path`, each as a resume takes it.
fn kept_lines(path: &Path, retry_errors: bool) -> Result<impl Iterator<Item = Kept>, Failure> {
    let file = File::open(path).map_err(|e| output_failure(path, e))?;
    // A line is written whole with its newline; a last line without one was cut by a
    // kill, even when what was written parses, and its row runs again.
    let complete_end = ends_with_newline(path).map_err(|e| output_failure(path, e))?;
    let mut lines = bounded_lines(Box::new(BufReader::new(file)), MAX_LINE_BYTES).peekable();
    Ok(std::iter::from_fn(move || {
        let line = lines.next()?;
        let cut = lines.peek().is_none() && !complete_end;
        let kept = match line {
            Ok(line) if line.is_empty() => Kept::Blank,
            Ok(line) if !cut => match serde_json::from_str::<Value>(&line) {
                Ok(value) if !runs_again(&value, retry_errors) => Kept::Row(line, value),
                _ => Kept::Dropped,
            },
            _ => Kept::Dropped,
        };
        Some(kept)
    }))
}

/// Rewrites the output at `path` with only the lines a resume keeps, atomically.
fn rewrite(path: &Path, retry_errors: bool) -> Result<(), Failure> {
    let temporary = path.with_extension("resume.tmp");
    let mut rewritten =
        BufWriter::new(File::create(&temporary).map_err(|e| output_failure(&temporary, e))?);
    for kept in kept_lines(path, retry_errors)? {
        if let Kept::Row(line, _) = kept {
            rewritten
                .write_all(line.as_bytes())
                .and_then(|()| rewritten.write_all(b"\n"))
                .map_err(|e| output_failure(&temporary, e))?;
        }
    }
    let rewritten = rewritten
        .into_inner()
        .map_err(|e| output_failure(&temporary, e))?;
    rewritten
        .sync_all()
        .map_err(|e| output_failure(&temporary, e))?;
    std::fs::rename(&temporary, path).map_err(|e| output_failure(path, e))
}

/// Whether a resume runs the row of this line again: when it failed retryably, or with
/// `retry_errors` when it failed at all.
fn runs_again(line: &Value, retry_errors: bool) -> bool {
    let failed = line["status"] != "ok";
    failed && (retry_errors || line["transient"] == true)
}

/// Whether the file's last byte is a newline (false for an empty file).
fn ends_with_newline(path: &Path) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = File::open(path)?;
    if file.seek(SeekFrom::End(0))? == 0 {
        return Ok(false);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A file named `name` holding `text`, in a directory removed with the returned guard.
    fn scratch(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        (dir, path)
    }

    #[test]
    fn resuming_reads_done_rows_and_drops_a_cut_last_line() {
        let (_dir, path) = scratch(
            "cut.jsonl",
            "{\"row\":\"1\",\"status\":\"ok\"}\n{\"row\":\"2\",\"status\":\"error\"}\n{\"row\":\"3\",\"sta",
        );
        let (mut sink, previous) = open(&path, true, false).expect("open");
        assert_eq!(
            previous.done,
            HashSet::from(["1".to_string(), "2".to_string()])
        );
        assert_eq!(previous.dropped, 1);
        sink.write_line(json!({ "row": "3", "status": "ok" }).to_string())
            .expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text.lines().count(), 3);
        assert!(
            text.lines()
                .all(|l| serde_json::from_str::<Value>(l).is_ok())
        );
    }

    /// A kill between a line's `}` and its newline leaves a line that parses; it was
    /// not finished, so resume cuts it and its row runs again, and the next line starts clean.
    #[test]
    fn a_last_line_without_its_newline_is_cut_even_when_it_parses() {
        let (_dir, path) = scratch(
            "no-newline.jsonl",
            "{\"row\":\"1\",\"status\":\"ok\"}\n{\"row\":\"2\",\"status\":\"ok\"}",
        );
        let (mut sink, previous) = open(&path, true, false).expect("open");
        assert_eq!(previous.done, HashSet::from(["1".to_string()]));
        assert_eq!(previous.dropped, 1);
        sink.write_line(json!({ "row": "2", "status": "ok" }).to_string())
            .expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text,
            "{\"row\":\"1\",\"status\":\"ok\"}\n{\"row\":\"2\",\"status\":\"ok\"}\n"
        );
    }

    #[test]
    fn retrying_errors_removes_the_failed_rows() {
        let (_dir, path) = scratch(
            "errors.jsonl",
            "{\"row\":\"1\",\"status\":\"ok\"}\n{\"row\":\"2\",\"status\":\"error\"}\n",
        );
        let (_, previous) = open(&path, true, true).expect("open");
        assert_eq!(previous.done, HashSet::from(["1".to_string()]));
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "{\"row\":\"1\",\"status\":\"ok\"}\n"
        );
    }

    /// A requeued task resumes: the rows that failed retryably run again, those that failed
    /// for good are kept, like the rows that succeeded.
    #[test]
    fn resuming_runs_the_retryable_failures_again_and_keeps_the_permanent_ones() {
        let (_dir, path) = scratch(
            "transient.jsonl",
            "{\"row\":\"1\",\"status\":\"ok\"}\n\
             {\"row\":\"2\",\"status\":\"error\",\"transient\":true}\n\
             {\"row\":\"3\",\"status\":\"error\",\"transient\":false}\n",
        );
        let (_, previous) = open(&path, true, false).expect("open");
        assert_eq!(
            previous.done,
            HashSet::from(["1".to_string(), "3".to_string()])
        );
        assert_eq!(previous.dropped, 1);
        assert_eq!(previous.failed, HashSet::from(["3".to_string()]));
        let kept = std::fs::read_to_string(&path).expect("read");
        assert!(!kept.contains("\"row\":\"2\""), "{kept}");
    }

    /// A line past the bound (one 80 MB line) is never held whole: its row runs again, and the
    /// lines around it are kept.
    #[test]
    fn a_line_past_the_bound_is_dropped_without_being_held() {
        let huge = "x".repeat(usize::try_from(MAX_LINE_BYTES).unwrap_or(usize::MAX) + 1024);
        let (_dir, path) = scratch(
            "huge.jsonl",
            &format!(
                "{{\"row\":\"1\",\"status\":\"ok\"}}\n{huge}\n{{\"row\":\"3\",\"status\":\"ok\"}}\n"
            ),
        );
        let (_, previous) = open(&path, true, false).expect("open");
        assert_eq!(
            previous.done,
            HashSet::from(["1".to_string(), "3".to_string()])
        );
        assert_eq!(previous.dropped, 1);
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "{\"row\":\"1\",\"status\":\"ok\"}\n{\"row\":\"3\",\"status\":\"ok\"}\n"
        );
    }

    #[test]
    fn an_existing_output_is_never_overwritten_without_resume() {
        let (_dir, path) = scratch("exists.jsonl", "{\"row\":\"1\",\"status\":\"ok\"}\n");
        let failure = open(&path, false, false).err().expect("refused");
        assert!(failure.message.contains("already exists"));
    }
}
