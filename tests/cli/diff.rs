//! `pagantic diff`: two run records or two batch outputs compared — identical runs exit 0
//! whatever their timings, a changed output is shown as a line diff and exits 1, rows are joined
//! by id, and a file that is neither kind exits 2.

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

fn batch(input: &Path, out: &Path) {
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
    assert!(run.code <= 1, "{}", run.stderr);
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
    batch(&input_a, &out_a);
    batch(&input_a, &out_c);
    batch(&input_b, &out_b);

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
