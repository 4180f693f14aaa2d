//! Batch input: rows streamed from JSON Lines, CSV with a header, or a directory / glob of text
//! files (one row per file), never loaded whole, so memory stays flat whatever the input's size.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::core::{Failure, FailureCode};

/// Most bytes one row may have unless `--max-row-bytes` says otherwise: a JSON Lines line, the
/// field text of a CSV record, or a file of a directory input.
pub const DEFAULT_MAX_ROW_BYTES: u64 = 16 * 1024 * 1024;

/// One input row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Position in the input, from 0.
    pub index: usize,
    /// The row's id: the `--id` column's value, else the line number (JSONL), record number
    /// (CSV, from 1), or the file path.
    pub id: String,
    pub data: Map<String, Value>,
}

fn bad_input(message: impl Into<String>) -> Failure {
    Failure::new(FailureCode::ConfigInvalidInput, message)
}

/// A row that could not be read, with the id it would have had without `--id` (its line or
/// record number, or its path), so its output line has a stable id a resume can skip.
#[derive(Debug, Clone, PartialEq)]
pub struct BadRow {
    pub index: usize,
    pub id: String,
    pub failure: Failure,
}

/// Rows from a source, one at a time.
pub type Rows = Box<dyn Iterator<Item = Result<Row, BadRow>> + Send>;

/// Opens `source`: `-` (JSON Lines on stdin), a `.jsonl`/`.json`/`.ndjson` file, a `.csv` file, a
/// directory, or a glob pattern of text files.
pub fn open(source: &str, id_column: Option<&str>, max_row_bytes: u64) -> Result<Rows, Failure> {
    let id_column = id_column.map(str::to_string);
    if source == "-" {
        return Ok(jsonl(
            Box::new(BufReader::new(std::io::stdin())),
            "stdin".into(),
            id_column,
            max_row_bytes,
        ));
    }
    let path = Path::new(source);
    if path.is_dir() {
        return files(
            &format!("{}/*", glob::Pattern::escape(source)),
            max_row_bytes,
        );
    }
    if source.contains(['*', '?', '[']) && !path.exists() {
        return files(source, max_row_bytes);
    }
    let file = File::open(path).map_err(|e| bad_input(format!("cannot read {source}: {e}")))?;
    let reader = BufReader::new(file);
    match path.extension().and_then(|e| e.to_str()) {
        Some("csv") => csv(reader, id_column, max_row_bytes),
        _ => Ok(jsonl(
            Box::new(reader),
            source.to_string(),
            id_column,
            max_row_bytes,
        )),
    }
}

/// Whether writing to `out` would feed the batch its own output: `out` is the input file itself
/// (by any name: the same inode), or lies in the input directory, or matches the input glob.
pub fn would_read(source: &str, out: &Path) -> bool {
    if source == "-" {
        return false;
    }
    let path = Path::new(source);
    let same_file = |a: &Path, b: &Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    };
    // `out` may not exist yet: compare where it would be.
    let out_dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let out_full = std::fs::canonicalize(out_dir)
        .map(|dir| dir.join(out.file_name().unwrap_or_default()))
        .unwrap_or_else(|_| out.to_path_buf());
    if path.is_dir() {
        return std::fs::canonicalize(path).is_ok_and(|dir| out_full.starts_with(dir));
    }
    if source.contains(['*', '?', '[']) && !path.exists() {
        return glob::Pattern::new(source).is_ok_and(|p| p.matches_path(out));
    }
    same_file(path, out) || std::fs::canonicalize(path).is_ok_and(|input| input == out_full)
}

fn with_id(
    index: usize,
    default_id: String,
    data: Map<String, Value>,
    id_column: &Option<String>,
) -> Result<Row, BadRow> {
    let id = match id_column {
        None => default_id,
        Some(column) => match data.get(column) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => {
                return Err(BadRow {
                    index,
                    failure: bad_input(format!(
                        "row {} has no `{column}` to use as its id",
                        index + 1
                    )),
                    id: default_id,
                });
            }
        },
    };
    Ok(Row { index, id, data })
}

