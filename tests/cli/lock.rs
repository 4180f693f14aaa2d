//! `pagantic lock`, and `run --locked` / `validate --locked` refusing a plan whose files drifted.

use crate::{pagantic_in, pagantic_with};

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

/// A template the prompt file includes (and one that includes) is pinned like the prompt file:
/// editing it is drift, named, and `run --locked` refuses to run.
#[test]
fn an_edited_included_template_is_refused_by_name() {
    let dir = workspace();
    let prompts = dir.path().join("prompts");
    std::fs::write(prompts.join("ask.j2"), "{% include 'part.j2' %}").expect("prompt");
    std::fs::write(
        prompts.join("part.j2"),
        "{% import 'macros.j2' as m %}{{ m.answer(inputs.text) }}",
    )
    .expect("part");
    std::fs::write(
        prompts.join("macros.j2"),
        "{% macro answer(text) %}Answer: {{ text }}{% endmacro %}",
    )
    .expect("macros");
    let locked = pagantic_in(dir.path(), &["lock", "plan.yaml"]);
    assert_eq!(locked.code, 0, "{}", locked.stderr);
    assert_eq!(locked.stderr, "wrote plan.yaml.lock (1 models, 4 files)\n");
    let run = |dir: &std::path::Path| {
        pagantic_in(dir, &["run", "--locked", "plan.yaml", "-i", "text=hi"])
    };
    assert_eq!(run(dir.path()).code, 0);
    std::fs::write(
        prompts.join("macros.j2"),
        "{% macro answer(text) %}Reply: {{ text }}{% endmacro %}",
    )
    .expect("edit");
    let refused = run(dir.path());
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stdout.is_empty(), "nothing ran: {}", refused.stdout);
    assert!(
        refused
            .stderr
            .contains("  - file `prompts/macros.j2`: locked \""),
        "{}",
        refused.stderr
    );
    assert!(
        !refused.stderr.contains("prompts/part.j2"),
        "{}",
        refused.stderr
    );
}

const TOOL_PLAN: &str = r#"version: 1
name: locked-tool
models:
  llm: { kind: mistralrs, source: "hf:org/repo/model.gguf" }
tools:
  lookup:
    kind: command
    description: Looks a word up.
    argv: [sh, lookup.sh, words.txt, "{{ args.word }}"]
    side_effects: read
    idempotent: true
steps:
  - name: look
    type: tool
    tool: lookup
    args: { word: hello }
"#;

/// A command tool's script and data file are pinned, and an `hf:` model by the revision and
/// SHA-256 the Hugging Face cache recorded (read from `$HF_HOME`, never fetched): a new revision
/// or an edited script is drift.
#[test]
fn tool_files_and_hub_revisions_are_pinned() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("plan.yaml"), TOOL_PLAN).expect("plan");
    std::fs::write(dir.path().join("lookup.sh"), "grep \"$2\" \"$1\"\n").expect("script");
    std::fs::write(dir.path().join("words.txt"), "hello\n").expect("data");
    let hub = dir.path().join("hf/hub/models--org--repo");
    let blob = "ab".repeat(32);
    for sub in ["refs", "blobs", "snapshots/c0ffee"] {
        std::fs::create_dir_all(hub.join(sub)).expect("hub dirs");
    }
    std::fs::write(hub.join("refs/main"), "c0ffee").expect("ref");
    std::fs::write(hub.join("blobs").join(&blob), "GGUF").expect("blob");
    std::os::unix::fs::symlink(
        format!("../../blobs/{blob}"),
        hub.join("snapshots/c0ffee/model.gguf"),
    )
    .expect("link");
    let hf_home = dir.path().join("hf");
    let env = [("HF_HOME", hf_home.to_str().expect("utf-8 path"))];
    let pagantic = |args: &[&str]| pagantic_with(dir.path(), args, &env);
    let locked = pagantic(&["lock", "plan.yaml"]);
    assert_eq!(locked.code, 0, "{}", locked.stderr);
    let lock: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("plan.yaml.lock")).expect("lockfile"),
    )
    .expect("JSON");
    assert_eq!(lock["models"]["llm"]["revision"], "c0ffee");
    assert_eq!(lock["models"]["llm"]["sha256"], blob.as_str());
    let files: Vec<&String> = lock["files"].as_object().expect("files").keys().collect();
    assert_eq!(files, ["lookup.sh", "words.txt"]);
    assert_eq!(pagantic(&["validate", "--locked", "plan.yaml"]).code, 0);

    std::fs::create_dir_all(hub.join("snapshots/beef")).expect("new snapshot");
    std::fs::write(hub.join("snapshots/beef/model.gguf"), "GGUF v2").expect("new file");
    std::fs::write(hub.join("refs/main"), "beef").expect("new ref");
    std::fs::write(dir.path().join("lookup.sh"), "grep -i \"$2\" \"$1\"\n").expect("edit");
    let refused = pagantic(&["validate", "--locked", "plan.yaml"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    for expected in [
        "  - model `llm`: locked {",
        "\"revision\":\"beef\"",
        "  - file `lookup.sh`: locked \"",
    ] {
        assert!(
            refused.stderr.contains(expected),
            "{expected}\n{}",
            refused.stderr
        );
    }
    assert!(!refused.stderr.contains("words.txt"), "{}", refused.stderr);
}
