//! Every command that runs a plan goes through one run session: the same events, the same
//! lifecycle, the policy's step timeout, and Ctrl-C and SIGTERM cancelling the run in flight.
//! Signals are sent only once the run has reached an observable point (an event in its events
//! file), never after a guessed delay.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{pagantic, spawn};

/// The events written so far to `path` (a cut last line is ignored).
fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Waits until an event in `path` satisfies `found` (at most a minute).
fn wait_for_event(path: &Path, found: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if events(path).iter().any(&found) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no such event in {}: {:?}", path.display(), events(path));
}

fn is_step(event: &Value, kind: &str, step: &str) -> bool {
    event["kind"] == kind && event["step"] == step
}

fn signal(child: &Child, name: &str) {
    let signal = match name {
        "INT" => nix::sys::signal::Signal::SIGINT,
        "TERM" => nix::sys::signal::Signal::SIGTERM,
        other => panic!("no such signal in these tests: {other}"),
    };
    crate::send_signal(child, signal);
}

/// Runs `tests/plans/cancel.yaml` (a quick step, then one that stalls) with `extra` arguments,
/// sends SIG`name` once the stalling step has started, and returns what the run printed and the
/// events it wrote.
fn interrupted_run(extra: &[&str], name: &str) -> (Output, Vec<Value>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("events.jsonl");
    let mut args = vec![
        "run",
        "tests/plans/cancel.yaml",
        "--events",
        events_file.to_str().expect("utf-8 path"),
    ];
    args.extend(extra);
    let child = spawn(&args);
    wait_for_event(&events_file, |e| is_step(e, "step_start", "long"));
    signal(&child, name);
    let output = crate::finish_within(child, crate::RUN_LIMIT);
    (output, events(&events_file))
}

/// Ctrl-C and SIGTERM (what Kubernetes and Slurm send) take the same path: the step in flight is
/// cancelled, the record says CANCELLED, and what completed is still reported — not exit 143
/// with nothing, but 75 (`EX_TEMPFAIL`: a scheduler runs it again).
#[test]
fn ctrl_c_and_sigterm_cancel_the_run_and_keep_what_completed() {
    for name in ["INT", "TERM"] {
        let (output, events) = interrupted_run(&["--format", "json"], name);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(75), "SIG{name}: {stderr}");
        let record: Value = serde_json::from_slice(&output.stdout).expect("a JSON record");
        assert_eq!(record["status"], "cancelled", "SIG{name}");
        assert_eq!(record["error"]["code"], "CANCELLED_SIGNAL", "SIG{name}");
        assert_eq!(crate::step(&record, "quick")["output"], "done quickly");
        let long = crate::step(&record, "long");
        assert_eq!(long["status"], "cancelled");
        // What ran is recorded: the attempt it was in, when it started, how long it ran.
        assert_eq!(long["attempts"], 1, "SIG{name}: {long}");
        assert!(long["started_at"].is_string(), "SIG{name}: {long}");
        assert!(long["ended_at"].is_string(), "SIG{name}: {long}");
        assert!(
            long["duration_ms"].as_f64().is_some_and(|ms| ms > 0.0),
            "SIG{name}: {long}"
        );
        let ends: Vec<&Value> = events
            .iter()
            .filter(|e| is_step(e, "step_end", "long"))
            .collect();
        assert_eq!(ends.len(), 1, "SIG{name}: {ends:?}");
        assert_eq!(ends[0]["data"]["status"], "cancelled", "SIG{name}");
        let states: Vec<Value> = events
            .into_iter()
            .filter(|e| e["kind"] == "lifecycle")
            .map(|e| e["data"]["state"].clone())
            .collect();
        assert_eq!(
            states,
            ["INIT", "PLAN", "PREPARE", "EXECUTE", "CANCELLED"],
            "SIG{name}"
        );
    }
}

