//! Files and flags that lie or never end: a cassette with a count past SQLite's integers, a cache
//! "database" whose `entries` is an endless recursive view, batch parts that are cut, huge,
//! endless or without a record, side files of a reduce left by another input, a dry run asked to
//! write an output, and a policy whose verdict every command must give alike.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::{Run, pagantic, path_arg as s, scratch};

/// `count` JSON Lines rows `{"id": "rI", "text": "row I"}` in the test's scratch directory.
fn rows(name: &str, count: usize) -> PathBuf {
    let path = scratch(name);
    let text: String = (0..count)
        .map(|i| format!("{{\"id\": \"r{i}\", \"text\": \"row {i}\"}}\n"))
        .collect();
    std::fs::write(&path, text).expect("rows");
    path
}

/// A cassette entry whose `tokens` is 2^64-1 (a server's word, recorded as it was) is imported:
/// stored as the largest count the cache holds, not a refusal of the whole cassette.
#[test]
fn a_cassette_count_past_sqlite_s_integers_is_imported_saturated() {
    let cassette = scratch("huge.cassette.jsonl");
    let key = "a".repeat(64);
    let answer = json!({ "text": "hi", "usage": { "prompt_tokens": 1, "completion_tokens": 1 }, "prompt_ms": 1.0, "completion_ms": 1.0 });
    std::fs::write(
        &cassette,
        format!(
            "{{\"pagantic_cassette\":1,\"entries\":1}}\n{{\"key\":\"{key}\",\"kind\":\"call\",\"tokens\":18446744073709551615,\"duration_ms\":1.0,\"value\":{answer}}}\n"
        ),
    )
    .expect("cassette");
    let cache = scratch("cache");
    let run = pagantic(&["cache", "import", s(&cassette), "--cache", s(&cache)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("1 added"), "{}", run.stdout);
    let stats = pagantic(&["cache", "stats", "--cache", s(&cache), "--format", "json"]);
    assert_eq!(stats.code, 0, "{}", stats.stderr);
}

/// `cache merge` of a "database" whose `entries` is an endless recursive view is refused before
/// anything is stored (it reads only plain tables), and the target is left as it was.
#[test]
fn cache_merge_refuses_an_endless_view() {
    let other = scratch("other");
    std::fs::create_dir_all(&other).expect("directory");
    let connection = rusqlite::Connection::open(other.join("cache.db")).expect("a database");
    connection
        .execute_batch(
            "PRAGMA user_version = 1;
             CREATE VIEW entries (key, kind, value, tokens, duration_ms) AS
               WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n)
               SELECT randomblob(32), 'call', hex(randomblob(64)), i, 1.0 FROM n;",
        )
        .expect("the view");
    drop(connection);
    let mine = scratch("mine");
    let run = pagantic(&["cache", "merge", s(&other), "--cache", s(&mine)]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("not a table"), "{}", run.stderr);
    let stats = pagantic(&["cache", "stats", "--cache", s(&mine), "--format", "json"]);
    let stats: Value = serde_json::from_str(&stats.stdout).expect("stats");
    assert_eq!(stats["kinds"], json!([]), "nothing stored: {stats}");
}

