//! `batch merge`: the parts that a batch's shards wrote, joined into one output by row id.
//!
//! A requeued or re-sharded task can write a row twice: the same result is kept once, a failed
//! line gives way to a successful one, and two different successful results for one id are a
//! conflict. Rows the input holds (or `--expect` counts) and no part does are reported missing,
//! by id when the input is given. The parts' records (`PART.meta.json`) must agree on the input
//! and the plan. The merged summary is counted from the rows themselves, not added up from the
//! shards' summaries: a requeued task's summary counts only its last attempt. Parts are read
//! twice, as streams — once to choose each id's line, once to write the chosen lines in the
//! parts' order — so memory holds one small entry per row, never the rows.
//!
//! Parts are input like any file a user is handed: only regular files are read (a FIFO or
//! `/dev/zero` is refused), no line is held past [`MAX_LINE_BYTES`] nor a row id past
//! [`MAX_ID_BYTES`] (such a line is not a row), and a record's numbers are bounded where it is
//! read. A line that is not a row (cut by a kill, or over the bounds) is a row missing: the batch
//! is complete only when the input, given, shows every row there. Parts without a record
//! cannot be checked to come from one batch: they are refused unless `unchecked` says to merge
//! them anyway.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::input;
use super::part::{self, Origin};
use crate::core::{Failure, FailureCode};

/// What to merge.
#[derive(Debug, Clone)]
pub struct MergeOptions {
    pub parts: Vec<PathBuf>,
    pub out: PathBuf,
    /// The number of rows the whole batch has, when the input is not given.
    pub expect: Option<usize>,
    /// The batch's input, to name the missing rows.
    pub input: Option<String>,
    /// The input's id column (`--id` of the batch).
    pub id_column: Option<String>,
    pub max_row_bytes: u64,
    /// Merge parts without a record (`.meta.json`) anyway, unchecked (`--unchecked`).
    pub unchecked: bool,
}

/// Most bytes of one line of a part held in memory; a longer line is not a row.
pub const MAX_LINE_BYTES: u64 = 64 * 1024 * 1024;

/// Most bytes of a row id kept; a line with a longer one is not a row.
pub const MAX_ID_BYTES: usize = 64 * 1024;

/// What the merge found; written as the merged summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Merged {
    /// Every row there exactly once, no conflict.
    pub complete: bool,
    /// Rows written.
    pub rows: usize,
    pub rows_ok: usize,
    /// Every failed row, those that failed retryably among them.
    pub rows_failed: usize,
    pub rows_failed_retryably: usize,
    /// Lines that repeated a row's result (kept once).
    pub duplicates: usize,
    /// Failed lines of rows another line has a success for (the success is kept).
    pub superseded: usize,
    /// Ids with two different successful results (the first part's is written).
    pub conflicts: Vec<String>,
    /// Rows missing: from the input, or against `--expect`.
    pub missing: usize,
    /// Their ids, when the input was given.
    pub missing_ids: Vec<String>,
    /// Lines that are not a row (cut by a kill, or past the bounds): their rows are missing
    /// unless the input shows another part has them.
    pub unreadable_lines: usize,
    /// Parts merged without a record (`--unchecked`): nothing says they come from one batch.
    pub unchecked_parts: Vec<PathBuf>,
    /// Each part and what wrote it.
    pub parts: Vec<MergedPart>,
    /// Shards of the batch with no part, when the parts' records name the shard count.
    pub missing_shards: Vec<usize>,
}

/// One part, as the merged summary lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MergedPart {
    pub path: PathBuf,
    pub lines: usize,
    /// Its record (None: it has none).
    pub origin: Option<Origin>,
}

/// Where an id's chosen line is, and what it says.
struct Chosen {
    part: usize,
    line: usize,
    ok: bool,
    transient: bool,
    /// A hash of its status and output.
    result: u64,
}

fn unreadable(path: &Path, e: impl std::fmt::Display) -> Failure {
    Failure::new(
        FailureCode::ConfigFileError,
        format!("cannot read {}: {e}", path.display()),
    )
}

/// Merges `options.parts` into `options.out`; an `Err` is a request that cannot be carried out
/// (an unreadable part, parts of different inputs or plans), the [`Merged`] says whether the
/// batch is complete.
pub fn merge(options: &MergeOptions) -> Result<Merged, Failure> {
    let mut merged = Merged::default();
    for part in &options.parts {
        if same_file(part, &options.out) {
            return Err(Failure::new(
                FailureCode::ConfigInvalidInput,
                format!("--out {} is one of the parts", part.display()),
            )
            .with_help("write the merged output somewhere else"));
        }
        merged.parts.push(MergedPart {
            path: part.clone(),
            lines: 0,
            origin: part::read(part)?,
        });
    }
    check_origins(&merged.parts, options.input.as_deref())?;
    merged.unchecked_parts = unrecorded(&merged.parts, options.unchecked)?;
    let chosen = choose(options, &mut merged)?;
    write(options, &chosen, &mut merged)?;
    count_missing(options, &chosen, &mut merged)?;
    // A line that is not a row may be a row missing: only the input, by id, can say it is not.
    let rows_accounted_for = merged.unreadable_lines == 0 || options.input.is_some();
    merged.complete = merged.missing == 0
        && rows_accounted_for
        && merged.conflicts.is_empty()
        && merged.missing_shards.is_empty();
    Ok(merged)
}

