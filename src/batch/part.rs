//! What wrote a batch output: the shard, the input's SHA-256 and the plan's, kept beside the
//! output as `OUT.meta.json` (written atomically before the first row), so that `--resume` —
//! what a requeued array task runs — can refuse an output another shard, input or plan wrote
//! instead of silently mixing their rows, and `batch merge` can check its parts belong together.
//! The output itself stays plain JSON Lines, one line per row.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::shard::Shard;
use crate::core::{Failure, FailureCode};

/// What a batch output was written by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Origin {
    /// The shard (None: the whole input).
    pub shard: Option<Shard>,
    /// The input's SHA-256 (None for stdin).
    pub input_sha256: Option<String>,
    /// The SHA-256 of the plan's text and of everything its lockfile pins (models, prompt,
    /// schema and sub-plan files).
    pub plan_sha256: String,
}

/// The record beside the output `part`: `PART.meta.json`.
pub fn record_path(part: &Path) -> PathBuf {
    let mut name = part.as_os_str().to_owned();
    name.push(".meta.json");
    PathBuf::from(name)
}

/// Writes `origin` beside `part`, atomically.
pub fn write(part: &Path, origin: &Origin) -> Result<(), Failure> {
    let path = record_path(part);
    let mut text = serde_json::to_string_pretty(origin).unwrap_or_default();
    text.push('\n');
    crate::core::file::write_atomic(&path, text.as_bytes()).map_err(|e| {
        Failure::new(
            FailureCode::ConfigFileError,
            format!("cannot write {}: {e}", path.display()),
        )
    })
}

/// Most bytes a record may have: what `write` makes is a few hundred.
const RECORD_LIMIT: u64 = 64 * 1024;

/// The origin recorded beside `part`; None when there is no record. A record is read only from a regular file of at most [`RECORD_LIMIT`]
/// bytes, and its shard must be one that can exist (at most [`super::shard::MAX_SHARDS`]).
pub fn read(part: &Path) -> Result<Option<Origin>, Failure> {
    let path = record_path(part);
    let text = match crate::core::file::read_bounded(&path, RECORD_LIMIT) {
        Ok(text) => text,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(Failure::from(e)),
    };
    let not_a_record = |why: String| {
        Failure::new(
            FailureCode::ConfigInvalidInput,
            format!(
                "{} is not a record of a batch output: {why}",
                path.display()
            ),
        )
        .with_help("delete it to take the output as this run's")
    };
    let origin: Origin = serde_json::from_str(&text).map_err(|e| not_a_record(e.to_string()))?;
    if let Some(shard) = &origin.shard {
        shard.check().map_err(|e| not_a_record(e.to_string()))?;
    }
    Ok(Some(origin))
}

/// What differs between the origin of an output (`was`) and this run's (`now`), one line each;
/// with `reshard`, another shard is not a difference.
pub fn differences(was: &Origin, now: &Origin, reshard: bool) -> Vec<String> {
    let mut found = Vec::new();
    let shard_of = |origin: &Origin| origin.shard.as_ref().map(|s| (s.index, s.count));
    if !reshard && shard_of(was) != shard_of(now) {
        let show = |origin: &Origin| match &origin.shard {
            Some(shard) => format!("shard {} of {}", shard.index, shard.count),
            None => "the whole input (no --shard)".to_string(),
        };
        found.push(format!(
            "it was written for {}, this run is {}",
            show(was),
            show(now)
        ));
    }
    if was.input_sha256 != now.input_sha256 {
        found.push(format!(
            "its input had SHA-256 {}, this run's has {}",
            was.input_sha256.as_deref().unwrap_or("(stdin)"),
            now.input_sha256.as_deref().unwrap_or("(stdin)")
        ));
    }
    if was.plan_sha256 != now.plan_sha256 {
        found.push(format!(
            "its plan had SHA-256 {}, this run's has {} (the plan, a prompt, schema or model changed)",
            was.plan_sha256, now.plan_sha256
        ));
    }
    found
}

