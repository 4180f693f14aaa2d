//! `run --batch`: one line per row, failures recorded without stopping the rest, CSV with
//! `--map`, shards, order, and crash safety — killed with SIGKILL at several points and resumed,
//! every row ends up in the output exactly once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::{Run, pagantic, root, scratch};

fn rows_file(name: &str, count: usize, boom_at: Option<usize>) -> PathBuf {
    let path = scratch(name);
    let text: String = (0..count)
        .map(|i| {
            let text = if Some(i) == boom_at {
                "boom".to_string()
            } else {
                format!("review {i}")
            };
            format!("{{\"id\": \"r{i}\", \"text\": \"{text}\"}}\n")
        })
        .collect();
    std::fs::write(&path, text).expect("rows");
    path
}

/// `pagantic run tests/plans/batch.yaml --batch INPUT ARGS…`.
fn batch(input: &std::path::Path, args: &[&str]) -> Run {
    batch_of("tests/plans/batch.yaml", input, args)
}

/// `pagantic run PLAN --batch INPUT ARGS…`.
fn batch_of(plan: &str, input: &std::path::Path, args: &[&str]) -> Run {
    let mut argv = vec!["run", plan, "--batch", s(input)];
    argv.extend_from_slice(args);
    pagantic(&argv)
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("output")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("half-written line {l:?}: {e}")))
        .collect()
}

fn s(path: &std::path::Path) -> &str {
    path.to_str().expect("utf-8")
}

#[test]
fn every_row_gets_one_line_and_a_failing_row_does_not_stop_the_others() {
    let input = rows_file("basic.jsonl", 20, Some(7));
    let out = scratch("basic.out.jsonl");
    let run = batch(&input, &["--out", s(&out), "--id", "id", "-j", "4"]);
    assert_eq!(
        run.code, 1,
        "a failed row makes the exit code 1\n{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("19 rows ok, 1 failed, 0 skipped"),
        "{}",
        run.stderr
    );
    let written = lines(&out);
    assert_eq!(written.len(), 20);
    let failed: Vec<&Value> = written.iter().filter(|l| l["status"] == "error").collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["row"], "r7");
    assert_eq!(failed[0]["error"]["code"], "VALIDATION_RULE_FAILED");
    let ok = written.iter().find(|l| l["row"] == "r3").expect("row r3");
    assert_eq!(ok["output"], "review 3 (3 stars, row r3)");
    assert!(ok["usage"]["completion_tokens"].is_u64() && ok["steps"].is_array());
}