/// The parts without a record: refused unless `unchecked`, for then nothing says they are
/// parts of one batch (rows of two plans would merge as one).
fn unrecorded(parts: &[MergedPart], unchecked: bool) -> Result<Vec<PathBuf>, Failure> {
    let unrecorded: Vec<PathBuf> = parts
        .iter()
        .filter(|part| part.origin.is_none())
        .map(|part| part.path.clone())
        .collect();
    if unrecorded.is_empty() || unchecked {
        return Ok(unrecorded);
    }
    let names: Vec<String> = unrecorded
        .iter()
        .map(|path| path.display().to_string())
        .collect();
    Err(Failure::new(
        FailureCode::ConfigInvalidInput,
        format!(
            "the parts cannot be checked to come from one batch: {} has no record (PART.meta.json)",
            names.join(", ")
        ),
    )
    .with_help(
        "merge the parts with the records `run --batch --out` wrote beside them, or pass \
         --unchecked to merge them anyway (rows of different inputs or plans would mix)",
    ))
}

/// The lines of the part at `path`, read as [`input::bounded_lines`] reads them (each at most
/// [`MAX_LINE_BYTES`]; a longer one, or one not UTF-8, an `Err`): only a regular file is read.
fn part_lines(path: &Path) -> Result<impl Iterator<Item = Result<String, String>>, Failure> {
    let file = File::open(path).map_err(|e| unreadable(path, e))?;
    let regular = file.metadata().map_err(|e| unreadable(path, e))?.is_file();
    if !regular {
        return Err(unreadable(path, "not a regular file"));
    }
    Ok(input::bounded_lines(
        Box::new(BufReader::new(file)),
        MAX_LINE_BYTES,
    ))
}

/// Whether `a` and `b` name one file (b may not exist yet).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Refuses parts whose records name different inputs, plans or shard counts, or an input other
/// than the one given.
fn check_origins(parts: &[MergedPart], input: Option<&str>) -> Result<(), Failure> {
    let mut recorded = parts
        .iter()
        .filter_map(|p| p.origin.as_ref().map(|o| (p.path.as_path(), o)));
    let Some((first, expected)) = recorded.next() else {
        return Ok(());
    };
    if let Some(source) = input {
        let given = input::sha256(source)?;
        if given != expected.input_sha256 {
            return Err(Failure::new(
                FailureCode::ConfigInvalidInput,
                format!(
                    "{} was written from another input than {source} (SHA-256 {} there, {} here)",
                    first.display(),
                    expected.input_sha256.as_deref().unwrap_or("(stdin)"),
                    given.as_deref().unwrap_or("(stdin)")
                ),
            ));
        }
    }
    let count = |origin: &Origin| origin.shard.as_ref().map(|s| s.count);
    for (path, origin) in recorded {
        // Shard indexes differ from part to part; the count, input and plan must not.
        let mut found = part::differences(origin, expected, true);
        if count(origin) != count(expected) {
            found.push(format!(
                "one splits the input into {:?} shards, the other into {:?}",
                count(expected),
                count(origin)
            ));
        }
        if !found.is_empty() {
            return Err(Failure::new(
                FailureCode::ConfigInvalidInput,
                format!(
                    "{} and {} are not parts of one batch: {}",
                    first.display(),
                    path.display(),
                    found.join("; ")
                ),
            )
            .with_help("merge only the parts of one batch: one input, one plan, one shard count"));
        }
    }
    Ok(())
}

/// Reads every part once and chooses the line each id keeps.
fn choose(options: &MergeOptions, merged: &mut Merged) -> Result<HashMap<String, Chosen>, Failure> {
    let mut chosen: HashMap<String, Chosen> = HashMap::new();
    let mut conflicts = BTreeSet::new();
    for (part_number, part) in options.parts.iter().enumerate() {
        for (line_number, line) in part_lines(part)?.enumerate() {
            if line
                .as_ref()
                .is_ok_and(|line| line.bytes().all(|b| b.is_ascii_whitespace()))
            {
                continue;
            }
            merged.parts[part_number].lines += 1;
            let read = line
                .ok()
                .and_then(|line| read_line(line.as_bytes(), part_number, line_number));
            let Some((id, candidate)) = read else {
                merged.unreadable_lines += 1;
                continue;
            };
            match chosen.get_mut(&id) {
                None => {
                    chosen.insert(id, candidate);
                }
                Some(kept) if kept.result == candidate.result => merged.duplicates += 1,
                Some(kept) if kept.ok && candidate.ok => {
                    conflicts.insert(id);
                }
                Some(kept) => {
                    merged.superseded += 1;
                    if candidate.ok {
                        *kept = candidate;
                    }
                }
            }
        }
    }
    merged.conflicts = conflicts.into_iter().collect();
    Ok(chosen)
}

