//! Engines reached from the CLI: a `kind: openai` model against a stub server on loopback, an
//! `hf:` source whose hub cannot be reached, and a local model with its decoder constraints off.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::thread::JoinHandle;

use crate::{events_in, pagantic_with, step};

/// A server on a loopback port that answers one HTTP request with `reply` (a JSON body) and
/// hands back the request's head and body.
fn serve_once(reply: serde_json::Value) -> (u16, JoinHandle<(String, serde_json::Value)>) {
    let (port, server) = serve_in_turn(vec![(200, reply.to_string())]);
    let server = std::thread::spawn(move || {
        let mut requests = server.join().expect("the server answered");
        requests.remove(0)
    });
    (port, server)
}

/// A server on a loopback port that answers one request per reply, in turn, with its status and
/// body, and hands back each request's head and body.
fn serve_in_turn(
    replies: Vec<(u16, String)>,
) -> (u16, JoinHandle<Vec<(String, serde_json::Value)>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    let server = std::thread::spawn(move || {
        let mut requests = Vec::new();
        for (status, text) in replies {
            let (stream, _) = listener.accept().expect("one request");
            let mut reader = BufReader::new(stream);
            let mut head = String::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).expect("a header line");
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                head.push_str(&line);
            }
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .expect("a content length");
            let mut body = vec![0; length];
            reader.read_exact(&mut body).expect("the body");
            write!(
                reader.get_mut(),
                "HTTP/1.1 {status} Stub\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            )
            .expect("the reply is sent");
            requests.push((head, serde_json::from_slice(&body).expect("a JSON request")));
        }
        requests
    });
    (port, server)
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
    let (port, server) = serve_in_turn(vec![(500, refusal.into()), (200, answer.to_string())]);
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
    let requests = server.join().expect("the server answered");
    assert_eq!(
        requests.len(),
        2,
        "one refusal, one answer, no backoff retries"
    );
    assert_eq!(requests[1].1["response_format"]["type"], "json_object");
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
    let (port, server) = serve_once(serde_json::json!({
        "id": "c1",
        "object": "chat.completion",
        "model": "served",
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": "Bonjour" },
            "finish_reason": "stop"
        }],
        "usage": { "prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9 }
    }));
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
    let (head, request) = server.join().expect("the server answered");
    assert!(head.starts_with("POST /v1/chat/completions "), "{head}");
    assert!(
        head.to_lowercase()
            .contains("authorization: bearer sk-stub"),
        "{head}"
    );
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

/// An `hf:` source whose hub cannot be reached fails the run at once with
/// INFERENCE_MODEL_UNAVAILABLE and the fix: a failure no retry can mend, so a step that allows
/// three attempts makes one.
#[test]
fn an_unreachable_hub_fails_an_hf_source_at_once() {
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.local_addr().expect("its address").port()
    };
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

/// With `decoder_constraints: false` a local model is refused a grammar (the invalid corpus has
/// that case) but still accepts a JSON Schema, which is then checked after decoding; `validate`
/// loads no model to tell.
#[test]
fn a_local_model_without_decoder_constraints_accepts_a_json_schema() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("plain.yaml"),
        "version: 1\nname: plain\nmodels:\n  plain: { kind: mistralrs, decoder_constraints: false }\nsteps:\n  - name: answer\n    type: infer\n    model: plain\n    template: Yes or no?\n    constraint: { json_schema: { enum: [\"yes\", \"no\"] } }\n",
    )
    .expect("plan written");
    let run = pagantic_with(dir.path(), &["validate", "plain.yaml"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}
