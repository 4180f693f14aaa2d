//! A `kind: openai` model against stub servers that bend the API as real servers do: one that
//! ignores a schema and answers 200 anyway, Text Generation Inference's `response_format`, and
//! llama-cpp-python's refusal of `json_schema` remembered from one run to the next. Each stub
//! answers by a rule of its own and counts what it was sent.

use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::{Value, json};

use crate::engines::serve_on_loopback;
use crate::{Run, events_in, fresh_cache_dir, pagantic_with, step};

/// How a stub server answers one request body: a status and a body.
type Rule = fn(&Value) -> (u16, String);

/// A server on a loopback port answering every request by `rule`, on a runtime of its own, and
/// logging the request bodies.
struct RuledServer {
    port: u16,
    log: Arc<Mutex<Vec<Value>>>,
    _runtime: tokio::runtime::Runtime,
}

impl RuledServer {
    fn start(rule: Rule) -> RuledServer {
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&log);
        let answer = move |body: Bytes| answer_by_rule(rule, Arc::clone(&kept), body);
        let (port, _runtime) = serve_on_loopback(Router::new().fallback(any(answer)));
        RuledServer {
            port,
            log,
            _runtime,
        }
    }

    /// The request bodies received so far, taken out of the log.
    fn requests(&self) -> Vec<Value> {
        std::mem::take(&mut *self.log.lock().expect("the request log"))
    }
}

async fn answer_by_rule(rule: Rule, log: Arc<Mutex<Vec<Value>>>, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).expect("a JSON request");
    let (status, reply) = rule(&body);
    log.lock().expect("the request log").push(body);
    (
        StatusCode::from_u16(status).expect("a status"),
        [(header::CONTENT_TYPE, "application/json")],
        reply,
    )
        .into_response()
}

/// A chat completion whose message is `content`.
fn completion(content: &str) -> String {
    json!({
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": content } }],
        "usage": { "prompt_tokens": 13, "completion_tokens": 8, "total_tokens": 21 }
    })
    .to_string()
}

/// The text of every message of a request, joined.
fn said(body: &Value) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|message| message["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Writes a plan asking the stub for a country's capital as JSON (a `structured` step), the
/// model given `extra` settings (a YAML flow mapping's entries, or nothing).
fn capital_plan(dir: &Path, port: u16, extra: &str) {
    std::fs::write(
        dir.join("capital.yaml"),
        format!(
            "version: 1\nname: capital\ninputs:\n  country: {{ type: string }}\nmodels:\n  remote: {{ kind: openai, base_url: \"http://127.0.0.1:{port}/v1\", model: served{extra} }}\nsteps:\n  - name: capital\n    type: structured\n    model: remote\n    template: \"Capital of {{{{ inputs.country }}}}?\"\n    schema: {{ type: object, required: [city], properties: {{ city: {{ type: string }} }} }}\n"
        ),
    )
    .expect("plan written");
}

/// Runs the capital plan for `country`, with the events written and the call cache in `cache`.
fn ask_capital(dir: &Path, country: &str, cache: &Path) -> (Run, Vec<Value>) {
    let events = dir.join(format!("events-{country}.jsonl"));
    let input = format!("country={country}");
    let run = pagantic_with(
        dir,
        &[
            "run",
            "--verbose",
            "--format",
            "json",
            "--events",
            events.to_str().expect("utf-8 path"),
            "capital.yaml",
            "-i",
            &input,
        ],
        &[("PAGANTIC_CACHE_DIR", cache.to_str().expect("utf-8 path"))],
    );
    let inference = if events.exists() {
        events_in(&events)
            .into_iter()
            .filter(|event| event["kind"] == "inference")
            .collect()
    } else {
        Vec::new()
    };
    (run, inference)
}

/// llama.cpp's server, when a schema's grammar does not compile, ignores the schema and answers
/// 200 with unconstrained text: the answer is checked against the schema, the call recorded
/// `constrained: false` (`schema_mode: ignored`), and the step repairs, validates and asks again
/// as for any unconstrained answer; the corrected answer is accepted.
#[test]
fn an_answer_that_ignores_the_schema_is_validated_and_retried() {
    let server = RuledServer::start(|body| {
        if said(body).contains("That answer is not valid") {
            (200, completion("{\"city\": \"Paris\"}"))
        } else {
            (200, completion("The capital of France is Paris."))
        }
    });
    let dir = tempfile::tempdir().expect("temp dir");
    capital_plan(dir.path(), server.port, "");
    let (run, inference) = ask_capital(dir.path(), "France", &fresh_cache_dir());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("does not conform to the schema"),
        "{}",
        run.stderr
    );
    let record: Value = serde_json::from_str(&run.stdout).expect("json record");
    let capital = step(&record, "capital");
    assert_eq!(capital["output"], json!({ "city": "Paris" }), "{record}");
    assert_eq!(
        capital["detail"]["attempts"][0]["schema_mode"], "ignored",
        "{record}"
    );
    assert_eq!(capital["detail"]["attempts"][0]["valid"], false, "{record}");
    assert_eq!(capital["detail"]["schema_mode"], "json_schema", "{record}");
    assert_eq!(inference.len(), 2, "{inference:?}");
    assert_eq!(inference[0]["data"]["constrained"], false);
    assert_eq!(inference[0]["data"]["schema_mode"], "ignored");
    assert_eq!(inference[1]["data"]["constrained"], true);
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .all(|body| body["response_format"]["type"] == "json_schema"),
        "an ignored schema is not a refused one: {requests:?}"
    );
}

