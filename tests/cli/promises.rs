//! Promises of the manual that only the binary can show, on stand-ins that need no network: the
//! model store's listing and verification, an unknown name refused before any fetch, `test -j`
//! running cases at once, a refused chat ending its events with ERROR, and the exit code and
//! failure of a model file the local engine cannot run.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::Value;

use crate::{events_in, pagantic, pagantic_with, root};

/// Runs `pagantic ARGS…` at the repository root with `PAGANTIC_HOME` set to `home`.
fn with_home(home: &Path, args: &[&str]) -> crate::Run {
    pagantic_with(
        &root(),
        args,
        &[("PAGANTIC_HOME", home.to_str().expect("utf-8 path"))],
    )
}

/// The path `models list` shows for the stored file of `name` in the user's store.
fn stored_file(name: &str) -> String {
    let listed = pagantic(&["models", "list"]);
    listed
        .stdout
        .lines()
        .find(|line| line.starts_with(name))
        .and_then(|line| line.split_whitespace().last())
        .map(str::to_string)
        .unwrap_or_else(|| {
            panic!(
                "this test needs {name} pulled: run `cargo run -- models pull` first\n{}",
                listed.stdout
            )
        })
}

/// A store holding a copy of the ONNX Runtime library: `models list` compares sizes,
/// `--verify` re-hashes and names a file whose bytes changed (exit 1, with the fix), `--all`
/// lists what can be pulled.
#[test]
fn models_list_compares_sizes_and_verify_rehashes_every_file() {
    let name = "onnxruntime-1.31.1";
    let library = stored_file(name);
    let home = tempfile::tempdir().expect("temp dir");
    let models = home.path().join("models");
    std::fs::create_dir_all(&models).expect("models dir");
    let copy = models.join("libonnxruntime.so.1.31.1");
    std::fs::copy(&library, &copy).expect("a copy of the library");
    let manifest = Path::new(&library).with_file_name(format!("{name}.json"));
    std::fs::copy(&manifest, models.join(format!("{name}.json"))).expect("its manifest");

    let listed = with_home(home.path(), &["models", "list"]);
    assert_eq!(listed.code, 0, "{}{}", listed.stdout, listed.stderr);
    let row = |stdout: &str| {
        stdout
            .lines()
            .find(|line| line.starts_with(name))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        row(&listed.stdout).contains(" size ok "),
        "{}",
        listed.stdout
    );
    let verified = with_home(home.path(), &["models", "list", "--verify"]);
    assert_eq!(verified.code, 0, "{}{}", verified.stdout, verified.stderr);
    assert!(
        row(&verified.stdout).contains(" sha256 ok "),
        "{}",
        verified.stdout
    );
    assert!(
        !verified.stdout.contains("contents not re-hashed"),
        "{}",
        verified.stdout
    );

    // One byte changed in place: the size still matches, the hash does not.
    let mut bytes = std::fs::read(&copy).expect("the copy");
    bytes[1000] ^= 0xff;
    std::fs::write(&copy, bytes).expect("the changed copy");
    let sized = with_home(home.path(), &["models", "list"]);
    assert_eq!(
        sized.code, 0,
        "sizes only: {}{}",
        sized.stdout, sized.stderr
    );
    let changed = with_home(home.path(), &["models", "list", "--verify"]);
    assert_eq!(changed.code, 1, "{}{}", changed.stdout, changed.stderr);
    assert!(row(&changed.stdout).contains(" NO "), "{}", changed.stdout);
    for expected in [
        format!(
            "error: {} does not verify: its content changed",
            copy.display()
        ),
        format!("help: `pagantic models pull {name} --force`"),
    ] {
        assert!(changed.stderr.contains(&expected), "{}", changed.stderr);
    }

    let all = with_home(home.path(), &["models", "list", "--all"]);
    for available in [
        "qwen2.5-coder-0.5b-instruct",
        "onnxruntime-1.31.1",
        "all-minilm-l6-v2-int8",
    ] {
        assert!(
            all.stdout.contains(&format!("available: {available} — ")),
            "{}",
            all.stdout
        );
    }
}

/// `models pull` with a name it does not know exits 2 and lists the known names, before it
/// starts the Python that would fetch anything.
#[test]
fn an_unknown_model_name_is_refused_before_any_fetch() {
    let home = tempfile::tempdir().expect("temp dir");
    let fetched = home.path().join("fetched");
    let python = home.path().join("python");
    std::fs::write(
        &python,
        format!("#!/bin/sh\ntouch '{}'\nexit 1\n", fetched.display()),
    )
    .expect("a stand-in python");
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).expect("executable");
    let env = [
        ("PAGANTIC_HOME", home.path().to_str().expect("utf-8 path")),
        ("PAGANTIC_PYTHON", python.to_str().expect("utf-8 path")),
    ];
    let pulled = pagantic_with(&root(), &["models", "pull", "no-such-model"], &env);
    assert_eq!(pulled.code, 2, "{}", pulled.stderr);
    assert!(
        pulled.stderr.contains(
            "error: no model named `no-such-model`; known: default, qwen2.5-coder-0.5b-instruct, onnxruntime-1.31.1, all-minilm-l6-v2-int8"
        ),
        "{}",
        pulled.stderr
    );
    assert!(!fetched.exists(), "the fetch started");
    assert!(
        !home.path().join("models").exists(),
        "nothing is stored for an unknown name"
    );
}

