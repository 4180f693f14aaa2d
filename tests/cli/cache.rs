//! The call cache: re-runs answered from it, what changes a key, opting out, `--cache-only`,
//! several processes at once, and a broken database. Each test shares one cache directory
//! between its own invocations (`--cache DIR`) and nothing else.

use std::path::Path;

use serde_json::Value;

use crate::{Run, events_in, pagantic_in, step};

pub const PLAN: &str = r#"version: 1
name: three-calls
inputs:
  text: { type: string }
models:
  echo: { kind: scripted, echo: true, stall: 5ms }
steps:
  - name: first
    type: infer
    model: echo
    template: "first: {{ inputs.text }}"
  - name: second
    type: infer
    model: echo
    template: "second: {{ steps.first.output }}"
  - name: third
    type: infer
    model: echo
    template: "third: {{ steps.second.output }}"
"#;

pub const ROWS: usize = 12;

/// A directory with the plan (as `plan.yaml`, `third` step's template edited by `edit`) and
/// `rows.jsonl`.
pub fn workspace(edit: impl Fn(&str) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("plan.yaml"), edit(PLAN)).expect("plan");
    let rows: String = (0..ROWS)
        .map(|i| format!("{{\"id\": \"r{i}\", \"text\": \"row {i}\"}}\n"))
        .collect();
    std::fs::write(dir.path().join("rows.jsonl"), rows).expect("rows");
    dir
}

/// Runs the batch with the cache in `dir/cache` and `extra` flags; the summary and the output.
fn batch(dir: &Path, extra: &[&str]) -> (Run, Value, String) {
    batch_with(dir, &[&["--cache", "cache"], extra].concat())
}

/// Runs the batch over `rows.jsonl` with `flags` (which say where answers come from); the
/// summary and the output.
pub fn batch_with(dir: &Path, flags: &[&str]) -> (Run, Value, String) {
    let mut args = vec![
        "run",
        "plan.yaml",
        "--batch",
        "rows.jsonl",
        "--id",
        "id",
        "--ordered",
        "-j",
        "4",
        "--out",
        "out.jsonl",
        "--summary",
        "summary.json",
    ];
    args.extend_from_slice(flags);
    let _ = std::fs::remove_file(dir.join("out.jsonl"));
    let run = pagantic_in(dir, &args);
    let summary = std::fs::read_to_string(dir.join("summary.json"))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    let out = std::fs::read_to_string(dir.join("out.jsonl")).unwrap_or_default();
    (run, summary, out)
}

/// The output lines without what differs between two runs of the same rows (timings, run ids).
pub fn outputs(out: &str) -> Vec<Value> {
    out.lines()
        .map(|line| {
            let line: Value = serde_json::from_str(line).expect("a JSON line");
            serde_json::json!({ "row": line["row"], "status": line["status"], "output": line["output"] })
        })
        .collect()
}

pub fn calls_and_hits(summary: &Value) -> (u64, u64, u64) {
    (
        summary["model_calls"].as_u64().expect("model_calls"),
        summary["cache"]["hits"].as_u64().expect("hits"),
        summary["cache"]["misses"].as_u64().expect("misses"),
    )
}

