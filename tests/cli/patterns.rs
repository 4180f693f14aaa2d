//! The orchestration patterns on scripted models: structured output with repair and retries, voting
//! (failed and invalid candidates, the quorum, the vote in the record), and the agent tool loop
//! (iteration limit, recovering from a tool error, tool events under the model call that asked).

use serde_json::Value;

use crate::{events_in, pagantic, step};

fn run(case: &str) -> (i32, Value, String) {
    let run = pagantic(&[
        "run",
        "--format",
        "json",
        "-i",
        &format!("case={case}"),
        "tests/plans/patterns.yaml",
    ]);
    let record = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr));
    (run.code, record, run.stderr)
}

#[test]
fn structured_output_is_repaired_and_normalised() {
    let (code, record, stderr) = run("repair");
    assert_eq!(code, 0, "{stderr}");
    let repair = step(&record, "repair");
    assert_eq!(
        repair["output"],
        serde_json::json!({ "label": "bug", "tags": ["ui"] })
    );
    let fixes = repair["detail"]["repairs"].as_array().expect("repairs");
    assert!(!fixes.is_empty(), "the repairs are recorded: {repair}");
    assert_eq!(
        repair["detail"]["normalized"],
        serde_json::json!(["/label"])
    );
    assert_eq!(repair["detail"]["retries"], 0);
}

#[test]
fn invalid_structured_output_is_retried_with_the_errors_fed_back() {
    let (code, record, stderr) = run("retry");
    assert_eq!(code, 0, "{stderr}");
    let retry = step(&record, "retry");
    assert_eq!(
        retry["output"],
        serde_json::json!({ "label": "feature", "tags": [] })
    );
    assert_eq!(retry["detail"]["retries"], 1);
    assert_eq!(retry["detail"]["attempts"][0]["valid"], false);
    assert_eq!(
        retry["detail"]["attempts"][0]["error"]["code"],
        "CONSTRAINT_JSON_INVALID"
    );
}

#[test]
fn structured_output_can_use_tools_first() {
    let (code, record, stderr) = run("tooled");
    assert_eq!(code, 0, "{stderr}");
    let tooled = step(&record, "tooled");
    assert_eq!(tooled["output"], serde_json::json!({ "value": 42 }));
    let phase = &tooled["detail"]["tool_phase"];
    assert_eq!(phase["tool_calls"][0]["tool"], "calculator", "{tooled}");
    assert_eq!(phase["tool_calls"][0]["ok"], true);
}

