//! Engines reached from the CLI: a `kind: openai` model against a stub server on loopback (an
//! axum router answering from a list of canned replies), streamed or not, an `hf:` source whose
//! hub cannot be reached, and a local model with its decoder constraints off.

use std::collections::VecDeque;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;

use crate::{events_in, pagantic_with, step};

/// A request the stub server received.
struct Received {
    method: Method,
    path: String,
    headers: HeaderMap,
    body: serde_json::Value,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// What the stub's handler shares: the replies still to give, and the requests received.
#[derive(Clone)]
struct StubState {
    replies: Arc<Mutex<VecDeque<(u16, String)>>>,
    received: Arc<Mutex<Vec<Received>>>,
}

/// A server on a loopback port that answers one request per reply, in turn, with its status and
/// body — JSON, or an event stream when it starts with `data:` — (418 once they are used up),
/// and records each request. It runs on a runtime of its
/// own, so the test can wait on `pagantic` as a blocking child process; it stops with the test.
struct StubServer {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
    _runtime: tokio::runtime::Runtime,
}

impl StubServer {
    fn start(replies: Vec<(u16, String)>) -> StubServer {
        let state = StubState {
            replies: Arc::new(Mutex::new(VecDeque::from(replies))),
            received: Arc::new(Mutex::new(Vec::new())),
        };
        let received = Arc::clone(&state.received);
        let router = Router::new().fallback(any(reply_in_turn)).with_state(state);
        let (port, runtime) = serve_on_loopback(router);
        StubServer {
            port,
            received,
            _runtime: runtime,
        }
    }

    /// The requests received so far, taken out of the log.
    fn requests(&self) -> Vec<Received> {
        std::mem::take(&mut *self.received.lock().expect("the request log"))
    }
}

/// Serves `router` on a loopback port from a runtime of its own (two worker threads), so a test
/// can wait on `pagantic` as a blocking child process; it serves until the runtime drops.
pub(crate) fn serve_on_loopback(router: Router) -> (u16, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime for the stub server");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    runtime.spawn(axum::serve(listener, router).into_future());
    (port, runtime)
}

/// Records the request and answers it with the next canned reply.
async fn reply_in_turn(
    State(stub): State<StubState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = serde_json::from_slice(&body).expect("a JSON request");
    stub.received
        .lock()
        .expect("the request log")
        .push(Received {
            method,
            path: uri.path().to_string(),
            headers,
            body,
        });
    let next = stub.replies.lock().expect("the replies").pop_front();
    let (status, text) = next.unwrap_or_else(|| (418, "no canned reply left".into()));
    let status = StatusCode::from_u16(status).expect("a valid status");
    // A canned event stream goes out as one, every other reply as JSON.
    let content_type = match text.starts_with("data:") {
        true => "text/event-stream",
        false => "application/json",
    };
    (status, [(header::CONTENT_TYPE, content_type)], text).into_response()
}

/// A server that refuses a `json_schema` response format the way llama-cpp-python's does (HTTP 500
/// naming `response_format`) gets the same request again with `json_object` and the schema, at
/// once rather than after backoff retries; the step's detail and the inference event say which
/// mode answered, and `--verbose` says that the engine fell back.
#[test]
fn a_structured_step_falls_back_when_the_server_refuses_json_schema() {
    let refusal = r#"{"error":{"message":"1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or 'json_object'\"}}","type":"internal_server_error","param":null,"code":null}}"#;
    let answer = serde_json::json!({
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": "{ \"city\": \"Paris\" }" } }],
        "usage": { "prompt_tokens": 13, "completion_tokens": 8, "total_tokens": 21 }
    });
    let server = StubServer::start(vec![(500, refusal.into()), (200, answer.to_string())]);
    let port = server.port;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("city.yaml"),
        format!(
            "version: 1\nname: city\nmodels:\n  remote: {{ kind: openai, base_url: \"http://127.0.0.1:{port}/v1\", model: served }}\nsteps:\n  - name: city\n    type: structured\n    model: remote\n    template: Capital of France?\n    schema: {{ type: object, required: [city], properties: {{ city: {{ type: string }} }} }}\n"
        ),
    )
    .expect("plan written");
    let events = dir.path().join("events.jsonl");
    let run = pagantic_with(
        dir.path(),
        &[
            "run",
            "--verbose",
            "--format",
            "json",
            "--events",
            events.to_str().expect("utf-8 path"),
            "city.yaml",
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("model `served`: the server refused a `json_schema` response format")
            && run.stderr.contains("asking with `json_object` from now on"),
        "{}",
        run.stderr
    );
    let requests = server.requests();
    assert_eq!(
        requests.len(),
        2,
        "one refusal, one answer, no backoff retries"
    );
    assert_eq!(requests[1].body["response_format"]["type"], "json_object");
    let record: serde_json::Value = serde_json::from_str(&run.stdout).expect("json record");
    let city = step(&record, "city");
    assert_eq!(
        city["output"],
        serde_json::json!({ "city": "Paris" }),
        "{record}"
    );
    assert_eq!(city["detail"]["schema_mode"], "json_object", "{record}");
    assert_eq!(city["detail"]["constrained"], true, "{record}");
    let inference: Vec<serde_json::Value> = events_in(&events)
        .into_iter()
        .filter(|event| event["kind"] == "inference")
        .collect();
    assert_eq!(
        inference.len(),
        1,
        "the engine's fallback is one model call"
    );
    assert_eq!(inference[0]["data"]["schema_mode"], "json_object");
}

