//! Tool results in the call cache: a tool the plan marks `cache: true` is answered from the cache
//! when it was called with the same arguments before, the events and the record say so, and
//! `--no-cache`, new arguments or an edited script run it again.

use std::path::Path;

use serde_json::Value;

use crate::{Run, events_in, pagantic_in, step};

const PLAN: &str = r#"version: 1
name: cached-tool
inputs:
  word: { type: string }
tools:
  shout:
    kind: command
    description: Upper-cases a word.
    argv: [sh, shout.sh, "{{ args.word }}"]
    parameters: { type: object, required: [word], properties: { word: { type: string } } }
    side_effects: read
    idempotent: true
    cache: true
    requires: [filesystem]
  sum: { kind: builtin, builtin: calculator, cache: true }
steps:
  - name: shout
    type: tool
    tool: shout
    args: { word: "{{ inputs.word }}" }
  - name: add
    type: tool
    tool: sum
    args: { expression: "2 + 3" }
output: "{{ steps.shout.output }}"
"#;

/// The script notes every time it runs in `runs.log`, which the test reads (so the tool
/// `requires: [filesystem]`: its sandbox would keep it from writing there).
const SCRIPT: &str = "echo run >> runs.log\nprintf '%s\\n' \"$1\" | tr a-z A-Z\n";

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("plan.yaml"), PLAN).expect("plan");
    std::fs::write(dir.path().join("shout.sh"), SCRIPT).expect("script");
    dir
}

/// Runs the plan for `word` with the cache in `dir/cache`; the run, its record, and the
/// `cached` flags of its `tool_end` events.
fn run(dir: &Path, word: &str, extra: &[&str]) -> (Run, Value, Vec<Value>) {
    run_plan(dir, &format!("word={word}"), "cache", extra)
}

/// Runs `dir/plan.yaml` with the input `input` (NAME=VALUE) and the cache `cache`; the run, its
/// record, and the `cached` flags of its `tool_end` events.
fn run_plan(dir: &Path, input: &str, cache: &str, extra: &[&str]) -> (Run, Value, Vec<Value>) {
    let mut args = vec![
        "run",
        "plan.yaml",
        "-i",
        input,
        "--format",
        "json",
        "--events",
        "events.jsonl",
        "--cache",
        cache,
    ];
    args.extend(extra);
    let run = pagantic_in(dir, &args);
    let record = serde_json::from_str(&run.stdout).unwrap_or(Value::Null);
    let flags = events_in(&dir.join("events.jsonl"))
        .into_iter()
        .filter(|event| event["kind"] == "tool_end")
        .map(|event| event["data"]["cached"].clone())
        .collect();
    (run, record, flags)
}

fn runs_of_the_script(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("runs.log"))
        .map(|log| log.lines().count())
        .unwrap_or(0)
}