/// A tool call stopped mid-flight still ends: Ctrl-C ends the tool call and its step
/// `cancelled`; a step timeout ends the tool call `cancelled` and the step `failed`.
#[test]
fn cancelled_tool_calls_and_steps_get_their_end_events() {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("events.jsonl");
    let events_arg = events_file.to_str().expect("utf-8 path");
    let child = spawn(&[
        "run",
        "tests/plans/cancel-tool.yaml",
        "--events",
        events_arg,
    ]);
    wait_for_event(&events_file, |e| is_step(e, "tool_start", "nap"));
    signal(&child, "INT");
    let output = crate::finish_within(child, crate::RUN_LIMIT);
    assert_eq!(output.status.code(), Some(75));
    let status_of = |events: &[Value], kind: &str, step: &str| -> Vec<Value> {
        events
            .iter()
            .filter(|e| is_step(e, kind, step))
            .map(|e| e["data"]["status"].clone())
            .collect()
    };
    let interrupted = events(&events_file);
    assert_eq!(status_of(&interrupted, "tool_end", "nap"), ["cancelled"]);
    assert_eq!(status_of(&interrupted, "step_end", "nap"), ["cancelled"]);

    let run = pagantic(&[
        "run",
        "-i",
        "short=true",
        "--events",
        events_arg,
        "tests/plans/cancel-tool.yaml",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let timed_out = events(&events_file);
    assert_eq!(
        status_of(&timed_out, "tool_end", "short_nap"),
        ["cancelled"]
    );
    assert_eq!(status_of(&timed_out, "step_end", "short_nap"), ["failed"]);
}

/// A plan that fails its checks at `run` ends the events with ERROR, not silently at PLAN.
#[test]
fn an_invalid_plan_ends_the_lifecycle_with_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("events.jsonl");
    let run = pagantic(&[
        "run",
        "tests/invalid/cycle.yaml",
        "--events",
        events_file.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let states: Vec<Value> = events(&events_file)
        .into_iter()
        .map(|e| e["data"]["state"].clone())
        .collect();
    assert_eq!(states, ["INIT", "PLAN", "ERROR"]);
}

/// The text form of a cancelled run prints the error and the steps that completed.
#[test]
fn a_cancelled_run_in_text_form_lists_the_completed_steps() {
    let (output, _) = interrupted_run(&[], "INT");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("error[CANCELLED_SIGNAL]"), "{stderr}");
    assert!(stderr.contains("quick: done quickly"), "{stderr}");
}

/// `run --batch --events FILE` records the batch's own lifecycle and every row's run, each row's
/// run id being the one in its output line.
#[test]
fn batch_events_record_every_row() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (events_file, out) = (
        dir.path().join("events.jsonl"),
        dir.path().join("out.jsonl"),
    );
    let rows = dir.path().join("rows.jsonl");
    std::fs::write(
        &rows,
        "{\"id\": \"a\", \"text\": \"one\"}\n{\"id\": \"b\", \"text\": \"two\"}\n{\"id\": \"c\", \"text\": \"three\"}\n",
    )
    .expect("rows written");
    let run = pagantic(&[
        "run",
        "tests/plans/batch.yaml",
        "--batch",
        rows.to_str().expect("utf-8 path"),
        "--out",
        out.to_str().expect("utf-8 path"),
        "--events",
        events_file.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let all = events(&events_file);
    let batch_id = all[0]["run_id"].clone();
    let batch_states: Vec<Value> = all
        .iter()
        .filter(|e| e["run_id"] == batch_id)
        .map(|e| e["data"]["state"].clone())
        .collect();
    assert_eq!(batch_states, ["INIT", "PLAN", "PREPARE", "COMPLETE"]);
    let lines: Vec<Value> = std::fs::read_to_string(&out)
        .expect("output")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 3);
    for line in &lines {
        let run_id = &line["run_id"];
        assert_ne!(run_id, &batch_id);
        let states: Vec<Value> = all
            .iter()
            .filter(|e| &e["run_id"] == run_id && e["kind"] == "lifecycle")
            .map(|e| e["data"]["state"].clone())
            .collect();
        assert_eq!(states, ["EXECUTE", "VALIDATE", "COMPLETE"], "{line}");
        assert!(
            all.iter()
                .any(|e| &e["run_id"] == run_id && e["kind"] == "step_end"),
            "row {line} has its step events"
        );
    }
}

/// The policy's `timeout_per_step` is the default step timeout for every command, not only
/// `run`: a model that stalls for a minute is stopped after the policy's one second.
#[test]
fn the_policy_timeout_holds_in_run_chat_and_render() {
    let timed_out = "ORCHESTRATION_STEP_TIMEOUT";
    let run = pagantic(&[
        "run",
        "tests/plans/policy-timeout.yaml",
        "-i",
        "message=hello",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains(timed_out), "run: {}", run.stderr);

    let render = pagantic(&[
        "render",
        "tests/plans/policy-timeout.yaml",
        "--step",
        "answer",
        "--live",
        "-i",
        "message=hello",
    ]);
    assert_eq!(render.code, 1, "{}", render.stderr);
    assert!(
        render.stderr.contains(timed_out),
        "render: {}",
        render.stderr
    );

    let mut chat = spawn(&["chat", "tests/plans/policy-timeout.yaml"]);
    chat.stdin
        .take()
        .expect("stdin")
        .write_all(b"hello\n")
        .expect("a message");
    let output = crate::finish_within(chat, crate::RUN_LIMIT);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(timed_out), "chat: {stderr}");
}

/// Ctrl-C during a chat reply stops that reply, and the conversation goes on.
#[test]
fn ctrl_c_in_chat_cancels_the_reply_in_flight() {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("events.jsonl");
    let mut child = spawn(&[
        "chat",
        "tests/plans/chat-stall.yaml",
        "--events",
        events_file.to_str().expect("utf-8 path"),
    ]);
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"be slow\n").expect("a message");
    stdin.flush().expect("sent");
    wait_for_event(&events_file, |e| is_step(e, "step_start", "slow"));
    signal(&child, "INT");
    wait_for_event(&events_file, |e| e["data"]["state"] == "CANCELLED");
    stdin
        .write_all(b"and now quick\n/exit\n")
        .expect("more messages");
    drop(stdin);
    let output = crate::finish_within(child, crate::RUN_LIMIT);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("(reply cancelled)"), "{stderr}");
    assert_eq!(stdout.trim(), "and now quick", "{stderr}");
}