#[test]
fn csv_columns_bind_through_map_and_text_becomes_numbers() {
    let input = scratch("reviews.csv");
    std::fs::write(
        &input,
        "id,review,rating\nc1,\"Great, really\",5\nc2,Meh,2\n",
    )
    .expect("csv");
    let run = batch(
        &input,
        &["--map", "text=review", "--map", "stars=rating", "--ordered"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let written: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(written.len(), 2);
    assert_eq!(
        written[0]["output"]
            .as_str()
            .map(|o| o.starts_with("Great, really (5 stars")),
        Some(true),
        "{written:?}"
    );
    assert_eq!(
        written[1]["row"], "2",
        "rows are numbered from 1 without --id"
    );
}

#[test]
fn shards_and_limits_select_rows_and_ordered_keeps_input_order() {
    let input = rows_file("shard.jsonl", 12, None);
    let run = batch(
        &input,
        &["--id", "id", "--shard", "1/3", "--ordered", "-j", "4"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let ids: Vec<String> = run
        .stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).expect("json")["row"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(ids, ["r1", "r4", "r7", "r10"]);
    let limited = batch(&input, &["--limit", "3"]);
    assert_eq!(limited.stdout.lines().count(), 3);
}

#[test]
fn an_existing_output_is_not_overwritten_without_resume() {
    let input = rows_file("exists.jsonl", 2, None);
    let out = scratch("exists.out.jsonl");
    std::fs::write(&out, "{\"row\": \"1\", \"status\": \"ok\"}\n").expect("existing");
    let run = batch(&input, &["--out", s(&out)]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("already exists"), "{}", run.stderr);
}

#[cfg(unix)]
#[test]
fn killed_with_sigkill_at_several_points_and_resumed_every_row_is_there_exactly_once() {
    let input = rows_file("crash.jsonl", 150, None);
    let out = scratch("crash.out.jsonl");
    let args = |resume: bool| {
        let mut args = vec![
            "run",
            "tests/plans/batch.yaml",
            "--batch",
            s(&input),
            "--out",
            s(&out),
            "--id",
            "id",
            "-j",
            "4",
            "--quiet",
        ];
        if resume {
            args.push("--resume");
        }
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>()
    };
    // Each attempt is killed once it has written 30 more rows: the kills land mid-batch, with
    // rows in flight, and every resume has rows to skip and rows to run.
    let complete_lines = || {
        std::fs::read_to_string(&out)
            .map(|text| text.matches('\n').count())
            .unwrap_or(0)
    };
    let cache = crate::fresh_cache_dir();
    for attempt in 0..3 {
        let before = complete_lines();
        let mut child = crate::command(&cache)
            .args(args(attempt > 0))
            .current_dir(root())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawned");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while complete_lines() < before + 30 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        assert!(
            complete_lines() >= before + 30,
            "attempt {attempt} wrote rows before it was killed"
        );
    }
    assert!(
        complete_lines() < 150,
        "rows are left for the last resume to run"
    );
    let finish_args = args(true);
    let finish = pagantic(&finish_args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(finish.code, 0, "{}", finish.stderr);
    let written = lines(&out);
    let mut counts: HashMap<String, usize> = HashMap::new();
    for line in &written {
        *counts
            .entry(line["row"].as_str().expect("row id").to_string())
            .or_default() += 1;
        assert_eq!(line["status"], "ok");
    }
    assert_eq!(counts.len(), 150, "every row is there");
    assert!(
        counts.values().all(|&n| n == 1),
        "no row twice: {:?}",
        counts.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
    );
}

#[test]
fn a_dry_run_shows_the_first_rows_prompts_and_counts_the_model_calls() {
    let input = rows_file("dry.jsonl", 5, None);
    let run = batch(&input, &["--id", "id", "--dry-run"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The prompts of the first two rows, as the model would get them; not the third's.
    assert!(
        run.stderr.contains("=== row r0 ===")
            && run
                .stderr
                .contains("--- label: user ---\nreview 0 (3 stars, row r0)")
            && run.stderr.contains("=== row r1 ===")
            && !run.stderr.contains("=== row r2 ==="),
        "{}",
        run.stderr
    );
    // One infer step per row: five model calls.
    assert!(
        run.stderr.contains("dry run: 5 model calls for 5 rows"),
        "{}",
        run.stderr
    );
    assert_eq!(
        run.stdout.lines().count(),
        5,
        "the stand-ins' lines, on stdout"
    );
}

/// An output inside the input (the same file by another name, a file in the input
/// directory) would feed the batch its own lines forever; it is refused before anything runs.
#[test]
fn an_output_the_input_would_read_is_refused() {
    let input = rows_file("self.jsonl", 3, None);
    let dir = input.parent().expect("a directory");
    let same_by_another_name = dir.join(".").join("self.jsonl");
    for out in [same_by_another_name, dir.join("out.jsonl")] {
        let input_arg = if out.ends_with("out.jsonl") {
            dir.to_path_buf()
        } else {
            input.clone()
        };
        let run = batch(&input_arg, &["--out", s(&out)]);
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(
            run.stderr.contains("the batch would read its own output"),
            "{}",
            run.stderr
        );
    }
    let before = std::fs::read_to_string(&input).expect("input");
    assert_eq!(before.lines().count(), 3, "the input is untouched");
}

/// An unreadable row is written under its line number, so a resume skips it instead
/// of appending it again; `--retry-errors` reads it again.
#[test]
fn an_unreadable_row_has_a_stable_id_and_is_written_once() {
    let input = scratch("unreadable.jsonl");
    std::fs::write(
        &input,
        "{\"id\": \"a\", \"text\": \"fine\"}\nnot json\n{\"id\": \"c\", \"text\": \"fine\"}\n",
    )
    .expect("rows");
    let out = scratch("unreadable.out.jsonl");
    let first = batch(&input, &["--out", s(&out)]);
    assert_eq!(first.code, 1, "{}", first.stderr);
    let written = lines(&out);
    assert_eq!(written.len(), 3);
    let bad: Vec<&Value> = written.iter().filter(|l| l["status"] == "error").collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0]["row"], "2", "the line number is its id");
    for extra in [vec!["--resume"], vec!["--resume", "--retry-errors"]] {
        let mut args = vec!["--out", s(&out)];
        args.extend(extra);
        batch(&input, &args);
        assert_eq!(lines(&out).len(), 3, "{args:?} wrote no row twice");
    }
}

/// A CSV record larger than `--max-row-bytes` — here one quoted field spanning lines —
/// fails on its own under its record number, and the records after it go on.
#[test]
fn a_csv_record_past_the_size_limit_fails_alone() {
    let input = scratch("huge.csv");
    let huge = "x\n".repeat(3000);
    std::fs::write(
        &input,
        format!("id,text\nr1,first\nr2,\"{huge}\"\nr3,\"third, quoted\"\r\n"),
    )
    .expect("rows");
    let out = scratch("huge.out.jsonl");
    let run = batch(&input, &["--out", s(&out), "--max-row-bytes", "1000"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let written = lines(&out);
    let by_row: HashMap<String, &Value> = written
        .iter()
        .map(|l| (l["row"].as_str().expect("a row id").to_string(), l))
        .collect();
    assert_eq!(by_row.len(), 3, "{written:?}");
    let too_large = by_row["2"];
    assert_eq!(too_large["status"], "error");
    assert_eq!(too_large["error"]["code"], "CONFIG_INVALID_INPUT");
    let message = too_large["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("CSV record 2: the row is 6006 bytes, more than the 1000 a row may have"),
        "{message}"
    );
    for (row, text) in [("1", "first"), ("3", "third, quoted")] {
        assert_eq!(by_row[row]["status"], "ok", "{}", by_row[row]);
        assert!(by_row[row].to_string().contains(text), "{}", by_row[row]);
    }
}

/// Rows sharing an `--id` are never skipped silently: the later ones are keyed
/// `id#2`, `id#3` and fail saying why, and a resume neither loses nor repeats them.
#[test]
fn rows_with_the_same_id_are_kept_apart_and_reported() {
    let input = scratch("same.jsonl");
    std::fs::write(
        &input,
        "{\"id\": \"same\", \"text\": \"one\"}\n{\"id\": \"same\", \"text\": \"two\"}\n{\"id\": \"same\", \"text\": \"three\"}\n",
    )
    .expect("rows");
    let out = scratch("same.out.jsonl");
    let run = batch(&input, &["--out", s(&out), "--id", "id"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let mut ids: Vec<String> = lines(&out)
        .iter()
        .map(|l| l["row"].as_str().unwrap_or_default().to_string())
        .collect();
    ids.sort();
    assert_eq!(ids, ["same", "same#2", "same#3"]);
    let duplicate = lines(&out)
        .into_iter()
        .find(|l| l["row"] == "same#2")
        .expect("the second row");
    assert!(
        duplicate["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("the id `same` of an earlier row")),
        "{duplicate}"
    );
    batch(&input, &["--out", s(&out), "--id", "id", "--resume"]);
    assert_eq!(lines(&out).len(), 3, "a resume adds nothing");
}

/// `--fail-fast` stops starting rows at the first failure (rows in flight still finish), and
/// `--summary FILE` writes the end-of-run counts as JSON.
#[test]
fn fail_fast_stops_at_the_first_failure_and_the_summary_says_so() {
    let input = rows_file("fast.jsonl", 40, Some(2));
    let out = scratch("fast.out.jsonl");
    let summary = scratch("fast.summary.json");
    let run = batch(
        &input,
        &[
            "--out",
            s(&out),
            "--id",
            "id",
            "-j",
            "1",
            "--fail-fast",
            "--summary",
            s(&summary),
        ],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let written = lines(&out);
    assert_eq!(
        written.len(),
        3,
        "rows r0, r1, then r2 failed and nothing more started"
    );
    assert_eq!(written[2]["row"], "r2");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary written"))
            .expect("summary JSON");
    assert_eq!(summary["rows_ok"], 2);
    assert_eq!(summary["rows_failed"], 1);
    assert!(summary["steps"]["label"]["p50_ms"].is_number(), "{summary}");
}

#[cfg(unix)]
#[test]
fn ctrl_c_during_a_batch_keeps_every_finished_row_and_resume_runs_the_rest() {
    // 600 rows of 20 ms at -j 4 take 3 s: far more than the signal needs to land after the
    // 20th row on a slow machine (120 rows ended within half a second of it).
    let input = rows_file("interrupted.jsonl", 600, None);
    let out = scratch("interrupted.out.jsonl");
    let args = [
        "run",
        "tests/plans/batch.yaml",
        "--batch",
        s(&input),
        "--out",
        s(&out),
        "--id",
        "id",
        "-j",
        "4",
    ];
    let child = crate::spawn(&args);
    let complete_lines = || {
        std::fs::read_to_string(&out)
            .map(|text| text.matches('\n').count())
            .unwrap_or(0)
    };
    // Interrupted once rows have been written, while others are in flight.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while complete_lines() < 20 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    crate::send_signal(&child, nix::sys::signal::Signal::SIGINT);
    let output = crate::finish_within(child, crate::RUN_LIMIT);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("cancelled; --resume continues"), "{stderr}");
    let kept = lines(&out);
    assert!(kept.len() >= 20 && kept.len() < 600, "{} rows", kept.len());
    assert!(
        kept.iter().all(|l| l["status"] == "ok"),
        "only finished rows"
    );

    let mut resumed = args.to_vec();
    resumed.push("--resume");
    let finish = pagantic(&resumed);
    assert_eq!(finish.code, 0, "{}", finish.stderr);
    let mut ids: Vec<String> = lines(&out)
        .iter()
        .map(|l| l["row"].as_str().expect("row id").to_string())
        .collect();
    ids.sort();
    let before = ids.len();
    ids.dedup();
    assert_eq!((before, ids.len()), (600, 600), "every row once");
}

#[test]
fn rows_come_from_stdin_with_a_dash() {
    let out = scratch("stdin.out.jsonl");
    let mut child = crate::spawn(&[
        "run",
        "-q",
        "tests/plans/batch.yaml",
        "--batch",
        "-",
        "--out",
        s(&out),
    ]);
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(
                b"{\"id\": \"s1\", \"text\": \"one\"}\n{\"id\": \"s2\", \"text\": \"two\"}\n",
            )
            .expect("rows written");
    }
    let status = crate::finish_within(child, crate::RUN_LIMIT);
    assert_eq!(
        status.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let mut outputs: Vec<String> = lines(&out)
        .iter()
        .map(|l| l["output"].as_str().unwrap_or_default().to_string())
        .collect();
    outputs.sort();
    assert_eq!(
        outputs,
        ["one (3 stars, row s1)", "two (3 stars, row s2)"],
        "each stdin line is a row"
    );
}

#[test]
fn a_glob_makes_one_row_per_matching_file() {
    let dir = scratch("docs");
    std::fs::create_dir_all(&dir).expect("dir");
    for (name, text) in [
        ("a.txt", "alpha"),
        ("b.txt", "beta"),
        ("c.md", "not matched"),
    ] {
        std::fs::write(dir.join(name), text).expect("file");
    }
    let out = scratch("glob.out.jsonl");
    let pattern = format!("{}/*.txt", s(&dir));
    let run = pagantic(&[
        "run",
        "-q",
        "tests/plans/batch-files.yaml",
        "--batch",
        &pattern,
        "--out",
        s(&out),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut rows: Vec<(String, String)> = lines(&out)
        .iter()
        .map(|l| {
            let id = l["row"].as_str().unwrap_or_default();
            let file = std::path::Path::new(id)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            (file, l["output"].as_str().unwrap_or_default().to_string())
        })
        .collect();
    rows.sort();
    assert_eq!(rows.len(), 2, "the .md file is not a row: {rows:?}");
    assert_eq!(rows[0].0, "a.txt");
    let path_length = |file: &str| dir.join(file).display().to_string().chars().count();
    assert_eq!(
        rows[0].1,
        format!("alpha ({} characters of path)", path_length("a.txt"))
    );
    assert_eq!(rows[1].0, "b.txt");
    assert_eq!(
        rows[1].1,
        format!("beta ({} characters of path)", path_length("b.txt"))
    );
}

/// A row that failed for good (a tool that fails while a file exists) stays failed on a plain
/// `--resume`; once the cause is gone, `--resume --retry-errors` runs it alone again, replaces
/// its line, leaves the other rows' lines as they were, and exits 0.
#[test]
fn retry_errors_replaces_the_line_of_a_row_that_now_succeeds() {
    let blocker = scratch("blocker");
    std::fs::write(&blocker, "").expect("blocker");
    let input = scratch("retry.jsonl");
    std::fs::write(
        &input,
        format!(
            "{{\"id\": \"a\", \"text\": \"one\"}}\n\
             {{\"id\": \"b\", \"text\": \"two\", \"blocker\": \"{}\"}}\n\
             {{\"id\": \"c\", \"text\": \"three\"}}\n",
            s(&blocker)
        ),
    )
    .expect("rows");
    let out = scratch("retry.out.jsonl");
    let run = |extra: &[&str]| {
        let args = [&["-q", "--id", "id", "--out", s(&out)], extra].concat();
        batch_of("tests/plans/retry-errors.yaml", &input, &args)
    };
    let by_row = || -> HashMap<String, Value> {
        lines(&out)
            .into_iter()
            .map(|l| (l["row"].as_str().expect("a row id").to_string(), l))
            .collect()
    };
    let first = run(&[]);
    assert_eq!(first.code, 1, "{}", first.stderr);
    let before = by_row();
    assert_eq!(before["b"]["status"], "error", "{}", before["b"]);
    assert_eq!(before["b"]["error"]["code"], "TOOL_EXECUTION_FAILED");
    assert_eq!(before["b"]["transient"], false);
    let resumed = run(&["--resume"]);
    assert_eq!(
        resumed.code, 1,
        "a plain resume keeps the failure: {}",
        resumed.stderr
    );
    assert_eq!(by_row()["b"]["status"], "error");
    std::fs::remove_file(&blocker).expect("the blocker goes");
    let retried = run(&["--resume", "--retry-errors"]);
    assert_eq!(retried.code, 0, "{}", retried.stderr);
    let written = lines(&out);
    assert_eq!(
        written.len(),
        3,
        "the failed line was replaced: {written:?}"
    );
    let after = by_row();
    assert_eq!(after["b"]["status"], "ok", "{}", after["b"]);
    assert_eq!(after["b"]["output"], "two");
    for id in ["a", "c"] {
        assert_eq!(after[id], before[id], "row {id} did not run again");
    }
}

/// `--max-row-bytes` holds for JSON Lines: the line past it fails on its own under its line
/// number, saying its size, and the rows within it go on.
#[test]
fn a_json_lines_row_past_the_size_limit_fails_alone() {
    let input = scratch("huge.jsonl");
    let huge = "x".repeat(3000);
    std::fs::write(
        &input,
        format!(
            "{{\"id\": \"r1\", \"text\": \"first\"}}\n\
             {{\"id\": \"r2\", \"text\": \"{huge}\"}}\n\
             {{\"id\": \"r3\", \"text\": \"third\"}}\n"
        ),
    )
    .expect("rows");
    let out = scratch("huge-jsonl.out.jsonl");
    let run = batch(
        &input,
        &["--id", "id", "--out", s(&out), "--max-row-bytes", "1000"],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let rows = statuses(&out);
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows["r1"].0, "ok");
    assert_eq!(rows["r3"].0, "ok");
    assert_eq!(
        rows["2"].0, "error",
        "a row too long to read is keyed by its line"
    );
    assert!(
        rows["2"]
            .1
            .contains("line 2: the row is 3025 bytes, more than the 1000 a row may have"),
        "{}",
        rows["2"].1
    );
}

/// `--max-row-bytes` holds for directory inputs: a file past it fails on its own, saying its
/// size, and the files within it go on.
#[test]
fn a_file_of_a_directory_input_past_the_size_limit_fails_alone() {
    let dir = scratch("sized");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("small.txt"), "small").expect("file");
    std::fs::write(dir.join("large.txt"), "y".repeat(2000)).expect("file");
    let out = scratch("sized.out.jsonl");
    let run = batch_of(
        "tests/plans/batch-files.yaml",
        &dir,
        &["-q", "--out", s(&out), "--max-row-bytes", "1000"],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let rows = statuses(&out);
    let large = dir.join("large.txt").display().to_string();
    let small = dir.join("small.txt").display().to_string();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[&small].0, "ok");
    assert_eq!(rows[&large].0, "error");
    assert!(
        rows[&large].1.contains(&format!(
            "{large} is 2000 bytes, more than the 1000 a row may have"
        )),
        "{}",
        rows[&large].1
    );
}

/// Each output line's row id with its status and its error message (empty when it has none).
fn statuses(out: &std::path::Path) -> HashMap<String, (String, String)> {
    lines(out)
        .into_iter()
        .map(|l| {
            let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
            (
                text(&l["row"]),
                (text(&l["status"]), text(&l["error"]["message"])),
            )
        })
        .collect()
}

/// `--inputs-file` gives the inputs, `-i` overrides one of them, and `--max-parallel N` runs at
/// most N of four independent steps at once — and does run N, as the events show.
#[test]
fn inputs_file_and_max_parallel_through_the_command_line() {
    let inputs = scratch("inputs.json");
    std::fs::write(&inputs, r#"{"text": "from the file", "stars": 5}"#).expect("inputs");
    for limit in [1, 2] {
        let events = scratch(&format!("parallel-{limit}.events.jsonl"));
        let run = pagantic(&[
            "run",
            "tests/plans/parallel-steps.yaml",
            "--inputs-file",
            s(&inputs),
            "-i",
            "stars=4",
            "--max-parallel",
            &limit.to_string(),
            "--no-cache",
            "--events",
            s(&events),
            "--format",
            "json",
        ]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let record: Value = serde_json::from_str(&run.stdout).expect("a record");
        assert_eq!(record["steps"][0]["output"], "a from the file (4 stars)");
        assert_eq!(record["steps"][3]["output"], "d from the file");
        let (mut running, mut most) = (0, 0);
        for event in crate::events_in(&events) {
            match event["kind"].as_str() {
                Some("step_start") => running += 1,
                Some("step_end") => running -= 1,
                _ => {}
            }
            most = most.max(running);
        }
        assert_eq!(
            most, limit,
            "steps running at once with --max-parallel {limit}"
        );
    }
}

/// The largest `--max-row-bytes` a count can hold is no limit at all, not an overflow: every
/// JSON Lines row is read and answered.
#[test]
fn the_largest_row_size_limit_reads_every_row() {
    let input = rows_file("unlimited.jsonl", 3, None);
    let out = scratch("unlimited.out.jsonl");
    let limit = u64::MAX.to_string();
    let run = batch(
        &input,
        &["--id", "id", "--out", s(&out), "--max-row-bytes", &limit],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let rows = statuses(&out);
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.values().all(|(status, _)| status == "ok"), "{rows:?}");
}
