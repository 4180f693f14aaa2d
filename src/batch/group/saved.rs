//! The partial results of a reduce, kept beside its output as `OUT.chunks.jsonl`: one line per
//! finished chunk run that is not a group's last (the last one's result is the group's own line
//! in the output), written whole and flushed as the run ends, like output lines. `--resume` reads
//! them back, so a group interrupted mid-fold starts again where it was: no finished chunk runs
//! twice. A cut last line (a kill mid-write) is ignored; its chunk runs again.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::batch::output::Sink;
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
    /// Opens the log of `out`: resuming, returns the chunks it holds by group (a cut last line
    /// dropped); otherwise starts it empty.
    pub fn open(
        out: &Path,
        resume: bool,
    ) -> Result<(ChunkLog, HashMap<String, Vec<SavedChunk>>), Failure> {
        let path = path_for(out);
        let mut saved: HashMap<String, Vec<SavedChunk>> = HashMap::new();
        if resume && path.exists() {
            let reader = BufReader::new(File::open(&path).map_err(|e| log_failure(&path, e))?);
            for line in reader.split(b'\n') {
                let line = line.map_err(|e| log_failure(&path, e))?;
                // A line cut by a kill does not parse: its chunk runs again.
                if let Ok(chunk) = serde_json::from_slice::<SavedChunk>(&line) {
                    saved.entry(chunk.group.clone()).or_default().push(chunk);
                }
            }
            // Its cut line, if any, is dropped from the file too, so the next line starts clean.
            let mut kept = String::new();
            for chunk in saved.values().flatten() {
                kept.push_str(&serde_json::to_string(chunk).map_err(|e| log_failure(&path, e))?);
                kept.push('\n');
            }
            crate::core::file::write_atomic(&path, kept.as_bytes())
                .map_err(|e| log_failure(&path, e))?;
        } else {
            std::fs::write(&path, b"").map_err(|e| log_failure(&path, e))?;
        }
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

    #[test]
    fn kept_chunks_come_back_on_resume_and_a_cut_line_is_dropped() {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("groups.jsonl");
        let (mut log, saved) = ChunkLog::open(&out, false).expect("opened");
        assert!(saved.is_empty());
        log.keep(&chunk("\"a\"", 0)).expect("kept");
        log.keep(&chunk("\"a\"", 1)).expect("kept");
        drop(log);
        let path = path_for(&out);
        let mut text = std::fs::read_to_string(&path).expect("read");
        text.push_str("{\"group\":\"\\\"a\\\"\",\"lev");
        std::fs::write(&path, text).expect("cut");
        let (_, saved) = ChunkLog::open(&out, true).expect("resumed");
        assert_eq!(saved["\"a\""], [chunk("\"a\"", 0), chunk("\"a\"", 1)]);
        let cleaned = std::fs::read_to_string(&path).expect("read");
        assert_eq!(cleaned.lines().count(), 2, "{cleaned}");
        let (_, fresh) = ChunkLog::open(&out, false).expect("a new run");
        assert!(fresh.is_empty(), "a run that does not resume starts empty");
    }
}
