//! `pagantic lock`, and `run --locked` / `validate --locked` refusing a plan whose files drifted.

use crate::pagantic_in;

const PLAN: &str = r#"version: 1
name: locked
inputs:
  text: { type: string }
models:
  echo: { kind: scripted, echo: true }
steps:
  - name: shape
    type: structured
    model: echo
    prompt: ask.j2
    schema: answer.schema.json
"#;

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("prompts")).expect("prompts");
    std::fs::write(dir.path().join("plan.yaml"), PLAN).expect("plan");
    std::fs::write(
        dir.path().join("prompts/ask.j2"),
        "Answer: {{ inputs.text }}",
    )
    .expect("prompt");
    std::fs::write(
        dir.path().join("answer.schema.json"),
        r#"{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}"#,
    )
    .expect("schema");
    dir
}

#[test]
fn a_lockfile_pins_the_version_models_prompts_and_schemas() {
    let dir = workspace();
    let locked = pagantic_in(dir.path(), &["lock", "plan.yaml"]);
    assert_eq!(locked.code, 0, "{}", locked.stderr);
    assert_eq!(locked.stderr, "wrote plan.yaml.lock (1 models, 2 files)\n");
    let lock: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("plan.yaml.lock")).expect("lockfile"),
    )
    .expect("JSON");
    assert_eq!(lock["pagantic"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        lock["models"]["echo"],
        serde_json::json!({ "kind": "scripted" })
    );
    let files: Vec<&String> = lock["files"].as_object().expect("files").keys().collect();
    assert_eq!(files, ["answer.schema.json", "prompts/ask.j2"]);
    let sha = lock["files"]["prompts/ask.j2"].as_str().expect("sha");
    assert_eq!(sha.len(), 64);
    let validate = pagantic_in(dir.path(), &["validate", "--locked", "plan.yaml"]);
    assert_eq!(validate.code, 0, "{}", validate.stderr);
    let run = pagantic_in(
        dir.path(),
        &["run", "--locked", "plan.yaml", "-i", "text=hi"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
fn a_changed_prompt_or_schema_is_refused_by_name_until_locked_again() {
    let dir = workspace();
    assert_eq!(pagantic_in(dir.path(), &["lock", "plan.yaml"]).code, 0);
    std::fs::write(
        dir.path().join("prompts/ask.j2"),
        "Reply: {{ inputs.text }}",
    )
    .expect("edit");
    std::fs::remove_file(dir.path().join("answer.schema.json")).expect("gone");
    std::fs::write(
        dir.path().join("answer.schema.json"),
        r#"{"type": "object"}"#,
    )
    .expect("edit");
    let validate = pagantic_in(dir.path(), &["validate", "--locked", "plan.yaml"]);
    assert_eq!(validate.code, 2, "{}", validate.stderr);
    for expected in [
        "error[CONFIG_INVALID_INPUT]: plan.yaml no longer matches plan.yaml.lock:",
        "  - file `answer.schema.json`: locked \"",
        "  - file `prompts/ask.j2`: locked \"",
        "  help: if the changes are intended, run `pagantic lock plan.yaml` and commit the lockfile",
    ] {
        assert!(
            validate.stderr.contains(expected),
            "{expected}\n{}",
            validate.stderr
        );
    }
    let run = pagantic_in(
        dir.path(),
        &[
            "run",
            "--locked",
            "plan.yaml",
            "-i",
            "text=hi",
            "--format",
            "json",
        ],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stdout.is_empty(), "nothing ran: {}", run.stdout);
    assert!(
        run.stderr.contains("file `prompts/ask.j2`"),
        "{}",
        run.stderr
    );
    assert_eq!(pagantic_in(dir.path(), &["lock", "plan.yaml"]).code, 0);
    let again = pagantic_in(dir.path(), &["validate", "--locked", "plan.yaml"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
}

#[test]
fn a_plan_without_a_lockfile_is_refused_under_locked() {
    let dir = workspace();
    let run = pagantic_in(
        dir.path(),
        &["run", "--locked", "plan.yaml", "-i", "text=hi"],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("cannot read the lockfile plan.yaml.lock"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("help: write it with `pagantic lock PLAN`"),
        "{}",
        run.stderr
    );
}
