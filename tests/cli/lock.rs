//! `pagantic lock`, and `run --locked` / `validate --locked` refusing a plan whose models or files
//! drifted, each named.

use crate::{Run, pagantic_in, pagantic_with};

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

/// Asserts that `text` (what a command said) holds each of `expected`.
fn says_all(text: &str, expected: &[&str]) {
    for line in expected {
        assert!(text.contains(line), "{line}\n{text}");
    }
}

/// Asserts that `refused` stopped with exit 2 before anything ran, naming `drift`.
fn refused_naming(refused: &Run, drift: &str) {
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stdout.is_empty(), "nothing ran: {}", refused.stdout);
    says_all(&refused.stderr, &[drift]);
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
    says_all(
        &validate.stderr,
        &[
            "error[CONFIG_INVALID_INPUT]: plan.yaml no longer matches plan.yaml.lock:",
            "  - file `answer.schema.json`: locked \"",
            "  - file `prompts/ask.j2`: locked \"",
            "  help: if the changes are intended, run `pagantic lock plan.yaml` and commit the lockfile",
        ],
    );
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
    refused_naming(&refused, "  - file `prompts/macros.j2`: locked \"");
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
    says_all(
        &refused.stderr,
        &[
            "  - model `llm`: locked {",
            "\"revision\":\"beef\"",
            "  - file `lookup.sh`: locked \"",
        ],
    );
    assert!(!refused.stderr.contains("words.txt"), "{}", refused.stderr);
}

const CORPUS_PLAN: &str = r#"version: 1
name: locked-corpus
inputs:
  question: { type: string }
corpora:
  docs:
    files: ["docs/*.md"]
  faq:
    jsonl: { path: faq.jsonl }
steps:
  - name: retrieve
    type: retrieve
    corpus: docs
    query: "{{ inputs.question }}"
output: "{{ steps.retrieve.output[0].content }}"
"#;

fn corpus_workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("docs")).expect("docs");
    std::fs::write(dir.path().join("plan.yaml"), CORPUS_PLAN).expect("plan");
    std::fs::write(dir.path().join("docs/a.md"), "Refunds take five days.").expect("a");
    std::fs::write(dir.path().join("docs/b.md"), "Shipping is free.").expect("b");
    std::fs::write(dir.path().join("faq.jsonl"), "{\"content\": \"Yes.\"}\n").expect("faq");
    dir
}

/// The documents a retrieve step reads are pinned per corpus: an edited corpus file is drift,
/// named, and `run --locked` refuses to run until the plan is locked again.
#[test]
fn corpus_files_are_pinned_and_an_edit_is_refused_by_name() {
    let dir = corpus_workspace();
    let locked = pagantic_in(dir.path(), &["lock", "plan.yaml"]);
    assert_eq!(locked.code, 0, "{}", locked.stderr);
    assert_eq!(
        locked.stderr,
        "wrote plan.yaml.lock (0 models, 0 files, 3 corpus files)\n"
    );
    let lock: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("plan.yaml.lock")).expect("lockfile"),
    )
    .expect("JSON");
    let docs: Vec<&String> = lock["corpora"]["docs"]
        .as_object()
        .expect("docs")
        .keys()
        .collect();
    assert_eq!(docs, ["docs/a.md", "docs/b.md"]);
    assert_eq!(
        lock["corpora"]["faq"]["faq.jsonl"].as_str().map(str::len),
        Some(64)
    );
    let run = |dir: &std::path::Path| {
        pagantic_in(
            dir,
            &["run", "--locked", "plan.yaml", "-i", "question=refunds"],
        )
    };
    assert_eq!(run(dir.path()).code, 0);

    std::fs::write(dir.path().join("docs/a.md"), "Refunds take ten days.").expect("edit");
    let refused = run(dir.path());
    refused_naming(&refused, "  - corpus `docs` file `docs/a.md`: locked \"");
    assert!(!refused.stderr.contains("docs/b.md"), "{}", refused.stderr);

    std::fs::write(dir.path().join("docs/c.md"), "New.").expect("added");
    let added = pagantic_in(dir.path(), &["validate", "--locked", "plan.yaml"]);
    assert!(
        added
            .stderr
            .contains("  - corpus `docs` file `docs/c.md`: not in the lockfile"),
        "{}",
        added.stderr
    );
    assert_eq!(pagantic_in(dir.path(), &["lock", "plan.yaml"]).code, 0);
    assert_eq!(run(dir.path()).code, 0);
}

