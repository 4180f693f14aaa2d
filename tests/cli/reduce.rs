//! `run --batch --group-by`: rows grouped by a key and reduced once per group — groups in order
//! of first appearance with their rows in input order, folding of big groups level by level
//! (counted model calls), a resume after SIGKILL mid-reduce that runs no finished chunk again,
//! shards that hold every group exactly once, and the bad-key cases refused with their row.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::{Run, pagantic, path_arg as s, root, scratch};

/// A JSON Lines file of `rows`, one object a line.
fn rows_file(name: &str, rows: &[Value]) -> PathBuf {
    let path = scratch(name);
    let text: String = rows.iter().map(|row| format!("{row}\n")).collect();
    std::fs::write(&path, text).expect("rows");
    path
}

/// `count` rows `{"n": i, "product": PRODUCT}`, the products taken in turn from `products`.
fn numbered(count: usize, products: &[&str]) -> Vec<Value> {
    (0..count)
        .map(|n| json!({ "n": n, "product": products[n % products.len()] }))
        .collect()
}

/// `pagantic run PLAN --batch INPUT ARGS…`.
fn reduce(plan: &str, input: &Path, args: &[&str]) -> Run {
    let mut argv = vec!["run", plan, "--batch", s(input)];
    argv.extend_from_slice(args);
    pagantic(&argv)
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("output")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("half-written line {l:?}: {e}")))
        .collect()
}

fn summary(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("summary")).expect("JSON")
}

const LIST: &str = "tests/plans/reduce/list.yaml";

