//! Cassettes: `--record` writes the cache entries a command used, `--cassette` replays them with
//! no model and without the cache (a changed prompt misses, naming its step), `cache import`
//! and `cache merge` fill a cache from cassettes and other caches, and a cassette that is not
//! what `--record` wrote is refused, line by line, before anything runs.

use std::path::Path;

use serde_json::Value;

use crate::cache::{PLAN, ROWS, batch_with, calls_and_hits, one_run_with, outputs, workspace};
use crate::{Run, pagantic_in, root};

/// The batch over `rows.jsonl` with `flags`: the run, its summary and its output rows.
fn batch(dir: &Path, flags: &[&str]) -> (Run, Value, Vec<Value>) {
    let (run, summary, out) = batch_with(dir, flags);
    (run, summary, outputs(&out))
}

/// The plan with the third step's prompt changed.
fn edit_third_prompt(dir: &Path) {
    let edited = PLAN.replace("third: {{", "THIRD: {{");
    std::fs::write(dir.join("plan.yaml"), edited).expect("edited");
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).expect("readable")
}

#[test]
fn a_recorded_batch_replays_from_its_cassette_with_no_model_call_and_no_cache() {
    let dir = workspace(str::to_string);
    let (recorded, summary, first) = batch(
        dir.path(),
        &["--cache", "cache", "--record", "cassette.jsonl"],
    );
    assert_eq!(recorded.code, 0, "{}", recorded.stderr);
    let all = 3 * ROWS as u64;
    assert_eq!(calls_and_hits(&summary), (all, 0, all));
    assert!(
        recorded.stderr.contains(&format!(
            "pagantic: recorded {all} entries in cassette.jsonl"
        )),
        "{}",
        recorded.stderr
    );
    let cassette = read(&dir.path().join("cassette.jsonl"));
    let lines: Vec<&str> = cassette.lines().collect();
    assert_eq!(
        lines[0],
        format!(r#"{{"pagantic_cassette":1,"entries":{all}}}"#)
    );
    assert_eq!(lines.len() as u64, all + 1);
    let keys: Vec<&str> = lines[1..].iter().map(|line| &line[8..72]).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(keys, sorted, "entries are sorted by key");

    // Recorded again from a warm cache: the same bytes, so a diff shows only what changed.
    let (again, _, _) = batch(dir.path(), &["--cache", "cache", "--record", "again.jsonl"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(read(&dir.path().join("again.jsonl")), cassette);

    // The cache cleared (and not used at all): the cassette alone answers every call.
    let cleared = pagantic_in(dir.path(), &["cache", "clear", "--cache", "cache"]);
    assert_eq!(cleared.stdout, format!("cleared {all} entries\n"));
    let (replay, summary, replayed) = batch(dir.path(), &["--cassette", "cassette.jsonl"]);
    assert_eq!(replay.code, 0, "{}", replay.stderr);
    assert_eq!(calls_and_hits(&summary), (0, all, 0));
    assert_eq!(replayed, first);
    let stats = pagantic_in(dir.path(), &["cache", "stats", "--cache", "cache"]);
    assert!(stats.stdout.contains("no entries"), "{}", stats.stdout);
}

/// Every case of every variant of `report` (`test --format json`): its name, verdict and score.
fn verdicts(report: &str) -> Vec<Value> {
    let report: Value = serde_json::from_str(report).expect("a JSON report");
    let mut verdicts = Vec::new();
    for variant in report["suites"][0]["variants"]
        .as_array()
        .expect("variants")
    {
        for case in variant["cases"].as_array().expect("cases") {
            verdicts.push(serde_json::json!([
                variant["name"],
                case["name"],
                case["passed"],
                case["score"]
            ]));
        }
    }
    verdicts
}

#[test]
fn a_recorded_suite_replays_from_its_cassette_with_the_same_verdicts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cassette = dir.path().join("suite.jsonl").display().to_string();
    let cache = dir.path().join("cache").display().to_string();
    let suite = |flags: &[&str]| {
        let mut args = vec!["test", "tests/evals/support.test.yaml", "--format", "json"];
        args.extend_from_slice(flags);
        pagantic_in(&root(), &args)
    };
    // Not quiet: the record says how many entries it holds.
    let recorded = suite(&["--cache", &cache, "--record", &cassette]);
    let entries = recorded
        .stderr
        .split("recorded ")
        .nth(1)
        .and_then(|said| said.split(' ').next())
        .unwrap_or_else(|| panic!("no record said: {}", recorded.stderr));
    let cleared = pagantic_in(&root(), &["cache", "clear", "--cache", &cache]);
    assert_eq!(
        cleared.stdout,
        format!("cleared {entries} entries\n"),
        "{}",
        cleared.stderr
    );
    let replayed = suite(&["-q", "--cassette", &cassette]);
    assert_eq!(replayed.code, recorded.code, "{}", replayed.stderr);
    assert!(
        !replayed.stdout.contains("CACHE_MISS"),
        "{}",
        replayed.stdout
    );
    assert_eq!(verdicts(&replayed.stdout), verdicts(&recorded.stdout));
    assert!(verdicts(&recorded.stdout).len() > 10);
}

#[test]
fn a_changed_prompt_misses_the_cassette_naming_its_step() {
    let dir = workspace(str::to_string);
    assert_eq!(one_run_with(dir.path(), &["--record", "c.jsonl"]).code, 0);
    edit_third_prompt(dir.path());
    let replay = one_run_with(dir.path(), &["--cassette", "c.jsonl"]);
    assert_eq!(replay.code, 1, "{}", replay.stderr);
    assert!(
        replay.stderr.contains(
            "error[CACHE_MISS]: step `third`: --cassette: the call of model `scripted` is not in the cassette c.jsonl"
        ),
        "{}",
        replay.stderr
    );
    assert!(
        replay.stderr.contains("help: record the cassette again"),
        "{}",
        replay.stderr
    );
    assert!(
        replay.stderr.contains("  second: second: first: hi"),
        "the steps before it were answered: {}",
        replay.stderr
    );
}

#[test]
fn a_run_that_fails_still_writes_the_entries_it_used() {
    let dir = workspace(str::to_string);
    assert_eq!(
        one_run_with(dir.path(), &["--record", "full.jsonl"]).code,
        0
    );
    let full = read(&dir.path().join("full.jsonl"));
    edit_third_prompt(dir.path());
    let replay = ["--cassette", "full.jsonl", "--record", "partial.jsonl"];
    let failed = one_run_with(dir.path(), &replay);
    assert_eq!(failed.code, 1, "{}", failed.stderr);
    let partial = read(&dir.path().join("partial.jsonl"));
    assert!(
        partial.starts_with("{\"pagantic_cassette\":1,\"entries\":2}\n"),
        "{partial}"
    );
    for line in partial.lines().skip(1) {
        assert!(full.contains(line), "{line} is one of the recorded entries");
    }
}

/// A plan with a structured step whose answer must be `{"label": "positive"|"negative"}`.
const STRUCTURED: &str = r#"version: 1
name: structured
models:
  llm: { kind: scripted, rules: [{ contains: "label", reply: '{"label": "positive"}' }] }
steps:
  - name: label
    type: structured
    model: llm
    template: "label this"
    schema: { type: object, required: [label], properties: { label: { enum: [positive, negative] } } }
"#;

#[test]
fn a_forged_answer_is_still_held_to_its_schema() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("plan.yaml"), STRUCTURED).expect("plan");
    let run = |flag, file| {
        pagantic_in(
            dir.path(),
            &["run", "plan.yaml", "--format", "json", flag, file],
        )
    };
    let recorded = run("--record", "c.jsonl");
    assert_eq!(recorded.code, 0, "{}", recorded.stderr);
    let cassette = read(&dir.path().join("c.jsonl"));
    assert!(
        cassette.contains(r#"{\"label\": \"positive\"}"#),
        "{cassette}"
    );
    let forged = cassette.replace(r#"{\"label\": \"positive\"}"#, r#"{\"label\": \"rm -rf\"}"#);
    std::fs::write(dir.path().join("forged.jsonl"), forged).expect("forged");
    let replayed = run("--cassette", "forged.jsonl");
    assert_eq!(replayed.code, 1, "{}", replayed.stdout);
    assert!(
        !replayed.stdout.contains(r#""label": "rm -rf""#),
        "{}",
        replayed.stdout
    );
    // The forged answer was read from the cassette and refused; the step then asked again with
    // the schema's errors as feedback, a call the cassette does not hold.
    let record: Value = serde_json::from_str(&replayed.stdout).expect("a record");
    let step = crate::step(&record, "label");
    assert_eq!(step["status"], "failed", "{step}");
    assert_eq!(step["output"], Value::Null, "{step}");
    assert_eq!(
        step["cached_calls"],
        serde_json::json!(["attempt 1"]),
        "{step}"
    );
    assert_eq!(step["error"]["code"], "CACHE_MISS", "{step}");
}

#[test]
fn tool_results_are_recorded_only_when_asked() {
    let plan = r#"version: 1
name: tools
tools:
  sum: { kind: builtin, builtin: calculator, cache: true }
models:
  echo: { kind: scripted, echo: true }
steps:
  - name: add
    type: tool
    tool: sum
    args: { expression: "2 + 3" }
  - name: say
    type: infer
    model: echo
    template: "the sum is {{ steps.add.output }}"
"#;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("plan.yaml"), plan).expect("plan");
    let kinds = |extra: &[&str]| {
        let mut args = vec!["run", "plan.yaml", "--record", "c.jsonl"];
        args.extend_from_slice(extra);
        let run = pagantic_in(dir.path(), &args);
        assert_eq!(run.code, 0, "{}", run.stderr);
        read(&dir.path().join("c.jsonl"))
            .lines()
            .skip(1)
            .map(|line| serde_json::from_str::<Value>(line).expect("an entry")["kind"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(kinds(&[]), vec![Value::from("call")]);
    let mut with_tools = kinds(&["--record-tools"]);
    with_tools.sort_by_key(Value::to_string);
    assert_eq!(with_tools, vec![Value::from("call"), Value::from("tool")]);
}

#[test]
fn a_cassette_can_be_imported_into_the_cache_counting_what_it_held() {
    let dir = workspace(str::to_string);
    let (recorded, _, first) = batch(dir.path(), &["--record", "c.jsonl"]);
    assert_eq!(recorded.code, 0, "{}", recorded.stderr);
    let all = 3 * ROWS;
    let import =
        |file: &str| pagantic_in(dir.path(), &["cache", "import", file, "--cache", "cache"]);
    let imported = import("c.jsonl");
    assert_eq!(
        imported.stdout,
        format!("c.jsonl: {all} entries: {all} added, 0 already held, 0 conflicting\n"),
        "{}",
        imported.stderr
    );
    // One answer changed (still an answer): a conflict, and the cache keeps what it held.
    let cassette = read(&dir.path().join("c.jsonl"));
    let changed = cassette.replacen("\"text\":\"first: row 0\"", "\"text\":\"other\"", 1);
    assert_ne!(changed, cassette);
    std::fs::write(dir.path().join("changed.jsonl"), changed).expect("written");
    let again = import("changed.jsonl");
    assert_eq!(
        again.stdout,
        format!(
            "changed.jsonl: {all} entries: 0 added, {} already held, 1 conflicting (the entries already held are kept)\n",
            all - 1
        ),
        "{}",
        again.stderr
    );
    let (replay, summary, replayed) = batch(dir.path(), &["--cache", "cache", "--cache-only"]);
    assert_eq!(replay.code, 0, "{}", replay.stderr);
    assert_eq!(calls_and_hits(&summary).0, 0);
    assert_eq!(replayed, first);
}

/// A cassette holding one key twice (an edit, or two cassettes concatenated) is refused by
/// `cache import` and by `--cassette`, naming the file, the line and the line it repeats: which
/// of two answers to replay cannot be guessed. Nothing is imported.
#[test]
fn a_cassette_with_a_key_given_twice_is_refused_naming_its_lines() {
    let dir = workspace(str::to_string);
    let (recorded, _, _) = batch(dir.path(), &["--record", "c.jsonl"]);
    assert_eq!(recorded.code, 0, "{}", recorded.stderr);
    let cassette = read(&dir.path().join("c.jsonl"));
    let lines: Vec<&str> = cassette.lines().collect();
    let entries = lines.len() - 1;
    let mut twice = vec![format!(
        r#"{{"pagantic_cassette":1,"entries":{}}}"#,
        entries + 1
    )];
    twice.extend(lines[1..].iter().map(|line| line.to_string()));
    twice.push(lines[1].to_string());
    std::fs::write(dir.path().join("twice.jsonl"), twice.join("\n") + "\n").expect("written");
    let repeated = entries + 2;

    let import = pagantic_in(
        dir.path(),
        &["cache", "import", "twice.jsonl", "--cache", "cache"],
    );
    assert_eq!(import.code, 2, "{}", import.stderr);
    assert!(
        import
            .stderr
            .contains(&format!("twice.jsonl:{repeated}: the key ")),
        "{}",
        import.stderr
    );
    assert!(
        import.stderr.contains("is already on line 2"),
        "{}",
        import.stderr
    );
    let (from_cache, _, _) = batch(dir.path(), &["--cache", "cache", "--cache-only"]);
    assert_ne!(
        from_cache.code, 0,
        "nothing was imported: {}",
        from_cache.stderr
    );

    let (replay, _, _) = batch(dir.path(), &["--cassette", "twice.jsonl"]);
    assert_eq!(replay.code, 2, "{}", replay.stderr);
    assert!(
        replay
            .stderr
            .contains(&format!("twice.jsonl:{repeated}: the key ")),
        "{}",
        replay.stderr
    );
}

#[test]
fn per_node_caches_merge_into_one_that_answers_every_row() {
    let dir = workspace(str::to_string);
    for (shard, cache) in [("0/2", "node-0"), ("1/2", "node-1")] {
        let (run, _, _) = batch(dir.path(), &["--shard", shard, "--cache", cache]);
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let merge = [
        "cache",
        "merge",
        "node-0",
        "node-1/cache.db",
        "--cache",
        "all",
    ];
    let merged = pagantic_in(dir.path(), &merge);
    assert_eq!(merged.code, 0, "{}", merged.stderr);
    let half = 3 * ROWS / 2;
    assert_eq!(
        merged.stdout,
        format!(
            "node-0: {half} entries: {half} added, 0 already held, 0 conflicting\n\
             node-1/cache.db: {half} entries: {half} added, 0 already held, 0 conflicting\n"
        )
    );
    let (replay, summary, _) = batch(dir.path(), &["--cache", "all", "--cache-only"]);
    assert_eq!(replay.code, 0, "{}", replay.stderr);
    assert_eq!(calls_and_hits(&summary), (0, 3 * ROWS as u64, 0));
    let again = pagantic_in(dir.path(), &["cache", "merge", "node-0", "--cache", "all"]);
    assert_eq!(
        again.stdout,
        format!("node-0: {half} entries: 0 added, {half} already held, 0 conflicting\n")
    );
}

#[test]
fn a_cache_of_another_schema_version_or_none_at_all_is_not_merged() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("newer")).expect("dir");
    let database = rusqlite::Connection::open(dir.path().join("newer/cache.db")).expect("opens");
    database
        .execute_batch("CREATE TABLE entries (key BLOB); PRAGMA user_version = 7;")
        .expect("a newer layout");
    drop(database);
    let merge =
        |other: &str| pagantic_in(dir.path(), &["cache", "merge", other, "--cache", "mine"]);
    let newer = merge("newer");
    assert_eq!(newer.code, 2, "{}", newer.stderr);
    assert!(
        newer
            .stderr
            .contains("newer/cache.db has schema version 7, and this build merges only version 1"),
        "{}",
        newer.stderr
    );
    assert!(
        newer
            .stderr
            .contains("help: merge it with the pagantic that wrote it")
    );
    let none = merge("nowhere");
    assert_eq!(none.code, 2, "{}", none.stderr);
    assert!(
        none.stderr
            .contains("there is no call cache at nowhere/cache.db"),
        "{}",
        none.stderr
    );
    let itself = merge("mine");
    assert_eq!(itself.code, 2, "{}", itself.stderr);
    assert!(
        itself.stderr.contains("is the cache being merged into"),
        "{}",
        itself.stderr
    );
}

/// Runs the plan with `--cassette FILE` in a directory holding `contents` as `c.jsonl`.
fn replay_of(contents: &[u8]) -> Run {
    let dir = workspace(str::to_string);
    std::fs::write(dir.path().join("c.jsonl"), contents).expect("written");
    one_run_with(dir.path(), &["--cassette", "c.jsonl"])
}

fn refused(run: &Run, expected: &str) {
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("error[CONFIG_FILE_ERROR]: ") && run.stderr.contains(expected),
        "expected `{expected}` in:\n{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("first:"),
        "nothing ran: {}",
        run.stderr
    );
}

#[test]
fn a_cassette_that_is_not_one_is_refused_line_by_line_before_anything_runs() {
    let dir = workspace(str::to_string);
    assert_eq!(one_run_with(dir.path(), &["--record", "c.jsonl"]).code, 0);
    let good = read(&dir.path().join("c.jsonl"));
    let lines: Vec<&str> = good.lines().collect();

    let truncated = &good[..good.len() - 30];
    refused(
        &replay_of(truncated.as_bytes()),
        "c.jsonl:4: not a cassette entry: EOF while parsing",
    );
    let wrong_type = good.replacen("\"tokens\":", "\"tokens\":\"many\",\"was\":", 1);
    refused(
        &replay_of(wrong_type.as_bytes()),
        "c.jsonl:2: not a cassette entry: invalid type",
    );
    let huge = format!("{}\n{}\n", lines[0], "x".repeat(17 * 1024 * 1024));
    refused(
        &replay_of(huge.as_bytes()),
        "c.jsonl:2: the line is 17825792 bytes, over the 16777216",
    );
    let newer = good.replacen("\"pagantic_cassette\":1", "\"pagantic_cassette\":2", 1);
    refused(
        &replay_of(newer.as_bytes()),
        "c.jsonl:1: cassette version 2, and this build reads version 1",
    );
    refused(&replay_of(b"\xff\xfe"), "c.jsonl is not UTF-8 text");

    let workspace = workspace(str::to_string);
    let fifo = workspace.path().join("fifo.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    for (file, kind) in [("fifo.jsonl", "a FIFO"), ("/dev/zero", "a device")] {
        refused(
            &one_run_with(workspace.path(), &["--cassette", file]),
            &format!("is not a regular file (it is {kind})"),
        );
    }
    let import = pagantic_in(
        workspace.path(),
        &["cache", "import", "/dev/zero", "--cache", "cache"],
    );
    refused(&import, "/dev/zero is not a regular file");
    assert!(
        !workspace.path().join("cache").exists(),
        "nothing was imported"
    );
}

#[test]
fn a_cassette_replaces_the_cache_so_the_two_flags_do_not_go_together() {
    let run = pagantic_in(
        &root(),
        &[
            "run",
            "plans/quickstart.yaml",
            "--cassette",
            "c.jsonl",
            "--cache",
            "dir",
        ],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("cannot be used with"), "{}", run.stderr);
}

/// `-q` silences what `--record` says it wrote (the cassette is still written); without it the
/// line is there.
#[test]
fn quiet_runs_do_not_say_what_they_recorded() {
    let dir = workspace(str::to_string);
    let quiet = one_run_with(dir.path(), &["-q", "--record", "quiet.jsonl"]);
    assert_eq!(quiet.code, 0, "{}", quiet.stderr);
    assert!(!quiet.stderr.contains("recorded"), "{}", quiet.stderr);
    assert!(!read(&dir.path().join("quiet.jsonl")).is_empty());
    let told = one_run_with(dir.path(), &["--record", "told.jsonl"]);
    assert!(
        told.stderr
            .contains("pagantic: recorded 3 entries in told.jsonl"),
        "{}",
        told.stderr
    );
}

/// A cassette that cannot be used fails before anything runs, and the events file still holds
/// a closed lifecycle: INIT, then ERROR.
#[test]
fn a_bad_cassette_ends_the_events_lifecycle_in_error() {
    let dir = workspace(str::to_string);
    std::fs::write(dir.path().join("c.jsonl"), b"not a cassette\n").expect("written");
    let events = dir.path().join("events.jsonl");
    let run = one_run_with(
        dir.path(),
        &[
            "--cassette",
            "c.jsonl",
            "--events",
            events.to_str().expect("utf-8"),
        ],
    );
    refused(&run, "c.jsonl:1: not a cassette header");
    let states: Vec<Value> = crate::events_in(&events)
        .iter()
        .filter(|e| e["kind"] == "lifecycle")
        .map(|e| e["data"]["state"].clone())
        .collect();
    assert_eq!(states, ["INIT", "ERROR"]);
}