/// A lockfile written before corpora were pinned cannot vouch for them: refused, asking for a
/// new lock.
#[test]
fn a_lockfile_without_corpus_pins_is_refused_for_a_plan_with_corpora() {
    let dir = corpus_workspace();
    assert_eq!(pagantic_in(dir.path(), &["lock", "plan.yaml"]).code, 0);
    let path = dir.path().join("plan.yaml.lock");
    let mut lock: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("lockfile")).expect("JSON");
    lock.as_object_mut().expect("object").remove("corpora");
    std::fs::write(&path, lock.to_string()).expect("old lockfile");
    let refused = pagantic_in(dir.path(), &["validate", "--locked", "plan.yaml"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    says_all(
        &refused.stderr,
        &[
            "  - corpora: the lockfile was written before pagantic pinned corpus files",
            "run `pagantic lock plan.yaml`",
        ],
    );
}

/// `pagantic lock` replaces a symbolic link planted at PLAN.lock instead of writing through it.
#[test]
fn a_symlinked_lockfile_is_replaced_not_written_through() {
    let dir = workspace();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "keep me\n").expect("victim");
    std::os::unix::fs::symlink(&victim, dir.path().join("plan.yaml.lock")).expect("link");
    let locked = pagantic_in(dir.path(), &["lock", "plan.yaml"]);
    assert_eq!(locked.code, 0, "{}", locked.stderr);
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "keep me\n"
    );
    let lockfile = dir.path().join("plan.yaml.lock");
    assert!(
        std::fs::symlink_metadata(&lockfile)
            .expect("meta")
            .is_file()
    );
    assert_eq!(
        pagantic_in(dir.path(), &["validate", "--locked", "plan.yaml"]).code,
        0
    );
}

/// A lockfile that is a device is refused, not read forever.
#[test]
fn a_lockfile_that_is_not_a_regular_file_is_refused() {
    let dir = workspace();
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("plan.yaml.lock")).expect("link");
    let refused = pagantic_in(dir.path(), &["validate", "--locked", "plan.yaml"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("plan.yaml.lock is not a regular file (it is a device)"),
        "{}",
        refused.stderr
    );
}

const KINDS_PLAN: &str = r#"version: 1
name: kinds
inputs:
  text: { type: string, default: x }
models:
  embedded: { kind: mistralrs }
  file: { kind: mistralrs, source: local.gguf }
  ranker: { kind: onnx, task: cross-encoder, source: ranker.onnx }
  remote: { kind: openai, base_url: "http://127.0.0.1:9/v1", model: served }
  router: { kind: scripted, echo: true }
agents:
  sum: { description: Sum up., plan: agents/sub.yaml }
steps:
  - { name: a, type: infer, model: embedded, prompt: ask.j2 }
  - { name: b, type: infer, model: file, prompt: child.j2 }
  - { name: c, type: infer, model: remote, template: hi }
  - { name: route, type: route, model: router, template: hi, agents: [sum] }
"#;

