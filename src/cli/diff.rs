//! `pagantic diff A B` — what changed between two runs: two run records (`run --format json`) or
//! two batch outputs (`run --batch … --out`), joined row by row on their row ids.
//!
//! A run or row *differs* when its status or output changed (or, in a record, any step's status
//! or output); tokens, cost and time are reported as deltas but never make two runs differ, since
//! they move between identical runs. Changed text outputs are shown as a unified line diff, bounded:
//! an output of more than [`MAX_DIFF_LINES`] lines, or one reached after the comparison's
//! [`DIFF_TIME`] is spent, is summarised (its line counts) with a note that the diff was cut. The
//! text report shows control characters as escapes, so an answer cannot drive the terminal. Exit 0
//! when nothing differs, 1 when something does, 2 when an input cannot be read as either kind.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use serde::Serialize;
use serde_json::{Map, Value};
use similar::TextDiff;

use super::{EXIT_FAILED, EXIT_INVALID, EXIT_OK};
use crate::core::file::{DATA_LIMIT, read_bounded};
use crate::core::text::terminal_safe;

/// The most lines either side of a changed output may have to be diffed line by line.
const MAX_DIFF_LINES: usize = 20_000;

/// The time the line diffs of one comparison may take together; a diff still running at the end
/// shows the rest of its lines as replaced, and later changed outputs are summarised.
const DIFF_TIME: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DiffFormat {
    /// What changed, readable.
    Text,
    /// The comparison as one JSON object.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The earlier run: a run record (`run --format json`) or a batch output (JSON Lines).
    a: PathBuf,
    /// The later run, of the same kind.
    b: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
    format: DiffFormat,
}

/// One side's measurable cost: tokens, money (when priced) and time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
struct Spend {
    tokens: i64,
    cost: Option<f64>,
    ms: f64,
}

impl Spend {
    fn of(entry: &Value) -> Self {
        let usage = &entry["usage"];
        let count = |key: &str| usage[key].as_i64().unwrap_or(0);
        Spend {
            // Counts from a file: added saturating, never overflowing.
            tokens: count("prompt_tokens").saturating_add(count("completion_tokens")),
            cost: entry["cost"].as_f64(),
            ms: entry["duration_ms"].as_f64().unwrap_or(0.0),
        }
    }

    fn add(self, other: Spend) -> Spend {
        Spend {
            tokens: self.tokens.saturating_add(other.tokens),
            cost: match (self.cost, other.cost) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
            },
            ms: self.ms + other.ms,
        }
    }
}

/// One run, row or step whose outcome changed, or whose spend moved.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Change {
    /// `run`, a step's name, or a row id (with `step` for a step of a row).
    at: String,
    status: (Value, Value),
    /// The output before and after, when it changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<(Value, Value)>,
    a: Spend,
    b: Spend,
}

impl Change {
    fn differs(&self) -> bool {
        self.status.0 != self.status.1 || self.output.is_some()
    }
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Comparison {
    kind: &'static str,
    identical: bool,
    /// Entries whose status or output changed.
    changed: Vec<Change>,
    /// Rows only in A / only in B (batch outputs).
    only_a: Vec<String>,
    only_b: Vec<String>,
    totals: (Spend, Spend),
}

/// What a file holds.
enum Runs {
    Record(Value),
    /// Rows by row id, in the file's order.
    Batch(Vec<(String, Value)>),
}

fn read(path: &Path) -> Result<Runs, String> {
    let text = read_bounded(path, DATA_LIMIT).map_err(|e| e.to_string())?;
    if let Ok(value) = serde_json::from_str::<Value>(&text)
        && value.get("steps").is_some()
        && value.get("row").is_none()
    {
        return Ok(Runs::Record(value));
    }
    let mut rows = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row: Value = serde_json::from_str(line).map_err(|e| {
            format!(
                "{}:{}: neither a run record nor a batch output line: {e}",
                path.display(),
                number + 1
            )
        })?;
        let id = match &row["row"] {
            Value::String(id) => id.clone(),
            Value::Null => {
                return Err(format!(
                    "{}:{}: a batch output line has a `row` id",
                    path.display(),
                    number + 1
                ));
            }
            other => other.to_string(),
        };
        rows.push((id, row));
    }
    Ok(Runs::Batch(rows))
}