/// Refuses to resume `part` when its record says another shard, input or plan wrote it
/// (`reshard`: another shard is fine), or when it holds rows and no record says what wrote them;
/// then records `now` as its origin.
pub fn adopt(part: &Path, now: &Origin, reshard: bool) -> Result<(), Failure> {
    let recorded = read(part)?;
    let holds_rows = std::fs::metadata(part).is_ok_and(|m| m.is_file() && m.len() > 0);
    if recorded.is_none() && holds_rows {
        return Err(Failure::new(
            FailureCode::ConfigInvalidInput,
            format!(
                "cannot resume {}: it holds rows, and no record ({}) says which input, plan and \
                 shard wrote them",
                part.display(),
                record_path(part).display()
            ),
        )
        .with_help("write to another --out, or delete the output to start over"));
    }
    if let Some(was) = recorded {
        let found = differences(&was, now, reshard);
        if !found.is_empty() {
            let shard_only = differences(&was, now, true).is_empty();
            let help = if shard_only {
                "pass the shard it was written for, or --reshard to take it as this shard's \
                 (its rows are kept and skipped; `batch merge` keeps one copy of a row written twice)"
            } else {
                "write to another --out, or delete the output and its .meta.json to start over"
            };
            return Err(Failure::new(
                FailureCode::ConfigInvalidInput,
                format!("cannot resume {}: {}", part.display(), found.join("; ")),
            )
            .with_help(help));
        }
    }
    write(part, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(index: usize, count: usize, input: &str, plan: &str) -> Origin {
        Origin {
            shard: Some(Shard {
                index,
                count,
                from: None,
            }),
            input_sha256: Some(input.into()),
            plan_sha256: plan.into(),
        }
    }

    #[test]
    fn another_shard_input_or_plan_is_a_difference_and_reshard_forgives_the_shard() {
        let was = origin(0, 2, "in", "plan");
        assert!(differences(&was, &was.clone(), false).is_empty());
        let other_shape = origin(0, 1, "in", "plan");
        let found = differences(&was, &other_shape, false);
        assert_eq!(
            found,
            ["it was written for shard 0 of 2, this run is shard 0 of 1"]
        );
        assert!(differences(&was, &other_shape, true).is_empty());
        let everything = differences(&was, &origin(1, 2, "other", "changed"), true);
        assert_eq!(everything.len(), 2, "{everything:?}");
        assert!(everything[0].contains("input had SHA-256 in"));
        assert!(everything[1].contains("plan had SHA-256 plan"));
    }

    /// An output that holds rows with no record of what wrote them is not resumed: its rows
    /// could be another input's or plan's. An empty one is taken as this run's.
    #[test]
    fn resuming_refuses_rows_without_a_record() {
        let dir = tempfile::tempdir().expect("temp dir");
        let part = dir.path().join("out.jsonl");
        std::fs::write(&part, "{\"row\":\"1\",\"status\":\"ok\"}\n").expect("rows");
        let refused = adopt(&part, &origin(0, 1, "in", "plan"), false).expect_err("refused");
        assert!(refused.message.contains("no record"), "{}", refused.message);
        std::fs::write(&part, "").expect("emptied");
        adopt(&part, &origin(0, 1, "in", "plan"), false).expect("nothing to mix up");
    }

    #[test]
    fn resuming_refuses_another_writer_and_records_this_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let part = dir.path().join("part-0-of-2.jsonl");
        let first = origin(0, 2, "in", "plan");
        adopt(&part, &first, false).expect("no record yet");
        assert_eq!(read(&part).expect("reads"), Some(first.clone()));
        let refused = adopt(&part, &origin(0, 1, "in", "plan"), false).expect_err("refused");
        assert!(
            refused.message.contains("shard 0 of 2"),
            "{}",
            refused.message
        );
        assert!(refused.help.is_some_and(|h| h.contains("--reshard")));
        adopt(&part, &origin(0, 1, "in", "plan"), true).expect("re-sharded on request");
        assert_eq!(
            read(&part).expect("reads"),
            Some(origin(0, 1, "in", "plan"))
        );
        let other_plan = adopt(&part, &origin(0, 1, "in", "new"), true).expect_err("refused");
        assert!(other_plan.help.is_some_and(|h| h.contains("another --out")));
    }
}
