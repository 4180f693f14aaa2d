//! The partial results of a reduce, kept beside its output as `OUT.chunks.jsonl`: one line per
//! finished chunk run that is not a group's last (the last one's result is the group's own line
//! in the output), written whole and flushed as the run ends, like output lines. `--resume` reads
//! them back, so a group interrupted mid-fold starts again where it was: no finished chunk runs
//! twice. A cut last line (a kill mid-write) is ignored; its chunk runs again.
//!
//! The file's first line says what wrote it — the output's [`Origin`]: input, plan (with the
//! grouping and fold) and shard — and a resume reads its chunks only when that is this run's: a
//! file left by another input or plan (its output and record deleted, as a refused resume advises)
//! is discarded, never read back as this run's partial results. No line is held past
//! [`MAX_LINE_BYTES`](crate::batch::merge::MAX_LINE_BYTES).

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::batch::input::bounded_lines;
use crate::batch::merge::MAX_LINE_BYTES;
use crate::batch::output::Sink;
use crate::batch::part::Origin;
use crate::core::{Cost, Failure, FailureCode, TokenUsage};

/// What one finished chunk run gave and spent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedChunk {
    /// The group's row id.
    pub group: String,
    pub level: u32,
    pub chunk: u64,
    pub output: Value,
    pub usage: TokenUsage,
    /// In the price's unit; None when nothing was priced.
    pub cost: Option<f64>,
    pub model_calls: u64,
}

impl SavedChunk {
    pub fn cost(&self) -> Option<Cost> {
        self.cost.map(Cost::from_amount)
    }
}

/// The layout of the file, as its header's `pagantic_chunks` says.
const VERSION: u64 = 1;

/// The first line: what wrote the chunks after it.
#[derive(Serialize, Deserialize)]
struct Header {
    pagantic_chunks: u64,
    origin: Origin,
}

/// The chunks of the file at `path` by group, when its header says `origin` wrote them; none
/// when there is no file, or another input, plan or shard wrote it (or it has no header).
fn read_chunks(path: &Path, origin: &Origin) -> Result<HashMap<String, Vec<SavedChunk>>, Failure> {
    let mut saved: HashMap<String, Vec<SavedChunk>> = HashMap::new();
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(saved),
        Err(e) => return Err(log_failure(path, e)),
    };
    if !file.metadata().map_err(|e| log_failure(path, e))?.is_file() {
        return Err(log_failure(path, "not a regular file"));
    }
    let mut lines = bounded_lines(Box::new(BufReader::new(file)), MAX_LINE_BYTES);
    let ours = lines
        .next()
        .and_then(|line| serde_json::from_str::<Header>(&line.ok()?).ok())
        .is_some_and(|header| header.pagantic_chunks == VERSION && header.origin == *origin);
    if !ours {
        return Ok(saved);
    }
    // A line cut by a kill (or past the bound) does not parse: its chunk runs again.
    for line in lines.flatten() {
        if let Ok(chunk) = serde_json::from_str::<SavedChunk>(&line) {
            saved.entry(chunk.group.clone()).or_default().push(chunk);
        }
    }
    Ok(saved)
}

/// The partial results file of the output `out`.
pub fn path_for(out: &Path) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(".chunks.jsonl");
    PathBuf::from(name)
}

/// Where finished chunks go.
pub struct ChunkLog {
    sink: Sink,
}

fn log_failure(path: &Path, e: impl std::fmt::Display) -> Failure {
    Failure::new(
        FailureCode::ConfigFileError,
        format!("cannot keep partial results in {}: {e}", path.display()),
    )
}