#[test]
fn a_second_run_is_answered_from_the_cache_without_a_model_call() {
    let dir = workspace(str::to_string);
    let (first, summary, first_out) = batch(dir.path(), &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let all = 3 * ROWS as u64;
    assert_eq!(calls_and_hits(&summary), (all, 0, all));
    let (second, summary, second_out) = batch(dir.path(), &[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(calls_and_hits(&summary), (0, all, 0));
    assert_eq!(outputs(&first_out), outputs(&second_out));
    assert!(
        second.stderr.contains(&format!(
            "call cache: {all} hits, 0 misses; 0 model calls made"
        )),
        "{}",
        second.stderr
    );
    let stats = pagantic_in(
        dir.path(),
        &["cache", "stats", "--cache", "cache", "--format", "json"],
    );
    let stats: Value = serde_json::from_str(&stats.stdout).expect("stats JSON");
    assert_eq!(stats["kinds"][0]["kind"], "call");
    assert_eq!(stats["kinds"][0]["entries"], all);
    assert_eq!(stats["recent_runs"], 2);
    assert_eq!(stats["recent"]["hits"], all);
}

#[test]
fn changing_the_last_template_asks_the_model_again_for_that_step_only() {
    let dir = workspace(str::to_string);
    assert_eq!(batch(dir.path(), &[]).0.code, 0);
    std::fs::write(
        dir.path().join("plan.yaml"),
        PLAN.replace("third: {{", "THIRD: {{"),
    )
    .expect("edited");
    let (run, summary, out) = batch(dir.path(), &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let rows = ROWS as u64;
    assert_eq!(calls_and_hits(&summary), (rows, 2 * rows, rows));
    assert!(out.contains("THIRD: second: first: row 0"), "{out}");
}

#[test]
fn a_step_or_a_model_with_cache_false_always_asks_the_model() {
    for edit in [
        PLAN.replace(
            "    template: \"second: {{",
            "    cache: false\n    template: \"second: {{",
        ),
        PLAN.replace("stall: 5ms }", "stall: 5ms, cache: false }"),
    ] {
        let dir = workspace(|_| edit.clone());
        let single = |dir: &Path| {
            let run = one_run(dir, &["--format", "json"]);
            assert_eq!(run.code, 0, "{}", run.stderr);
            serde_json::from_str::<Value>(&run.stdout).expect("record")
        };
        single(dir.path());
        let record = single(dir.path());
        let cached = |name| step(&record, name)["cached_calls"].clone();
        let model_off = edit.contains("cache: false }");
        let expected = if model_off {
            Value::Null
        } else {
            serde_json::json!(["call"])
        };
        assert_eq!(cached("first"), expected, "{edit}");
        assert_eq!(cached("second"), Value::Null, "{edit}");
        assert_eq!(cached("third"), expected, "{edit}");
    }
}

#[test]
fn no_cache_neither_reads_nor_writes_it() {
    let dir = workspace(str::to_string);
    assert_eq!(batch(dir.path(), &[]).0.code, 0);
    let (run, summary, _) = batch(dir.path(), &["--no-cache"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(calls_and_hits(&summary), (3 * ROWS as u64, 0, 0));
    let fresh = workspace(str::to_string);
    assert_eq!(batch(fresh.path(), &["--no-cache"]).0.code, 0);
    assert!(!fresh.path().join("cache").exists());
}

/// `run plan.yaml -i text=hi --cache cache` and `extra`.
fn one_run(dir: &Path, extra: &[&str]) -> Run {
    one_run_with(dir, &[&["--cache", "cache"], extra].concat())
}

/// `run plan.yaml -i text=hi` and `flags`.
pub fn one_run_with(dir: &Path, flags: &[&str]) -> Run {
    let mut args = vec!["run", "plan.yaml", "-i", "text=hi"];
    args.extend_from_slice(flags);
    pagantic_in(dir, &args)
}

#[test]
fn cache_only_fails_a_call_the_cache_does_not_hold() {
    let dir = workspace(str::to_string);
    let miss = one_run(dir.path(), &["--cache-only"]);
    assert_eq!(miss.code, 1, "{}", miss.stderr);
    assert!(
        miss.stderr.contains(
            "error[CACHE_MISS]: step `first`: --cache-only: the call of model `scripted` is not in the cache"
        ),
        "{}",
        miss.stderr
    );
    assert!(
        miss.stderr
            .contains("  help: run once without --cache-only"),
        "{}",
        miss.stderr
    );
    let filled = one_run(dir.path(), &[]);
    assert_eq!(filled.code, 0, "{}", filled.stderr);
    let replay = one_run(dir.path(), &["--cache-only"]);
    assert_eq!(replay.code, 0, "{}", replay.stderr);
    assert_eq!(replay.stdout, filled.stdout);
}

#[test]
fn two_processes_fill_one_cache_at_once() {
    let dir = workspace(str::to_string);
    let many: String = (0..200)
        .map(|i| format!("{{\"id\": \"r{i}\", \"text\": \"row {i}\"}}\n"))
        .collect();
    std::fs::write(dir.path().join("rows.jsonl"), many).expect("rows");
    let spawn = |shard: &str, out: &str| {
        crate::output_of(
            crate::command(&dir.path().join("unused"))
                .current_dir(dir.path())
                .args([
                    "run",
                    "plan.yaml",
                    "--batch",
                    "rows.jsonl",
                    "--id",
                    "id",
                    "-j",
                    "8",
                    "--quiet",
                    "--cache",
                    "cache",
                    "--shard",
                    shard,
                    "--out",
                    out,
                ]),
        )
    };
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| spawn("0/2", "a.jsonl"));
        let b = scope.spawn(|| spawn("1/2", "b.jsonl"));
        (a.join().expect("a"), b.join().expect("b"))
    });
    for output in [&a, &b] {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        assert!(!stderr.contains("cannot be used"), "{stderr}");
    }
    let (replay, summary, _) = batch(dir.path(), &["--cache-only"]);
    assert_eq!(replay.code, 0, "{}", replay.stderr);
    assert_eq!(calls_and_hits(&summary), (0, 600, 0));
}

#[test]
fn a_corrupt_database_is_reported_once_and_the_run_goes_on_uncached() {
    let dir = workspace(str::to_string);
    std::fs::create_dir(dir.path().join("cache")).expect("dir");
    std::fs::write(
        dir.path().join("cache/cache.db"),
        "not a database at all ".repeat(500),
    )
    .expect("garbage");
    let (run, summary, out) = batch(dir.path(), &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(calls_and_hits(&summary), (3 * ROWS as u64, 0, 0));
    assert_eq!(outputs(&out).len(), ROWS);
    assert_eq!(
        run.stderr.matches("cannot be used").count(),
        1,
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("cache/cache.db cannot be used (file is not a database); running without it"),
        "{}",
        run.stderr
    );
}

#[test]
fn cached_calls_are_marked_in_the_events() {
    let dir = workspace(str::to_string);
    let cached_flags = || {
        events_in(&dir.path().join("events.jsonl"))
            .into_iter()
            .filter(|event| event["kind"] == "inference")
            .map(|event| event["data"]["cached"].clone())
            .collect::<Vec<_>>()
    };
    let events = ["--events", "events.jsonl"];
    assert_eq!(one_run(dir.path(), &events).code, 0);
    assert_eq!(cached_flags(), vec![Value::Bool(false); 3]);
    assert_eq!(one_run(dir.path(), &events).code, 0);
    assert_eq!(cached_flags(), vec![Value::Bool(true); 3]);
}

/// `cache prune --older-than 30d` on the cache in `dir/cache`.
fn prune_unused_for_30_days(dir: &Path) -> Run {
    pagantic_in(
        dir,
        &["cache", "prune", "--older-than", "30d", "--cache", "cache"],
    )
}

#[test]
fn prune_and_clear_empty_the_cache() {
    let dir = workspace(str::to_string);
    assert_eq!(batch(dir.path(), &[]).0.code, 0);
    let prune = prune_unused_for_30_days(dir.path());
    assert_eq!(
        prune.stdout, "pruned 0 entries unused since 30 days ago\n",
        "{}",
        prune.stderr
    );
    let clear = pagantic_in(dir.path(), &["cache", "clear", "--cache", "cache"]);
    assert_eq!(clear.stdout, format!("cleared {} entries\n", 3 * ROWS));
    let (_, summary, _) = batch(dir.path(), &[]);
    assert_eq!(calls_and_hits(&summary).0, 3 * ROWS as u64);
}

/// A cache a newer pagantic wrote (a schema version this build does not know) is left as it is:
/// runs go on without it, and `pagantic cache` refuses it with the cache's own advice.
#[test]
fn a_cache_from_a_newer_pagantic_is_left_alone_and_its_fix_is_named() {
    let dir = workspace(str::to_string);
    std::fs::create_dir(dir.path().join("cache")).expect("dir");
    let file = dir.path().join("cache/cache.db");
    let database = rusqlite::Connection::open(&file).expect("a database");
    database
        .execute_batch("CREATE TABLE future (x); PRAGMA user_version = 99;")
        .expect("a newer layout");
    drop(database);
    let before = std::fs::read(&file).expect("bytes");
    let (run, summary, out) = batch(dir.path(), &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(calls_and_hits(&summary), (3 * ROWS as u64, 0, 0));
    assert_eq!(outputs(&out).len(), ROWS);
    assert!(
        run.stderr.contains("schema version is 99"),
        "{}",
        run.stderr
    );
    let stats = pagantic_in(dir.path(), &["cache", "stats", "--cache", "cache"]);
    assert_eq!(stats.code, 2, "{}", stats.stderr);
    assert!(
        stats
            .stderr
            .contains("use the newer pagantic, or point this one at another cache directory"),
        "{}",
        stats.stderr
    );
    assert_eq!(
        std::fs::read(&file).expect("bytes"),
        before,
        "left as it was"
    );
}

/// `cache prune --older-than 30d` removes exactly the entries last used more than 30 days ago:
/// a run whose entries were backdated 31 days is asked of the model again afterwards, one
/// backdated 29 days and one just made are still answered from the cache.
#[test]
fn prune_removes_only_the_entries_unused_for_longer_than_the_age() {
    const DAY: i64 = 24 * 60 * 60;
    let dir = workspace(str::to_string);
    let run_of = |text: &str, extra: &[&str]| {
        let input = format!("text={text}");
        let mut args = vec!["run", "plan.yaml", "-i", &input, "--cache", "cache"];
        args.extend_from_slice(extra);
        pagantic_in(dir.path(), &args)
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64;
    for (text, age_in_days) in [("old", 31), ("recent", 29)] {
        assert_eq!(run_of(text, &[]).code, 0);
        let database =
            rusqlite::Connection::open(dir.path().join("cache/cache.db")).expect("the cache");
        let backdated = database
            .execute(
                "UPDATE entries SET used_at = ?1, created_at = ?1 WHERE used_at > ?2",
                [now - age_in_days * DAY, now - DAY],
            )
            .expect("backdated");
        assert_eq!(backdated, 3, "the three entries of the `{text}` run");
    }
    assert_eq!(run_of("new", &[]).code, 0);
    let prune = prune_unused_for_30_days(dir.path());
    assert_eq!(
        prune.stdout, "pruned 3 entries unused since 30 days ago\n",
        "{}",
        prune.stderr
    );
    for kept in ["recent", "new"] {
        let replay = run_of(kept, &["--cache-only"]);
        assert_eq!(
            replay.code, 0,
            "`{kept}` is still cached: {}",
            replay.stderr
        );
    }
    let pruned = run_of("old", &["--cache-only"]);
    assert_eq!(pruned.code, 1, "`old` was pruned: {}", pruned.stderr);
    assert!(pruned.stderr.contains("CACHE_MISS"), "{}", pruned.stderr);
}