/// Groups `input` by `key` with the list plan into the output `name`, groups in order of first
/// appearance (`extra` flags added); returns its lines and stderr. The run must succeed.
fn listed(input: &Path, key: &str, name: &str, extra: &[&str]) -> (Vec<Value>, String) {
    let out = scratch(name);
    let mut args = vec!["--group-by", key, "--out", s(&out), "--ordered"];
    args.extend_from_slice(extra);
    let run = reduce(LIST, input, &args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    (lines(&out), run.stderr)
}
const SUM: &str = "tests/plans/reduce/sum.yaml";

#[test]
fn groups_come_in_order_of_first_appearance_with_their_rows_in_input_order() {
    let input = rows_file(
        "order.jsonl",
        &[
            json!({ "n": 0, "product": "b" }),
            json!({ "n": 1, "product": "a" }),
            json!({ "n": 2 }),
            json!({ "n": 3, "product": "b" }),
            json!({ "n": 4, "product": 7 }),
            json!({ "n": 5, "product": "b" }),
        ],
    );
    let (written, stderr) = listed(&input, "product", "order.out.jsonl", &[]);
    let got: Vec<(&str, &Value, u64, &str)> = written
        .iter()
        .map(|l| {
            (
                l["row"].as_str().unwrap_or_default(),
                &l["group"],
                l["rows"].as_u64().unwrap_or_default(),
                l["output"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("\"b\"", &json!("b"), 3, "b L0: 0 3 5 "),
            ("\"a\"", &json!("a"), 1, "a L0: 1 "),
            ("null", &Value::Null, 1, "null L0: 2 "),
            ("7", &json!(7), 1, "7 L0: 4 "),
        ]
    );
    assert!(
        written
            .iter()
            .all(|l| l["status"] == "ok" && l["runs"] == 1)
    );
    assert!(
        stderr.contains("4 groups ok, 0 failed, 0 skipped")
            && stderr.contains("reduce: 6 input rows"),
        "{stderr}"
    );
    // Without the rows that have no key.
    let (skipped, stderr) = listed(
        &input,
        "product",
        "order-skipped.out.jsonl",
        &["--skip-missing-key"],
    );
    let ids: Vec<&Value> = skipped.iter().map(|l| &l["row"]).collect();
    assert_eq!(ids, [&json!("\"b\""), &json!("\"a\""), &json!("7")]);
    assert!(
        stderr.contains("1 rows without the key left out"),
        "{stderr}"
    );
}

#[test]
fn a_map_output_is_grouped_by_a_path_into_its_lines() {
    // What a map wrote: each line its input and output objects.
    let input = rows_file(
        "mapped.jsonl",
        &[
            json!({ "row": "1", "input": { "n": 0 }, "output": { "label": "good" }, "n": 0 }),
            json!({ "row": "2", "input": { "n": 1 }, "output": { "label": "bad" }, "n": 1 }),
            json!({ "row": "3", "input": { "n": 2 }, "output": { "label": "good" }, "n": 2 }),
        ],
    );
    let (by_label, _) = listed(&input, "output.label", "mapped.out.jsonl", &[]);
    let outputs: Vec<&Value> = by_label.iter().map(|l| &l["output"]).collect();
    assert_eq!(outputs, [&json!("good L0: 0 2 "), &json!("bad L0: 1 ")]);
    let template = "{{ row.output.label }}-{{ row.n % 2 }}";
    let (by_template, _) = listed(&input, template, "mapped-template.out.jsonl", &[]);
    let groups: Vec<&Value> = by_template.iter().map(|l| &l["group"]).collect();
    assert_eq!(groups, [&json!("good-0"), &json!("bad-1")]);
}

#[test]
fn a_thousand_row_group_at_fold_fifty_takes_twenty_runs_then_one() {
    let mut rows = numbered(1_000, &["big"]);
    rows.extend(numbered(30, &["small"]));
    let input = rows_file("fold.jsonl", &rows);
    let out = scratch("fold.out.jsonl");
    let summary_file = scratch("fold.summary.json");
    let args = [
        "--group-by",
        "product",
        "--fold",
        "50",
        "--out",
        s(&out),
        "--summary",
        s(&summary_file),
        "--no-cache",
        "-j",
        "4",
    ];
    // A dry run writes its lines to stdout: no --out, no --summary.
    let mut dry_args: Vec<&str> = args[..4].to_vec();
    dry_args.extend_from_slice(&["--no-cache", "-j", "4", "--dry-run"]);
    let dry = reduce(SUM, &input, &dry_args);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stderr.contains("in 2 groups; 22 runs of the plan"),
        "{}",
        dry.stderr
    );
    let run = reduce(SUM, &input, &args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let by_group: HashMap<String, Value> = lines(&out)
        .into_iter()
        .map(|l| (l["row"].as_str().unwrap_or_default().to_string(), l))
        .collect();
    let big = &by_group["\"big\""];
    assert_eq!(big["output"], json!((0..1_000).sum::<u64>().to_string()));
    assert_eq!(
        (big["runs"].clone(), big["fold_levels"].clone()),
        (json!(21), json!(2))
    );
    assert_eq!(big["model_calls"], json!(21));
    let small = &by_group["\"small\""];
    // The 30 small rows are numbered 0..30 again.
    assert_eq!(small["output"], json!((0..30).sum::<u64>().to_string()));
    assert_eq!(small["runs"], json!(1));
    let counted = summary(&summary_file);
    assert_eq!(counted["model_calls"], json!(22), "{counted}");
    assert_eq!(counted["grouped"]["planned_runs"], json!(22));
    assert_eq!(counted["grouped"]["input_rows"], json!(1_030));
}

/// Partial results kept so far, by (group, level, chunk); a cut last line is not one, nor is the
/// header that says what wrote them.
fn kept_chunks(out: &Path) -> Vec<(String, u64, u64)> {
    let text = std::fs::read_to_string(format!("{}.chunks.jsonl", s(out))).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line.get("group").is_some())
        .map(|c| {
            (
                c["group"].as_str().unwrap_or_default().to_string(),
                c["level"].as_u64().unwrap_or_default(),
                c["chunk"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

#[cfg(unix)]
#[test]
fn killed_mid_reduce_and_resumed_no_finished_chunk_runs_again() {
    // Two groups of 300 rows at --fold 10: 30 + 3 + 1 runs each, 68 in all.
    let input = rows_file("kill.jsonl", &numbered(600, &["x", "y"]));
    let out = scratch("kill.out.jsonl");
    let args = |extra: &[&str]| {
        let mut args = vec![
            "run",
            SUM,
            "--batch",
            s(&input),
            "--group-by",
            "product",
            "--fold",
            "10",
            "--out",
            s(&out),
            "-j",
            "2",
            "--quiet",
            "--no-cache",
        ];
        args.extend_from_slice(extra);
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>()
    };
    let mut child = crate::command(&crate::fresh_cache_dir())
        .args(args(&[]))
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawned");
    // Killed once it has kept 20 partial results: mid-fold, with runs in flight.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while kept_chunks(&out).len() < 20 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let kept = kept_chunks(&out);
    // Groups whose line was written whole before the kill.
    let written_before: Vec<String> = std::fs::read_to_string(&out)
        .unwrap_or_default()
        .split_inclusive('\n')
        .filter(|line| line.ends_with('\n'))
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|line| line["row"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        kept.len() >= 20,
        "partial results were kept before the kill"
    );
    assert!(
        kept.len() < 66,
        "chunks are left for the resume to run: {}",
        kept.len()
    );
    let summary_file = scratch("kill.summary.json");
    let resume_args = args(&["--resume", "--summary", s(&summary_file)]);
    let resumed = pagantic(&resume_args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let counted = summary(&summary_file);
    // Each group not written before the kill runs its 34 runs less those it kept.
    let calls_left: usize = ["\"x\"", "\"y\""]
        .iter()
        .filter(|group| !written_before.contains(&group.to_string()))
        .map(|group| 34 - kept.iter().filter(|(g, _, _)| g == group).count())
        .sum();
    assert_eq!(
        counted["model_calls"].as_u64(),
        Some(calls_left as u64),
        "only the chunks not kept ran again: {counted}"
    );
    let written = lines(&out);
    assert_eq!(written.len(), 2, "each group once");
    for line in &written {
        assert_eq!(line["status"], "ok");
        assert_eq!(
            line["runs"],
            json!(34),
            "every run of the group counted once: {line}"
        );
    }
    let total: u64 = written
        .iter()
        .map(|l| {
            l["output"]
                .as_str()
                .and_then(|t| t.parse::<u64>().ok())
                .unwrap_or_default()
        })
        .sum();
    assert_eq!(total, (0..600).sum::<u64>(), "every row reduced once");
}

#[test]
fn shards_hold_every_group_exactly_once() {
    let products: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
    let names: Vec<&str> = products.iter().map(String::as_str).collect();
    let input = rows_file("shards.jsonl", &numbered(100, &names));
    let mut seen: HashMap<String, usize> = HashMap::new();
    for index in 0..3 {
        let out = scratch(&format!("shard-{index}.jsonl"));
        let shard = format!("{index}/3");
        let run = reduce(
            LIST,
            &input,
            &["--group-by", "product", "--shard", &shard, "--out", s(&out)],
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        for line in lines(&out) {
            assert_eq!(line["rows"], json!(5), "a group is never split: {line}");
            *seen
                .entry(line["row"].as_str().unwrap_or_default().to_string())
                .or_default() += 1;
        }
        let meta: Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{}.meta.json", s(&out))).expect("meta"),
        )
        .expect("JSON");
        assert_eq!(
            meta["shard"]["index"],
            json!(index),
            "the part says what wrote it"
        );
    }
    assert_eq!(seen.len(), 20, "{seen:?}");
    assert!(seen.values().all(|&n| n == 1), "{seen:?}");
}

#[test]
fn bad_keys_and_plans_that_cannot_reduce_are_refused_with_where() {
    let input = rows_file(
        "bad.jsonl",
        &[
            json!({ "n": 0, "product": "a" }),
            json!({ "n": 1, "product": { "id": 3 } }),
        ],
    );
    let cases: [(&str, &[&str], &str); 6] = [
        (
            LIST,
            &["--group-by", "product"],
            "error[CONFIG_INVALID_INPUT]: row 2: the group key `product` is an object",
        ),
        (
            LIST,
            &["--group-by", "input..product"],
            "--group-by `input..product` is not a path",
        ),
        (
            LIST,
            &["--group-by", "{{ inputs.product }}"],
            "a key template sees only `row`",
        ),
        (
            LIST,
            &["--group-by", "{{ row.missing }}"],
            "row 1: the --group-by template cannot be rendered",
        ),
        (
            "tests/plans/reduce/no-rows.yaml",
            &["--group-by", "n"],
            "has no input `rows`",
        ),
        (
            LIST,
            &["--group-by", "n", "--fold", "1"],
            "--fold must be at least 2",
        ),
    ];
    for (plan, args, said) in cases {
        let out = scratch("bad.out.jsonl");
        let mut args = args.to_vec();
        args.extend_from_slice(&["--out", s(&out)]);
        let run = reduce(plan, &input, &args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(said), "{args:?}: {}", run.stderr);
        assert!(!out.exists(), "{args:?}: nothing was written");
    }
}

#[test]
fn a_plan_with_reduce_runs_the_map_then_the_reduce_with_one_resume_and_one_summary() {
    let input = rows_file("pipeline.jsonl", &numbered(6, &["a", "b"]));
    let out = scratch("pipeline.out.jsonl");
    let summary_file = scratch("pipeline.summary.json");
    let args = [
        "--out",
        s(&out),
        "--summary",
        s(&summary_file),
        "--no-cache",
        "-j",
        "3",
    ];
    let run = reduce("tests/plans/reduce/map.yaml", &input, &args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mapped = lines(Path::new(&format!("{}.map.jsonl", s(&out))));
    assert_eq!(
        mapped.len(),
        6,
        "the map's lines are kept beside the output"
    );
    // Groups are written as they end; each lists its rows' outputs in input order.
    let mut outputs: Vec<String> = lines(&out)
        .iter()
        .map(|l| l["output"].as_str().unwrap_or_default().to_string())
        .collect();
    outputs.sort();
    assert_eq!(outputs, ["a: 0 4 8 ", "b: 2 6 10 "], "rows in input order");
    let counted = summary(&summary_file);
    assert_eq!(counted["model_calls"], json!(2), "{counted}");
    assert_eq!(counted["map"]["model_calls"], json!(6), "{counted}");
    assert!(
        run.stderr.contains("6 rows ok") && run.stderr.contains("2 groups ok"),
        "{}",
        run.stderr
    );
    let mut resume_args = args.to_vec();
    resume_args.push("--resume");
    let again = reduce("tests/plans/reduce/map.yaml", &input, &resume_args);
    assert_eq!(again.code, 0, "{}", again.stderr);
    let counted = summary(&summary_file);
    assert_eq!(
        (
            counted["model_calls"].clone(),
            counted["map"]["model_calls"].clone()
        ),
        (json!(0), json!(0)),
        "a resume of a finished pipeline runs nothing: {counted}"
    );
    assert_eq!(counted["rows_skipped"], json!(2));
}

#[test]
fn validate_refuses_a_reduce_plan_that_takes_no_rows() {
    let run = pagantic(&["validate", "tests/plans/reduce/bad-reduce.yaml"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("plan::reduce_rows")
            && run
                .stderr
                .contains("the reduce plan no-rows.yaml has no input `rows`"),
        "{}",
        run.stderr
    );
    let good = pagantic(&["validate", "tests/plans/reduce/map.yaml"]);
    assert_eq!(good.code, 0, "{}", good.stderr);
}