/// A line's row id and what it says, or None when it is not a row's line.
fn read_line(line: &[u8], part: usize, line_number: usize) -> Option<(String, Chosen)> {
    let value: Value = serde_json::from_slice(line).ok()?;
    let id = value["row"]
        .as_str()
        .filter(|id| id.len() <= MAX_ID_BYTES)?
        .to_string();
    let ok = value["status"] == "ok";
    let mut hasher = DefaultHasher::new();
    value["status"].to_string().hash(&mut hasher);
    value["output"].to_string().hash(&mut hasher);
    value["error"]["code"].to_string().hash(&mut hasher);
    Some((
        id,
        Chosen {
            part,
            line: line_number,
            ok,
            transient: value["transient"] == true,
            result: hasher.finish(),
        },
    ))
}

/// Writes the chosen lines, part by part, to the output (atomically), and counts them.
fn write(
    options: &MergeOptions,
    chosen: &HashMap<String, Chosen>,
    merged: &mut Merged,
) -> Result<(), Failure> {
    let out = &options.out;
    let cannot_write = |e: &dyn std::fmt::Display| {
        Failure::new(
            FailureCode::ConfigFileError,
            format!("cannot write {}: {e}", out.display()),
        )
    };
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let temporary = tempfile::NamedTempFile::new_in(dir).map_err(|e| cannot_write(&e))?;
    let mut writer = BufWriter::new(temporary);
    let wanted: HashSet<(usize, usize)> = chosen.values().map(|c| (c.part, c.line)).collect();
    for (part_number, part) in options.parts.iter().enumerate() {
        for (line_number, line) in part_lines(part)?.enumerate() {
            if let Ok(line) = line
                && wanted.contains(&(part_number, line_number))
            {
                writer
                    .write_all(line.as_bytes())
                    .and_then(|()| writer.write_all(b"\n"))
                    .map_err(|e| cannot_write(&e))?;
            }
        }
    }
    let file = writer.into_inner().map_err(|e| cannot_write(&e))?;
    file.as_file().sync_all().map_err(|e| cannot_write(&e))?;
    file.persist(out).map_err(|e| cannot_write(&e))?;
    merged.rows = chosen.len();
    for kept in chosen.values() {
        if kept.ok {
            merged.rows_ok += 1;
        } else {
            merged.rows_failed += 1;
            merged.rows_failed_retryably += usize::from(kept.transient);
        }
    }
    Ok(())
}

