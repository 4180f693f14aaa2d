//! Orchestration semantics through the binary, on scripted models: routes visible while they
//! run, tool capabilities granted by a policy, tools that need approval, and what the usage
//! record says.

use serde_json::Value;

use crate::{Run, events_in, pagantic};

/// Runs `plan` with `args` and an events file: the run, its record (null when stdout holds
/// none) and its events.
fn run_with_events(plan: &str, args: &[&str]) -> (Run, Value, Vec<Value>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("events.jsonl");
    let events_path = events_file.to_str().expect("utf-8");
    let mut all = vec!["run", "--format", "json", "--events", events_path];
    all.extend_from_slice(args);
    all.push(plan);
    let run = pagantic(&all);
    let record = serde_json::from_str(&run.stdout).unwrap_or(Value::Null);
    let events = events_in(&events_file);
    (run, record, events)
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

fn position(events: &[Value], kind: &str) -> usize {
    events
        .iter()
        .position(|e| e["kind"] == kind)
        .unwrap_or_else(|| panic!("a `{kind}` event"))
}

const ROUTE: &str = "tests/plans/semantics3/route-visible.yaml";

#[test]
fn a_route_s_decision_and_each_agent_show_while_it_runs() {
    let (run, record, events) = run_with_events(ROUTE, &["-i", "request=both at once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(record["output"], "Done.");
    // The decision comes before any agent starts, and says what the router said.
    let decision = of_kind(&events, "route_decision");
    assert_eq!(decision.len(), 1);
    assert_eq!(
        decision[0]["data"],
        serde_json::json!({ "mode": "parallel", "agents": ["greet", "broken"], "rationale": "two independent things" })
    );
    assert!(position(&events, "route_decision") < position(&events, "agent_start"));
    assert_eq!(decision[0]["step"], "assist");
    // Each agent starts and ends on a span of its own; its tool call hangs from it.
    let starts = of_kind(&events, "agent_start");
    assert_eq!(starts.len(), 2);
    for end in of_kind(&events, "agent_end") {
        let agent = end["data"]["agent"].as_str().expect("an agent");
        let start = starts
            .iter()
            .find(|s| s["data"]["agent"] == agent)
            .expect("its start");
        assert_eq!(start["span"], end["span"], "{agent}");
        let tool = of_kind(&events, "tool_start")
            .into_iter()
            .find(|t| t["parent_span"] == start["span"]);
        assert!(tool.is_some(), "{agent}'s tool call hangs from its span");
        match agent {
            "greet" => {
                assert_eq!(end["data"]["status"], "ok");
                assert_eq!(end["data"]["result"]["text"], "hello Ada\n");
                assert_eq!(start["data"]["args"], serde_json::json!({ "name": "Ada" }));
                assert_eq!(start["data"]["index"], 0);
            }
            _ => {
                assert_eq!(end["data"]["status"], "failed");
                assert_eq!(end["data"]["error"]["code"], "TOOL_EXECUTION_FAILED");
            }
        }
    }
    // And the progress lines say the same.
    for line in [
        "  ⇢ assist: parallel route to greet, broken — two independent things",
        "    → assist › greet",
        "    ✓ assist › greet (",
        "    ✗ assist › broken: TOOL_EXECUTION_FAILED",
    ] {
        assert!(
            run.stderr.lines().any(|l| l.starts_with(line)),
            "{line}\n{}",
            run.stderr
        );
    }
}

#[test]
fn an_agent_after_a_failed_one_in_a_sequence_ends_skipped_without_starting() {
    let (run, _, events) = run_with_events(ROUTE, &["-i", "request=one after the other"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let started: Vec<String> = of_kind(&events, "agent_start")
        .into_iter()
        .map(|e| text(&e["data"]["agent"]))
        .collect();
    assert_eq!(started, ["broken"]);
    let ends: Vec<(String, String)> = of_kind(&events, "agent_end")
        .into_iter()
        .map(|e| (text(&e["data"]["agent"]), text(&e["data"]["status"])))
        .collect();
    assert_eq!(
        ends,
        [
            ("broken".to_string(), "failed".to_string()),
            ("greet".to_string(), "skipped".to_string())
        ]
    );
    let skipped = of_kind(&events, "agent_end")[1];
    assert_eq!(skipped["data"]["after"], "broken");
    assert_eq!(skipped["data"]["index"], 1);
    assert!(
        run.stderr
            .contains("    ↷ assist › greet: not run (`broken` before it failed)"),
        "{}",
        run.stderr
    );
}

const CAPABILITIES: &str = "tests/plans/semantics3/capabilities.yaml";
const PROCESS_ONLY: &str = "tests/plans/semantics3/process-only.policy.yaml";

#[test]
fn a_tool_requiring_what_the_policy_does_not_grant_is_refused_where_it_is_declared() {
    let run = pagantic(&[
        "validate",
        "--format",
        "json",
        "--policy",
        PROCESS_ONLY,
        CAPABILITIES,
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let found: Vec<(String, u64)> = run
        .stdout
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).expect("a JSON diagnostic");
            (
                value["code"].as_str().unwrap_or_default().to_string(),
                value["line"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    // `fetch` at its `requires`, `notes` (a read_file, which lists none) at its `kind`.
    let refused = "policy::capability_not_granted".to_string();
    assert_eq!(found, [(refused.clone(), 13), (refused, 17)]);
    let said: Vec<Value> = run
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON diagnostic"))
        .collect();
    assert_eq!(
        said[0]["message"],
        format!(
            "tool `fetch` requires network, which the policy file {PROCESS_ONLY} does not grant"
        )
    );
    assert_eq!(
        said[1]["message"],
        format!(
            "tool `notes` requires filesystem, which the policy file {PROCESS_ONLY} does not grant"
        )
    );
    assert!(
        said[0]["help"]
            .as_str()
            .is_some_and(|help| help.starts_with("allowed capabilities: process")),
        "{}",
        said[0]
    );
    // `run` refuses it the same way, before anything runs.
    let refused_run = pagantic(&["run", "--policy", PROCESS_ONLY, CAPABILITIES]);
    assert_eq!(refused_run.code, 2, "{}", refused_run.stderr);
    assert!(refused_run.stderr.contains("capability_not_granted"));
    assert!(refused_run.stdout.is_empty(), "{}", refused_run.stdout);
    // Granted, and without a policy, it runs.
    for flags in [
        &["--policy", "tests/plans/semantics3/everything.policy.yaml"][..],
        &[],
    ] {
        let mut args = vec!["run", "-q"];
        args.extend_from_slice(flags);
        args.push(CAPABILITIES);
        let granted = pagantic(&args);
        assert_eq!(granted.code, 0, "{flags:?}: {}", granted.stderr);
        assert_eq!(granted.stdout.trim(), "fetched https://example.org");
    }
}

const APPROVAL: &str = "tests/plans/semantics3/approval.yaml";

#[test]
fn a_call_needing_approval_fails_unless_approve_names_its_tool() {
    let (run, record, events) = run_with_events(APPROVAL, &[]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(
        record["error"]["code"], "TOOL_APPROVAL_REQUIRED",
        "{record}"
    );
    assert!(
        run.stderr.contains("--approve stamp"),
        "the help says how: {}",
        run.stderr
    );
    let ends = of_kind(&events, "tool_end");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["data"]["status"], "refused");
    assert_eq!(ends[0]["data"]["error"]["code"], "TOOL_APPROVAL_REQUIRED");
    // Approving another tool changes nothing; approving this one runs it.
    let (other, record, _) = run_with_events(APPROVAL, &["--approve", "shred"]);
    assert_eq!(other.code, 1);
    assert_eq!(record["error"]["code"], "TOOL_APPROVAL_REQUIRED");
    let (approved, record, events) = run_with_events(APPROVAL, &["--approve", "stamp"]);
    assert_eq!(approved.code, 0, "{}", approved.stderr);
    assert_eq!(record["output"], "stamped the form\n");
    assert_eq!(of_kind(&events, "tool_end")[0]["data"]["status"], "ok");
}

/// Chats with `plan` with its input from a pipe (not a terminal): what it printed on stdout
/// and stderr.
fn chat_piped(plan: &str, flags: &[&str], lines: &str) -> (String, String) {
    use std::io::Write;
    let mut args = vec!["chat", plan];
    args.extend_from_slice(flags);
    let mut child = crate::spawn(&args);
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(lines.as_bytes())
        .expect("the conversation is written");
    let output = crate::finish_within(child, std::time::Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(0));
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_chat_whose_input_is_not_a_terminal_asks_nobody_and_runs_only_approved_tools() {
    let plan = "tests/plans/semantics3/approval-chat.yaml";
    let (_, stderr) = chat_piped(plan, &[], "please make it official\n");
    assert!(
        stderr.contains("← stamp refused (0 ms): tool `stamp` needs approval"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("allow? [y/N]"),
        "nobody is asked: {stderr}"
    );
    let (stdout, stderr) = chat_piped(plan, &["--approve", "stamp"], "please make it official\n");
    assert!(stderr.contains("← stamp ok"), "{stderr}");
    assert!(stdout.contains("stamped the form"), "{stdout}");
}

/// At a terminal (`script` gives the chat one), each call is asked about with its arguments
/// shown, on the chat's own input: `y` runs it, `n` declines it and the agent is told so.
#[test]
fn at_a_terminal_the_chat_asks_before_each_call_and_runs_only_what_you_allow() {
    use std::io::Write;
    let chat = format!(
        "'{}' chat tests/plans/semantics3/approval-chat.yaml",
        env!("CARGO_BIN_EXE_pagantic")
    );
    let cache = crate::fresh_cache_dir();
    let mut child = crate::sealed(&mut std::process::Command::new("script"))
        .args(["-qec", &chat, "/dev/null"])
        .current_dir(crate::root())
        .env("PAGANTIC_CACHE_DIR", &cache)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("`script` (util-linux) runs the chat at a terminal");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"please make it official\ny\nmake it official again\nn\n/exit\n")
        .expect("the conversation is typed");
    let output = crate::finish_within(child, std::time::Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&cache);
    let screen = String::from_utf8_lossy(&output.stdout).replace('\r', "");
    assert_eq!(output.status.code(), Some(0), "{screen}");
    let asked = "? run stamp {\"what\":\"the form\"} — allow? [y/N]";
    assert_eq!(screen.matches(asked).count(), 2, "{screen}");
    let ran = screen.find("← stamp ok").expect("the first call ran");
    let declined = screen
        .find("← stamp refused (0 ms): you declined the call of tool `stamp`")
        .expect("the second was declined");
    assert!(ran < declined, "{screen}");
    assert!(
        screen.contains("The last tool result was: error: TOOL_APPROVAL_DENIED"),
        "the agent is told: {screen}"
    );
}

/// A limit a policy file set, broken in a sub-plan, names that file: not the plan that handed
/// the policy down.
#[test]
fn a_sub_plan_s_violation_names_the_policy_file_that_set_the_limit() {
    let plan = "tests/plans/semantics3/sub-plan-policy.yaml";
    let policy = "tests/plans/semantics3/routes-only.policy.yaml";
    let run = pagantic(&["validate", "--format", "json", "--policy", policy, plan]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let refused: Value = run
        .stdout
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a JSON diagnostic"))
        .find(|d| d["code"] == "policy::step_type_not_allowed")
        .expect("the sub-plan's step is refused");
    assert_eq!(
        refused["message"],
        format!("step type `template` is not allowed by the policy file {policy}")
    );
    assert!(
        refused["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("agents/summarise.yaml")),
        "{refused}"
    );
    assert_eq!(pagantic(&["validate", plan]).code, 0, "valid on its own");
}

/// Answers every chat completion with one reply whose usage says how many of its completion
/// tokens were reasoning.
async fn reasoned_reply() -> axum::response::Response {
    use axum::response::IntoResponse;
    let reply = serde_json::json!({
        "id": "c1",
        "object": "chat.completion",
        "model": "thinker",
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": "42" }, "finish_reason": "stop" }],
        "usage": {
            "prompt_tokens": 11,
            "completion_tokens": 30,
            "total_tokens": 41,
            "completion_tokens_details": { "reasoning_tokens": 28 }
        }
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        reply.to_string(),
    )
        .into_response()
}

/// A server that reports reasoning tokens: the call's `inference` event, the step and the run
/// carry them, summed over the calls, as part of the completion tokens.
#[test]
fn reasoning_tokens_a_server_reports_reach_the_event_the_step_and_the_run() {
    let router = axum::Router::new().fallback(axum::routing::any(reasoned_reply));
    let (port, _server) = crate::engines::serve_on_loopback(router);
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = dir.path().join("thinker.yaml");
    std::fs::write(
        &plan,
        format!(
            "version: 1\nname: thinker\nmodels:\n  thinker: {{ kind: openai, base_url: \"http://127.0.0.1:{port}/v1\", model: thinker }}\nsteps:\n  - {{ name: first, type: infer, model: thinker, template: Think. }}\n  - {{ name: second, type: infer, model: thinker, template: Think again. }}\n"
        ),
    )
    .expect("plan written");
    let (run, record, events) = run_with_events(plan.to_str().expect("utf-8"), &["--no-stream"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let calls = of_kind(&events, "inference");
    assert_eq!(calls.len(), 2);
    for call in calls {
        assert_eq!(
            call["data"]["usage"],
            serde_json::json!({ "prompt_tokens": 11, "completion_tokens": 30, "reasoning_tokens": 28 })
        );
    }
    assert_eq!(
        crate::step(&record, "first")["usage"]["reasoning_tokens"],
        28
    );
    assert_eq!(record["usage"]["reasoning_tokens"], 56, "{record}");
    assert_eq!(record["usage"]["completion_tokens"], 60);
}

/// The local model's calls say its context window: its file's trained context, as the GGUF
/// header gives it (the embedded model's is 32768 tokens), read once a call has loaded it.
#[cfg(feature = "local")]
#[test]
fn a_local_model_s_calls_say_the_context_window_of_its_file() {
    let (run, _, events) = run_with_events("plans/quickstart.yaml", &["-q"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let calls = of_kind(&events, "inference");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["data"]["context_window"], 32768, "{}", calls[0]);
}