/// The changes between two entries (a record, a row) and between their steps, matched by name.
fn compare_entries(at: &str, a: &Value, b: &Value, out: &mut Vec<Change>) {
    out.push(change(at.to_string(), a, b));
    let steps = |v: &Value| -> BTreeMap<String, Value> {
        v["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| Some((s["name"].as_str()?.to_string(), s.clone())))
            .collect()
    };
    let (before, after) = (steps(a), steps(b));
    let prefix = if at == "run" {
        String::new()
    } else {
        format!("{at} ")
    };
    for (name, step) in &before {
        let other = after.get(name).unwrap_or(&Value::Null);
        out.push(change(format!("{prefix}step {name}"), step, other));
    }
    for (name, step) in &after {
        if !before.contains_key(name) {
            out.push(change(format!("{prefix}step {name}"), &Value::Null, step));
        }
    }
}

fn change(at: String, a: &Value, b: &Value) -> Change {
    let output = |v: &Value| v.get("output").cloned().unwrap_or(Value::Null);
    let (out_a, out_b) = (output(a), output(b));
    Change {
        at,
        status: (a["status"].clone(), b["status"].clone()),
        output: (out_a != out_b).then_some((out_a, out_b)),
        a: Spend::of(a),
        b: Spend::of(b),
    }
}

fn compare(a: Runs, b: Runs) -> Result<Comparison, String> {
    let mut changes = Vec::new();
    let (kind, only_a, only_b, totals) = match (a, b) {
        (Runs::Record(a), Runs::Record(b)) => {
            compare_entries("run", &a, &b, &mut changes);
            (
                "record",
                Vec::new(),
                Vec::new(),
                (Spend::of(&a), Spend::of(&b)),
            )
        }
        (Runs::Batch(a), Runs::Batch(b)) => {
            let later: Map<String, Value> = b.iter().cloned().collect();
            let earlier: Map<String, Value> = a.iter().cloned().collect();
            let mut totals = (Spend::default(), Spend::default());
            let mut only_a = Vec::new();
            for (id, row) in &a {
                totals.0 = totals.0.add(Spend::of(row));
                match later.get(id) {
                    Some(other) => compare_entries(id, row, other, &mut changes),
                    None => only_a.push(id.clone()),
                }
            }
            let mut only_b = Vec::new();
            for (id, row) in &b {
                totals.1 = totals.1.add(Spend::of(row));
                if !earlier.contains_key(id) {
                    only_b.push(id.clone());
                }
            }
            ("batch", only_a, only_b, totals)
        }
        _ => return Err("one file is a run record and the other a batch output".into()),
    };
    let identical = only_a.is_empty() && only_b.is_empty() && !changes.iter().any(Change::differs);
    changes.retain(Change::differs);
    Ok(Comparison {
        kind,
        identical,
        changed: changes,
        only_a,
        only_b,
        totals,
    })
}

pub fn run(args: &Args) -> io::Result<u8> {
    let comparison = read(&args.a)
        .and_then(|a| Ok((a, read(&args.b)?)))
        .and_then(|(a, b)| compare(a, b));
    let comparison = match comparison {
        Ok(comparison) => comparison,
        Err(message) => {
            writeln!(io::stderr(), "error: {}", terminal_safe(&message))?;
            return Ok(EXIT_INVALID);
        }
    };
    let mut stdout = io::stdout().lock();
    match args.format {
        DiffFormat::Json => {
            serde_json::to_writer_pretty(&mut stdout, &comparison).map_err(io::Error::other)?;
            writeln!(stdout)?;
        }
        DiffFormat::Text => write_text(&mut stdout, &comparison)?,
    }
    stdout.flush()?;
    Ok(if comparison.identical {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}

/// Writes one line of the text report, its control characters shown as escapes.
fn safe_line(out: &mut impl Write, line: &str) -> io::Result<()> {
    writeln!(out, "{}", terminal_safe(line))
}

fn write_text(out: &mut impl Write, comparison: &Comparison) -> io::Result<()> {
    let deadline = Instant::now() + DIFF_TIME;
    for change in &comparison.changed {
        let (was, now) = &change.status;
        if was == now {
            safe_line(out, &format!("~ {} ({})", change.at, plain(now)))?;
        } else {
            let line = format!("~ {}: {} → {}", change.at, plain(was), plain(now));
            safe_line(out, &line)?;
        }
        if let Some((before, after)) = &change.output {
            for line in line_diff(&as_text(before), &as_text(after), deadline) {
                safe_line(out, &format!("    {line}"))?;
            }
        }
    }
    for id in &comparison.only_a {
        safe_line(out, &format!("- {id} (only in A)"))?;
    }
    for id in &comparison.only_b {
        safe_line(out, &format!("+ {id} (only in B)"))?;
    }
    let (a, b) = comparison.totals;
    let cost = match (a.cost, b.cost) {
        (None, None) => String::new(),
        (x, y) => format!(", cost {:.6} → {:.6}", x.unwrap_or(0.0), y.unwrap_or(0.0)),
    };
    writeln!(
        out,
        "{}: tokens {} → {} ({:+}){cost}, time {:.0} ms → {:.0} ms",
        if comparison.identical {
            "identical"
        } else {
            "different"
        },
        a.tokens,
        b.tokens,
        b.tokens - a.tokens,
        a.ms,
        b.ms
    )
}

/// The unified diff of two outputs, or a summary that says the diff was cut: when either has more
/// than [`MAX_DIFF_LINES`] lines, or `deadline` has passed before it starts. A diff that reaches
/// `deadline` shows its remaining lines as replaced, and says so.
fn line_diff(before: &str, after: &str, deadline: Instant) -> Vec<String> {
    let counts = (before.lines().count(), after.lines().count());
    let cut = |why: String| {
        vec![format!(
            "(diff cut: {why}; the output has {} lines in A and {} in B)",
            counts.0, counts.1
        )]
    };
    if counts.0.max(counts.1) > MAX_DIFF_LINES {
        return cut(format!("over {MAX_DIFF_LINES} lines"));
    }
    if Instant::now() >= deadline {
        return cut(format!(
            "the {} s for line diffs is spent",
            DIFF_TIME.as_secs()
        ));
    }
    let diff = TextDiff::configure()
        .deadline(deadline)
        .diff_lines(before, after);
    let mut lines: Vec<String> = diff
        .unified_diff()
        .context_radius(2)
        .to_string()
        .lines()
        .map(str::to_string)
        .collect();
    if Instant::now() >= deadline {
        lines.push(format!(
            "(diff cut: the {} s for line diffs ran out; the lines after that point are shown as replaced)",
            DIFF_TIME.as_secs()
        ));
    }
    lines
}

/// A status or id as the user wrote it: strings without quotes.
fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => "absent".into(),
        other => other.to_string(),
    }
}

/// An output as lines to diff: text as it is, JSON pretty-printed, ending in a newline.
fn as_text(value: &Value) -> String {
    let mut text = match value {
        Value::String(text) => text.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn record(output: &str, step_output: &str, tokens: i64) -> Runs {
        Runs::Record(json!({
            "status": "complete", "output": output, "duration_ms": 10.0,
            "usage": { "prompt_tokens": tokens, "completion_tokens": 0 }, "cost": null,
            "steps": [
                { "name": "draft", "status": "ok", "output": "same", "usage": {}, "duration_ms": 1.0 },
                { "name": "answer", "status": "ok", "output": step_output, "usage": {}, "duration_ms": 1.0 },
            ],
        }))
    }

    #[test]
    fn records_that_differ_only_in_spend_are_identical() {
        let comparison = compare(record("x", "x", 5), record("x", "x", 9)).expect("compared");
        assert!(comparison.identical);
        assert!(comparison.changed.is_empty());
        assert_eq!(
            (comparison.totals.0.tokens, comparison.totals.1.tokens),
            (5, 9)
        );
    }

    #[test]
    fn a_changed_step_output_is_named_with_its_step() {
        let comparison = compare(record("x", "old", 5), record("y", "new", 5)).expect("compared");
        assert!(!comparison.identical);
        let at: Vec<&str> = comparison.changed.iter().map(|c| c.at.as_str()).collect();
        assert_eq!(at, ["run", "step answer"]);
        let mut text = Vec::new();
        write_text(&mut text, &comparison).expect("written");
        let text = String::from_utf8(text).expect("utf-8");
        assert!(text.contains("~ step answer (ok)\n"), "{text}");
        assert!(text.contains("-old\n") && text.contains("+new\n"), "{text}");
        assert!(
            text.ends_with("different: tokens 5 → 5 (+0), time 10 ms → 10 ms\n"),
            "{text}"
        );
    }

    fn row(id: &str, status: &str, output: &str) -> (String, Value) {
        let row = json!({ "row": id, "status": status, "output": output,
                          "usage": { "prompt_tokens": 1, "completion_tokens": 1 }, "duration_ms": 2.0 });
        (id.to_string(), row)
    }

    #[test]
    fn batch_rows_are_joined_by_id_whatever_their_order() {
        let a = Runs::Batch(vec![
            row("1", "ok", "a"),
            row("2", "ok", "b"),
            row("3", "ok", "c"),
        ]);
        let b = Runs::Batch(vec![
            row("4", "ok", "d"),
            row("2", "error", "b"),
            row("1", "ok", "a"),
        ]);
        let comparison = compare(a, b).expect("compared");
        assert!(!comparison.identical);
        assert_eq!(comparison.changed.len(), 1);
        assert_eq!(comparison.changed[0].at, "2");
        assert_eq!(
            comparison.changed[0].output, None,
            "only the status changed"
        );
        assert_eq!(comparison.only_a, ["3"]);
        assert_eq!(comparison.only_b, ["4"]);
        assert_eq!(comparison.totals.0.tokens, 6);
    }

    #[test]
    fn an_output_past_the_line_bound_is_summarised_as_cut() {
        let long = |prefix: &str| {
            (0..MAX_DIFF_LINES + 1)
                .map(|n| format!("{prefix}{n}\n"))
                .collect::<String>()
        };
        let started = Instant::now();
        let lines = line_diff(&long("a"), &long("b"), started + DIFF_TIME);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(
            lines,
            ["(diff cut: over 20000 lines; the output has 20001 lines in A and 20001 in B)"]
        );
        let spent = line_diff("a\n", "b\n", started);
        assert_eq!(spent.len(), 1);
        assert!(spent[0].starts_with("(diff cut: the 5 s for line diffs is spent"));
        let small = line_diff("a\n", "b\n", Instant::now() + DIFF_TIME);
        assert!(small.contains(&"-a".to_string()) && small.contains(&"+b".to_string()));
    }

    #[test]
    fn the_text_report_shows_control_characters_as_escapes() {
        let answer =
            |text: &str| Runs::Record(json!({ "status": "complete", "output": text, "steps": [] }));
        let comparison =
            compare(answer("ok"), answer("\u{1b}]0;owned\u{7}\u{1b}[2J")).expect("compared");
        let mut text = Vec::new();
        write_text(&mut text, &comparison).expect("written");
        let text = String::from_utf8(text).expect("utf-8");
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text}"
        );
        assert!(text.contains("+\\u{1b}]0;owned\\u{7}\\u{1b}[2J"), "{text}");
    }

    #[test]
    fn a_record_and_a_batch_do_not_compare() {
        let error = compare(record("x", "x", 1), Runs::Batch(Vec::new())).expect_err("refused");
        assert!(error.contains("run record"), "{error}");
    }
}
