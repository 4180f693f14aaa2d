//! The build without the local engine (`cargo test --no-default-features`): plans that use
//! `kind: mistralrs` still validate and run on stand-ins or from the call cache; running one for
//! real is refused before anything runs, saying how to get the engine.

use crate::pagantic;

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