/// `pagantic run` on a `kind: openai` model sends the plan's model name, prompt, limits and API
/// key to the server, and the record carries the server's answer and token usage.
#[test]
fn run_calls_an_openai_compatible_server() {
    let reply = serde_json::json!({
        "id": "c1",
        "object": "chat.completion",
        "model": "served",
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": "Bonjour" },
            "finish_reason": "stop"
        }],
        "usage": { "prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9 }
    });
    let server = StubServer::start(vec![(200, reply.to_string())]);
    let port = server.port;
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = dir.path().join("remote.yaml");
    std::fs::write(
        &plan,
        format!(
            "version: 1\nname: remote\nmodels:\n  remote: {{ kind: openai, base_url: \"http://127.0.0.1:{port}/v1\", model: served, api_key_env: STUB_KEY }}\nsteps:\n  - {{ name: greet, type: infer, model: remote, template: Say hello in French., max_tokens: 8 }}\n"
        ),
    )
    .expect("plan written");
    let run = pagantic_with(
        dir.path(),
        &["run", "--no-stream", "--format", "json", "remote.yaml"],
        &[("STUB_KEY", "sk-stub")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "one model call");
    let received = &requests[0];
    assert_eq!(received.method, Method::POST);
    assert_eq!(received.path, "/v1/chat/completions");
    assert_eq!(
        received.header("authorization"),
        Some("Bearer sk-stub"),
        "{:?}",
        received.headers
    );
    let request = &received.body;
    assert_eq!(request["model"], "served", "{request}");
    assert_eq!(request["max_tokens"], 8, "{request}");
    let messages = request["messages"].as_array().expect("messages");
    assert_eq!(
        messages.last().map(|m| &m["content"]),
        Some(&serde_json::json!("Say hello in French.")),
        "{request}"
    );
    let record: serde_json::Value = serde_json::from_str(&run.stdout).expect("json record");
    let greet = step(&record, "greet");
    assert_eq!(greet["output"], "Bonjour", "{record}");
    assert_eq!(greet["usage"]["completion_tokens"], 2, "{record}");
}