#[test]
fn a_cached_tool_runs_once_for_the_same_arguments() {
    let dir = workspace();
    let (first, record, flags) = run(dir.path(), "hello", &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(record["output"], "HELLO\n");
    assert_eq!(flags, [false, false]);
    assert_eq!(runs_of_the_script(dir.path()), 1);
    let sum = step(&record, "add")["output"].clone();

    let (again, record, flags) = run(dir.path(), "hello", &[]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(record["output"], "HELLO\n");
    assert_eq!(step(&record, "add")["output"], sum);
    assert_eq!(flags, [true, true]);
    assert_eq!(
        step(&record, "shout")["cached_calls"],
        serde_json::json!(["tool shout"])
    );
    assert_eq!(
        step(&record, "add")["cached_calls"],
        serde_json::json!(["tool sum"])
    );
    assert_eq!(runs_of_the_script(dir.path()), 1, "answered from the cache");

    let (other, record, flags) = run(dir.path(), "world", &[]);
    assert_eq!(other.code, 0, "{}", other.stderr);
    assert_eq!(record["output"], "WORLD\n");
    assert_eq!(flags, [false, true], "new arguments run the tool");
    assert_eq!(runs_of_the_script(dir.path()), 2);

    let (uncached, _, flags) = run(dir.path(), "hello", &["--no-cache"]);
    assert_eq!(uncached.code, 0, "{}", uncached.stderr);
    assert_eq!(flags, [false, false]);
    assert_eq!(runs_of_the_script(dir.path()), 3);

    // --cache-only: a tool needs no model, so a result the cache lacks is computed, not a miss.
    let (only, record, flags) = run(dir.path(), "again", &["--cache-only"]);
    assert_eq!(only.code, 0, "{}", only.stderr);
    assert_eq!(record["output"], "AGAIN\n");
    assert_eq!(flags, [false, true]);
    assert_eq!(runs_of_the_script(dir.path()), 4);

    std::fs::write(dir.path().join("shout.sh"), format!("{SCRIPT}# edited\n")).expect("edit");
    let (edited, _, flags) = run(dir.path(), "hello", &[]);
    assert_eq!(edited.code, 0, "{}", edited.stderr);
    assert_eq!(flags, [false, true], "an edited script is a new tool");
    assert_eq!(runs_of_the_script(dir.path()), 5);
}

const READER: &str = r#"version: 1
name: reader
inputs:
  path: { type: string }
tools:
  read: { kind: builtin, builtin: read_file, root: docs, cache: true }
  cat:
    kind: command
    description: Prints a file.
    argv: [cat, "{{ args.path }}"]
    working_dir: docs
    parameters: { type: object, required: [path], properties: { path: { type: string } } }
    side_effects: read
    idempotent: true
    cache: true
steps:
  - name: read
    type: tool
    tool: read
    args: { path: "{{ inputs.path }}" }
  - name: cat
    type: tool
    tool: cat
    args: { path: "{{ inputs.path }}" }
output: "{{ steps.read.output.content }}|{{ steps.cat.output }}"
"#;

/// A project folder holding the reader plan and `docs/notes.txt` with `notes`.
fn project(parent: &Path, name: &str, notes: &str) -> std::path::PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir_all(dir.join("docs")).expect("project dir");
    std::fs::write(dir.join("plan.yaml"), READER).expect("plan");
    std::fs::write(dir.join("docs/notes.txt"), notes).expect("notes");
    dir
}

/// Runs the reader plan in `dir` with the cache `cache`; its output and the `cached` flags.
fn read_notes(dir: &Path, cache: &Path) -> (String, Vec<Value>) {
    let cache = cache.to_str().expect("utf-8");
    let (run, record, flags) = run_plan(dir, "path=notes.txt", cache, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    (
        record["output"].as_str().unwrap_or_default().to_string(),
        flags,
    )
}

#[test]
fn cached_file_reads_never_answer_for_another_project_or_an_edited_file() {
    let parent = tempfile::tempdir().expect("temp dir");
    let cache = parent.path().join("cache");
    let a = project(parent.path(), "a", "notes of A\n");
    let b = project(parent.path(), "b", "notes of B\n");

    assert_eq!(read_notes(&a, &cache).0, "notes of A\n|notes of A\n");
    let (again, flags) = read_notes(&a, &cache);
    assert_eq!(again, "notes of A\n|notes of A\n");
    assert_eq!(flags, [true, true], "the same project reads from the cache");

    let (other, flags) = read_notes(&b, &cache);
    assert_eq!(other, "notes of B\n|notes of B\n", "B's file, not A's");
    assert_eq!(flags, [false, false]);

    std::fs::write(a.join("docs/notes.txt"), "notes of A, edited\n").expect("edited");
    let (edited, flags) = read_notes(&a, &cache);
    assert_eq!(edited, "notes of A, edited\n|notes of A, edited\n");
    assert_eq!(flags, [false, false], "an edited file is read again");
}
