//! `pagantic diff`: two run records or two batch outputs compared — identical runs exit 0
//! whatever their timings, a changed output is shown as a line diff and exits 1, rows are joined
//! by id, a row whose status changed is named with the step that failed, and a file that is
//! neither kind exits 2.

use std::path::Path;

use crate::pagantic;

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8")
}

fn rows(path: &Path, texts: &[(&str, &str)]) {
    let text: String = texts
        .iter()
        .map(|(id, text)| format!("{{\"id\": \"{id}\", \"text\": \"{text}\"}}\n"))
        .collect();
    std::fs::write(path, text).expect("rows written");
}

/// Runs tests/plans/batch.yaml over `input` into `out`; it must exit `code` (1 when a row fails).
fn batch(input: &Path, out: &Path, code: i32) {
    let run = pagantic(&[
        "run",
        "-q",
        "tests/plans/batch.yaml",
        "--batch",
        s(input),
        "--id",
        "id",
        "--out",
        s(out),
    ]);
    assert_eq!(run.code, code, "{}", run.stderr);
}

#[test]
fn two_batch_outputs_are_compared_row_by_row() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (input_a, input_b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    let (out_a, out_b, out_c) = (
        dir.path().join("a.out"),
        dir.path().join("b.out"),
        dir.path().join("c.out"),
    );
    rows(&input_a, &[("r1", "good"), ("r2", "fine"), ("r3", "gone")]);
    rows(&input_b, &[("r2", "better"), ("r1", "good"), ("r4", "new")]);
    batch(&input_a, &out_a, 0);
    batch(&input_a, &out_c, 0);
    batch(&input_b, &out_b, 0);

    let same = pagantic(&["diff", s(&out_a), s(&out_c)]);
    assert_eq!(same.code, 0, "{}{}", same.stdout, same.stderr);
    assert!(same.stdout.starts_with("identical: "), "{}", same.stdout);

    let changed = pagantic(&["diff", s(&out_a), s(&out_b)]);
    assert_eq!(changed.code, 1, "{}", changed.stderr);
    let text = &changed.stdout;
    assert!(text.contains("~ r2 (ok)\n"), "{text}");
    assert!(text.contains("-fine (3 stars, row r2)"), "{text}");
    assert!(text.contains("+better (3 stars, row r2)"), "{text}");
    assert!(!text.contains("~ r1 "), "r1 is the same in both: {text}");
    assert!(text.contains("- r3 (only in A)\n"), "{text}");
    assert!(text.contains("+ r4 (only in B)\n"), "{text}");

    let json = pagantic(&["diff", "--format", "json", s(&out_a), s(&out_b)]);
    assert_eq!(json.code, 1);
    let value: serde_json::Value = serde_json::from_str(&json.stdout).expect("json");
    assert_eq!(value["kind"], "batch");
    assert_eq!(value["identical"], false);
    assert_eq!(value["only_a"], serde_json::json!(["r3"]));
}

/// A row that succeeded in A and failed in B is a status change, shown in text (with the step
/// that failed and the totals line) and in JSON.
#[test]
fn a_row_that_failed_in_b_is_a_status_change() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (input_a, input_b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    let (out_a, out_b) = (dir.path().join("a.out"), dir.path().join("b.out"));
    rows(&input_a, &[("r1", "good"), ("r2", "fine")]);
    rows(&input_b, &[("r1", "good"), ("r2", "boom"), ("r3", "new")]);
    batch(&input_a, &out_a, 0);
    batch(&input_b, &out_b, 1);

    let changed = pagantic(&["diff", s(&out_a), s(&out_b)]);
    assert_eq!(changed.code, 1, "{}", changed.stderr);
    let text = &changed.stdout;
    for line in [
        "~ r2: ok → error\n",
        "-fine (3 stars, row r2)\n",
        "~ r2 step check: ok → failed\n",
        "+ r3 (only in B)\n",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
    assert!(!text.contains("r1"), "r1 is the same in both: {text}");
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l.starts_with("different: tokens 20 → 30 (+10), time ")),
        "{text}"
    );

    let json = pagantic(&["diff", "--format", "json", s(&out_a), s(&out_b)]);
    assert_eq!(json.code, 1, "{}", json.stderr);
    let value: serde_json::Value = serde_json::from_str(&json.stdout).expect("json");
    assert_eq!(value["identical"], false);
    assert_eq!(value["only_a"], serde_json::json!([]));
    assert_eq!(value["only_b"], serde_json::json!(["r3"]));
    let changes: Vec<(&str, &serde_json::Value)> = value["changed"]
        .as_array()
        .expect("changed")
        .iter()
        .map(|c| (c["at"].as_str().unwrap_or_default(), &c["status"]))
        .collect();
    assert_eq!(
        changes,
        [
            ("r2", &serde_json::json!(["ok", "error"])),
            ("r2 step check", &serde_json::json!(["ok", "failed"])),
        ]
    );
    assert_eq!(
        value["changed"][0]["output"],
        serde_json::json!(["fine (3 stars, row r2)", null])
    );
    let tokens: Vec<&serde_json::Value> = value["totals"]
        .as_array()
        .expect("totals")
        .iter()
        .map(|t| &t["tokens"])
        .collect();
    assert_eq!(tokens, [20, 30]);
}