/// A row that could not be read.
fn bad_row(index: usize, id: String, message: String) -> BadRow {
    BadRow {
        index,
        id,
        failure: bad_input(message),
    }
}

/// The lines of `reader`, each at most `max` bytes held in memory: a longer line is read past
/// (not kept) and reported, so one huge line cannot take the memory of the whole job.
pub(super) fn bounded_lines(
    mut reader: Box<dyn BufRead + Send>,
    max: u64,
) -> impl Iterator<Item = Result<String, String>> {
    std::iter::from_fn(move || {
        let mut line = Vec::new();
        let read = (&mut reader)
            .take(max.saturating_add(1))
            .read_until(b'\n', &mut line);
        match read {
            Err(e) => Some(Err(e.to_string())),
            Ok(0) => None,
            Ok(_) if line.len() as u64 > max && line.last() != Some(&b'\n') => {
                // Skip the rest of the line without keeping it.
                let mut rest = 0u64;
                loop {
                    let buffer = match reader.fill_buf() {
                        Ok(buffer) => buffer,
                        Err(e) => return Some(Err(e.to_string())),
                    };
                    if buffer.is_empty() {
                        break;
                    }
                    let (used, done) = match buffer.iter().position(|&b| b == b'\n') {
                        Some(at) => (at + 1, true),
                        None => (buffer.len(), false),
                    };
                    rest += used as u64;
                    reader.consume(used);
                    if done {
                        break;
                    }
                }
                Some(Err(format!(
                    "the row is {} bytes, more than the {max} a row may have (--max-row-bytes)",
                    line.len() as u64 + rest
                )))
            }
            Ok(_) => {
                if line.last() == Some(&b'\n') {
                    line.pop();
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                }
                Some(String::from_utf8(line).map_err(|_| "the row is not UTF-8".to_string()))
            }
        }
    })
}

fn jsonl(
    reader: Box<dyn BufRead + Send>,
    name: String,
    id_column: Option<String>,
    max_row_bytes: u64,
) -> Rows {
    let mut index = 0;
    Box::new(bounded_lines(reader, max_row_bytes).enumerate().filter_map(
        move |(line_number, line)| {
            let line = match line {
                Ok(line) => line,
                Err(problem) => {
                    let id = (line_number + 1).to_string();
                    let message = format!("{name} line {}: {problem}", line_number + 1);
                    let row = bad_row(index, id, message);
                    index += 1;
                    return Some(Err(row));
                }
            };
            // A byte-order mark before the first row is an editor's, not the row's.
            let line = match line_number {
                0 => line.strip_prefix('\u{feff}').unwrap_or(&line),
                _ => &line,
            };
            if line.trim().is_empty() {
                return None;
            }
            let row = match serde_json::from_str::<Value>(line) {
                Ok(Value::Object(data)) => {
                    with_id(index, (line_number + 1).to_string(), data, &id_column)
                }
                Ok(_) => Err(bad_row(
                    index,
                    (line_number + 1).to_string(),
                    format!(
                        "{name} line {}: a row must be a JSON object",
                        line_number + 1
                    ),
                )),
                Err(e) => Err(bad_row(
                    index,
                    (line_number + 1).to_string(),
                    format!("{name} line {}: {e}", line_number + 1),
                )),
            };
            index += 1;
            Some(row)
        },
    ))
}

fn csv(
    reader: BufReader<File>,
    id_column: Option<String>,
    max_row_bytes: u64,
) -> Result<Rows, Failure> {
    let mut records = CsvRecords::new(reader, max_row_bytes);
    let headers = match records.next() {
        None => Vec::new(),
        Some(header) => header.map_err(|problem| bad_input(format!("CSV header: {problem}")))?,
    };
    Ok(Box::new(records.enumerate().map(move |(index, record)| {
        let id = (index + 1).to_string();
        let fields = record
            .and_then(|fields| match fields.len() == headers.len() {
                true => Ok(fields),
                false => Err(format!(
                    "the record has {} fields, the header {}",
                    fields.len(),
                    headers.len()
                )),
            })
            .map_err(|problem| {
                bad_row(
                    index,
                    id.clone(),
                    format!("CSV record {}: {problem}", index + 1),
                )
            })?;
        let data: Map<String, Value> = headers
            .iter()
            .cloned()
            .zip(fields.into_iter().map(Value::String))
            .collect();
        with_id(index, id, data, &id_column)
    })))
}