/// Writes a test file in `dir` with one case per name, each running tests/plans/barrier.yaml
/// with `patience` seconds to meet the others, and passing when it saw them all arrive.
fn barrier_suite(dir: &Path, cases: &[&str], patience: u32) -> String {
    let arrivals = dir.join("arrivals");
    std::fs::create_dir_all(&arrivals).expect("the arrivals dir");
    let plan = root().join("tests/plans/barrier.yaml");
    let mut text = format!("version: 1\nplan: {}\ncases:\n", plan.display());
    for case in cases {
        text.push_str(&format!(
            "  - name: {case}\n    inputs: {{ dir: \"{}\", case: {case}, expected: {}, patience: {patience} }}\n    assert: [{{ type: regex, value: \"^{}$\" }}]\n",
            arrivals.display(),
            cases.len(),
            cases.len()
        ));
    }
    let suite = dir.join("barrier.test.yaml");
    std::fs::write(&suite, text).expect("the test file");
    suite.to_str().expect("utf-8 path").to_string()
}

/// `test -j N` runs N cases at once: three cases that each wait for the other two pass only
/// when all three are in flight together. One at a time, the first waits out its patience
/// alone and fails.
#[test]
fn test_concurrency_runs_the_cases_at_once() {
    let cases = ["one", "two", "three"];
    let together = tempfile::tempdir().expect("temp dir");
    let suite = barrier_suite(together.path(), &cases, 60);
    let run = pagantic(&["test", "-j", "3", "--format", "json", &suite]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).expect("a JSON report");
    let variant = &report["suites"][0]["variants"][0];
    assert_eq!(variant["passed"], cases.len(), "{report}");
    assert_eq!(variant["total"], cases.len(), "{report}");

    let alone = tempfile::tempdir().expect("temp dir");
    let suite = barrier_suite(alone.path(), &cases, 1);
    let run = pagantic(&["test", "-j", "1", &suite]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
}

/// A chat refused after its session opened (no such `--message-input`, no agent step) ends
/// its events with ERROR, as a refused `run` does.
#[test]
fn a_refused_chat_ends_its_events_with_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, args) in [
        (
            "message-input",
            &["tests/plans/chat-persona.yaml", "--message-input", "nope"][..],
        ),
        ("no-agent", &["tests/plans/tools.yaml"][..]),
        ("invalid", &["tests/invalid/cycle.yaml"][..]),
    ] {
        let events = dir.path().join(format!("{name}.jsonl"));
        let mut argv = vec!["chat", "--events", events.to_str().expect("utf-8 path")];
        argv.extend_from_slice(args);
        let chat = pagantic(&argv);
        assert_eq!(chat.code, 2, "{name}: {}", chat.stderr);
        let states: Vec<Value> = events_in(&events)
            .into_iter()
            .filter(|e| e["kind"] == "lifecycle")
            .map(|e| e["data"]["state"].clone())
            .collect();
        assert_eq!(
            states.last(),
            Some(&Value::from("ERROR")),
            "{name}: {states:?}"
        );
        assert!(
            !states.contains(&Value::from("EXECUTE")),
            "{name}: {states:?}"
        );
    }
}

/// A GGUF header that names `architecture` and holds nothing else.
#[cfg(feature = "local")]
fn gguf_header(architecture: &str) -> Vec<u8> {
    let string = |text: &str| {
        let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(text.as_bytes());
        bytes
    };
    let mut bytes = b"GGUF".to_vec();
    bytes.extend_from_slice(&3u32.to_le_bytes()); // version
    bytes.extend_from_slice(&0u64.to_le_bytes()); // tensors
    bytes.extend_from_slice(&1u64.to_le_bytes()); // metadata entries
    bytes.extend(string("general.architecture"));
    bytes.extend_from_slice(&8u32.to_le_bytes()); // a string value
    bytes.extend(string(architecture));
    bytes
}

/// A model file the local engine cannot run — missing, not GGUF, or of an architecture
/// mistral.rs does not support — fails its step with INFERENCE_MODEL_UNAVAILABLE, the reason
/// and a fix, and exit 1: the file is found wanting when the step loads it, after any steps
/// before it ran. (Exit 2 is for a model kind this build has no engine for: nothing runs.)
// The local engine's own path: a build without it refuses the plan before that.
#[cfg(feature = "local")]
#[test]
fn a_model_file_the_engine_cannot_run_fails_its_step_with_exit_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("text.gguf"), "not a model").expect("written");
    std::fs::write(dir.path().join("gemma.gguf"), gguf_header("gemma3")).expect("written");
    for (file, reason, help) in [
        (
            "absent.gguf",
            "absent.gguf: No such file or directory",
            "check the path",
        ),
        (
            "text.gguf",
            "text.gguf is not a usable GGUF model: it does not start with `GGUF`",
            "point `source:` at a complete .gguf file",
        ),
        (
            "gemma.gguf",
            "gemma.gguf is a `gemma3` model, which mistral.rs 0.8.1 cannot run from GGUF",
            "supported architectures: llama,",
        ),
    ] {
        std::fs::write(
            dir.path().join("plan.yaml"),
            format!(
                "version: 1\nname: file\nmodels:\n  llm: {{ kind: mistralrs, source: {file} }}\nsteps:\n  - {{ name: first, type: template, template: ran }}\n  - {{ name: answer, type: infer, model: llm, template: hi }}\n"
            ),
        )
        .expect("plan written");
        let run = pagantic_with(dir.path(), &["run", "--format", "json", "plan.yaml"], &[]);
        assert_eq!(run.code, 1, "{file}: {}", run.stderr);
        let record: Value = serde_json::from_str(&run.stdout).expect("a JSON record");
        assert_eq!(
            record["error"]["code"], "INFERENCE_MODEL_UNAVAILABLE",
            "{record}"
        );
        let message = record["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(reason), "{file}: {message}");
        let fix = record["error"]["help"].as_str().unwrap_or_default();
        assert!(fix.contains(help), "{file}: {fix}");
        assert_eq!(crate::step(&record, "first")["status"], "ok", "{record}");
    }
}
