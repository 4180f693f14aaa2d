//! A few short tests on the real embedded model (Qwen2.5-Coder-0.5B on mistral.rs, CPU). They need
//! the model in the cache: the README's test command runs `pagantic models pull` first, and so
//! does CI. Each loads the model once (~6 s) and generates a handful of tokens.

use crate::pagantic;

/// Fails with the fix when the model has not been pulled.
fn require_model() {
    let listed = pagantic(&["models", "list"]);
    assert!(
        listed.code == 0 && listed.stdout.contains("qwen2.5-coder-0.5b-instruct"),
        "these tests need the embedded model: run `cargo run -- models pull` first\n{}{}",
        listed.stdout,
        listed.stderr
    );
}

#[test]
fn the_quickstart_plan_answers_paris() {
    require_model();
    let run = pagantic(&["run", "--no-stream", "plans/quickstart.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("Paris"),
        "answer: {}\n{}",
        run.stdout,
        run.stderr
    );
}