#[test]
fn two_run_records_show_the_steps_that_changed() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let record = |name: &str, question: &str| {
        let run = pagantic(&[
            "run",
            "--format",
            "json",
            "--dry-run",
            "-i",
            &format!("question={question}"),
            "plans/quickstart.yaml",
        ]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let path = dir.path().join(name);
        std::fs::write(&path, run.stdout).expect("record written");
        path
    };
    let (a, b, c) = (
        record("a", "Why?"),
        record("b", "How?"),
        record("c", "Why?"),
    );
    assert_eq!(pagantic(&["diff", s(&a), s(&c)]).code, 0);
    let changed = pagantic(&["diff", s(&a), s(&b)]);
    assert_eq!(changed.code, 1, "{}", changed.stderr);
    assert!(
        changed.stdout.contains("~ run (complete)\n"),
        "{}",
        changed.stdout
    );
    assert!(
        changed.stdout.contains("~ step answer (ok)\n"),
        "{}",
        changed.stdout
    );

    let junk = dir.path().join("junk");
    std::fs::write(&junk, "not json\n").expect("written");
    let refused = pagantic(&["diff", s(&a), s(&junk)]);
    assert_eq!(refused.code, 2);
    assert!(refused.stderr.contains("junk:1:"), "{}", refused.stderr);
}

/// A run record whose answer is `output`, written to `dir/name`.
fn record_with_output(dir: &Path, name: &str, output: &str) -> std::path::PathBuf {
    let record = serde_json::json!({ "status": "complete", "output": output, "steps": [] });
    let path = dir.join(name);
    std::fs::write(&path, record.to_string()).expect("record written");
    path
}

#[test]
fn huge_changed_outputs_are_summarised_in_bounded_time() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let lines = |prefix: &str| -> String {
        (0..200_000)
            .map(|n| format!("{prefix} line {n}\n"))
            .collect()
    };
    let a = record_with_output(dir.path(), "a.json", &lines("before"));
    let b = record_with_output(dir.path(), "b.json", &lines("after"));
    let started = std::time::Instant::now();
    let changed = pagantic(&["diff", s(&a), s(&b)]);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(changed.code, 1, "{}", changed.stderr);
    assert!(
        changed.stdout.contains(
            "(diff cut: over 20000 lines; the output has 200000 lines in A and 200000 in B)"
        ),
        "{}",
        changed.stdout
    );
}

#[test]
fn escape_sequences_in_answers_are_shown_not_obeyed() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let a = record_with_output(dir.path(), "a.json", "fine");
    let b = record_with_output(
        dir.path(),
        "b.json",
        "\u{1b}]0;owned\u{7}\u{1b}[2Jgone\r\u{9b}1m",
    );
    let changed = pagantic(&["diff", s(&a), s(&b)]);
    assert_eq!(changed.code, 1, "{}", changed.stderr);
    let text = &changed.stdout;
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{text:?}"
    );
    assert!(
        text.contains(r"+\u{1b}]0;owned\u{7}\u{1b}[2Jgone\u{d}") && text.contains(r"\u{9b}1m"),
        "{text}"
    );
}

#[test]
fn a_device_or_fifo_is_refused_not_read() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let a = record_with_output(dir.path(), "a.json", "fine");
    let zero = pagantic(&["diff", s(&a), "/dev/zero"]);
    assert_eq!(zero.code, 2, "{}", zero.stderr);
    assert!(
        zero.stderr.contains("/dev/zero is not a regular file"),
        "{}",
        zero.stderr
    );
}