impl ChunkLog {
    /// Opens the log of `out`, written by `origin`: resuming, returns the chunks it holds by
    /// group (a cut last line dropped) when `origin` wrote them, none when another did;
    /// otherwise starts it empty.
    pub fn open(
        out: &Path,
        origin: &Origin,
        resume: bool,
    ) -> Result<(ChunkLog, HashMap<String, Vec<SavedChunk>>), Failure> {
        let path = path_for(out);
        let saved = match resume {
            true => read_chunks(&path, origin)?,
            false => HashMap::new(),
        };
        // Written again whole: the header of this run, then what is kept (a cut line, or another
        // writer's chunks, dropped), so the next line starts clean.
        let header = Header {
            pagantic_chunks: VERSION,
            origin: origin.clone(),
        };
        let mut kept = serde_json::to_string(&header).map_err(|e| log_failure(&path, e))?;
        kept.push('\n');
        for chunk in saved.values().flatten() {
            kept.push_str(&serde_json::to_string(chunk).map_err(|e| log_failure(&path, e))?);
            kept.push('\n');
        }
        crate::core::file::write_atomic(&path, kept.as_bytes())
            .map_err(|e| log_failure(&path, e))?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| log_failure(&path, e))?;
        Ok((
            ChunkLog {
                sink: Sink::File { path, file },
            },
            saved,
        ))
    }

    /// Keeps one finished chunk, flushed before this returns.
    pub fn keep(&mut self, chunk: &SavedChunk) -> Result<(), Failure> {
        let line = serde_json::to_string(chunk).unwrap_or_default();
        self.sink.write_line(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chunk(group: &str, index: u64) -> SavedChunk {
        SavedChunk {
            group: group.into(),
            level: 0,
            chunk: index,
            output: json!(format!("partial {index}")),
            usage: TokenUsage::default(),
            cost: None,
            model_calls: 1,
        }
    }

    fn origin(input: &str) -> Origin {
        Origin {
            shard: None,
            input_sha256: Some(input.into()),
            plan_sha256: "plan".into(),
        }
    }

    #[test]
    fn kept_chunks_come_back_on_resume_and_a_cut_line_is_dropped() {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("groups.jsonl");
        let (mut log, saved) = ChunkLog::open(&out, &origin("in"), false).expect("opened");
        assert!(saved.is_empty());
        log.keep(&chunk("\"a\"", 0)).expect("kept");
        log.keep(&chunk("\"a\"", 1)).expect("kept");
        drop(log);
        let path = path_for(&out);
        let mut text = std::fs::read_to_string(&path).expect("read");
        text.push_str("{\"group\":\"\\\"a\\\"\",\"lev");
        std::fs::write(&path, text).expect("cut");
        let (_, saved) = ChunkLog::open(&out, &origin("in"), true).expect("resumed");
        assert_eq!(saved["\"a\""], [chunk("\"a\"", 0), chunk("\"a\"", 1)]);
        let cleaned = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            cleaned.lines().count(),
            3,
            "the header and two chunks: {cleaned}"
        );
        let (_, fresh) = ChunkLog::open(&out, &origin("in"), false).expect("a new run");
        assert!(fresh.is_empty(), "a run that does not resume starts empty");
    }

    /// Chunks another input (or plan, or shard) left are never read back as this run's; nor are
    /// those of a file without a header.
    #[test]
    fn chunks_of_another_writer_are_discarded_on_resume() {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("groups.jsonl");
        let (mut log, _) = ChunkLog::open(&out, &origin("first"), false).expect("opened");
        log.keep(&chunk("\"a\"", 0)).expect("kept");
        drop(log);
        let (mut log, saved) = ChunkLog::open(&out, &origin("second"), true).expect("resumed");
        assert!(saved.is_empty(), "{saved:?}");
        log.keep(&chunk("\"b\"", 0)).expect("kept");
        drop(log);
        let (_, saved) = ChunkLog::open(&out, &origin("second"), true).expect("resumed");
        assert_eq!(saved.len(), 1);
        assert_eq!(saved["\"b\""], [chunk("\"b\"", 0)]);
        let headless = serde_json::to_string(&chunk("\"c\"", 0)).expect("json") + "\n";
        std::fs::write(path_for(&out), headless).expect("written");
        let (_, saved) = ChunkLog::open(&out, &origin("second"), true).expect("resumed");
        assert!(saved.is_empty(), "{saved:?}");
    }
}