/// The rows no part holds: by id against the input, else by count against `--expect`; and
/// the shards with no part.
fn count_missing(
    options: &MergeOptions,
    chosen: &HashMap<String, Chosen>,
    merged: &mut Merged,
) -> Result<(), Failure> {
    if let Some(source) = &options.input {
        let rows = input::open(source, options.id_column.as_deref(), options.max_row_bytes)?;
        let mut seen: HashMap<String, usize> = HashMap::new();
        for row in rows {
            let mut id = match row {
                Ok(row) => row.id,
                Err(bad) => bad.id,
            };
            // As the batch keys a repeated `--id` value: `id#2`, `id#3`…
            let occurrence = seen.entry(id.clone()).or_insert(0);
            *occurrence += 1;
            if *occurrence > 1 && options.id_column.is_some() {
                id = format!("{id}#{occurrence}");
            }
            if !chosen.contains_key(&id) {
                merged.missing_ids.push(id);
            }
        }
        merged.missing = merged.missing_ids.len();
    } else if let Some(expect) = options.expect {
        merged.missing = expect.saturating_sub(chosen.len());
    }
    let counts: BTreeSet<usize> = merged
        .parts
        .iter()
        .filter_map(|p| p.origin.as_ref()?.shard.as_ref().map(|s| s.count))
        .collect();
    if let Some(&count) = counts.first() {
        let present: BTreeSet<usize> = merged
            .parts
            .iter()
            .filter_map(|p| p.origin.as_ref()?.shard.as_ref().map(|s| s.index))
            .collect();
        merged.missing_shards = (0..count).filter(|i| !present.contains(i)).collect();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Shard;

    fn line(id: &str, status: &str, output: &str, transient: bool) -> String {
        serde_json::json!({
            "row": id, "status": status, "output": output, "run_id": format!("run-{id}-{output}"),
            "transient": transient,
        })
        .to_string()
    }

    fn write_part(
        dir: &Path,
        name: &str,
        lines: &[String],
        shard: Option<(usize, usize)>,
    ) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(
            &path,
            lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
        )
        .expect("part");
        if let Some((index, count)) = shard {
            let origin = Origin {
                shard: Some(Shard {
                    index,
                    count,
                    from: None,
                }),
                input_sha256: Some("input".into()),
                plan_sha256: "plan".into(),
            };
            part::write(&path, &origin).expect("record");
        }
        path
    }

    fn options(dir: &Path, parts: Vec<PathBuf>, expect: Option<usize>) -> MergeOptions {
        MergeOptions {
            parts,
            out: dir.join("merged.jsonl"),
            expect,
            input: None,
            id_column: None,
            max_row_bytes: input::DEFAULT_MAX_ROW_BYTES,
            unchecked: true,
        }
    }

    /// A row written twice (a requeued task) is kept once; a failed line gives way to the
    /// success; every shard is there.
    #[test]
    fn duplicates_are_kept_once_and_a_success_supersedes_a_failure() {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = write_part(
            dir.path(),
            "a.jsonl",
            &[line("1", "ok", "one", false), line("3", "error", "", true)],
            Some((0, 2)),
        );
        let b = write_part(
            dir.path(),
            "b.jsonl",
            &[
                line("2", "ok", "two", false),
                line("1", "ok", "one", false),
                line("3", "ok", "three", false),
                "{\"row\": \"4\", \"sta".to_string(),
            ],
            Some((1, 2)),
        );
        let merged = merge(&options(dir.path(), vec![a, b], Some(3))).expect("merges");
        assert!(
            !merged.complete,
            "a cut line may be a row missing: only the input can say: {merged:?}"
        );
        assert_eq!((merged.rows, merged.rows_ok), (3, 3));
        assert_eq!((merged.duplicates, merged.superseded), (1, 1));
        assert_eq!(merged.unreadable_lines, 1);
        let text = std::fs::read_to_string(dir.path().join("merged.jsonl")).expect("out");
        let ids: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("json")["row"].to_string())
            .collect();
        assert_eq!(ids, ["\"1\"", "\"2\"", "\"3\""]);
    }

    #[test]
    fn two_different_results_for_one_id_are_a_conflict() {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = write_part(
            dir.path(),
            "a.jsonl",
            &[line("1", "ok", "one", false)],
            None,
        );
        let b = write_part(
            dir.path(),
            "b.jsonl",
            &[line("1", "ok", "uno", false)],
            None,
        );
        let merged = merge(&options(dir.path(), vec![a, b], None)).expect("merges");
        assert!(!merged.complete);
        assert_eq!(merged.conflicts, ["1"]);
    }

    /// Missing rows by count against --expect, by id against the input, and missing shards.
    #[test]
    fn missing_rows_are_counted_or_named_and_missing_shards_listed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = write_part(
            dir.path(),
            "a.jsonl",
            &[line("1", "ok", "one", false)],
            Some((0, 3)),
        );
        let by_count = merge(&options(dir.path(), vec![a.clone()], Some(3))).expect("merges");
        assert_eq!(by_count.missing, 2);
        assert_eq!(by_count.missing_shards, [1, 2]);
        assert!(!by_count.complete);
        let input = dir.path().join("input.jsonl");
        std::fs::write(&input, "{\"q\": 1}\n{\"q\": 2}\n").expect("input");
        let mut named = options(dir.path(), vec![dir.path().join("plain.jsonl")], None);
        std::fs::write(
            &named.parts[0],
            format!("{}\n", line("1", "ok", "one", false)),
        )
        .expect("part");
        named.input = Some(input.display().to_string());
        let by_id = merge(&named).expect("merges");
        assert_eq!(by_id.missing_ids, ["2"]);
    }

    #[test]
    fn parts_of_another_plan_or_input_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = write_part(dir.path(), "a.jsonl", &[], Some((0, 2)));
        let b = write_part(dir.path(), "b.jsonl", &[], Some((1, 2)));
        let mut other = part::read(&b).expect("reads").expect("a record");
        other.plan_sha256 = "another".into();
        part::write(&b, &other).expect("record");
        let refused = merge(&options(dir.path(), vec![a.clone(), b], None)).expect_err("refused");
        assert!(
            refused.message.contains("not parts of one batch"),
            "{}",
            refused.message
        );
        let same = merge(&options(dir.path(), vec![a.clone()], None));
        assert!(same.is_ok());
        let onto_a_part = MergeOptions {
            out: a.clone(),
            ..options(dir.path(), vec![a], None)
        };
        assert!(merge(&onto_a_part).is_err());
    }
}