/// Text Generation Inference refuses OpenAI's `response_format` shape with a 422 naming the
/// `value` it wants; the engine learns its shape from the error, and `compat: tgi` speaks it
/// from the first request.
#[test]
fn tgi_s_dialect_is_learned_or_named() {
    let server = RuledServer::start(|body| {
        let format = &body["response_format"];
        if format["type"] == "json" && format.get("value").is_some() {
            (200, completion("{\"city\": \"Rome\"}"))
        } else {
            (
                422,
                "Failed to deserialize the JSON body into the target type: response_format: \
                 missing field `value` at line 1 column 168"
                    .into(),
            )
        }
    });
    let dir = tempfile::tempdir().expect("temp dir");
    capital_plan(dir.path(), server.port, "");
    let (run, _) = ask_capital(dir.path(), "Italy", &fresh_cache_dir());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(server.requests().len(), 2, "one refusal, then TGI's shape");
    capital_plan(dir.path(), server.port, ", compat: tgi");
    let (run, _) = ask_capital(dir.path(), "Italy", &fresh_cache_dir());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0]["response_format"]["type"], "json");
}

/// llama-cpp-python's server refuses a `json_schema` response format (HTTP 500 naming it): the
/// first run pays one refused request before asking with `json_object`. A 500 may be a passing
/// failure, so the second run, sharing the call cache's store, asks with `json_schema` again;
/// its refusal confirms what the first learned, and the third run asks with `json_object` at
/// once. `cache stats` shows what is kept, unconfirmed and then remembered.
#[test]
fn the_negotiated_mode_is_remembered_across_runs() {
    let server = RuledServer::start(|body| {
        if body["response_format"]["type"] == "json_schema" {
            (
                500,
                r#"{"error":{"message":"1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}","type":"internal_server_error","param":null,"code":null}}"#.into(),
            )
        } else {
            (200, completion("{\"city\": \"Paris\"}"))
        }
    });
    let dir = tempfile::tempdir().expect("temp dir");
    capital_plan(dir.path(), server.port, "");
    let cache = fresh_cache_dir();
    let stats = || {
        let cache_arg = cache.to_str().expect("utf-8 path");
        let run = pagantic_with(dir.path(), &["cache", "stats", "--cache", cache_arg], &[]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.stdout
    };
    let (first, _) = ask_capital(dir.path(), "France", &cache);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(server.requests().len(), 2, "a refusal, then json_object");
    let kept = stats();
    assert!(
        kept.contains(
            "unconfirmed (not used until the server refuses again): schemas as `json_object`"
        ),
        "{kept}"
    );
    let (second, _) = ask_capital(dir.path(), "Spain", &cache);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(server.requests().len(), 2, "one 500 is not taken for good");
    assert!(stats().contains("remembered: schemas as `json_object`"));
    let (third, inference) = ask_capital(dir.path(), "Belgium", &cache);
    assert_eq!(third.code, 0, "{}", third.stderr);
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "no refused first attempt: {requests:?}");
    assert_eq!(requests[0]["response_format"]["type"], "json_object");
    assert_eq!(inference[0]["data"]["schema_mode"], "json_object");
    assert!(
        !third.stderr.contains("refused"),
        "nothing to fall back from: {}",
        third.stderr
    );
    let _ = std::fs::remove_dir_all(&cache);
}

/// `compat:` takes the servers' names and nothing else.
#[test]
fn an_unknown_compat_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    capital_plan(dir.path(), 9, ", compat: llamacpp");
    let run = pagantic_with(dir.path(), &["validate", "capital.yaml"], &[]);
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("llamacpp") && run.stderr.contains("llama.cpp"),
        "{}",
        run.stderr
    );
}