/// `run --stream` asks the server for a streamed reply and prints its pieces as they come;
/// `--no-stream`, and a run whose stdout is not a terminal, ask for the whole reply. Either way
/// stdout is the answer.
#[test]
fn stream_and_no_stream_choose_how_the_answer_is_asked_for() {
    let chunk = |text: &str| {
        let chunk =
            serde_json::json!({ "choices": [{ "index": 0, "delta": { "content": text } }] });
        format!("data: {chunk}\n\n")
    };
    let streamed = format!("{}{}data: [DONE]\n\n", chunk("Bon"), chunk("jour"));
    let whole = serde_json::json!({
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": "Bonjour" }, "finish_reason": "stop" }],
        "usage": { "prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9 }
    })
    .to_string();
    let server = StubServer::start(vec![(200, streamed), (200, whole.clone()), (200, whole)]);
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("remote.yaml"),
        format!(
            "version: 1\nname: remote\nmodels:\n  remote: {{ kind: openai, base_url: \"http://127.0.0.1:{}/v1\", model: served }}\nsteps:\n  - {{ name: greet, type: infer, model: remote, template: Say hello in French. }}\n",
            server.port
        ),
    )
    .expect("plan written");
    for flag in ["--stream", "--no-stream", "--quiet"] {
        let run = pagantic_with(dir.path(), &["run", flag, "remote.yaml"], &[]);
        assert_eq!(run.code, 0, "{flag}: {}", run.stderr);
        assert_eq!(run.stdout, "Bonjour\n", "{flag}");
    }
    let asked: Vec<bool> = server
        .requests()
        .iter()
        .map(|request| request.body["stream"] == true)
        .collect();
    assert_eq!(
        asked,
        [true, false, false],
        "which requests asked for a stream"
    );
}

/// An `hf:` source whose hub cannot be reached fails the run at once with
/// INFERENCE_MODEL_UNAVAILABLE and the fix: a failure no retry can mend, so a step that allows
/// three attempts makes one.
// The local engine's own path: a build without it refuses the plan before that.
#[cfg(feature = "local")]
#[test]
fn an_unreachable_hub_fails_an_hf_source_at_once() {
    // A hub that hangs up on every connection: the port stays this test's while it runs (a
    // port taken from a dropped listener could be bound by another process meanwhile).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let closed = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || listener.incoming().for_each(drop));
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("hub.yaml"),
        "version: 1\nname: hub\nmodels:\n  llm: { kind: mistralrs, source: \"hf:example/missing-GGUF/missing.gguf\" }\nsteps:\n  - { name: ask, type: infer, model: llm, template: hi, max_tokens: 2, retry: { max_attempts: 3 } }\n",
    )
    .expect("plan written");
    let events = dir.path().join("events.jsonl");
    let endpoint = format!("http://127.0.0.1:{closed}");
    let cache = dir.path().join("hf-cache");
    let run = pagantic_with(
        dir.path(),
        &[
            "run",
            "--no-stream",
            "--events",
            events.to_str().expect("utf-8 path"),
            "hub.yaml",
        ],
        &[
            ("HF_ENDPOINT", endpoint.as_str()),
            ("HF_HOME", cache.to_str().expect("utf-8 path")),
        ],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "error[INFERENCE_MODEL_UNAVAILABLE]: cannot fetch missing.gguf from the Hugging Face repository example/missing-GGUF"
        ),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("help:"), "{}", run.stderr);
    let calls = events_in(&events)
        .iter()
        .filter(|event| event["kind"] == "inference")
        .count();
    assert_eq!(calls, 1, "one attempt, no retries");
}

/// With `decoder_constraints: false` a local model is refused a grammar but still takes a JSON
/// Schema (checked after decoding: the real-model tests run that); `validate` tells the two
/// apart without loading a model.
#[test]
fn validate_takes_a_json_schema_but_refuses_a_grammar_without_decoder_constraints() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = |constraint: &str| {
        format!(
            "version: 1\nname: plain\nmodels:\n  plain: {{ kind: mistralrs, decoder_constraints: false }}\nsteps:\n  - name: answer\n    type: infer\n    model: plain\n    template: Yes or no?\n    constraint: {constraint}\n"
        )
    };
    std::fs::write(
        dir.path().join("schema.yaml"),
        plan(r#"{ json_schema: { enum: ["yes", "no"] } }"#),
    )
    .expect("plan written");
    std::fs::write(
        dir.path().join("grammar.yaml"),
        plan(r#"{ lark: 'start: "yes" | "no"' }"#),
    )
    .expect("plan written");
    let schema = pagantic_with(dir.path(), &["validate", "schema.yaml"], &[]);
    assert_eq!(schema.code, 0, "{}", schema.stderr);
    let grammar = pagantic_with(dir.path(), &["validate", "grammar.yaml"], &[]);
    assert_eq!(grammar.code, 2, "{}", grammar.stderr);
    assert!(
        grammar.stderr.contains("decoder_constraints"),
        "{}",
        grammar.stderr
    );
}