/// Runs the batch plan over `input` as shard `shard` (`I/N`) into `out`.
fn part(input: &Path, shard: &str, out: &Path) -> Run {
    let run = pagantic(&[
        "run",
        "tests/plans/batch.yaml",
        "--batch",
        s(input),
        "--id",
        "id",
        "--shard",
        shard,
        "--out",
        s(out),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run
}

/// `batch merge PARTS… ARGS…` into the scratch file `merged.jsonl`.
fn merge(parts: &[&Path], args: &[&str]) -> Run {
    let merged = scratch("merged.jsonl");
    let mut argv = vec!["batch", "merge"];
    argv.extend(parts.iter().map(|p| s(p)));
    argv.extend_from_slice(&["--out", s(&merged)]);
    argv.extend_from_slice(args);
    pagantic(&argv)
}

/// A part whose last line was cut (a kill mid-write) holds a row missing: without `--input`
/// the batch is not complete (exit 1); with it, the ids say whether another part has the row.
#[test]
fn a_cut_line_is_a_row_missing() {
    let input = rows("cut.jsonl", 4);
    let whole = scratch("part-0-of-1.jsonl");
    part(&input, "0/1", &whole);
    let text = std::fs::read_to_string(&whole).expect("part");
    let cut = &text[..text.len() - 20];
    std::fs::write(&whole, cut).expect("cut");
    let summary = scratch("merged.json");
    let run = merge(&[&whole], &["--summary", s(&summary)]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let merged: Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary")).expect("JSON");
    assert_eq!(merged["complete"], false, "{merged}");
    assert_eq!(merged["unreadable_lines"], 1, "{merged}");
    let by_input = merge(&[&whole], &["--input", s(&input), "--id", "id"]);
    assert_eq!(by_input.code, 1, "{}", by_input.stderr);
    assert!(
        by_input.stderr.contains("1 rows are missing: r"),
        "{}",
        by_input.stderr
    );
}

/// A part that is not a regular file (`/dev/zero`) is refused, not read; a part that is one line
/// of 80 MB is a line that is not a row, never held whole; a record claiming 10^12 shards is
/// refused — none of them aborts the process.
#[test]
fn merge_bounds_every_line_and_number_of_a_part() {
    let refused = merge(&[Path::new("/dev/zero")], &["--unchecked"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("not a regular file"),
        "{}",
        refused.stderr
    );

    let huge = scratch("huge.jsonl");
    std::fs::write(&huge, "x".repeat(80 * 1024 * 1024)).expect("a huge line");
    let run = merge(&[&huge], &["--unchecked", "--expect", "1"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("1 lines are not rows"),
        "{}",
        run.stderr
    );

    let input = rows("shards.jsonl", 2);
    let lying = scratch("part-0-of-2.jsonl");
    part(&input, "0/2", &lying);
    let record = scratch("part-0-of-2.jsonl.meta.json");
    let mut origin: Value =
        serde_json::from_str(&std::fs::read_to_string(&record).expect("record")).expect("JSON");
    origin["shard"]["count"] = json!(1_000_000_000_000u64);
    std::fs::write(&record, origin.to_string()).expect("record");
    let run = merge(&[&lying], &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("1000000000000 shards"),
        "{}",
        run.stderr
    );
}

/// Parts without their record cannot be checked to come from one batch (rows of two plans would
/// merge as one): refused with the way out, `--unchecked`, which merges them and says so.
#[test]
fn parts_without_a_record_are_merged_only_unchecked() {
    let input = rows("unrecorded.jsonl", 2);
    let first = scratch("a.jsonl");
    part(&input, "0/1", &first);
    std::fs::remove_file(scratch("a.jsonl.meta.json")).expect("record removed");
    let refused = merge(&[&first], &[]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("cannot be checked") && refused.stderr.contains("--unchecked"),
        "{}",
        refused.stderr
    );
    let summary = scratch("unchecked.json");
    let merged = merge(&[&first], &["--unchecked", "--summary", s(&summary)]);
    assert_eq!(merged.code, 0, "{}", merged.stderr);
    assert!(
        merged.stderr.contains("merged unchecked"),
        "{}",
        merged.stderr
    );
    let merged: Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary")).expect("JSON");
    assert_eq!(merged["unchecked_parts"], json!([s(&first)]), "{merged}");
}

/// A reduce's partial results (`OUT.chunks.jsonl`) belong to the output's input and plan: after
/// deleting the output and its record, as a refused resume advises, a `--resume` on another
/// input reduces that input, not the old one's chunks.
#[test]
fn partial_results_of_another_input_are_not_read_back() {
    let out = scratch("sums.jsonl");
    let input = |name: &str, n: u64| {
        let path = scratch(name);
        let text: String = (0..20)
            .map(|_| format!("{}\n", json!({ "n": n, "product": "x" })))
            .collect();
        std::fs::write(&path, text).expect("rows");
        path
    };
    let reduce = |input: &Path, extra: &[&str]| {
        let mut args = vec![
            "run",
            "tests/plans/reduce/sum.yaml",
            "--batch",
            s(input),
            "--group-by",
            "product",
            "--fold",
            "10",
            "--out",
            s(&out),
            "--no-cache",
        ];
        args.extend_from_slice(extra);
        let run = pagantic(&args);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let text = std::fs::read_to_string(&out).expect("the output");
        let line: Value = serde_json::from_str(text.trim()).expect("one line");
        line["output"].clone()
    };
    assert_eq!(reduce(&input("ones.jsonl", 1), &[]), "20");
    std::fs::remove_file(&out).expect("output removed");
    std::fs::remove_file(scratch("sums.jsonl.meta.json")).expect("record removed");
    assert_eq!(reduce(&input("twos.jsonl", 2), &["--resume"]), "40");
}

/// A dry run writes no output a later `--resume` would take as done rows (refused, exit 2), and
/// reads its input as a real run does: from stdin too, every row.
#[test]
fn a_dry_run_writes_no_output_and_reads_stdin_whole() {
    let input = rows("dry.jsonl", 3);
    let out = scratch("dry.out.jsonl");
    let refused = pagantic(&[
        "run",
        "tests/plans/batch.yaml",
        "--batch",
        s(&input),
        "--out",
        s(&out),
        "--dry-run",
    ]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("--dry-run writes no --out file"),
        "{}",
        refused.stderr
    );
    assert!(!out.exists());
    let mut child = crate::spawn(&["run", "tests/plans/batch.yaml", "--batch", "-", "--dry-run"]);
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(&std::fs::read(&input).expect("rows"))
            .expect("rows written");
    }
    let output = crate::finish_within(child, crate::RUN_LIMIT);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let lines = String::from_utf8_lossy(&output.stdout).lines().count();
    assert_eq!(lines, 3, "every row of stdin ran: {stderr}");
}

/// `pagantic tools --policy P` gives the verdict `validate` and `run` give: a tool requiring a
/// capability the policy's `allowed_capabilities` does not grant is listed as refused, and the
/// plan is refused (exit 2) by all three.
#[test]
fn tools_validate_and_run_give_one_verdict_on_capabilities() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("plan.yaml"),
        "version: 1\nname: shell\ntools:\n  shout: { kind: command, description: Says hi., argv: [echo, hi] }\nsteps:\n  - { name: call, type: tool, tool: shout, args: {} }\n",
    )
    .expect("plan written");
    std::fs::write(
        dir.path().join("policy.yaml"),
        "allowed_capabilities: [filesystem]\n",
    )
    .expect("policy written");
    let with_policy = |command: &str| {
        crate::pagantic_in(
            dir.path(),
            &[command, "plan.yaml", "--policy", "policy.yaml"],
        )
    };
    let tools = with_policy("tools");
    assert_eq!(tools.code, 2, "{}{}", tools.stdout, tools.stderr);
    let line = tools
        .stdout
        .lines()
        .find(|l| l.starts_with("shout "))
        .unwrap_or_default();
    assert!(
        line.contains("refused: requires process"),
        "{}",
        tools.stdout
    );
    assert_eq!(with_policy("validate").code, 2);
    assert_eq!(with_policy("run").code, 2);
    let plain = crate::pagantic_in(dir.path(), &["tools", "plan.yaml"]);
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    assert!(
        plain
            .stdout
            .lines()
            .any(|l| l.starts_with("shout ") && l.ends_with("available")),
        "{}",
        plain.stdout
    );
}
