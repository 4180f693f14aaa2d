//! Costs on scripted models with declared prices: per step and per run in the record (null for an
//! unpriced model, not 0), on every inference event, in batch output and summary, and the
//! policy's `max_cost` — refused by `validate` where `max_tokens` shows a step cannot fit, and
//! enforced at run time with its own failure code, sub-plans' calls included.

use serde_json::Value;

use crate::{events_in, pagantic, step};

fn record(run: &crate::Run) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr))
}

#[test]
fn the_record_carries_each_step_s_cost_and_the_run_s_total() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let events = dir.path().join("events.jsonl");
    let run = pagantic(&[
        "run",
        "--format",
        "json",
        "--events",
        &events.display().to_string(),
        "tests/plans/cost.yaml",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record = record(&run);
    assert_eq!(step(&record, "first")["cost"], 8.0);
    assert_eq!(
        step(&record, "unpriced")["cost"],
        Value::Null,
        "unpriced: null, not 0"
    );
    assert_eq!(step(&record, "second")["cost"], 8.0);
    assert_eq!(record["cost"], 16.0);
    let costs: Vec<Value> = events_in(&events)
        .into_iter()
        .filter(|e| e["kind"] == "inference")
        .map(|e| e["data"]["cost"].clone())
        .collect();
    assert_eq!(costs, [8.0.into(), Value::Null, 8.0.into()]);
}

/// The record of `plan` run under tests/policies/cost.policy.yaml (max_cost 10), which its
/// second call of 8 takes over: the run fails with ORCHESTRATION_COST_EXCEEDED after its first
/// step completed.
fn over_max_cost(plan: &str) -> Value {
    let policy = "tests/policies/cost.policy.yaml";
    let run = pagantic(&["run", "--format", "json", "--policy", policy, plan]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let record = record(&run);
    assert_eq!(record["error"]["code"], "ORCHESTRATION_COST_EXCEEDED");
    assert_eq!(
        record["error"]["message"],
        "the run's model calls have cost 16, over its max_cost of 10"
    );
    assert!(record["error"]["help"].is_string());
    assert_eq!(step(&record, "first")["status"], "ok");
    record
}

#[test]
fn a_run_over_max_cost_fails_at_the_call_that_took_it_over() {
    let record = over_max_cost("tests/plans/cost.yaml");
    let second = step(&record, "second");
    assert_eq!(second["status"], "failed");
    assert_eq!(
        second["cost"], 8.0,
        "what the failed step spent is still counted"
    );
    assert_eq!(record["cost"], 16.0);
}

/// A sub-plan's model calls count against the run's max_cost: the route whose sub-plan agent
/// made the call that took the run over fails, though each call alone fits.
#[test]
fn a_sub_plan_s_calls_count_against_the_run_s_max_cost() {
    let plan = "tests/plans/cost-subplan.yaml";
    let unlimited = pagantic(&["run", "--format", "json", plan]);
    assert_eq!(unlimited.code, 0, "{}", unlimited.stderr);
    let whole = record(&unlimited);
    assert_eq!(step(&whole, "route")["cost"], 8.0, "{whole}");
    assert_eq!(whole["cost"], 16.0);

    let policy = "tests/policies/cost.policy.yaml";
    assert_eq!(pagantic(&["validate", "--policy", policy, plan]).code, 0);
    let record = over_max_cost(plan);
    assert_eq!(step(&record, "route")["status"], "failed", "{record}");
}

#[test]
fn validate_refuses_a_step_whose_max_tokens_alone_could_cost_more_than_max_cost() {
    let run = pagantic(&[
        "validate",
        "--format",
        "json",
        "--policy",
        "tests/policies/cost.policy.yaml",
        "tests/plans/cost.yaml",
    ]);
    assert_eq!(run.code, 0, "each step fits: {}{}", run.stdout, run.stderr);
    let run = pagantic(&[
        "validate",
        "--format",
        "json",
        "tests/invalid/policy_max_cost.yaml",
    ]);
    assert_eq!(run.code, 2);
    let diagnostic: Value = serde_json::from_str(run.stdout.lines().next().unwrap_or_default())
        .expect("one JSON diagnostic");
    assert_eq!(diagnostic["code"], "policy::max_cost_exceed");
    assert_eq!(
        diagnostic["message"],
        "this step's 5000 completion tokens may cost 0.003 on model `llm`; the max_cost set by the plan's policy is 0.001"
    );
}

#[test]
fn batch_rows_and_the_summary_carry_costs() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let input = dir.path().join("rows.jsonl");
    std::fs::write(&input, "{\"topic\": \"a\"}\n{\"topic\": \"b\"}\n").expect("written");
    let out = dir.path().join("out.jsonl");
    let summary = dir.path().join("summary.json");
    let run = pagantic(&[
        "run",
        "tests/plans/cost.yaml",
        "--batch",
        &input.display().to_string(),
        "--out",
        &out.display().to_string(),
        "--summary",
        &summary.display().to_string(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains(", cost 32)"), "{}", run.stderr);
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary")).expect("json");
    assert_eq!(summary["cost"], 32.0);
    let rows = std::fs::read_to_string(&out).expect("output");
    assert_eq!(rows.lines().count(), 2, "{rows}");
    for line in rows.lines() {
        let row: Value = serde_json::from_str(line).expect("a JSON line");
        assert_eq!(row["cost"], 16.0, "{row}");
        assert_eq!(row["steps"][1]["cost"], Value::Null, "{row}");
    }
}
