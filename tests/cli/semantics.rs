//! Orchestration semantics through the binary, on scripted models: typed step boundaries,
//! honest token accounting, tool results on record, and tool availability.

use serde_json::Value;

use crate::{events_in, pagantic, step};

/// `validate --format json`'s diagnostics for `plan`: (code, line) pairs.
fn diagnostics(plan: &str) -> (i32, Vec<(String, u64)>) {
    let run = pagantic(&["validate", "--format", "json", plan]);
    let found = run
        .stdout
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).expect("a JSON diagnostic");
            (
                value["code"].as_str().unwrap_or_default().to_string(),
                value["line"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    (run.code, found)
}

#[test]
fn validate_refuses_a_step_boundary_no_run_can_cross() {
    let (code, found) = diagnostics("tests/plans/boundaries/never.yaml");
    assert_eq!(code, 2, "{found:?}");
    // The rerank step after a tool's text (through a validate step), and the one fed two steps.
    assert_eq!(
        found,
        [
            ("plan::step_boundary".to_string(), 23),
            ("plan::step_boundary".to_string(), 26),
        ]
    );
    let human = pagantic(&["validate", "tests/plans/boundaries/never.yaml"]);
    assert!(
        human.stderr.contains("gives text") && human.stderr.contains("takes a list of candidates"),
        "both steps are located: {}",
        human.stderr
    );
}

#[test]
fn a_boundary_that_may_work_is_left_to_the_run() {
    let (code, found) = diagnostics("tests/plans/boundaries/may.yaml");
    assert_eq!((code, found), (0, Vec::new()));
    let run = pagantic(&[
        "run",
        "tests/plans/boundaries/may.yaml",
        "--format",
        "json",
        "-q",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record: serde_json::Value = serde_json::from_str(&run.stdout).expect("a run record");
    let kept = &step(&record, "best")["output"];
    assert_eq!(kept.as_array().map(Vec::len), Some(1), "{kept}");
    assert_eq!(kept[0]["source"], "a");
}

/// Runs `plan` with `--format json` and an events file; the record and the events.
fn run_with_events(plan: &str) -> (crate::Run, Value, Vec<Value>) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let events = dir.path().join("events.jsonl");
    let run = pagantic(&[
        "run",
        plan,
        "--format",
        "json",
        "--events",
        &events.display().to_string(),
    ]);
    let record = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr));
    (run, record, events_in(&events))
}

/// The prompt and completion tokens of the `inference` events of step `name`.
fn tokens_of_calls(events: &[Value], name: &str) -> (u64, u64) {
    events
        .iter()
        .filter(|e| e["kind"] == "inference" && e["step"] == name)
        .fold((0, 0), |(prompt, completion), e| {
            let usage = &e["data"]["usage"];
            (
                prompt + usage["prompt_tokens"].as_u64().unwrap_or_default(),
                completion + usage["completion_tokens"].as_u64().unwrap_or_default(),
            )
        })
}

#[test]
fn every_token_spent_is_counted_in_the_step_and_the_run() {
    let (run, record, events) = run_with_events("tests/plans/accounting.yaml");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut total = (0, 0);
    for (name, calls) in [("shaped", 2), ("retried", 2), ("vote", 3)] {
        let entry = step(&record, name);
        let called = events
            .iter()
            .filter(|e| e["kind"] == "inference" && e["step"] == name)
            .count();
        assert_eq!(called, calls, "{name}: every call has its event");
        let (prompt, completion) = tokens_of_calls(&events, name);
        assert!(prompt > 0, "{name}: the calls used tokens");
        assert_eq!(
            (
                entry["usage"]["prompt_tokens"].as_u64(),
                entry["usage"]["completion_tokens"].as_u64()
            ),
            (Some(prompt), Some(completion)),
            "{name}: the step counts every call's tokens: {entry}"
        );
        // One unit a prompt token, two a completion token: the cost agrees with the tokens.
        assert_eq!(
            entry["cost"].as_f64(),
            Some((prompt + 2 * completion) as f64),
            "{name}"
        );
        total = (total.0 + prompt, total.1 + completion);
    }
    assert_eq!(step(&record, "shaped")["status"], "failed");
    assert_eq!(
        (
            record["usage"]["prompt_tokens"].as_u64(),
            record["usage"]["completion_tokens"].as_u64()
        ),
        (Some(total.0), Some(total.1))
    );
    assert_eq!(
        record["cost"].as_f64(),
        Some((total.0 + 2 * total.1) as f64)
    );
    let vote = step(&record, "vote");
    assert_eq!(vote["vote"]["asked"], 3);
    assert!(
        vote["detail"]["largest_context"].as_u64() > Some(0),
        "{vote}"
    );
    assert!(
        events
            .iter()
            .filter(|e| e["kind"] == "inference" && e["data"]["error"].is_null())
            .all(|e| e["data"]["tokens_per_second"].as_f64() > Some(0.0)),
        "every answered call has its speed"
    );
}

