//! `pagantic test` as a regression gate, on scripted plans written into a temporary directory:
//! `--baseline` with `--fail-on regression` names exactly the cases that went from PASS to FAIL
//! (and passes an improvement), `--repeat` flags a case whose model alternates as flaky rather
//! than as a regression and gives each repeat of a sampled call its own cache entry, the Markdown
//! summary stays under its bound and is appended to `$GITHUB_STEP_SUMMARY`, and answers full of
//! control characters leave every report well formed.

use std::path::Path;

use serde_json::Value;

use crate::{Run, command, fresh_cache_dir, pagantic_in, pagantic_with};

const TEST_FILE: &str = "gate.test.yaml";

/// A plan named `name` whose one step asks a scripted model set up by `model` (its lines below
/// `kind: scripted`) the case's question.
fn scripted_plan(name: &str, model: &str) -> String {
    format!(
        "version: 1\nname: {name}\ninputs:\n  question: {{ type: string }}\nmodels:\n  llm:\n    kind: scripted\n{model}steps:\n  - name: answer\n    type: infer\n    model: llm\n    template: \"{{{{ inputs.question }}}}\"\noutput: \"{{{{ steps.answer.output }}}}\"\n"
    )
}

/// A plan whose scripted model answers `question N` with `answer N`, except for the numbers in
/// `broken`, which it answers wrongly.
fn plan(broken: &[&str]) -> String {
    let rules: String = ["one", "two", "three", "four"]
        .iter()
        .map(|n| {
            let reply = if broken.contains(n) { "no idea" } else { n };
            format!("      - {{ contains: \"question {n}\", reply: \"answer {reply}\" }}\n")
        })
        .collect();
    scripted_plan("gate", &format!("    rules:\n{rules}"))
}

/// The test file: four cases, each expecting its own answer; half of them must pass.
fn test_file() -> String {
    let cases: String = ["one", "two", "three", "four"]
        .iter()
        .map(|n| {
            format!(
                "  - name: case-{n}\n    inputs: {{ question: \"question {n}\" }}\n    assert:\n      - {{ type: contains, value: \"answer {n}\" }}\n"
            )
        })
        .collect();
    format!("version: 1\nplan: gate.yaml\nmin_pass_rate: 0.5\ncases:\n{cases}")
}

/// A temporary directory holding the test file and the plan with `broken` answers.
fn suite_dir(broken: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), broken);
    std::fs::write(dir.path().join(TEST_FILE), test_file()).expect("test file");
    dir
}

/// Writes the plan with `broken` answers into `dir`.
fn write(dir: &Path, broken: &[&str]) {
    std::fs::write(dir.join("gate.yaml"), plan(broken)).expect("plan");
}

/// `pagantic test gate.test.yaml ARGS…` in `dir`, quietly.
fn test_in(dir: &Path, args: &[&str]) -> Run {
    let mut all = vec!["test", TEST_FILE, "--quiet"];
    all.extend_from_slice(args);
    pagantic_in(dir, &all)
}

/// `pagantic test` as [`test_in`] does, gated on regressions against `base.json`.
fn gated(dir: &Path, args: &[&str]) -> Run {
    let mut all = vec!["--baseline", "base.json", "--fail-on", "regression"];
    all.extend_from_slice(args);
    test_in(dir, &all)
}

/// Writes the JSON report of the suite in `dir` to `name`, as a baseline.
fn baseline(dir: &Path, name: &str, args: &[&str]) {
    let mut all = vec!["--format", "json", "--out", name];
    all.extend_from_slice(args);
    let run = test_in(dir, &all);
    assert!(run.code == 0 || run.code == 1, "{}", run.stderr);
}

fn json(run: &Run) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", run.stdout, run.stderr))
}

