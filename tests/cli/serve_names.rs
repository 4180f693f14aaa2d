//! Serving a directory or a glob the way the docs do (`pagantic serve plans/`): test files and
//! other YAML that is not a plan are skipped with a note, two plans of one name still refuse,
//! the start-up news maps each served name to its file, and an unknown name is answered with
//! the served ones (OpenAI's `model_not_found` on the OpenAI routes).

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::serve::{Server, client, post};
use crate::{pagantic, path_arg, scratch};

const PLAN: &str = "version: 1\nname: NAME\ninputs:\n  q: { type: string }\nsteps:\n  - name: echo\n    type: template\n    template: \"{{ inputs.q }}\"\n";

/// A directory holding the plans `(file, name)` and `others` (file, text).
fn served_dir(name: &str, plans: &[(&str, &str)], others: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = scratch(name);
    std::fs::create_dir_all(&dir).expect("dir");
    for (file, plan) in plans {
        std::fs::write(dir.join(file), PLAN.replace("NAME", plan)).expect("written");
    }
    for (file, text) in others {
        std::fs::write(dir.join(file), text).expect("written");
    }
    dir
}

#[tokio::test]
async fn the_repository_s_plans_directory_serves_by_name() {
    // Its plans' calls would be answered from the call cache only (nothing here asks a model),
    // so the build without the local engine serves the plans on the embedded model too.
    let mut server = Server::start(&["plans/"], &[("PAGANTIC_CACHE_ONLY", "1")]);
    for skipped in ["plans/classify.test.yaml", "plans/rag.test.yaml"] {
        server.wait_for_line(|l| l.contains(&format!("skipping {skipped}: a test file")));
    }
    let mapping =
        server.wait_for_line(|l| l.contains("support-answer") && l.contains("plans/rag.yaml"));
    assert!(mapping.starts_with("  support-answer"), "{mapping}");
    let models: Value = client()
        .get(server.url("/v1/models"))
        .send()
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    let ids: Vec<&str> = models["data"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert!(
        ids.contains(&"support-answer") && ids.contains(&"quickstart"),
        "{ids:?}"
    );
    assert_eq!(ids.len(), 9, "every plan of plans/, no test file: {ids:?}");

    let (status, body) = post(
        &server,
        "/v1/chat/completions",
        &json!({ "model": "chat", "messages": [{ "role": "user", "content": "hi" }] }),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "model_not_found", "{body}");
    assert_eq!(body["error"]["param"], "model");
    let message = body["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("`support-answer` (plans/rag.yaml)"),
        "{message}"
    );

    let (status, body) = post(&server, "/v1/plans/rag/runs", &json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let message = body["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("plans/rag.yaml is served as `support-answer`"),
        "{message}"
    );
}

#[tokio::test]
async fn a_directory_skips_what_is_not_a_plan_and_names_what_it_serves() {
    let dir = served_dir(
        "mixed",
        &[("a.yaml", "alpha")],
        &[
            ("a.test.yaml", "version: 1\nplan: a.yaml\ncases: []\n"),
            ("ci.policy.yaml", "max_steps: 3\n"),
            (".pre-commit-config.yaml", "repos: []\n"),
        ],
    );
    let mut server = Server::start(&[path_arg(&dir)], &[]);
    server.wait_for_line(|l| l.contains("a.test.yaml: a test file"));
    server.wait_for_line(|l| l.contains("ci.policy.yaml: not a plan (no top-level `steps`)"));
    server.wait_for_line(|l| l.contains(".pre-commit-config.yaml: not a plan"));
    let (status, body) = post(&server, "/v1/plans/alph/runs", &json!({ "q": "x" })).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let message = body["error"]["message"].as_str().expect("a message");
    assert!(message.contains("did you mean `alpha`?"), "{message}");
    assert!(message.contains("served plans: `alpha`"), "{message}");
}

#[test]
fn two_plans_of_one_name_in_a_directory_still_refuse() {
    let dir = served_dir("twins", &[("a.yaml", "same"), ("b.yaml", "same")], &[]);
    let run = pagantic(&["serve", path_arg(&dir), "--addr", "127.0.0.1:0"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("are both named `same`"),
        "{}",
        run.stderr
    );
}

/// A broken plan is not taken for a non-plan: a file that does not parse is served as a plan,
/// and refused with its diagnostics.
#[test]
fn a_broken_plan_in_a_directory_is_refused_not_skipped() {
    let dir = served_dir("broken", &[("a.yaml", "alpha")], &[("b.yaml", "steps: [")]);
    let run = pagantic(&["serve", path_arg(&dir), "--addr", "127.0.0.1:0"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("b.yaml"), "{}", run.stderr);
}

/// A file name with terminal escapes is shown escaped in the notes.
#[tokio::test]
async fn a_hostile_file_name_is_shown_escaped() {
    let dir = served_dir(
        "hostile",
        &[("a.yaml", "alpha")],
        &[(
            "\u{1b}[2Jevil.test.yaml",
            "version: 1\nplan: a.yaml\ncases: []\n",
        )],
    );
    let mut server = Server::start(&[path_arg(&dir)], &[]);
    let note = server.wait_for_line(|l| l.contains("evil.test.yaml"));
    assert!(!note.contains('\u{1b}'), "{note:?}");
    assert!(note.contains("\\u{1b}[2J"), "{note}");
}