#[test]
fn the_batch_summary_counts_a_failed_step_s_tokens() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = |name: &str| dir.path().join(name).display().to_string();
    let (rows, out, summary) = (path("rows.jsonl"), path("out.jsonl"), path("summary.json"));
    std::fs::write(&rows, "{\"topic\": \"a\"}\n{\"topic\": \"b\"}\n").expect("written");
    let plan = "tests/plans/accounting.yaml";
    let args = [
        "run",
        plan,
        "--batch",
        &rows,
        "--out",
        &out,
        "--summary",
        &summary,
    ];
    let run = pagantic(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary")).expect("json");
    let mut tokens = 0;
    let mut cost = 0.0;
    for line in std::fs::read_to_string(&out).expect("output").lines() {
        let row: Value = serde_json::from_str(line).expect("a JSON line");
        let usage = &row["usage"];
        let (prompt, completion) = (
            usage["prompt_tokens"].as_u64().unwrap_or_default(),
            usage["completion_tokens"].as_u64().unwrap_or_default(),
        );
        assert_eq!(
            row["cost"].as_f64(),
            Some((prompt + 2 * completion) as f64),
            "{row}"
        );
        tokens += prompt + completion;
        cost += row["cost"].as_f64().unwrap_or_default();
    }
    assert_eq!(summary["cost"].as_f64(), Some(cost), "{summary}");
    let summed = summary["usage"]["prompt_tokens"]
        .as_u64()
        .unwrap_or_default()
        + summary["usage"]["completion_tokens"]
            .as_u64()
            .unwrap_or_default();
    assert_eq!(summed, tokens, "{summary}");
}

#[test]
fn tool_results_are_recorded_bounded_in_events_and_the_step_detail() {
    let (run, record, events) = run_with_events("tests/plans/availability.yaml");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let calls = &step(&record, "ask")["detail"]["tool_calls"];
    let answered = &calls[0]["result"];
    assert!(
        answered["text"].as_str().is_some_and(|t| t.contains("42")),
        "{calls}"
    );
    assert_eq!(answered["truncated"], false);
    assert_eq!(
        answered["bytes"].as_u64(),
        answered["text"].as_str().map(|t| t.len() as u64)
    );
    let counted = &step(&record, "count")["detail"]["result"];
    assert_eq!(counted["bytes"], 8893, "{counted}");
    assert_eq!(counted["truncated"], true);
    let text = counted["text"].as_str().expect("the text kept");
    assert!(
        text.len() <= 4096 && text.starts_with("1\n2\n3\n"),
        "{text}"
    );
    let ends: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool_end" && e["data"]["status"] == "ok")
        .collect();
    assert_eq!(ends.len(), 2, "the calculator's and the count's");
    assert!(
        ends.iter().any(|e| e["data"]["result"] == *answered),
        "the event carries the same result as the detail"
    );
}

#[test]
fn a_tool_that_cannot_run_is_refused_as_unavailable_saying_why() {
    let (run, record, events) = run_with_events("tests/plans/availability.yaml");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let refused = &step(&record, "ask")["detail"]["tool_calls"][1];
    assert_eq!(refused["ok"], false);
    assert_eq!(refused["error"]["code"], "TOOL_UNAVAILABLE", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m
                .contains("`pagantic-test-no-such-program` is not an executable program on PATH")),
        "{refused}"
    );
    // The model was never offered it: each round's request listed the calculator only.
    let offered: Vec<Option<u64>> = events
        .iter()
        .filter(|e| e["kind"] == "inference" && e["step"] == "ask")
        .map(|e| e["data"]["tools"].as_u64())
        .collect();
    assert_eq!(offered, [Some(1), Some(1), Some(1)]);
}