/// The names of the cases of the first suite's first variant whose change is `change`.
fn changed(report: &Value, change: &str) -> Vec<String> {
    report["suites"][0]["comparison"]["variants"][0]["cases"]
        .as_array()
        .expect("compared cases")
        .iter()
        .filter(|c| c["change"] == change)
        .map(|c| c["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_change_that_breaks_two_cases_fails_the_regression_gate_naming_exactly_those_two() {
    let dir = suite_dir(&[]);
    baseline(dir.path(), "base.json", &[]);
    write(dir.path(), &["two", "three"]);
    // 2 of 4 still reach the suite's pass rate of 50%: the pass-rate gate lets it through.
    let by_rate = test_in(dir.path(), &["--baseline", "base.json"]);
    assert_eq!(by_rate.code, 0, "{}\n{}", by_rate.stdout, by_rate.stderr);
    assert!(
        by_rate.stdout.contains("compared with baseline base.json:"),
        "{}",
        by_rate.stdout
    );
    let refused = gated(dir.path(), &[]);
    assert_eq!(refused.code, 1, "{}\n{}", refused.stdout, refused.stderr);
    let table = &refused.stdout;
    for case in ["case-two", "case-three"] {
        assert!(
            table.contains(&format!("[plan] PASS→FAIL: {case} (line")),
            "{table}"
        );
    }
    assert_eq!(table.matches("PASS→FAIL").count(), 2, "{table}");
    assert!(table.contains("  2 regressions"), "{table}");
    let report = json(&gated(dir.path(), &["--format", "json"]));
    assert_eq!(changed(&report, "regressed"), ["case-two", "case-three"]);
    assert_eq!(changed(&report, "unchanged"), ["case-one", "case-four"]);
    let pass_rate = report["suites"][0]["comparison"]["variants"][0]["metrics"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["name"] == "pass rate"))
        .expect("the pass rate compared");
    assert_eq!(
        (pass_rate["before"].as_f64(), pass_rate["after"].as_f64()),
        (Some(1.0), Some(0.5))
    );
    // The GitHub annotations land on the two cases' lines.
    let github = gated(dir.path(), &["--format", "github"]);
    let regressed: Vec<&str> = github
        .stdout
        .lines()
        .filter(|l| l.contains("PASS→FAIL::"))
        .collect();
    assert_eq!(regressed.len(), 2, "{}", github.stdout);
    assert!(regressed[0].starts_with("::error file=gate.test.yaml,line=9,title=case-two [plan] PASS→FAIL::passed in the baseline"), "{regressed:?}");
}

#[test]
fn an_improvement_alone_passes_the_regression_gate() {
    let dir = suite_dir(&["two", "three"]);
    baseline(dir.path(), "base.json", &[]);
    write(dir.path(), &[]);
    let run = gated(dir.path(), &["--format", "json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let report = json(&run);
    assert_eq!(changed(&report, "improved"), ["case-two", "case-three"]);
    let variant = &report["suites"][0]["comparison"]["variants"][0];
    assert_eq!(variant["new_cases"], serde_json::json!([]));
    // Running only some cases: the others are listed as gone, not counted.
    let some = gated(dir.path(), &["--filter", "case-t"]);
    assert_eq!(some.code, 0, "{}", some.stdout);
    assert!(
        some.stdout.contains("[plan] gone: case-one, case-four"),
        "{}",
        some.stdout
    );
}

#[test]
fn a_baseline_that_is_not_a_report_is_refused_before_anything_runs() {
    let dir = suite_dir(&[]);
    std::fs::write(
        dir.path().join("other.json"),
        r#"{"passed": true, "suites": []}"#,
    )
    .expect("file");
    let foreign = test_in(dir.path(), &["--baseline", "other.json"]);
    assert_eq!(foreign.code, 2, "{}", foreign.stderr);
    assert!(foreign.stdout.is_empty(), "nothing ran: {}", foreign.stdout);
    assert!(
        foreign.stderr.contains("CONFIG_FILE_ERROR"),
        "{}",
        foreign.stderr
    );
    assert!(
        foreign.stderr.contains("not a `pagantic test` JSON report"),
        "{}",
        foreign.stderr
    );
    let missing = test_in(dir.path(), &["--baseline", "missing.json"]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    let unnamed = test_in(dir.path(), &["--fail-on", "regression"]);
    assert_eq!(unnamed.code, 2, "{}", unnamed.stderr);
    assert!(
        unnamed.stderr.contains("none was given"),
        "{}",
        unnamed.stderr
    );
}

/// What the coin plan's model answers, in turn: heads, tails, heads, tails… (then heads).
const COIN_REPLIES: &str = "    replies: [heads, tails, heads, tails, heads]\n";

const COIN_TEST: &str = r#"version: 1
plan: coin.yaml
min_pass_rate: 0.5
cases:
  - name: coin
    inputs: { question: "toss" }
    assert:
      - { type: contains, value: heads }
"#;

#[test]
fn a_case_whose_model_alternates_is_flaky_under_repeat_and_not_a_regression() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("coin.yaml"),
        scripted_plan("coin", COIN_REPLIES),
    )
    .expect("plan");
    std::fs::write(dir.path().join("coin.test.yaml"), COIN_TEST).expect("test file");
    let test = |args: &[&str]| {
        let mut all = vec!["test", "coin.test.yaml", "--quiet", "-j", "1"];
        all.extend_from_slice(args);
        pagantic_in(dir.path(), &all)
    };
    let repeated_against_baseline = |args: &[&str]| {
        let gate = [
            "--repeat",
            "4",
            "--baseline",
            "base.json",
            "--fail-on",
            "regression",
        ];
        test(&[&gate[..], args].concat())
    };
    // Once: heads, a pass — the baseline.
    let once = test(&["--format", "json", "--out", "base.json"]);
    assert_eq!(once.code, 0, "{}", once.stderr);
    let repeated = repeated_against_baseline(&["--format", "json"]);
    assert_eq!(
        repeated.code, 0,
        "flaky is not a regression: {}",
        repeated.stdout
    );
    let report = json(&repeated);
    let variant = &report["suites"][0]["variants"][0];
    let coin = &variant["cases"][0];
    assert_eq!(
        coin["repeats"]["passes"],
        serde_json::json!([true, false, true, false])
    );
    assert_eq!(
        (coin["repeats"]["flaky"].as_bool(), coin["passed"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(
        (coin["repeats"]["shown"].as_u64(), coin["output"].as_str()),
        (Some(2), Some("tails"))
    );
    assert_eq!(
        (
            variant["pass_at_k"].as_f64(),
            variant["pass_every_time"].as_f64(),
            variant["flaky"].as_u64()
        ),
        (Some(1.0), Some(0.0), Some(1))
    );
    assert_eq!(
        (variant["runs"].as_u64(), variant["pass_rate"].as_f64()),
        (Some(4), Some(0.5))
    );
    assert_eq!(
        variant["repeat_pass_rates"],
        serde_json::json!([1.0, 0.0, 1.0, 0.0])
    );
    assert_eq!(changed(&report, "flaky"), ["coin"]);
    // The table marks it and shows the repeat statistics; the pass rate is over all runs.
    let table = test(&["--repeat", "4", "--baseline", "base.json"]);
    assert_eq!(table.code, 0, "2 of 4 runs reach 50%: {}", table.stdout);
    for shown in [
        "~ 0.50",
        "2/4",
        "pass@4",
        "pass^4",
        "flaky (not counted): coin",
        "│ 2/4 50%",
    ] {
        assert!(table.stdout.contains(shown), "{shown} in {}", table.stdout);
    }
    // The pass rate fell from 1 to 0.5: not a regression unless --max-drop says so.
    let dropped = repeated_against_baseline(&["--max-drop", "0.25"]);
    assert_eq!(dropped.code, 1, "{}", dropped.stdout);
    assert!(
        dropped
            .stdout
            .contains("[plan] pass rate: 1.00 → 0.50 (-0.50) — dropped more than 0.25"),
        "{}",
        dropped.stdout
    );
    let bad_drop = test(&["--baseline", "base.json", "--max-drop", "1.5"]);
    assert_eq!(bad_drop.code, 2, "{}", bad_drop.stderr);
    // A progress line per run.
    let noisy = pagantic_in(
        dir.path(),
        &["test", "coin.test.yaml", "-j", "1", "--repeat", "4"],
    );
    assert_eq!(
        noisy.stderr.matches("[plan] run ").count(),
        4,
        "{}",
        noisy.stderr
    );
}

#[test]
fn each_repeat_of_a_sampled_call_has_a_cache_entry_of_its_own() {
    let entries = |temperature: &str| {
        let dir = suite_dir(&[]);
        let plan = plan(&[]).replace(
            "    model: llm\n",
            &format!("    model: llm\n    temperature: {temperature}\n"),
        );
        std::fs::write(dir.path().join("gate.yaml"), plan).expect("plan");
        let cache = fresh_cache_dir();
        let run = crate::output_of(
            command(&cache)
                .args([
                    "test", TEST_FILE, "--quiet", "--repeat", "3", "--filter", "case-one",
                ])
                .current_dir(dir.path()),
        );
        assert_eq!(
            run.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let stats = crate::output_of(command(&cache).args(["cache", "stats", "--format", "json"]));
        let _ = std::fs::remove_dir_all(&cache);
        let stats: Value = serde_json::from_slice(&stats.stdout).expect("JSON stats");
        stats["kinds"]
            .as_array()
            .and_then(|kinds| kinds.iter().find(|k| k["kind"] == "call"))
            .and_then(|k| k["entries"].as_u64())
            .unwrap_or_else(|| panic!("no call entries in {stats:#}"))
    };
    assert_eq!(entries("0.7"), 3, "three samples");
    assert_eq!(entries("0"), 1, "greedy: one answer, asked once");
}

#[test]
fn the_markdown_summary_is_bounded_and_appended_to_the_step_summary() {
    let dir = suite_dir(&["two"]);
    let summary = dir.path().join("summary.md");
    std::fs::write(&summary, "earlier step\n").expect("summary");
    let summary_path = summary.to_string_lossy().into_owned();
    let run = pagantic_with(
        dir.path(),
        &[
            "test",
            TEST_FILE,
            "--quiet",
            "--html",
            "report.html",
            "--format",
            "json",
        ],
        &[("GITHUB_STEP_SUMMARY", &summary_path)],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let _ = json(&run);
    let written = std::fs::read_to_string(&summary).expect("summary");
    assert!(
        written.starts_with("earlier step\n## pagantic test — passed"),
        "{written}"
    );
    for shown in [
        "| plan | 3/4 (75%) |",
        "| case-two | plan | 9 |",
        "[report.html](<report.html>)",
    ] {
        assert!(written.contains(shown), "{shown} in {written}");
    }
    // A suite whose summary would be far larger is cut, with a note.
    let rows: String = (0..700)
        .map(|i| {
            format!(
                "{{\"id\": \"row-{i:04}-{}\", \"question\": \"question {i}\"}}\n",
                "x".repeat(120)
            )
        })
        .collect();
    std::fs::write(dir.path().join("rows.jsonl"), rows).expect("dataset");
    let big = "version: 1\nplan: gate.yaml\ndataset:\n  file: rows.jsonl\n  id: id\n  assert:\n    - { type: contains, value: \"never said\" }\n";
    std::fs::write(dir.path().join("big.test.yaml"), big).expect("test file");
    let markdown = pagantic_in(
        dir.path(),
        &["test", "big.test.yaml", "--quiet", "--format", "markdown"],
    );
    assert_eq!(markdown.code, 1, "{}", markdown.stderr);
    assert!(
        markdown.stdout.len() <= 64 * 1024,
        "{}",
        markdown.stdout.len()
    );
    assert!(
        markdown.stdout.len() > 60 * 1024,
        "{}",
        markdown.stdout.len()
    );
    assert!(
        markdown
            .stdout
            .ends_with("the JSON and HTML reports have every case.\n"),
        "{}",
        &markdown.stdout[markdown.stdout.len() - 300..]
    );
}

/// A model that answers with what no report can print raw: XML's forbidden characters, NUL-like
/// controls, terminal escape sequences, markup.
const HOSTILE_REPLIES: &str = r#"    replies: ["\uFFFE\uFFFF \x01\x08 \e]0;pwned\x07 \e[2J <b>bold</b> & \"quoted\" \r\n| pipe \u009B31m"]
"#;

const HOSTILE_TEST: &str = r#"version: 1
plan: hostile.yaml
cases:
  - name: hostile
    inputs: { question: "say it" }
    assert:
      - { type: contains, value: "plain words" }
"#;

/// Whether `c` may appear in an XML 1.0 document.
fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
}

#[test]
fn answers_full_of_control_characters_leave_every_report_well_formed() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("hostile.yaml"),
        scripted_plan("hostile", HOSTILE_REPLIES),
    )
    .expect("plan");
    std::fs::write(dir.path().join("hostile.test.yaml"), HOSTILE_TEST).expect("test file");
    let report = |format: &str| {
        let run = pagantic_in(
            dir.path(),
            &[
                "test",
                "hostile.test.yaml",
                "--quiet",
                "--format",
                format,
                "--html",
                "report.html",
            ],
        );
        assert_eq!(run.code, 1, "{}", run.stderr);
        run.stdout
    };
    let terminal_unsafe = |text: &str| {
        text.chars().any(|c| {
            (c.is_control() && c != '\n' && c != '\t') || c == '\u{fffe}' || c == '\u{ffff}'
        })
    };
    // JSON carries the answer exactly.
    let parsed: Value = serde_json::from_str(&report("json")).expect("valid JSON");
    let answer = parsed["suites"][0]["variants"][0]["cases"][0]["output"]
        .as_str()
        .expect("output");
    assert!(
        answer.starts_with("\u{fffe}\u{ffff} \u{1}\u{8} \u{1b}]0;pwned\u{7}"),
        "{answer:?}"
    );
    // JUnit: only characters XML 1.0 allows, and the markup escaped.
    let junit = report("junit");
    assert!(junit.chars().all(xml_char), "{junit:?}");
    assert!(
        !junit.contains("<b>") && junit.contains("&lt;b&gt;"),
        "{junit}"
    );
    assert!(
        junit.contains("\\u{fffe}\\u{ffff}") && junit.contains("\\u{1b}]0;pwned\\u{7}"),
        "{junit}"
    );
    assert_eq!(
        junit.matches("<testcase ").count(),
        junit.matches("</testcase>").count()
    );
    // HTML: no raw control character and no markup from the answer.
    let html = std::fs::read_to_string(dir.path().join("report.html")).expect("html");
    assert!(!terminal_unsafe(&html.replace('\r', "")), "{html:?}");
    assert!(!html.contains("<b>bold</b>") && html.contains("&lt;b&gt;bold&lt;/b&gt;"));
    // GitHub: every line is a workflow command, none broken by the answer's line breaks.
    let github = report("github");
    assert!(github.lines().all(|l| l.starts_with("::")), "{github}");
    assert_eq!(github.lines().count(), 2, "{github}");
    assert!(!terminal_unsafe(&github), "{github:?}");
    // Text and Markdown: control characters shown, not obeyed.
    for format in ["text", "markdown"] {
        let text = report(format);
        assert!(!terminal_unsafe(&text), "{format}: {text:?}");
        assert!(
            text.contains("\\u{1b}") || text.contains("\\\\u{1b}"),
            "{format}: {text}"
        );
    }
}