/// Every kind of pin: the embedded model by its published SHA-256, a `.gguf` and an `.onnx`
/// file by theirs, an `openai` model by its server and model name, a sub-plan's file, and the
/// templates a prompt reaches with `{% from %}` and `{% extends %}`. A change to each is drift,
/// named; what did not change is not.
#[test]
fn every_kind_of_model_and_file_is_pinned_and_its_drift_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("dirs");
        std::fs::write(path, text).expect("written");
    };
    write("plan.yaml", KINDS_PLAN);
    write("local.gguf", "GGUF local");
    write("ranker.onnx", "onnx bytes");
    write(
        "agents/sub.yaml",
        "version: 1\nname: sub\nsteps:\n  - { name: s, type: template, template: sub }\n",
    );
    write(
        "prompts/ask.j2",
        r#"{% from "macros.j2" import answer %}{{ answer(inputs.text) }}"#,
    );
    write(
        "prompts/macros.j2",
        "{% macro answer(t) %}A: {{ t }}{% endmacro %}",
    );
    write(
        "prompts/child.j2",
        r#"{% extends "base.j2" %}{% block body %}hi{% endblock %}"#,
    );
    write("prompts/base.j2", "Base {% block body %}{% endblock %}");
    let locked = pagantic_in(dir.path(), &["lock", "plan.yaml"]);
    assert_eq!(locked.code, 0, "{}", locked.stderr);
    let lockfile = dir.path().join("plan.yaml.lock");
    let mut lock: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&lockfile).expect("lockfile")).expect("JSON");
    let models = &lock["models"];
    // The published SHA-256 of the embedded model (the manifest `models pull` checks).
    let published = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32";
    assert_eq!(models["embedded"]["sha256"], published, "{lock}");
    for (model, pin) in [
        ("file", &models["file"]["sha256"]),
        ("ranker", &models["ranker"]["sha256"]["model"]),
    ] {
        assert!(
            pin.as_str().is_some_and(|h| h.len() == 64),
            "{model}: {lock}"
        );
    }
    assert_eq!(models["remote"]["base_url"], "http://127.0.0.1:9/v1");
    assert_eq!(models["remote"]["model"], "served");
    let files: Vec<&String> = lock["files"].as_object().expect("files").keys().collect();
    assert_eq!(
        files,
        [
            "agents/sub.yaml",
            "prompts/ask.j2",
            "prompts/base.j2",
            "prompts/child.j2",
            "prompts/macros.j2"
        ]
    );
    assert_eq!(
        pagantic_in(dir.path(), &["validate", "--locked", "plan.yaml"]).code,
        0
    );

    // A lock written by a build with another embedded model, and every other pin changed.
    lock["models"]["embedded"]["sha256"] = "0".repeat(64).into();
    std::fs::write(&lockfile, lock.to_string()).expect("lockfile");
    write(
        "plan.yaml",
        &KINDS_PLAN.replace("model: served", "model: other"),
    );
    write("local.gguf", "GGUF local, edited");
    write("ranker.onnx", "onnx bytes, edited");
    write(
        "agents/sub.yaml",
        "version: 1\nname: sub\nsteps:\n  - { name: s, type: template, template: edited }\n",
    );
    write(
        "prompts/macros.j2",
        "{% macro answer(t) %}B: {{ t }}{% endmacro %}",
    );
    write("prompts/base.j2", "Edited {% block body %}{% endblock %}");
    let refused = pagantic_in(dir.path(), &["validate", "--locked", "plan.yaml"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    says_all(
        &refused.stderr,
        &[
            &format!(
                "  - model `embedded`: locked {{\"kind\":\"mistralrs\",\"source\":\"default\",\"decoder_constraints\":true,\"sha256\":\"{}\"}}, now {{\"kind\":\"mistralrs\",\"source\":\"default\",\"decoder_constraints\":true,\"sha256\":\"{published}\"}}",
                "0".repeat(64)
            ),
            "  - model `file`: locked {",
            "  - model `ranker`: locked {",
            "\"model\":\"served\"}, now {\"kind\":\"openai\",\"base_url\":\"http://127.0.0.1:9/v1\",\"model\":\"other\"}",
            "  - file `agents/sub.yaml`: locked \"",
            "  - file `prompts/base.j2`: locked \"",
            "  - file `prompts/macros.j2`: locked \"",
        ],
    );
    for unchanged in ["prompts/ask.j2", "prompts/child.j2", "model `router`"] {
        assert!(
            !refused.stderr.contains(unchanged),
            "{unchanged}: {}",
            refused.stderr
        );
    }
}
