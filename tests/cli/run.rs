//! `pagantic run` and `pagantic render`: example plans on `--dry-run`, failures with their codes,
//! concurrency, retries, timeouts, cancellation, tool safety, events.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::{events_in, pagantic, root, step};

/// How long a test waits for an event before it fails: generous, so a starved machine passes
/// and a regression fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(60);

fn record(stdout: &str) -> Value {
    serde_json::from_str(stdout)
        .unwrap_or_else(|e| panic!("not a JSON run record ({e}):\n{stdout}"))
}

#[test]
fn every_example_plan_runs_on_dry_run() {
    let mut plans: Vec<_> = std::fs::read_dir(root().join("plans"))
        .expect("plans/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter(|p| !p.to_string_lossy().ends_with(".test.yaml"))
        .collect();
    plans.sort();
    for plan in plans {
        let relative = plan
            .strip_prefix(root())
            .expect("inside root")
            .to_str()
            .expect("utf-8")
            .to_string();
        // Inputs for the plans whose inputs have no default.
        let inputs: &[&str] = match plan.file_name().and_then(|n| n.to_str()) {
            Some("rag.yaml") => &["-i", "question=How do I validate plans in CI?"],
            Some("classify.yaml") => &["-i", "review=Great battery, awful price."],
            _ => &[],
        };
        let mut args = vec!["run", "--dry-run", "--format", "json"];
        args.extend_from_slice(inputs);
        args.push(&relative);
        let run = pagantic(&args);
        assert_eq!(
            run.code, 0,
            "{relative} failed on --dry-run:\n{}\n{}",
            run.stdout, run.stderr
        );
        let record = record(&run.stdout);
        assert_eq!(record["status"], "complete", "{relative}");
    }
}

#[test]
fn a_failing_step_exits_1_with_its_code_and_the_completed_outputs() {
    let run = pagantic(&["run", "tests/plans/failing.yaml"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("error[VALIDATION_RULE_FAILED]: the output is 12 characters long, under the minimum of 100"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("completed steps:\n  draft: draft: short"),
        "{}",
        run.stderr
    );
    let json = pagantic(&["run", "--format", "json", "tests/plans/failing.yaml"]);
    assert_eq!(json.code, 1);
    let record = record(&json.stdout);
    assert_eq!(record["status"], "error");
    assert_eq!(record["error"]["code"], "VALIDATION_RULE_FAILED");
    // A failure says what kind it is, and gives its facts where it has them.
    assert_eq!(record["error"]["category"], "validation");
    assert_eq!(
        record["error"]["details"]["broken"][0],
        "the output is 12 characters long, under the minimum of 100"
    );
    assert_eq!(record["steps"][0]["status"], "ok");
    assert_eq!(record["steps"][0]["output"], "draft: short");
    assert_eq!(record["steps"][1]["status"], "failed");
    assert_eq!(record["steps"][2]["status"], "not_run");
    assert_eq!(
        record["steps"][2]["error"]["code"],
        "ORCHESTRATION_DEPENDENCY_FAILED"
    );
}

/// A validate step with `feedback` sends a failed answer back to the model step with what was
/// wrong (the scripted model answers properly only when it reads that message), the steps
/// between re-run, and the record and events show every round.
#[test]
fn a_failed_check_sends_the_answer_back_to_the_model_with_what_was_wrong() {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("feedback-events.jsonl");
    let events_arg = events_file.to_str().expect("utf-8");
    let run = pagantic(&[
        "run",
        "--format",
        "json",
        "--events",
        events_arg,
        "tests/plans/feedback.yaml",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record = record(&run.stdout);
    assert_eq!(record["output"], "Answer: Paris is the capital of France.");
    let answer = step(&record, "answer");
    assert_eq!(answer["output"], "  Paris is the capital of France.  ");
    assert_eq!(answer["earlier"][0]["output"], "I don't know");
    assert_eq!(
        step(&record, "tidy")["earlier"][0]["output"],
        "I don't know"
    );
    let check = step(&record, "check");
    assert_eq!(check["status"], "ok");
    assert_eq!(
        check["earlier"][0]["error"]["code"],
        "VALIDATION_RULE_FAILED"
    );
    assert_eq!(
        check["earlier"][0]["error"]["details"]["broken"],
        serde_json::json!(["the output contains \"I don't know\""])
    );
    assert!(step(&record, "publish").get("earlier").is_none());
    assert!(
        run.stderr
            .contains("↺ check: back to `answer` with what failed (check 2 of 3)"),
        "{}",
        run.stderr
    );
    let events = events_in(&events_file);
    let states: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "lifecycle")
        .filter_map(|e| e["data"]["state"].as_str())
        .collect();
    assert_eq!(
        states,
        [
            "INIT", "PLAN", "PREPARE", "EXECUTE", "VALIDATE", "EXECUTE", "VALIDATE", "COMPLETE"
        ]
    );
    let feedback: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "step_feedback")
        .collect();
    assert_eq!(feedback.len(), 1);
    assert_eq!(feedback[0]["step"], "check");
    assert_eq!(
        feedback[0]["data"],
        serde_json::json!({ "to": "answer", "next_attempt": 2, "max_attempts": 3, "code": "VALIDATION_RULE_FAILED" })
    );
    let model_calls = events
        .iter()
        .filter(|e| e["kind"] == "inference" && e["step"] == "answer")
        .count();
    assert_eq!(model_calls, 2);

    // No answer passes: three checks, then the run fails with the last one's error.
    let stubborn = pagantic(&[
        "run",
        "--format",
        "json",
        "-i",
        "stubborn=true",
        "tests/plans/feedback.yaml",
    ]);
    assert_eq!(stubborn.code, 1, "{}", stubborn.stderr);
    let failed = self::record(&stubborn.stdout);
    assert_eq!(failed["error"]["code"], "VALIDATION_RULE_FAILED");
    assert_eq!(
        step(&failed, "answer")["earlier"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(step(&failed, "check")["status"], "failed");
    assert_eq!(step(&failed, "publish")["status"], "not_run");
}

/// `on_error: continue`: a failed lookup leaves its output null and its error readable; the
/// answer is written without it and the run completes. Without it the same failure fails the run.
#[test]
fn a_step_that_may_fail_is_continued_past_with_its_error_readable() {
    let run = pagantic(&["run", "--format", "json", "tests/plans/optional.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record = record(&run.stdout);
    assert_eq!(record["status"], "complete");
    assert_eq!(
        record["output"],
        "No context (TOOL_EXECUTION_FAILED, exit 3): answering from general knowledge."
    );
    let lookup = step(&record, "lookup");
    assert_eq!(lookup["status"], "failed");
    assert_eq!(lookup["continued"], true);
    assert!(lookup.get("output").is_none(), "{lookup}");
    assert_eq!(lookup["error"]["category"], "tool");
    assert_eq!(lookup["error"]["details"]["exit_code"], 3);
    assert_eq!(
        step(&record, "note")["output"],
        "lookup failed: `sh` exited with code 3; stderr: index missing"
    );

    let required = pagantic(&["run", "-i", "required=true", "tests/plans/optional.yaml"]);
    assert_eq!(required.code, 1, "{}", required.stderr);
    assert!(
        required.stderr.contains("error[TOOL_EXECUTION_FAILED]"),
        "{}",
        required.stderr
    );
}

#[test]
fn independent_steps_overlap_in_time() {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("fanout-events.jsonl");
    let events_arg = events_file.to_str().expect("utf-8");
    let run = pagantic(&["run", "--events", events_arg, "tests/plans/fanout.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "left go + right go");
    // Each branch stalls 300 ms; the events show their windows overlapping (a wall-clock bound
    // would be flaky on a loaded machine).
    let events = events_in(&events_file);
    let window = |step: &str| {
        let at = |kind: &str| {
            events
                .iter()
                .find(|e| e["kind"] == kind && e["step"] == step)
                .and_then(|e| e["at_ms"].as_f64())
                .expect("event")
        };
        (at("step_start"), at("step_end"))
    };
    let (left_start, left_end) = window("left");
    let (right_start, right_end) = window("right");
    assert!(
        left_start < right_end && right_start < left_end,
        "left and right overlap"
    );
    let run_id = events[0]["run_id"].as_str().expect("run id");
    assert!(
        events
            .iter()
            .all(|e| e["run_id"] == run_id && e["span"].is_string())
    );
    let states: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "lifecycle")
        .filter_map(|e| e["data"]["state"].as_str())
        .collect();
    assert_eq!(
        states,
        ["INIT", "PLAN", "PREPARE", "EXECUTE", "VALIDATE", "COMPLETE"]
    );
}

#[test]
fn transient_failures_are_retried_and_timeouts_fail_the_step() {
    let run = pagantic(&["run", "--format", "json", "tests/plans/retries.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record = record(&run.stdout);
    assert_eq!(record["steps"][0]["attempts"], 3);
    assert_eq!(record["steps"][0]["output"], "fine");
    assert_eq!(record["steps"][1]["status"], "skipped");
    assert!(
        run.stderr.contains("↻ ask: retrying (attempt 2)"),
        "{}",
        run.stderr
    );

    // Without the timeout, the 30 s stall would end in an answer and exit 0.
    let slow = pagantic(&["run", "-i", "slow=true", "tests/plans/retries.yaml"]);
    assert_eq!(slow.code, 1);
    assert!(
        slow.stderr.contains("error[ORCHESTRATION_STEP_TIMEOUT]"),
        "{}",
        slow.stderr
    );
}

#[test]
fn tool_arguments_are_never_interpreted_by_a_shell() {
    let text = "a; echo pwned $(whoami) `id` > /tmp/x";
    let run = pagantic(&[
        "run",
        "-i",
        &format!("text={text}"),
        "tests/plans/tools.yaml",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The plan's output is the last step in plan order (skipped here), so read the record.
    let json = pagantic(&[
        "run",
        "--format",
        "json",
        "-i",
        &format!("text={text}"),
        "tests/plans/tools.yaml",
    ]);
    assert_eq!(record(&json.stdout)["steps"][0]["output"], text);
}

#[test]
fn tool_output_is_capped_and_timeouts_kill_the_process_tree() {
    let flood = pagantic(&[
        "run",
        "--format",
        "json",
        "-i",
        "text=x",
        "-i",
        "mode=flood",
        "tests/plans/tools.yaml",
    ]);
    assert_eq!(flood.code, 0, "{}", flood.stderr);
    let output = record(&flood.stdout)["steps"][1]["output"]
        .as_str()
        .expect("text")
        .to_string();
    assert!(
        output.ends_with("[output truncated at 1000 bytes]"),
        "{output}"
    );
    assert!(output.len() < 1100);

    // Without the sandbox, whose PID namespace would both end the grandchild and hide its pid
    // (tests/cli/sandbox.rs covers that): the process group alone must take it down.
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("grandchild.pid");
    let hang = crate::pagantic_with(
        &crate::root(),
        &[
            "run",
            "-i",
            "text=x",
            "-i",
            "mode=hang",
            "-i",
            &format!("pidfile={}", pidfile.display()),
            "tests/plans/tools.yaml",
        ],
        &[("PAGANTIC_SANDBOX", "off")],
    );
    assert_eq!(hang.code, 1);
    assert!(
        hang.stderr.contains("error[TOOL_TIMEOUT]"),
        "{}",
        hang.stderr
    );
    // The `sleep 300` that `sh` started is killed with it: the whole process group goes. The
    // pid is a whole line: an empty file (the shell killed before it wrote) is a failure, not
    // a dead process.
    let pid = std::fs::read_to_string(&pidfile).expect("the grandchild's pid");
    assert!(
        pid.ends_with('\n') && pid.trim().parse::<u32>().is_ok(),
        "the shell did not write a whole pid before the timeout: {pid:?}"
    );
    let stat = format!("/proc/{}/stat", pid.trim());
    let alive = || {
        std::fs::read_to_string(&stat)
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()
                    .map(|rest| rest.trim_start().to_string())
            })
            .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
    };
    let deadline = std::time::Instant::now() + PATIENCE;
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !alive(),
        "the grandchild {} outlived the timeout",
        pid.trim()
    );
}

#[test]
fn tool_events_carry_the_tool_call_id() {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("tool-events.jsonl");
    let run = pagantic(&[
        "run",
        "--events",
        events_file.to_str().expect("utf-8"),
        "-i",
        "text=hi",
        "tests/plans/tools.yaml",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let tool_events: Vec<Value> = events_in(&events_file)
        .into_iter()
        .filter(|e| e["kind"] == "tool_start" || e["kind"] == "tool_end")
        .collect();
    assert_eq!(tool_events.len(), 2);
    let id = tool_events[0]["tool_call_id"]
        .as_str()
        .expect("tool_call_id");
    assert!(id.starts_with("call_"));
    assert_eq!(tool_events[1]["tool_call_id"], id);
    assert!(tool_events[0]["parent_span"].is_string());
}

#[test]
fn missing_and_unknown_inputs_exit_2_before_anything_runs() {
    // On stand-ins: the inputs are checked the same way, in builds with or without the local
    // engine (a build without it would refuse the plan's model first).
    let run = pagantic(&["run", "-i", "qestion=x", "plans/rag.yaml", "--dry-run"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("error[CONFIG_INVALID_INPUT]"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("`qestion` is not an input of this plan (did you mean `question`?)"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("missing input `question` (the user's question)"),
        "{}",
        run.stderr
    );
}

#[test]
fn render_shows_the_exact_messages_of_a_step() {
    let run = pagantic(&[
        "render",
        "plans/rag.yaml",
        "--step",
        "answer",
        "-i",
        "question=How do I validate plans in CI?",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with("--- user ---\nQuestion: How do I validate plans in CI?\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("--- from ../corpus/docs/validation.md\n"),
        "the reranked passages are in the prompt:\n{}",
        run.stdout
    );
    assert!(run.stdout.trim_end().ends_with("Answer:"), "{}", run.stdout);
}

#[test]
fn render_shows_an_agent_s_ephemeral_context_where_the_model_sees_it() {
    let run = pagantic(&[
        "render",
        "tests/plans/agent_context.yaml",
        "--step",
        "ask",
        "-i",
        "question=How long is shipping?",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout.trim_end(),
        "--- system ---\nYou answer questions about orders.\n\
         --- system ---\nContext:\nShipping takes 3 days.\n\
         --- user ---\nHow long is shipping?"
    );
}

/// `render --live` runs the upstream steps on the plan's own models; a plain render stands in
/// scripted echoes for them, so the rendered prompt differs.
#[test]
fn render_live_runs_the_upstream_steps_on_their_models() {
    let args = ["render", "tests/plans/render-live.yaml", "--step", "check"];
    let echoed = pagantic(&args);
    assert_eq!(echoed.code, 0, "{}", echoed.stderr);
    assert_eq!(
        echoed.stdout.trim_end(),
        "--- user ---\nIs Which city is the capital of France? right?"
    );
    let live = pagantic(&[&args[..], &["--live"]].concat());
    assert_eq!(live.code, 0, "{}", live.stderr);
    assert_eq!(live.stdout.trim_end(), "--- user ---\nIs Paris right?");
}

#[test]
fn render_a_prompt_file_alone() {
    let run = pagantic(&[
        "render",
        "prompts/answer.j2",
        "--var",
        "inputs={\"question\": \"Why?\"}",
        "--var",
        "input=[{\"source\": \"a.md\", \"content\": \"Because.\"}]",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("--- from a.md\nBecause.\n"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("Question: Why?"), "{}", run.stdout);
}

/// A templated argument must not become an option of the program.
#[test]
fn a_tool_argument_starting_with_a_dash_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("pwned.txt");
    let run = pagantic(&[
        "run",
        "tests/plans/option-injection.yaml",
        "-i",
        &format!("file=--output={}", target.display()),
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("error[TOOL_INVALID_ARGUMENTS]"),
        "{}",
        run.stderr
    );
    assert!(
        !target.exists(),
        "sort wrote a file it was given as an option"
    );
}

/// A tool call that never ran (an unknown tool, arguments the schema refuses) leaves a
/// trace: a refused tool event with the failure, and the failure in the step's record.
#[test]
fn refused_tool_calls_are_in_the_events_and_the_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("events.jsonl");
    let run = pagantic(&[
        "run",
        "--format",
        "json",
        "--events",
        events_file.to_str().expect("utf-8 path"),
        "tests/plans/refused-tools.yaml",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record: Value = serde_json::from_str(&run.stdout).expect("a record");
    let calls = step(&record, "act")["detail"]["tool_calls"].clone();
    let codes: Vec<&str> = calls
        .as_array()
        .expect("calls")
        .iter()
        .map(|c| c["error"]["code"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        codes,
        ["TOOL_NOT_FOUND", "TOOL_INVALID_ARGUMENTS"],
        "{calls}"
    );
    let refused: Vec<(String, String)> = events_in(&events_file)
        .into_iter()
        .filter(|e| e["kind"] == "tool_end" && e["data"]["status"] == "refused")
        .map(|e| {
            (
                e["tool_call_id"].as_str().unwrap_or_default().to_string(),
                e["data"]["error"]["code"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        refused,
        [
            ("scripted_call_1".to_string(), "TOOL_NOT_FOUND".to_string()),
            (
                "scripted_call_2".to_string(),
                "TOOL_INVALID_ARGUMENTS".to_string()
            )
        ]
    );
}

/// The derived Q8_0 file is the one runs load; one whose size is not the one recorded
/// when it was made is refused at load, with the repair.
// The local engine's own path: a build without it refuses the plan before that.
#[cfg(feature = "local")]
#[test]
fn a_changed_derived_model_file_is_refused_at_load() {
    let home = tempfile::tempdir().expect("temp dir");
    let models = home.path().join("models");
    std::fs::create_dir_all(&models).expect("models dir");
    std::fs::write(models.join("qwen.q8_0-derived.gguf"), b"cut short").expect("derived");
    let manifest = serde_json::json!({
        "name": "qwen2.5-coder-0.5b-instruct",
        "file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "size": 491_400_064u64,
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "derived": {
            "file": "qwen.q8_0-derived.gguf",
            "size": 636_896_128u64,
            "sha256": "8698b59cb41f84d60e4cc5e7c9455770616d1b3ab6b645a6e140c05217c64975",
            "note": "test"
        }
    });
    std::fs::write(
        models.join("qwen2.5-coder-0.5b-instruct.json"),
        manifest.to_string(),
    )
    .expect("manifest");
    let env = [("PAGANTIC_HOME", home.path().to_str().expect("utf-8 path"))];
    let run = crate::pagantic_with(&root(), &["run", "plans/quickstart.yaml"], &env);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("has changed since it was pulled")
            && run
                .stderr
                .contains("pagantic models pull qwen2.5-coder-0.5b-instruct --force"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_reader_that_stops_reading_is_not_an_error() {
    // `pagantic run … | head -0`: stdout is closed while the result is written. The record
    // holds the 100 KB text three times (input, step output, plan output), more than a pipe's
    // 64 KiB buffer, so the write meets the closed pipe whichever comes first.
    let text = "x".repeat(100_000);
    let mut child = crate::spawn(&[
        "run",
        "--format",
        "json",
        "-i",
        &format!("text={text}"),
        "tests/plans/tools.yaml",
    ]);
    drop(child.stdout.take());
    drop(child.stdin.take());
    let output = crate::finish_within(child, crate::RUN_LIMIT);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
}

/// Whether the tests run as root: the `Uid:` line of `/proc/self/status` (real, effective, …).
fn running_as_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let uids = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .expect("a Uid line");
    uids.split_whitespace().nth(1) == Some("0")
}

/// A command tool cannot read pagantic's environment (where API keys are) through
/// `/proc/<parent pid>/environ`, though it runs as the same user. Root reads any process's, so
/// when the tests run as root pagantic runs as `nobody` (with `setpriv`), like any user would.
#[test]
fn a_command_tool_cannot_read_pagantics_environment() {
    let secret = "sk-test-5b1c0e7d-never-shown";
    // The binary and the plan go to a directory any user can read: the checkout may not be
    // (a CI clone under /root), and as root the test runs pagantic as `nobody`.
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("a readable dir");
    let pagantic = dir.path().join("pagantic");
    let built = env!("CARGO_BIN_EXE_pagantic");
    std::fs::hard_link(built, &pagantic)
        .or_else(|_| std::fs::copy(built, &pagantic).map(drop))
        .expect("the binary in the dir");
    let plan = dir.path().join("parent-environ.yaml");
    std::fs::copy(root().join("tests/plans/parent-environ.yaml"), &plan).expect("the plan");
    let as_nobody = ["--reuid", "65534", "--regid", "65534", "--clear-groups"];
    let mut command = match running_as_root() {
        true => {
            let mut setpriv = Command::new("setpriv");
            setpriv.args(as_nobody).arg(&pagantic);
            setpriv
        }
        false => Command::new(&pagantic),
    };
    let output = crate::output_of(
        crate::sealed(&mut command)
            .args([
                "run",
                "parent-environ.yaml",
                "-i",
                "script=cat /proc/$PPID/environ",
            ])
            .current_dir(dir.path())
            .env("HOME", dir.path())
            .env("PAGANTIC_TEST_API_KEY", secret),
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        !stdout.contains(secret) && !stderr.contains(secret),
        "the tool read pagantic's environment:\n{stdout}{stderr}"
    );
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Permission denied"), "{stderr}");
}