/// The records of a CSV file, each with at most `max` bytes of field text (and `max` fields)
/// held in memory: a larger record is parsed through to its end — quoted line breaks and all —
/// with its fields dropped as they come, and reported, so one huge record cannot take the memory
/// of the whole job.
struct CsvRecords {
    input: BufReader<File>,
    parser: csv_core::Reader,
    max: u64,
    /// The current record's field text, and where each field ends in it.
    text: Vec<u8>,
    ends: Vec<usize>,
}

impl CsvRecords {
    fn new(input: BufReader<File>, max: u64) -> Self {
        CsvRecords {
            input,
            parser: csv_core::Reader::new(),
            max,
            text: vec![0; 64],
            ends: vec![0; 64],
        }
    }

    /// The fields of the record just read, whose first `count` ends are in `ends`.
    fn fields(&self, count: usize) -> Result<Vec<String>, String> {
        let mut start = 0;
        self.ends[..count]
            .iter()
            .map(|&end| {
                let field = self.text.get(start..end).unwrap_or_default();
                start = end;
                String::from_utf8(field.to_vec()).map_err(|_| "the row is not UTF-8".to_string())
            })
            .collect()
    }
}

impl Iterator for CsvRecords {
    type Item = Result<Vec<String>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        use csv_core::ReadRecordResult as Read;
        // Buffers grow up to `max` entries (64 at least, so a full one always makes progress).
        let limit = usize::try_from(self.max).unwrap_or(usize::MAX).max(64);
        let (mut text_at, mut ends_at) = (0, 0);
        let (mut bytes, mut text_bytes, mut fields) = (0u64, 0u64, 0u64);
        loop {
            let input = match self.input.fill_buf() {
                Ok(input) => input,
                Err(e) => return Some(Err(e.to_string())),
            };
            let (result, read, written, ended) = self.parser.read_record(
                input,
                &mut self.text[text_at..],
                &mut self.ends[ends_at..],
            );
            self.input.consume(read);
            bytes += read as u64;
            text_bytes += written as u64;
            fields += ended as u64;
            text_at += written;
            ends_at += ended;
            let oversized = text_bytes > self.max || fields > self.max;
            match result {
                Read::InputEmpty => {}
                Read::OutputFull => text_at = make_room(&mut self.text, text_at, limit),
                Read::OutputEndsFull => ends_at = make_room(&mut self.ends, ends_at, limit),
                Read::Record if oversized => {
                    return Some(Err(format!(
                        "the row is {bytes} bytes, more than the {} a row may have (--max-row-bytes)",
                        self.max
                    )));
                }
                Read::Record => return Some(self.fields(ends_at)),
                Read::End => return None,
            }
        }
    }
}

/// Makes room in a full `buffer` whose first `used` entries are written: doubles it up to
/// `limit` entries; past that the record is too large to keep, and its entries so far are dropped.
/// Returns where writing goes on.
fn make_room<T: Clone + Default>(buffer: &mut Vec<T>, used: usize, limit: usize) -> usize {
    if buffer.len() >= limit {
        return 0;
    }
    buffer.resize(buffer.len().saturating_mul(2).min(limit), T::default());
    used
}

/// The files `pattern` matches, in order; none is an error.
fn matching_files(pattern: &str) -> Result<Vec<PathBuf>, Failure> {
    let mut paths: Vec<PathBuf> = glob::glob(pattern)
        .map_err(|e| bad_input(format!("invalid pattern {pattern}: {}", e.msg)))?
        .filter_map(Result::ok)
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(bad_input(format!("{pattern} matches no file")));
    }
    Ok(paths)
}

