//! The worker contract a scheduler acts on (docs/cluster.md): exit codes for each cause, per-shard
//! outputs and summaries named by placeholders, resume that runs retryable failures again and
//! refuses a part another shard, input or plan wrote, shards from AWS Batch's environment,
//! `batch merge`, and the Kubernetes example's failure policy. Slurm itself is driven by
//! tests/scale/slurm.sh.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{Run, pagantic, pagantic_with, path_arg as s, root, scratch};

/// Rows r0…r{count-1}; the text of row `boom` says "boom" (its check fails for good).
fn rows(name: &str, count: usize, boom: Option<usize>) -> PathBuf {
    let path = scratch(name);
    let text: String = (0..count)
        .map(|i| {
            let text = if Some(i) == boom { "boom" } else { "fine" };
            format!("{{\"id\": \"r{i}\", \"text\": \"{text} {i}\"}}\n")
        })
        .collect();
    std::fs::write(&path, text).expect("rows");
    path
}

/// A plan whose model fails every call with a retryable engine error, as a server that is down
/// for a while does.
fn failing_model_plan() -> PathBuf {
    let path = scratch("down.yaml");
    std::fs::write(
        &path,
        "version: 1\nname: down\ninputs:\n  text: { type: string }\nmodels:\n  \
         down: { kind: scripted, echo: true, fail_first: 1000000 }\nsteps:\n  \
         - { name: label, type: infer, model: down, template: \"{{ inputs.text }}\" }\n",
    )
    .expect("plan");
    path
}

/// `pagantic run PLAN --batch INPUT --id id ARGS…`.
fn batch(plan: &str, input: &Path, args: &[&str]) -> Run {
    let mut argv = vec!["run", plan, "--batch", s(input), "--id", "id", "--quiet"];
    argv.extend_from_slice(args);
    pagantic(&argv)
}

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("JSON")
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("output")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// 0 when every row succeeded, 1 when a row failed for good, 75 when a row failed retryably
/// (the summary counts each kind), 2 when nothing could run; a single run that fails retryably
/// exits 75 too.
#[test]
fn the_exit_code_says_whether_a_scheduler_should_retry() {
    let input = rows("codes.jsonl", 6, Some(2));
    let ok = batch("tests/plans/batch.yaml", &rows("ok.jsonl", 3, None), &[]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);

    let summary = scratch("permanent.json");
    let permanent = batch(
        "tests/plans/batch.yaml",
        &input,
        &["--summary", s(&summary)],
    );
    assert_eq!(permanent.code, 1, "{}", permanent.stderr);
    let counts = json(&summary);
    assert_eq!(
        (counts["end"].as_str(), counts["exit_code"].as_u64()),
        (Some("failed"), Some(1))
    );
    assert_eq!(
        (
            counts["rows_failed"].as_u64(),
            counts["rows_failed_retryably"].as_u64()
        ),
        (Some(1), Some(0))
    );

    let plan = failing_model_plan();
    let summary = scratch("transient.json");
    let out = scratch("transient.jsonl");
    let transient = batch(
        s(&plan),
        &input,
        &["--out", s(&out), "--summary", s(&summary)],
    );
    assert_eq!(transient.code, 75, "{}", transient.stderr);
    let counts = json(&summary);
    assert_eq!(
        (counts["end"].as_str(), counts["exit_code"].as_u64()),
        (Some("retry"), Some(75))
    );
    assert_eq!(counts["rows_failed_retryably"], 6);
    assert!(lines(&out).iter().all(|l| l["transient"] == true));
    let single = pagantic(&["run", s(&plan), "-i", "text=hello", "--quiet"]);
    assert_eq!(single.code, 75, "{}", single.stderr);
    assert!(
        single.stderr.contains("INFERENCE_ENGINE_ERROR"),
        "{}",
        single.stderr
    );

    let invalid = batch("tests/plans/batch.yaml", &input, &["--shard", "4/4"]);
    assert_eq!(invalid.code, 2, "{}", invalid.stderr);
}

