//! The build without the local engine (`cargo test --no-default-features`): plans that use
//! `kind: mistralrs` still validate and run on stand-ins, from the call cache or from a cassette;
//! running one for real is refused before anything runs, saying how to get the engine.

use crate::{pagantic, step};

#[test]
fn a_local_plan_still_validates() {
    let run = pagantic(&["validate", "plans/quickstart.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
fn running_a_local_plan_is_refused_with_the_way_to_get_the_engine() {
    let run = pagantic(&["run", "plans/quickstart.yaml", "--no-cache"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "error[CONFIG_NO_ENGINE]: model `llm`: this pagantic was built without its local engine (mistral.rs)"
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("cargo install --locked --path ."),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty(), "nothing ran: {}", run.stdout);
}

#[test]
fn a_dry_run_of_a_local_plan_runs_on_stand_ins() {
    let run = pagantic(&["run", "plans/quickstart.yaml", "--dry-run", "--no-cache"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

/// With `--cache-only` the model is built for replay: a call the cache holds is answered, and
/// one it does not hold fails as a cache miss, not for want of an engine.
#[test]
fn cache_only_replays_a_local_model_s_calls() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let cache = dir.path().display().to_string();
    let run = pagantic(&[
        "run",
        "plans/quickstart.yaml",
        "--cache-only",
        "--cache",
        &cache,
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("CACHE_MISS"), "{}", run.stderr);
    assert!(!run.stderr.contains("CONFIG_NO_ENGINE"), "{}", run.stderr);
}

/// `tests/cassettes/quickstart.jsonl` was recorded by the default build from the embedded model
/// (`pagantic run plans/quickstart.yaml --record tests/cassettes/quickstart.jsonl`). This build
/// keys the model as the engine does — by the SHA-256 the embedded model's manifest publishes —
/// so the cassette answers with no engine, pull or load, and only a changed question misses.
#[test]
fn a_cassette_recorded_from_the_embedded_model_replays_without_the_engine() {
    let cassette = "tests/cassettes/quickstart.jsonl";
    let run = pagantic(&[
        "run",
        "plans/quickstart.yaml",
        "--cassette",
        cassette,
        "--format",
        "json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record: serde_json::Value = serde_json::from_str(&run.stdout).expect("a run record");
    assert_eq!(record["output"], "Paris");
    let answer = step(&record, "answer");
    assert_eq!(
        answer["cached_calls"],
        serde_json::json!(["call"]),
        "{answer}"
    );
    assert!(
        !run.stderr.contains("loading"),
        "no model loaded: {}",
        run.stderr
    );

    let other = pagantic(&[
        "run",
        "plans/quickstart.yaml",
        "-i",
        "question=What is the capital of Italy?",
        "--cassette",
        cassette,
    ]);
    assert_eq!(other.code, 1, "{}", other.stderr);
    assert!(
        other
            .stderr
            .contains("error[CACHE_MISS]: step `answer`: --cassette"),
        "{}",
        other.stderr
    );
    assert!(
        !other.stderr.contains("CONFIG_NO_ENGINE"),
        "{}",
        other.stderr
    );
}

/// `plans/classify.cassette.jsonl` was recorded by the default build from a run of the whole
/// suite on the embedded model (`pagantic test plans/classify.test.yaml --record
/// plans/classify.cassette.jsonl`: 80 entries, about two minutes); replayed here every case of
/// every variant is scored on a recorded answer, none missing, in a fraction of a second, and
/// compared with the committed baseline. After a change to the plan, its prompts or its data,
/// record both again.
#[test]
fn the_classification_suite_replays_from_its_committed_cassette() {
    let run = pagantic(&[
        "test",
        "plans/classify.test.yaml",
        "--cassette",
        "plans/classify.cassette.jsonl",
        "--baseline",
        "plans/classify.baseline.json",
        "--fail-on",
        "regression",
        "--format",
        "json",
        "--quiet",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stdout.contains("CACHE_MISS"), "{}", run.stdout);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).expect("a JSON report");
    for variant in report["suites"][0]["variants"]
        .as_array()
        .expect("variants")
    {
        assert_eq!(variant["total"], 16, "{variant}");
        assert_eq!(variant["passed"], 15, "the recorded answers: {variant}");
        assert_eq!(variant["error"], serde_json::Value::Null, "{variant}");
    }
    // The committed baseline (the JSON report of this replay) is what the CI recipe in
    // docs/testing.md gates on: every case is compared, none changed.
    let compared = &report["suites"][0]["comparison"]["variants"];
    for variant in compared.as_array().expect("compared variants") {
        let cases = variant["cases"].as_array().expect("cases");
        assert_eq!(cases.len(), 16, "{variant}");
        assert!(
            cases.iter().all(|case| case["change"] == "unchanged"),
            "{variant}"
        );
    }
}