#[test]
fn majority_voting_over_a_b_a_picks_a_with_two_thirds() {
    let (code, record, stderr) = run("majority");
    assert_eq!(code, 0, "{stderr}");
    let output = &step(&record, "majority")["output"];
    assert_eq!(output["value"], "a");
    let confidence = output["confidence"].as_f64().expect("confidence");
    assert!((confidence - 0.667).abs() < 0.001, "{confidence}");
    assert_eq!(output["candidates"].as_array().map(Vec::len), Some(3));
    let vote = &step(&record, "majority")["vote"];
    assert_eq!(vote["winner"], 1, "{vote}");
    assert_eq!(vote["answered_by"], "vote");
    assert_eq!(
        (vote["asked"].as_u64(), vote["voted"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(vote["confidence"], output["confidence"]);
}

#[test]
fn a_vote_goes_on_without_failed_and_invalid_candidates() {
    let (code, record, stderr) = run("replicas");
    assert_eq!(code, 0, "{stderr}");
    let replicas = step(&record, "replicas");
    assert_eq!(
        replicas["output"]["value"],
        serde_json::json!({ "label": "bug" })
    );
    assert_eq!(replicas["output"]["confidence"], 1.0);
    // Candidate 1's call failed and candidate 2's answer was not JSON: neither voted.
    let detail = &replicas["detail"];
    assert_eq!(detail["failed"][0]["candidate"], 1, "{detail}");
    assert_eq!(
        detail["failed"][0]["error"]["code"],
        "INFERENCE_ENGINE_ERROR"
    );
    assert_eq!(detail["rejected"][0]["candidate"], 2, "{detail}");
    assert_eq!(
        replicas["vote"],
        serde_json::json!({ "confidence": 1.0, "winner": 3, "answered_by": "vote", "asked": 4, "voted": 2, "agreement": 0.5 })
    );
}

#[test]
fn a_vote_below_its_quorum_fails_with_the_candidates_failure() {
    let (code, record, _) = run("quorum");
    // An engine error may pass: exit 75, so a scheduler runs it again.
    assert_eq!(code, 75);
    assert_eq!(record["error"]["code"], "INFERENCE_ENGINE_ERROR");
    let message = record["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("only 1 of the 3 candidates could vote, fewer than min_candidates 2")
            && message.contains("candidate 1: INFERENCE_ENGINE_ERROR")
            && message.contains("candidate 2: INFERENCE_ENGINE_ERROR"),
        "{message}"
    );
}

#[test]
fn every_candidate_of_a_vote_is_a_recorded_model_call() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let events = dir.path().join("events.jsonl");
    let run = pagantic(&[
        "run",
        "-q",
        "-i",
        "case=majority",
        "--events",
        &events.display().to_string(),
        "tests/plans/patterns.yaml",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut votes: Vec<u64> = events_in(&events)
        .into_iter()
        .filter(|e| e["kind"] == "inference" && e["step"] == "majority")
        .map(|e| e["data"]["vote"].as_u64().expect("the vote's number"))
        .collect();
    votes.sort_unstable();
    assert_eq!(votes, [1, 2, 3]);
}

#[test]
fn unanimity_with_a_differing_candidate_fails_with_no_consensus() {
    let (code, record, _) = run("unanimity");
    assert_eq!(code, 1);
    assert_eq!(record["error"]["code"], "ORCHESTRATION_NO_CONSENSUS");
    assert!(
        record["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("answered \"no\"")),
        "{record}"
    );
}

#[test]
fn a_vote_below_min_confidence_hands_over_to_its_standby_fallback_step() {
    let (code, record, stderr) = run("fallback");
    assert_eq!(code, 0, "{stderr}");
    let voted = step(&record, "fallback");
    // a, b, c: confidence 1/3 < 0.6, so `escalate` answers in the vote's place…
    assert_eq!(voted["output"], "no consensus on: fallback");
    assert_eq!(voted["detail"]["fallback"], "escalate");
    let confidence = voted["detail"]["vote"]["confidence"].as_f64();
    assert!(
        confidence.is_some_and(|c| (c - 0.333).abs() < 0.001),
        "{voted}"
    );
    // …and never ran on its own.
    assert_eq!(step(&record, "escalate")["status"], "skipped");
    let vote = &voted["vote"];
    assert_eq!(vote["answered_by"], "fallback", "{voted}");
    assert_eq!(vote["fallback"], "escalate");
    assert_eq!(vote["winner"], serde_json::Value::Null);
    assert_eq!(vote["confidence"], voted["detail"]["vote"]["confidence"]);
}

#[test]
fn an_agent_that_always_calls_a_tool_hits_the_iteration_limit() {
    let (code, record, _) = run("loop");
    assert_eq!(code, 1);
    assert_eq!(record["error"]["code"], "ORCHESTRATION_ITERATION_LIMIT");
}

#[test]
fn an_agent_sees_a_tool_error_and_recovers() {
    let (code, record, stderr) = run("recover");
    assert_eq!(code, 0, "{stderr}");
    let recover = step(&record, "recover");
    assert_eq!(recover["output"], "The answer is 4.");
    let calls = recover["detail"]["tool_calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[0]["ok"], false,
        "the first call failed and the model saw it"
    );
    assert_eq!(calls[1]["ok"], true);
}

#[test]
fn a_tool_call_is_a_child_of_the_model_call_that_asked_for_it() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let events = dir.path().join("events.jsonl");
    let run = pagantic(&[
        "run",
        "-q",
        "-i",
        "case=recover",
        "--events",
        &events.display().to_string(),
        "tests/plans/patterns.yaml",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let events = events_in(&events);
    let rounds: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "inference" && e["step"] == "recover")
        .collect();
    assert_eq!(rounds.len(), 3, "two tool rounds and the answer");
    for round in &rounds {
        let data = &round["data"];
        assert_eq!(data["tools"], 1, "the calculator was offered: {data}");
        assert!(data["messages"].as_u64().is_some_and(|m| m >= 1), "{data}");
        assert_eq!(data["constraint"], Value::Null);
        assert_eq!(data["cost"], Value::Null, "an unpriced model");
    }
    assert_eq!(rounds[2]["data"]["tool_call_ids"], serde_json::json!([]));
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool_start")
        .collect();
    assert_eq!(starts.len(), 2);
    for (start, round) in starts.iter().zip(&rounds) {
        assert_eq!(start["parent_span"], round["span"], "{start}");
        assert_eq!(
            round["data"]["tool_call_ids"],
            serde_json::json!([start["tool_call_id"]])
        );
    }
}

#[test]
fn a_tool_that_cannot_run_here_is_hidden_from_the_model_and_verbose_says_why() {
    let run = crate::pagantic(&[
        "run",
        "--verbose",
        "--format",
        "json",
        "tests/plans/hidden-tool.yaml",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "step `ask`: tool `lookup` is hidden from the model: `pagantic-test-no-such-program` is not an executable program on PATH"
        ),
        "{}",
        run.stderr
    );
    let record: Value = serde_json::from_str(&run.stdout).expect("json record");
    // The model's call to the hidden tool came back as "no such tool", and it went on.
    assert_eq!(step(&record, "ask")["detail"]["tool_calls"][0]["ok"], false);
    assert_eq!(record["output"], "done");
    let quiet = crate::pagantic(&["run", "tests/plans/hidden-tool.yaml"]);
    assert!(!quiet.stderr.contains("hidden"), "{}", quiet.stderr);
}