#[test]
fn tools_lists_every_tool_with_its_availability() {
    let run = pagantic(&["tools", "tests/plans/availability.yaml", "--format", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = run.stdout_json_lines();
    let availability: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap_or_default(),
                l["availability"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        availability,
        [
            ("calculator", "available"),
            ("lookup", "unavailable"),
            ("numbers", "available"),
            ("clock", "refused"),
        ]
    );
    assert!(
        lines[1]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not an executable program on PATH")),
        "{}",
        lines[1]
    );
    assert_eq!(
        lines[3]["reason"],
        "not in the `allowed_tools` of the plan's policy"
    );
    let text = pagantic(&["tools", "tests/plans/availability.yaml"]);
    assert!(
        text.stdout
            .contains("lookup  side effects: read  unavailable: `pagantic-test-no-such-program`"),
        "{}",
        text.stdout
    );
}

#[test]
fn a_vote_reports_agreement_over_the_candidates_asked() {
    let (run, record, _) = run_with_events("tests/plans/agreement.yaml");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vote = &step(&record, "vote")["vote"];
    assert_eq!(
        (vote["asked"].as_u64(), vote["voted"].as_u64()),
        (Some(3), Some(2))
    );
    assert_eq!(vote["confidence"], 1.0, "the two that answered agree");
    let agreement = vote["agreement"].as_f64().expect("agreement");
    assert!((agreement - 2.0 / 3.0).abs() < 1e-9, "{vote}");
}

#[test]
fn a_model_call_cut_off_by_its_step_s_timeout_leaves_an_inference_event() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let events = dir.path().join("events.jsonl");
    let run = pagantic(&[
        "run",
        "tests/plans/retries.yaml",
        "-i",
        "slow=true",
        "--events",
        &events.display().to_string(),
    ]);
    assert_ne!(run.code, 0, "the stalled step times out: {}", run.stderr);
    let cut: Vec<Value> = events_in(&events)
        .into_iter()
        .filter(|e| e["kind"] == "inference" && e["step"] == "wait")
        .collect();
    assert_eq!(cut.len(), 1, "{cut:?}");
    assert_eq!(cut[0]["data"]["cut_off"], true);
    assert_eq!(cut[0]["data"]["usage"]["completion_tokens"], 0);
    assert!(
        cut[0]["data"]["duration_ms"].as_f64() >= Some(250.0),
        "{}",
        cut[0]
    );
}

/// An agent whose first tool writes the program of its second: the second is offered from the
/// turn after it appears, and runs.
const APPEARING: &str = r#"version: 1
name: appearing
models:
  caller:
    kind: scripted
    replies:
      - { call: { tool: make, arguments: {} } }
      - { call: { tool: late, arguments: {} } }
      - done
tools:
  make:
    kind: command
    description: Write the late tool.
    argv: [sh, -c, "printf '#!/bin/sh\\necho here\\n' > late.sh && chmod +x late.sh"]
    side_effects: write
    requires: [filesystem]
  late:
    kind: command
    description: Say here.
    argv: [./late.sh]
    side_effects: none
steps:
  - { name: ask, type: agent, model: caller, template: Go., tools: [make, late] }
"#;

#[test]
fn a_tool_that_appears_during_a_run_is_offered_from_the_next_turn() {
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::write(dir.path().join("plan.yaml"), APPEARING).expect("the plan");
    let events = dir.path().join("events.jsonl").display().to_string();
    let args = ["run", "plan.yaml", "--format", "json", "--events", &events];
    let run = crate::pagantic_in(dir.path(), &args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let offered: Vec<Option<u64>> = events_in(std::path::Path::new(&events))
        .iter()
        .filter(|e| e["kind"] == "inference")
        .map(|e| e["data"]["tools"].as_u64())
        .collect();
    assert_eq!(offered, [Some(1), Some(2), Some(2)]);
    let record: Value = serde_json::from_str(&run.stdout).expect("a record");
    let late = &step(&record, "ask")["detail"]["tool_calls"][1];
    assert_eq!(late["result"]["text"], "here\n", "{late}");
}