/// The SHA-256 of `source`, in hex, so that a part written from it can tell it from another
/// input: of the file's bytes, or for a directory or glob of each file's path and SHA-256 in
/// order. Stdin cannot be read twice: None.
pub fn sha256(source: &str) -> Result<Option<String>, Failure> {
    use crate::model_store::{hex, sha256_file};
    use sha2::{Digest, Sha256};
    let hash_file = |path: &Path| sha256_file(path).map_err(|failure| bad_input(failure.message));
    let path = Path::new(source);
    let pattern = if source == "-" {
        return Ok(None);
    } else if path.is_dir() {
        format!("{}/*", glob::Pattern::escape(source))
    } else if source.contains(['*', '?', '[']) && !path.exists() {
        source.to_string()
    } else {
        return hash_file(path).map(Some);
    };
    let mut hasher = Sha256::new();
    for file in matching_files(&pattern)? {
        hasher.update(format!("{}\0{}\n", file.display(), hash_file(&file)?));
    }
    Ok(Some(hex(&hasher.finalize())))
}

fn files(pattern: &str, max_row_bytes: u64) -> Result<Rows, Failure> {
    let paths = matching_files(pattern)?;
    Ok(Box::new(paths.into_iter().enumerate().map(
        move |(index, path)| {
            let mut content = String::new();
            let shown = path.display().to_string();
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            if size > max_row_bytes {
                return Err(bad_row(
                    index,
                    shown.clone(),
                    format!(
                        "{shown} is {size} bytes, more than the {max_row_bytes} a row may have (--max-row-bytes)"
                    ),
                ));
            }
            File::open(&path)
                .and_then(|f| f.take(max_row_bytes).read_to_string(&mut content))
                .map_err(|e| bad_row(index, shown.clone(), format!("cannot read {shown}: {e}")))?;
            let mut data = Map::new();
            data.insert("path".into(), Value::String(shown.clone()));
            data.insert("content".into(), Value::String(content));
            Ok(Row {
                index,
                id: shown,
                data,
            })
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file named `name` holding `text` (its path as text), in a directory removed with the
    /// returned guard.
    fn scratch(name: &str, text: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        (dir, path.display().to_string())
    }

    fn collect(rows: Rows) -> Vec<Result<Row, BadRow>> {
        rows.collect()
    }

    #[test]
    fn json_lines_skip_blank_lines_and_number_rows_by_line() {
        let (_dir, path) = scratch(
            "rows.jsonl",
            "{\"q\": \"a\"}\n\n{\"q\": \"b\", \"id\": 7}\n",
        );
        let rows: Vec<Row> = collect(open(&path, None, DEFAULT_MAX_ROW_BYTES).expect("open"))
            .into_iter()
            .map(|r| r.expect("row"))
            .collect();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].index, rows[0].id.as_str()), (0, "1"));
        assert_eq!((rows[1].index, rows[1].id.as_str()), (1, "3"));
        let by_id = collect(open(&path, Some("id"), DEFAULT_MAX_ROW_BYTES).expect("open"));
        let missing = by_id[0].as_ref().expect_err("row 1 has no id column");
        assert_eq!(missing.id, "1", "it keeps its line number as its id");
        assert_eq!(by_id[1].as_ref().map(|r| r.id.clone()), Ok("7".to_string()));
    }

    #[test]
    fn bad_lines_are_errors_with_their_line_number() {
        let (_dir, path) = scratch("bad.jsonl", "{\"q\": 1}\nnot json\n[1]\n");
        let rows = collect(open(&path, None, DEFAULT_MAX_ROW_BYTES).expect("open"));
        assert!(rows[0].is_ok());
        let second = rows[1].as_ref().expect_err("bad");
        assert!(second.failure.message.contains("line 2"));
        assert_eq!((second.index, second.id.as_str()), (1, "2"));
        let third = rows[2].as_ref().expect_err("bad");
        assert!(third.failure.message.contains("must be a JSON object"));
        assert_eq!(third.id, "3");
    }

    #[test]
    fn csv_rows_are_strings_keyed_by_header() {
        let (_dir, path) = scratch("rows.csv", "review,stars\n\"Great, really\",5\nBad,1\n");
        let rows: Vec<Row> = collect(open(&path, None, DEFAULT_MAX_ROW_BYTES).expect("open"))
            .into_iter()
            .map(|r| r.expect("row"))
            .collect();
        assert_eq!(
            rows[0].data.get("review"),
            Some(&Value::String("Great, really".into()))
        );
        assert_eq!(rows[1].data.get("stars"), Some(&Value::String("1".into())));
        assert_eq!(rows[1].id, "2");
    }

    #[test]
    fn a_byte_order_mark_before_the_first_row_is_skipped() {
        let (_dir, path) = scratch(
            "bom.jsonl",
            "\u{feff}{\"text\": \"first\"}\n{\"text\": \"second\"}\n",
        );
        let rows: Vec<Row> = collect(open(&path, None, DEFAULT_MAX_ROW_BYTES).expect("open"))
            .into_iter()
            .map(|r| r.expect("every row reads"))
            .collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0].data.get("text"),
            Some(&Value::String("first".into()))
        );
    }

    /// One huge line is one failed row, read past without being held in memory; the
    /// rows after it go on.
    #[test]
    fn a_row_past_the_size_limit_fails_alone() {
        let huge = format!("{{\"text\": \"{}\"}}", "x".repeat(5000));
        let (_dir, path) = scratch(
            "huge.jsonl",
            &format!("{{\"text\": \"a\"}}\n{huge}\n{{\"text\": \"c\"}}\r\n"),
        );
        let rows = collect(open(&path, None, 1000).expect("open"));
        assert_eq!(rows.len(), 3);
        let too_long = rows[1].as_ref().expect_err("too long");
        assert!(
            too_long
                .failure
                .message
                .contains("more than the 1000 a row may have"),
            "{}",
            too_long.failure.message
        );
        assert_eq!(too_long.id, "2");
        let last = rows[2].as_ref().expect("the next row reads");
        assert_eq!(last.data.get("text"), Some(&Value::String("c".into())));
        assert_eq!(last.id, "3");
    }

    /// The CSV twin of the above: a record with more field text than the limit (a
    /// quoted field spanning lines) fails alone; so does one with the wrong number of fields.
    #[test]
    fn a_csv_record_past_the_size_limit_fails_alone() {
        let huge = format!("\"{}\"", "x\n".repeat(3000));
        let (_dir, path) = scratch(
            "huge.csv",
            &format!("\u{feff}a,b\n1,2\n{huge},3\n\n4\n\"5\",\"6\"\r\n"),
        );
        let rows = collect(open(&path, None, 1000).expect("open"));
        assert_eq!(rows.len(), 4);
        let too_long = rows[1].as_ref().expect_err("too long");
        assert_eq!(too_long.id, "2");
        assert!(
            too_long
                .failure
                .message
                .contains("CSV record 2: the row is 6005 bytes, more than the 1000"),
            "{}",
            too_long.failure.message
        );
        let short = rows[2].as_ref().expect_err("one field");
        assert_eq!(
            short.failure.message,
            "CSV record 3: the record has 1 fields, the header 2"
        );
        let last = rows[3].as_ref().expect("the next row reads");
        assert_eq!(last.data.get("a"), Some(&Value::String("5".into())));
        assert_eq!(last.data.get("b"), Some(&Value::String("6".into())));
        assert_eq!(last.id, "4");
    }

    #[test]
    fn a_directory_is_one_row_per_file() {
        let scratch = tempfile::tempdir().expect("temp dir");
        let dir = scratch.path();
        std::fs::write(dir.join("b.txt"), "second").expect("write");
        std::fs::write(dir.join("a.txt"), "first").expect("write");
        let rows: Vec<Row> =
            collect(open(dir.to_str().expect("utf-8"), None, DEFAULT_MAX_ROW_BYTES).expect("open"))
                .into_iter()
                .map(|r| r.expect("row"))
                .collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0].data.get("content"),
            Some(&Value::String("first".into()))
        );
        assert!(rows[0].id.ends_with("a.txt"));
    }
}
