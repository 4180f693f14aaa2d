//! `pagantic test`: test files run every case under every variant of a scripted plan, score each
//! kind of assertion, gate on the pass rate (exit 0 / 1, 2 for an invalid file), and report as a
//! table, JSON, JUnit XML, GitHub annotations and one HTML page checked in headless Chromium.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::{pagantic, root};

const SUITE: &str = "tests/evals/support.test.yaml";

fn json_report(args: &[&str]) -> (i32, Value) {
    let mut all = vec!["test", "--format", "json", "--quiet"];
    all.extend_from_slice(args);
    let run = pagantic(&all);
    let report = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", run.stdout, run.stderr));
    (run.code, report)
}

fn variant<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["suites"][0]["variants"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == name))
        .unwrap_or_else(|| panic!("no variant {name} in {report}"))
}

fn case<'a>(variant: &'a Value, name: &str) -> &'a Value {
    variant["cases"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no case {name} in {variant}"))
}

/// The 1-based line of the first line of `file` containing `text`.
fn line_of(file: &str, text: &str) -> usize {
    std::fs::read_to_string(root().join(file))
        .expect("readable")
        .lines()
        .position(|l| l.contains(text))
        .unwrap_or_else(|| panic!("`{text}` not in {file}"))
        + 1
}

#[test]
fn every_kind_of_assertion_is_scored_on_the_steps_and_the_record() {
    let (code, report) = json_report(&[SUITE, "--variant", "plan"]);
    assert_eq!(
        code, 0,
        "7 of 8 cases pass, above the 0.5 needed: {report:#}"
    );
    let plan = variant(&report, "plan");
    assert_eq!(
        (plan["passed"].as_u64(), plan["total"].as_u64()),
        (Some(7), Some(8))
    );
    for name in ["resume", "label", "fails", "weighted", "markup"] {
        let case = case(plan, name);
        assert_eq!(case["passed"], true, "{case:#}");
    }
    // Every assertion of `resume` passed, the shared max_latency included.
    let resume = case(plan, "resume");
    let kinds: Vec<&str> = resume["assertions"]
        .as_array()
        .expect("assertions")
        .iter()
        .map(|a| a["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        kinds,
        [
            "max_latency",
            "contains",
            "icontains",
            "starts_with",
            "regex",
            "not_contains",
            "hit_at_k",
            "recall_at_k",
            "mrr",
            "max_tokens",
            "max_cost",
            "judge"
        ]
    );
    // The judge (a scripted model here) answered through the fixed schema.
    let judge = &resume["assertions"][11];
    assert_eq!(
        (judge["score"].as_f64(), judge["passed"].as_bool()),
        (Some(0.9), Some(true))
    );
    assert_eq!(judge["note"], "judge: pass (0.90) — it names --resume");
    // An assertion of weight 0 is reported but does not fail its case.
    let unscored = &case(plan, "label")["assertions"][5];
    assert_eq!(
        (unscored["weight"].as_f64(), unscored["passed"].as_bool()),
        (Some(0.0), Some(false))
    );
    // The expected failure: the run failed with the code the case asked for.
    let fails = case(plan, "fails");
    assert_eq!(fails["status"], "error");
    assert_eq!(fails["error"]["code"], "VALIDATION_RULE_FAILED");
    // One assertion failed, but the weighted score (4 of 5: the shared max_latency, and the
    // equals of weight 3) reaches the threshold of 0.75.
    let weighted = case(plan, "weighted");
    assert_eq!(weighted["score"], 0.8);
    assert_eq!(weighted["assertions"][1]["passed"], false);
    // The case that fails on purpose says what the reranker kept instead.
    let wrong = case(plan, "wrong-source");
    assert_eq!(wrong["passed"], false);
    let metric = &wrong["assertions"][1];
    assert_eq!(metric["got"], "models.md", "{metric:#}");
    assert_eq!(metric["line"], line_of(SUITE, "fails on purpose"));
    let judged = &wrong["assertions"][2];
    assert_eq!(
        (judged["score"].as_f64(), judged["passed"].as_bool()),
        (Some(0.0), Some(false))
    );
    assert_eq!(judged["note"], "judge: fail (0.10) — it does not");
    // Dataset rows: the row's columns bound to the inputs and to the expected values.
    for row in ["questions.jsonl:resume-row", "questions.jsonl:validate-row"] {
        assert_eq!(case(plan, row)["passed"], true, "{row}");
    }
    // The retrieval metrics, averaged over the cases.
    assert_eq!(plan["metrics"]["rerank recall_at_k"], 1.0);
    assert_eq!(plan["metrics"]["rerank hit_at_k"], 0.0);
    assert_eq!(plan["metrics"]["retrieve hit_at_k"], 1.0);
}

#[test]
fn a_variant_below_the_pass_rate_fails_the_suite_and_the_table_compares_them() {
    let run = pagantic(&["test", SUITE]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let table = &run.stdout;
    assert!(table.contains("│ plan"), "{table}");
    assert!(table.contains("│ brief"), "{table}");
    assert!(table.contains("pass rate  "), "{table}");
    assert!(table.contains("│ 7/8 88%"), "{table}");
    assert!(table.contains("│ 1/8 12%"), "{table}");
    let contains_line = line_of(SUITE, "{ type: contains, value: \"--resume\" }");
    assert!(
        table.contains(&format!(
            "line {contains_line}: contains: expected \"--resume\", got \"Resume.\""
        )),
        "{table}"
    );
    assert!(
        table.contains(
            "FAIL: tests/evals/support.test.yaml (needs a pass rate of 50% under every variant)"
        ),
        "{table}"
    );
    // Progress on stderr, one line per case.
    assert_eq!(run.stderr.matches(" [brief] ").count(), 8, "{}", run.stderr);
}

#[test]
fn variants_set_fields_of_the_plan() {
    let (_, report) = json_report(&[SUITE]);
    let brief = variant(&report, "brief");
    assert_eq!(
        brief["set"]["answer.template"],
        "Briefly: {{ inputs.question }}"
    );
    assert_eq!(case(brief, "resume")["output"], "Resume.");
    assert_eq!(case(variant(&report, "plan"), "resume")["passed"], true);
}

#[test]
fn filter_and_variant_select_what_runs() {
    let (code, report) = json_report(&[SUITE, "--filter", "resume", "--variant", "brief"]);
    assert_eq!(code, 1);
    let variants = report["suites"][0]["variants"]
        .as_array()
        .expect("variants");
    assert_eq!(variants.len(), 1);
    let names: Vec<&str> = variants[0]["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["resume", "questions.jsonl:resume-row"]);
    let nothing = pagantic(&["test", SUITE, "--filter", "no-such-case"]);
    assert_eq!(nothing.code, 2);
    assert!(
        nothing
            .stderr
            .contains("no case name contains `no-such-case`"),
        "{}",
        nothing.stderr
    );
    let unknown = pagantic(&["test", SUITE, "--variant", "nope"]);
    assert_eq!(unknown.code, 2);
    assert!(
        unknown.stderr.contains("has no variant `nope`"),
        "{}",
        unknown.stderr
    );
}

#[test]
fn junit_and_github_reports_point_at_the_test_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("junit.xml");
    let run = pagantic(&[
        "test",
        SUITE,
        "--quiet",
        "--format",
        "junit",
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout.is_empty(),
        "--out takes the report: {}",
        run.stdout
    );
    let xml = std::fs::read_to_string(&out).expect("written");
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>"));
    assert!(
        xml.contains(
            "<testsuite name=\"tests/evals/support.test.yaml [plan]\" tests=\"8\" failures=\"1\""
        ),
        "{xml}"
    );
    assert!(
        xml.contains(
            "<testsuite name=\"tests/evals/support.test.yaml [brief]\" tests=\"8\" failures=\"7\""
        ),
        "{xml}"
    );
    assert!(xml.contains("<failure message=\"line "), "{xml}");
    assert!(xml.contains("&lt;script&gt;"), "markup is escaped: {xml}");
    assert_eq!(xml.matches("<testcase ").count(), 16);

    let github = pagantic(&[
        "test",
        SUITE,
        "--quiet",
        "--format",
        "github",
        "--variant",
        "plan",
    ]);
    assert_eq!(github.code, 0);
    let line = line_of(SUITE, "fails on purpose");
    assert!(
        github.stdout.contains(&format!(
            "::error file=tests/evals/support.test.yaml,line={line},title=wrong-source [plan]::hit_at_k on step `rerank`: expected \"batch.md in the top 1\", got \"models.md\""
        )),
        "{}",
        github.stdout
    );
    assert!(github.stdout.contains("::notice file=tests/evals/support.test.yaml,line=1,title=tests passed::plan 7/8 (88%25); needs 50%25"), "{}", github.stdout);
}

#[test]
fn an_invalid_test_file_runs_nothing_and_exits_2() {
    let run = pagantic(&["test", SUITE, "tests/invalid/test_unknown_step.test.yaml"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stdout.is_empty(), "nothing ran: {}", run.stdout);
    assert!(run.stderr.contains("test::unknown_step"), "{}", run.stderr);
    assert!(
        run.stderr.contains("did you mean `answer`?"),
        "{}",
        run.stderr
    );
    let github = pagantic(&[
        "test",
        "--format",
        "github",
        "tests/invalid/test_unknown_step.test.yaml",
    ]);
    assert_eq!(github.code, 2);
    assert!(
        github
            .stdout
            .starts_with("::error file=tests/invalid/test_unknown_step.test.yaml,line=7,col="),
        "{}",
        github.stdout
    );
}

#[test]
fn validate_checks_test_files_with_their_plans() {
    let run = pagantic(&["validate", SUITE]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("ok: tests/evals/support.test.yaml (6 cases and a dataset, 2 variants)"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("0 plans, 1 test file checked"),
        "{}",
        run.stderr
    );
}

/// The example suites on the stand-ins of `--dry-run` (an echo for the model, keyword scoring for
/// MiniLM), which are deterministic: the echo repeats the prompt, so every retrieval, rerank and
/// answer check of the docs questions passes; every extraction is the schema's one stand-in
/// instance (sentiment `positive`), right for the 6 positive reviews of 16, below the gate.
#[test]
fn the_example_suites_run_on_stand_ins() {
    let (code, report) = json_report(&[
        "plans/rag.test.yaml",
        "plans/classify.test.yaml",
        "--dry-run",
    ]);
    assert_eq!(
        code, 1,
        "the classification suite is below its gate: {report:#}"
    );
    let rag = &report["suites"][0];
    assert_eq!(rag["passed"], true, "{rag:#}");
    let plan = &rag["variants"][0];
    assert_eq!((&plan["passed"], &plan["total"]), (&12.into(), &12.into()));
    for metric in [
        "retrieve hit_at_k",
        "retrieve mrr",
        "rerank hit_at_k",
        "rerank mrr",
        "icontains",
    ] {
        assert_eq!(plan["metrics"][metric], 1.0, "{metric} in {plan:#}");
    }
    let similar = plan["metrics"]["similar"].as_f64().expect("similar");
    assert!(
        (0.9..0.95).contains(&similar),
        "keyword similarity {similar}"
    );
    let classify = &report["suites"][1];
    assert_eq!(classify["passed"], false, "{classify:#}");
    let variants = classify["variants"].as_array().expect("variants");
    assert_eq!(variants.len(), 2);
    for variant in variants {
        assert_eq!(
            (&variant["passed"], &variant["total"]),
            (&6.into(), &16.into())
        );
        assert_eq!(
            variant["metrics"]["extract json_schema"], 1.0,
            "{variant:#}"
        );
        assert_eq!(
            variant["metrics"]["extract json_path"], 0.375,
            "{variant:#}"
        );
    }
}

/// Chromium, which the HTML test needs: `.ci/run` installs it (Debian package `chromium`).
fn chromium() -> PathBuf {
    ["chromium", "chromium-browser"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join(name))
                    .find(|path| path.is_file())
            })
        })
        .expect("chromium is not installed: `apt-get install -y chromium` (.ci/run does it)")
}

fn headless(page: &Path, extra: &[&str]) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let output = crate::output_of(
        Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(format!("file://{}", page.display())),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_html_report_shows_every_case_in_headless_chromium() {
    let dir = tempfile::tempdir().expect("temp dir");
    let page = dir.path().join("report.html");
    let run = pagantic(&[
        "test",
        SUITE,
        "--quiet",
        "--html",
        page.to_str().expect("utf-8"),
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let html = std::fs::read_to_string(&page).expect("written");
    for external in [
        "<script",
        "<link",
        "src=\"http",
        "href=\"http",
        "@import",
        "url(",
    ] {
        assert!(!html.contains(external), "self-contained: found {external}");
    }
    let dom = headless(&page, &["--dump-dom"]);
    // The injected script did not run: the title is ours, and the markup shows as text.
    assert!(
        dom.contains("<title>pagantic test: failed</title>"),
        "{dom}"
    );
    assert!(
        dom.contains("&lt;script&gt;document.title='injected'&lt;/script&gt;"),
        "{dom}"
    );
    assert!(
        dom.contains("id=\"verdict\" class=\"fail\">FAILED<"),
        "{dom}"
    );
    for case in [
        "resume",
        "label",
        "fails",
        "weighted",
        "wrong-source",
        "markup",
        "questions.jsonl:resume-row",
    ] {
        assert!(dom.contains(&format!("<h3>{case}</h3>")), "{case}");
    }
    assert!(
        dom.contains("<th>plan</th><th>brief</th>"),
        "the variants side by side"
    );
    assert!(dom.contains("<td class=\"pass\">7/8 (88%)</td>"), "{dom}");
    assert!(
        dom.contains("<summary>step rerank output</summary>"),
        "steps collapsible"
    );
    assert!(dom.contains("Use --resume: rows already written are skipped."));

    let shot = dir.path().join("report.png");
    headless(
        &page,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1200,900",
        ],
    );
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    // The page rendered at the size asked for (its header's width and height). How many bytes
    // the text makes depends on the fonts installed, so the DOM checks above stand for content.
    let size = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().expect("4 bytes"));
    assert_eq!(&png[12..16], b"IHDR", "the PNG starts with its header");
    assert_eq!((size(16), size(20)), (1200, 900));
}

#[test]
fn a_csv_dataset_binds_columns_to_inputs_and_expected_values() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("questions.csv"),
        "question,expected\n\"how do I resume, after a crash\",--resume\nhow do I validate,--resume\n",
    )
    .expect("written");
    let plan = root().join("tests/evals/support.yaml");
    std::fs::write(
        dir.path().join("csv.test.yaml"),
        format!(
            "version: 1\nplan: {}\nmin_pass_rate: 0.5\ndataset:\n  file: questions.csv\n  assert:\n    - {{ type: contains, value: \"{{{{ row.expected }}}}\" }}\n",
            plan.display()
        ),
    )
    .expect("written");
    let file = dir.path().join("csv.test.yaml");
    let (code, report) = json_report(&[file.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{report:#}");
    let cases = variant(&report, "plan")["cases"]
        .as_array()
        .expect("cases")
        .clone();
    let outcome: Vec<(&str, bool)> = cases
        .iter()
        .map(|c| (c["name"].as_str().unwrap_or_default(), c["passed"] == true))
        .collect();
    assert_eq!(
        outcome,
        [("questions.csv:1", true), ("questions.csv:2", false)]
    );
    assert_eq!(
        cases[0]["inputs"]["question"],
        "how do I resume, after a crash"
    );
}

/// A suite's model calls go through the call cache: a second run with `--cache-only` is answered
/// entirely from what the first stored (the same verdicts, no CACHE_MISS), and the same replay
/// from an empty cache fails its cases with CACHE_MISS.
#[test]
fn a_suite_replays_from_the_call_cache() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (filled, empty) = (dir.path().join("filled"), dir.path().join("empty"));
    let with = |cache: &Path, only: bool| {
        let mut args = vec!["--cache", cache.to_str().expect("utf-8")];
        if only {
            args.push("--cache-only");
        }
        args.extend(["--variant", "plan", SUITE]);
        json_report(&args)
    };
    let (code, first) = with(&filled, false);
    let passed = |report: &Value| variant(report, "plan")["passed"].clone();
    assert_eq!(code, 0, "{first}");
    let (code, replay) = with(&filled, true);
    assert_eq!(code, 0, "{replay}");
    assert_eq!(passed(&replay), passed(&first), "{replay}");
    assert!(!replay.to_string().contains("CACHE_MISS"), "{replay}");
    let (code, missed) = with(&empty, true);
    assert_eq!(code, 1, "{missed}");
    assert!(missed.to_string().contains("CACHE_MISS"), "{missed}");
}