/// A requeued task's `--resume` runs again the rows whose failure may pass and keeps the rows
/// that succeeded or failed for good.
#[test]
fn resume_runs_the_retryable_failures_again_and_keeps_the_permanent_ones() {
    let input = rows("resume.jsonl", 3, None);
    let out = scratch("resume.out.jsonl");
    let earlier = [
        r#"{"row":"r0","status":"ok","output":"kept"}"#,
        r#"{"row":"r1","status":"error","error":{"code":"INFERENCE_RATE_LIMITED"},"transient":true}"#,
        r#"{"row":"r2","status":"error","error":{"code":"VALIDATION_RULE_FAILED"},"transient":false}"#,
    ];
    std::fs::write(&out, earlier.join("\n") + "\n").expect("part");
    // What wrote it: a run of no rows over the same input and plan records it.
    let recorded = scratch("recorded.jsonl");
    let none = batch(
        "tests/plans/batch.yaml",
        &input,
        &["--out", s(&recorded), "--limit", "0"],
    );
    assert_eq!(none.code, 0, "{}", none.stderr);
    copy_record(&recorded, &out);
    let run = batch(
        "tests/plans/batch.yaml",
        &input,
        &["--out", s(&out), "--resume"],
    );
    assert_eq!(run.code, 1, "the permanent failure remains: {}", run.stderr);
    let written = lines(&out);
    let statuses: Vec<(String, String)> = written
        .iter()
        .map(|l| {
            (
                l["row"].as_str().unwrap_or("").into(),
                l["status"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            ("r0".to_string(), "ok".to_string()),
            ("r2".into(), "error".into()),
            ("r1".into(), "ok".into())
        ]
    );
    assert_eq!(written[0]["output"], "kept");
}

/// `{shard}` and `{shards}` name each shard's part and summary; the summary (written last)
/// names the shard, where it came from, the input's SHA-256 and the plan's; the part's record
/// sits beside it.
#[test]
fn placeholders_name_each_shards_part_and_summary() {
    let input = rows("shards.jsonl", 10, None);
    let dir = scratch("parts");
    let out = format!("{}/part-{{shard}}-of-{{shards}}.jsonl", s(&dir));
    let summary = format!("{}/summary-{{shard}}-of-{{shards}}.json", s(&dir));
    std::fs::create_dir_all(&dir).expect("dir");
    for shard in ["0/2", "1/2"] {
        let run = batch(
            "tests/plans/batch.yaml",
            &input,
            &["--shard", shard, "--out", &out, "--summary", &summary],
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let part = dir.join("part-1-of-2.jsonl");
    assert_eq!(lines(&part).len(), 5);
    let counts = json(&dir.join("summary-1-of-2.json"));
    assert_eq!(
        counts["shard"],
        serde_json::json!({ "index": 1, "count": 2, "from": null })
    );
    assert_eq!(counts["rows_ok"], 5);
    assert_eq!(counts["input_sha256"].as_str().map(str::len), Some(64));
    assert_eq!(counts["plan_sha256"].as_str().map(str::len), Some(64));
    let record = json(&dir.join("part-1-of-2.jsonl.meta.json"));
    assert_eq!(record["input_sha256"], counts["input_sha256"]);
    assert_eq!(record["plan_sha256"], counts["plan_sha256"]);
}

/// A part knows what wrote it: resuming it as another shard (an array resubmitted with another
/// shape), from another input or with another plan is refused (exit 2, naming the difference)
/// unless `--reshard` takes it as this shard's.
#[test]
fn resume_refuses_a_part_another_shard_input_or_plan_wrote() {
    let input = rows("owner.jsonl", 8, None);
    let out = scratch("owner.out.jsonl");
    let first = batch(
        "tests/plans/batch.yaml",
        &input,
        &["--shard", "0/2", "--out", s(&out)],
    );
    assert_eq!(first.code, 0, "{}", first.stderr);
    let resume = |plan: &str, input: &Path, extra: &[&str]| {
        let mut args = vec!["--out", s(&out), "--resume"];
        args.extend_from_slice(extra);
        batch(plan, input, &args)
    };
    let reshaped = resume("tests/plans/batch.yaml", &input, &["--shard", "0/1"]);
    assert_eq!(reshaped.code, 2, "{}", reshaped.stderr);
    assert!(
        reshaped
            .stderr
            .contains("written for shard 0 of 2, this run is shard 0 of 1"),
        "{}",
        reshaped.stderr
    );
    assert_eq!(lines(&out).len(), 4, "the part is left as it was");

    let other_input = rows("other.jsonl", 8, Some(0));
    let refused = resume("tests/plans/batch.yaml", &other_input, &["--shard", "0/2"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("its input had SHA-256"),
        "{}",
        refused.stderr
    );
    let other_plan = resume(s(&failing_model_plan()), &input, &["--shard", "0/2"]);
    assert_eq!(other_plan.code, 2, "{}", other_plan.stderr);
    assert!(
        other_plan.stderr.contains("its plan had SHA-256"),
        "{}",
        other_plan.stderr
    );

    let resharded = resume(
        "tests/plans/batch.yaml",
        &input,
        &["--shard", "0/1", "--reshard"],
    );
    assert_eq!(resharded.code, 0, "{}", resharded.stderr);
    assert_eq!(
        lines(&out).len(),
        8,
        "the 4 rows it held were skipped, the other 4 run"
    );
}

/// `--shard env` reads AWS Batch's array index (with PAGANTIC_SHARDS) and Kubernetes', and
/// refuses an environment that names no index.
#[test]
fn shards_come_from_aws_batch_and_kubernetes_environments() {
    let input = rows("env.jsonl", 6, None);
    let sharded_by = |env: &[(&str, &str)], summary: &Path| {
        let args = [
            "run",
            "tests/plans/batch.yaml",
            "--batch",
            s(&input),
            "--shard",
            "env",
        ];
        let mut args = args.to_vec();
        args.extend_from_slice(&["--quiet", "--summary", s(summary)]);
        pagantic_with(&root(), &args, env)
    };
    for index_from in ["AWS_BATCH_JOB_ARRAY_INDEX", "JOB_COMPLETION_INDEX"] {
        let summary = scratch(&format!("{index_from}.json"));
        let run = sharded_by(&[(index_from, "1"), ("PAGANTIC_SHARDS", "3")], &summary);
        assert_eq!(run.code, 0, "{index_from}: {}", run.stderr);
        let counts = json(&summary);
        assert_eq!(
            counts["shard"],
            serde_json::json!({ "index": 1, "count": 3, "from": index_from })
        );
        assert_eq!(counts["rows_ok"], 2);
    }
    let no_count = sharded_by(&[("AWS_BATCH_JOB_ARRAY_INDEX", "1")], &scratch("none.json"));
    assert_eq!(no_count.code, 2, "{}", no_count.stderr);
    assert!(
        no_count.stderr.contains("PAGANTIC_SHARDS"),
        "{}",
        no_count.stderr
    );
}

/// SIGTERM mid-batch (a preemption): every finished row is written, the summary ends
/// `preempted`, the exit code is 75; the resume runs only the rows not written.
#[cfg(unix)]
#[test]
fn sigterm_mid_batch_ends_preempted_with_75_and_the_resume_recomputes_nothing() {
    let input = rows("preempted.jsonl", 200, None);
    let out = scratch("preempted.out.jsonl");
    let summary = scratch("preempted.summary.json");
    let args = [
        "run",
        "tests/plans/batch.yaml",
        "--batch",
        s(&input),
        "--id",
        "id",
        "--out",
        s(&out),
        "--summary",
        s(&summary),
        "-j",
        "2",
    ];
    let child = crate::spawn(&args);
    let written = || std::fs::read_to_string(&out).map_or(0, |t| t.matches('\n').count());
    let deadline = Instant::now() + Duration::from_secs(60);
    while written() < 20 {
        assert!(Instant::now() < deadline, "no 20 rows within 60 s");
        std::thread::yield_now();
    }
    crate::send_signal(&child, nix::sys::signal::Signal::SIGTERM);
    let output = crate::finish_within(child, crate::RUN_LIMIT);
    assert_eq!(
        output.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let first = json(&summary);
    assert_eq!(
        (first["end"].as_str(), first["exit_code"].as_u64()),
        (Some("preempted"), Some(75))
    );
    let kept = lines(&out).len();
    assert_eq!(first["rows_ok"].as_u64(), Some(kept as u64));
    assert!(kept < 200, "preempted before the end");

    let mut resumed = args.to_vec();
    resumed.push("--resume");
    let finish = pagantic(&resumed);
    assert_eq!(finish.code, 0, "{}", finish.stderr);
    let second = json(&summary);
    assert_eq!(second["rows_skipped"].as_u64(), Some(kept as u64));
    assert_eq!(second["model_calls"].as_u64(), Some(200 - kept as u64));
    assert_eq!(lines(&out).len(), 200);
}

/// Gives the part `to` the record (`.meta.json`) of the part `from`: what wrote it.
fn copy_record(from: &Path, to: &Path) {
    let record = |part: &Path| {
        let mut name = part.as_os_str().to_owned();
        name.push(".meta.json");
        std::path::PathBuf::from(name)
    };
    std::fs::copy(record(from), record(to)).expect("the record copied");
}

/// Two shards' parts merge into every row once; a row written twice with the same result is
/// kept once; a missing part names its rows (exit 1); two different results for one id are a
/// conflict (exit 1).
#[test]
fn batch_merge_joins_parts_and_reports_duplicates_missing_rows_and_conflicts() {
    let input = rows("merge.jsonl", 9, None);
    let part = |i: usize| scratch(&format!("part-{i}-of-2.jsonl"));
    for i in 0..2 {
        let shard = format!("{i}/2");
        let run = batch(
            "tests/plans/batch.yaml",
            &input,
            &["--shard", &shard, "--out", s(&part(i))],
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let merged = scratch("merged.jsonl");
    let summary = scratch("merged.json");
    let merge = |parts: &[&Path], extra: &[&str]| {
        let mut args = vec!["batch", "merge"];
        args.extend(parts.iter().map(|p| s(p)));
        args.extend_from_slice(&["--out", s(&merged), "--summary", s(&summary)]);
        args.extend_from_slice(extra);
        pagantic(&args)
    };
    // A requeued task wrote its first row again.
    let first_line = std::fs::read_to_string(part(0))
        .expect("part")
        .lines()
        .next()
        .map(str::to_string);
    let again = scratch("again.jsonl");
    std::fs::write(&again, first_line.expect("a line") + "\n").expect("again");
    copy_record(&part(0), &again);
    let whole = merge(
        &[&part(0), &part(1), &again],
        &["--input", s(&input), "--id", "id"],
    );
    assert_eq!(whole.code, 0, "{}", whole.stderr);
    assert_eq!(lines(&merged).len(), 9);
    let counts = json(&summary);
    assert_eq!(
        (counts["complete"].as_bool(), counts["duplicates"].as_u64()),
        (Some(true), Some(1))
    );

    let half = merge(&[&part(0)], &["--input", s(&input), "--id", "id"]);
    assert_eq!(half.code, 1, "{}", half.stderr);
    assert!(
        half.stderr.contains("4 rows are missing: r1, r3, r5, r7"),
        "{}",
        half.stderr
    );
    assert_eq!(json(&summary)["missing_shards"], serde_json::json!([1]));
    let by_count = merge(&[&part(1)], &["--expect", "9"]);
    assert_eq!(by_count.code, 1);
    assert!(
        by_count.stderr.contains("5 rows are missing"),
        "{}",
        by_count.stderr
    );

    let other = scratch("conflict.jsonl");
    let mut line: Value = lines(&part(1))[0].clone();
    line["output"] = "something else".into();
    std::fs::write(&other, format!("{line}\n")).expect("conflict");
    copy_record(&part(1), &other);
    let conflict = merge(&[&part(0), &part(1), &other], &[]);
    assert_eq!(conflict.code, 1, "{}", conflict.stderr);
    assert!(
        conflict
            .stderr
            .contains("1 rows have two different results"),
        "{}",
        conflict.stderr
    );
}

/// The Kubernetes example is an Indexed Job whose pod failure policy retries exit 75 and fails
/// the index at once on 1 and 2, with as many shards (PAGANTIC_SHARDS) as completions, and runs
/// pagantic with `--shard env --resume` and per-shard outputs.
#[test]
fn the_kubernetes_example_acts_on_the_exit_codes() {
    let text =
        std::fs::read_to_string(root().join("examples/kubernetes/job.yaml")).expect("manifest");
    let job = pagantic::plan::yaml::parse(&text).expect("YAML").to_json();
    assert_eq!(
        (job["apiVersion"].as_str(), job["kind"].as_str()),
        (Some("batch/v1"), Some("Job"))
    );
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    assert!(spec["backoffLimitPerIndex"].as_u64().is_some_and(|n| n > 0));
    let rules = spec["podFailurePolicy"]["rules"].as_array().expect("rules");
    let action_for = |code: u64| {
        rules
            .iter()
            .find(|r| {
                r["onExitCodes"]["values"]
                    .as_array()
                    .is_some_and(|v| v.contains(&code.into()))
            })
            .map(|r| r["action"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(action_for(75).as_deref(), Some("Count"));
    assert_eq!(action_for(1).as_deref(), Some("FailIndex"));
    assert_eq!(action_for(2).as_deref(), Some("FailIndex"));
    let pod = &spec["template"]["spec"];
    assert_eq!(
        pod["restartPolicy"], "Never",
        "a pod failure policy needs it"
    );
    let container = &pod["containers"][0];
    assert_eq!(container["name"], rules[0]["onExitCodes"]["containerName"]);
    let shards = container["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == "PAGANTIC_SHARDS"))
        .and_then(|e| e["value"].as_str()?.parse::<u64>().ok());
    assert_eq!(shards, spec["completions"].as_u64());
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for wanted in ["--shard=env", "--resume"] {
        assert!(args.contains(&wanted), "{args:?}");
    }
    assert!(
        args.iter()
            .any(|a| a.starts_with("--out=") && a.contains("{shard}")),
        "{args:?}"
    );
}
