//! Orchestration semantics through the binary, on scripted models: model calls named by the
//! plan's model key, so two models of one engine can be told apart.

use serde_json::Value;

use crate::{events_in, pagantic};

#[test]
fn each_model_call_names_the_plan_s_model_key_beside_the_engine_s_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("events.jsonl");
    let run = pagantic(&[
        "run",
        "tests/plans/cost.yaml",
        "--format",
        "json",
        "--events",
        events_file.to_str().expect("utf-8"),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let calls: Vec<(String, String, String)> = events_in(&events_file)
        .iter()
        .filter(|event| event["kind"] == "inference")
        .map(|event| {
            let text = |field: &str| {
                event["data"][field]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            };
            (
                event["step"].as_str().unwrap_or_default().to_string(),
                text("model_key"),
                text("engine"),
            )
        })
        .collect();
    let expected = [
        ("first", "priced"),
        ("unpriced", "free"),
        ("second", "priced"),
    ]
    .map(|(step, key)| (step.to_string(), key.to_string(), "scripted".to_string()));
    assert_eq!(calls, expected);
    let names: Vec<Value> = events_in(&events_file)
        .iter()
        .filter(|event| event["kind"] == "inference")
        .map(|event| event["data"]["model"].clone())
        .collect();
    assert!(
        names.windows(2).all(|pair| pair[0] == pair[1]),
        "both models have the same engine's name, which alone cannot tell them apart: {names:?}"
    );
}
