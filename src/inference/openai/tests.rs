//! The engine against stub servers on loopback: answers, keys, tools, retries and waits,
//! statuses, time-outs, odd replies and streams. Each stub is an axum router answering
//! `POST /v1/chat/completions` from a queue of canned replies.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response as HttpResponse;
use axum::routing::post;
use tokio::net::TcpListener;

use reqwest::header::RETRY_AFTER;

use super::failure::{MAX_WAIT, exhausted_reset, retry_after};
use super::*;
use crate::core::{Message, TokenUsage, ToolCall, ToolDefinition};
use crate::inference::SchemaMode;

/// How long a stub server lives at most.
const STUB_LIFETIME: Duration = Duration::from_secs(10);

/// The pause between the pieces of a reply written in pieces.
const PIECE_PAUSE: Duration = Duration::from_millis(10);

/// One canned HTTP reply.
#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    /// Written one piece at a time, with a pause between pieces.
    pieces: Vec<Vec<u8>>,
    /// An event stream: no content length, the body sent as it is written.
    stream: bool,
    /// Read the request and never answer.
    silent: bool,
}

impl Reply {
    fn json(status: u16, body: Value) -> Self {
        Reply::text(status, &body.to_string())
    }

    fn text(status: u16, body: &str) -> Self {
        Reply {
            status,
            headers: vec![("content-type", "application/json".into())],
            pieces: vec![body.as_bytes().to_vec()],
            stream: false,
            silent: false,
        }
    }

    fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// An event stream, written in pieces cut at these byte offsets.
    fn sse(text: &str, cuts: &[usize]) -> Self {
        let mut pieces = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain([&text.len()]) {
            pieces.push(text.as_bytes()[from..cut].to_vec());
            from = cut;
        }
        Reply {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            pieces,
            stream: true,
            silent: false,
        }
    }

    fn silent() -> Self {
        Reply {
            silent: true,
            ..Reply::text(200, "")
        }
    }

    /// The reply as an HTTP response: a stream's pieces are sent one by one with a pause
    /// between them, anything else at once with its length.
    fn into_response(self) -> HttpResponse {
        let mut response = HttpResponse::builder().status(self.status);
        for (name, value) in &self.headers {
            response = response.header(*name, value);
        }
        let body = if self.stream {
            let pieces = futures_util::stream::unfold(
                (self.pieces.into_iter(), true),
                |(mut rest, first)| async move {
                    let piece = rest.next()?;
                    if !first {
                        tokio::time::sleep(PIECE_PAUSE).await;
                    }
                    Some((Ok::<_, Infallible>(Bytes::from(piece)), (rest, false)))
                },
            );
            Body::from_stream(pieces)
        } else {
            Body::from(self.pieces.concat())
        };
        response.body(body).expect("a valid canned reply")
    }
}

/// A request the stub received.
struct Received {
    headers: HeaderMap,
    body: Value,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// What the stub's handler shares: the replies still to give, and the requests received.
#[derive(Clone)]
struct StubState {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    received: Arc<Mutex<Vec<Received>>>,
}

/// Records the request and answers it with the next canned reply (418 when none is left).
async fn reply_in_turn(
    State(stub): State<StubState>,
    headers: HeaderMap,
    body: Bytes,
) -> HttpResponse {
    let body = serde_json::from_slice(&body).expect("the engine sends JSON");
    stub.received
        .lock()
        .expect("log")
        .push(Received { headers, body });
    let reply = stub.replies.lock().expect("queue").pop_front();
    let reply = reply.unwrap_or_else(|| Reply::text(418, "no canned reply left"));
    if reply.silent {
        tokio::time::sleep(STUB_LIFETIME).await;
    }
    reply.into_response()
}

/// An HTTP server on 127.0.0.1 answering `POST /v1/chat/completions` from a queue; when the
/// queue is empty it answers 418. It stops after `STUB_LIFETIME` or with the test.
struct Stub {
    base_url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Stub {
    async fn start(replies: Vec<Reply>) -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base_url = format!("http://{}/v1", listener.local_addr().expect("address"));
        let state = StubState {
            replies: Arc::new(Mutex::new(VecDeque::from(replies))),
            received: Arc::new(Mutex::new(Vec::new())),
        };
        let received = Arc::clone(&state.received);
        let router = Router::new()
            .route("/v1/chat/completions", post(reply_in_turn))
            .with_state(state);
        tokio::spawn(tokio::time::timeout(
            STUB_LIFETIME,
            axum::serve(listener, router).into_future(),
        ));
        Stub { base_url, received }
    }

    fn config(&self) -> OpenAiConfig {
        OpenAiConfig {
            timeout: Duration::from_secs(5),
            ..OpenAiConfig::new(&self.base_url, "test-model")
        }
    }

    fn engine(&self) -> OpenAiEngine {
        OpenAiEngine::new(self.config()).expect("engine")
    }

    fn bodies(&self) -> Vec<Value> {
        let received = self.received.lock().expect("log");
        received.iter().map(|r| r.body.clone()).collect()
    }
}

fn ask(text: &str) -> Request {
    Request {
        messages: vec![Message::system("be brief"), Message::user(text)],
        ..Request::default()
    }
}

fn answer(content: Value) -> Value {
    json!({
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": content } }],
        "usage": { "prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15 },
    })
}

async fn failure(engine: &OpenAiEngine, request: Request) -> Failure {
    engine.infer(request).await.expect_err("a failure")
}

#[tokio::test]
async fn a_plain_answer_with_usage_and_the_request_it_came_from() {
    let stub = Stub::start(vec![Reply::json(
        200,
        answer(json!("{\"city\":\"Paris\"}")),
    )])
    .await;
    let schema = json!({ "type": "object", "properties": { "city": { "type": "string" } } });
    let request = Request {
        json_schema: Some(schema.clone()),
        max_tokens: Some(64),
        temperature: Some(0.0),
        seed: Some(7),
        stop: vec!["\n\n".into()],
        ..ask("capital of France?")
    };
    let response = stub.engine().infer(request).await.expect("an answer");
    assert_eq!(response.text, "{\"city\":\"Paris\"}");
    assert_eq!(
        response.usage,
        TokenUsage {
            prompt_tokens: 12,
            completion_tokens: 3,
            reasoning_tokens: None,
        }
    );
    assert!(response.tool_calls.is_empty());
    assert_eq!(
        stub.bodies(),
        vec![json!({
            "model": "test-model",
            "messages": [
                { "role": "system", "content": "be brief" },
                { "role": "user", "content": "capital of France?" },
            ],
            "response_format": {
                "type": "json_schema",
                "json_schema": { "name": "answer", "schema": schema, "strict": true },
            },
            "max_tokens": 64,
            "temperature": 0.0,
            "seed": 7,
            "stop": ["\n\n"],
        })]
    );
    let received = stub.received.lock().expect("log");
    assert_eq!(received[0].header("authorization"), None);
}

#[tokio::test]
async fn the_key_is_sent_as_a_bearer_token() {
    let stub = Stub::start(vec![Reply::json(200, answer(json!("hi")))]).await;
    let engine = OpenAiEngine::new(OpenAiConfig {
        api_key: Some("sk-test-42".into()),
        ..stub.config()
    })
    .expect("engine");
    engine.infer(ask("hello")).await.expect("an answer");
    let received = stub.received.lock().expect("log");
    assert_eq!(
        received[0].header("authorization"),
        Some("Bearer sk-test-42")
    );
    assert!(!format!("{engine:?}").contains("sk-test-42"));
}

#[tokio::test]
async fn tools_are_offered_and_tool_calls_parsed() {
    let reply = json!({
        "choices": [{ "message": { "role": "assistant", "content": null, "tool_calls": [
            { "id": "call_a", "type": "function",
              "function": { "name": "weather", "arguments": "{\"city\":\"Oslo\"}" } },
            { "id": "call_b", "type": "function",
              "function": { "name": "weather", "arguments": "{city: Bergen" } },
        ] } }],
    });
    let stub = Stub::start(vec![Reply::json(200, reply)]).await;
    let parameters = json!({ "type": "object", "properties": { "city": { "type": "string" } } });
    let earlier_call = ToolCall {
        id: "call_0".into(),
        name: "weather".into(),
        arguments: json!({ "city": "Rome" }),
    };
    let mut messages = ask("weather in Oslo and Bergen?").messages;
    messages.push(Message {
        tool_calls: vec![earlier_call],
        ..Message::assistant("")
    });
    messages.push(Message::tool_result("call_0", "sunny"));
    let request = Request {
        messages,
        tools: vec![ToolDefinition {
            name: "weather".into(),
            description: "The weather in a city.".into(),
            parameters: parameters.clone(),
        }],
        ..Request::default()
    };
    let response = stub.engine().infer(request).await.expect("an answer");
    assert_eq!(response.text, "");
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall {
                id: "call_a".into(),
                name: "weather".into(),
                arguments: json!({ "city": "Oslo" }),
            },
            ToolCall {
                id: "call_b".into(),
                name: "weather".into(),
                arguments: json!("{city: Bergen"),
            },
        ]
    );
    assert_eq!(response.usage, TokenUsage::default(), "no usage given");
    let body = &stub.bodies()[0];
    assert_eq!(
        body["tools"],
        json!([{ "type": "function", "function": {
            "name": "weather", "description": "The weather in a city.", "parameters": parameters,
        } }])
    );
    assert_eq!(
        body["messages"][2],
        json!({ "role": "assistant", "content": null, "tool_calls": [
            { "id": "call_0", "type": "function",
              "function": { "name": "weather", "arguments": "{\"city\":\"Rome\"}" } },
        ] })
    );
    assert_eq!(
        body["messages"][3],
        json!({ "role": "tool", "content": "sunny", "tool_call_id": "call_0" })
    );
}

#[tokio::test]
async fn a_rate_limit_is_retried_after_the_wait_the_server_asks() {
    let stub = Stub::start(vec![
        Reply::json(429, json!({ "error": { "message": "slow down" } })).header("Retry-After", "1"),
        Reply::json(200, answer(json!("ok"))),
    ])
    .await;
    let started = Instant::now();
    let response = stub.engine().infer(ask("hi")).await.expect("an answer");
    assert_eq!(response.text, "ok");
    assert_eq!(stub.bodies().len(), 2);
    // Without the header the wait would be the first backoff, 200 ms.
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited {:?}, not the second the server asked for",
        started.elapsed()
    );
}

#[tokio::test]
async fn server_errors_are_retried_with_backoff_up_to_max_retries() {
    let error = || Reply::text(500, "boom");
    let stub = Stub::start(vec![
        error(),
        error(),
        Reply::json(200, answer(json!("ok"))),
    ])
    .await;
    let response = stub.engine().infer(ask("hi")).await.expect("an answer");
    assert_eq!(response.text, "ok");
    assert_eq!(stub.bodies().len(), 3);

    let stub = Stub::start(vec![error(), error(), error()]).await;
    let engine = OpenAiEngine::new(OpenAiConfig {
        max_retries: 1,
        ..stub.config()
    })
    .expect("engine");
    let failure = failure(&engine, ask("hi")).await;
    assert_eq!(failure.code, FailureCode::InferenceEngineError);
    assert!(failure.message.contains("500"), "{}", failure.message);
    assert!(failure.message.contains("boom"), "{}", failure.message);
    assert_eq!(stub.bodies().len(), 2, "one try and one retry");
}

#[tokio::test]
async fn statuses_map_to_failure_codes() {
    let key = "sk-secret-123";
    let cases = [
        (
            Reply::json(
                401,
                json!({ "error": { "message": format!("Incorrect API key: {key}") } }),
            ),
            FailureCode::InferenceModelUnavailable,
            "refused the credentials",
        ),
        (
            Reply::json(404, json!({ "detail": "Not Found" })),
            FailureCode::InferenceModelUnavailable,
            "has no model `test-model`",
        ),
        (
            Reply::json(
                400,
                json!({ "object": "error", "message":
                "This model's maximum context length is 2048 tokens." }),
            ),
            FailureCode::InferenceContextExceeded,
            "maximum context length is 2048",
        ),
        (
            Reply::json(422, json!({ "error": "temperature must be positive" })),
            FailureCode::InferenceEngineError,
            "temperature must be positive",
        ),
    ];
    for (reply, code, says) in cases {
        let stub = Stub::start(vec![reply]).await;
        let engine = OpenAiEngine::new(OpenAiConfig {
            api_key: Some(key.into()),
            ..stub.config()
        })
        .expect("engine");
        let failure = failure(&engine, ask("hi")).await;
        assert_eq!(failure.code, code, "{failure:?}");
        assert!(failure.message.contains(says), "{failure:?}");
        assert!(!format!("{failure:?}").contains(key), "{failure:?}");
        assert_eq!(stub.bodies().len(), 1, "not retried: {failure:?}");
        if code == FailureCode::InferenceEngineError {
            assert!(!failure.retryable, "a rejected request is not retryable");
        }
    }
}

#[tokio::test]
async fn a_refused_connection_is_an_unavailable_model() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base_url = format!("http://{}/v1", listener.local_addr().expect("address"));
    drop(listener);
    let engine = OpenAiEngine::new(OpenAiConfig {
        max_retries: 1,
        ..OpenAiConfig::new(&base_url, "m")
    })
    .expect("engine");
    let failure = failure(&engine, ask("hi")).await;
    assert_eq!(failure.code, FailureCode::InferenceModelUnavailable);
    assert!(failure.message.contains(&base_url), "{}", failure.message);
}

#[tokio::test]
async fn a_silent_server_times_out() {
    let stub = Stub::start(vec![Reply::silent()]).await;
    let engine = OpenAiEngine::new(OpenAiConfig {
        timeout: Duration::from_millis(300),
        ..stub.config()
    })
    .expect("engine");
    let failure = failure(&engine, ask("hi")).await;
    assert_eq!(failure.code, FailureCode::InferenceTimeout, "{failure:?}");
    assert_eq!(stub.bodies().len(), 1, "a timeout is not retried here");
}

#[tokio::test]
async fn a_grammar_is_refused_before_any_request() {
    let stub = Stub::start(vec![]).await;
    let request = Request {
        grammar: Some(Grammar::Regex("[0-9]+".into())),
        ..ask("a number")
    };
    let failure = failure(&stub.engine(), request).await;
    assert_eq!(failure.code, FailureCode::ConstraintGrammarRejected);
    assert!(failure.message.contains("regex"), "{}", failure.message);
    assert!(failure.help.is_some_and(|h| h.contains("mistralrs")));
    assert!(stub.bodies().is_empty());
}

#[tokio::test]
async fn odd_replies_fail_cleanly() {
    let huge = "x".repeat(1024 * 1024);
    let cases = [
        (Reply::text(200, "not json"), "not a chat completion"),
        (Reply::text(200, "{}"), "no choice"),
        (
            Reply::json(200, json!({ "choices": "many" })),
            "not a chat completion",
        ),
        (
            Reply::json(200, json!({ "error": { "message": "overloaded" } })),
            "overloaded",
        ),
        (Reply::text(500, &huge), "xxxx…"),
    ];
    for (reply, says) in cases {
        let stub = Stub::start(vec![reply]).await;
        let engine = OpenAiEngine::new(OpenAiConfig {
            max_retries: 0,
            ..stub.config()
        })
        .expect("engine");
        let failure = failure(&engine, ask("hi")).await;
        assert_eq!(failure.code, FailureCode::InferenceEngineError);
        assert!(failure.message.contains(says), "{failure:?}");
        assert!(failure.message.len() < 1000, "the message is cut short");
    }
    let empty = json!({ "choices": [{ "message": {} }] });
    let stub = Stub::start(vec![Reply::json(200, empty)]).await;
    let response = stub
        .engine()
        .infer(ask("hi"))
        .await
        .expect("an empty answer");
    assert_eq!(response.text, "");
}

#[tokio::test]
async fn a_stream_split_anywhere_reaches_the_sink_in_order() {
    let stream = concat!(
        "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"Par\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"is \\u00e9\"}}]}\r\n\r\n",
        ": keep-alive\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"té\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4}}\n\n",
        "data: [DONE]\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"after done\"}}]}\n\n",
    );
    let at = |text: &str, offset: usize| stream.find(text).expect("in the stream") + offset;
    // Cuts inside a line, a JSON string, a CRLF, the two bytes of an `é`, and `data:`.
    let cuts = [
        at("Par", 0) - 1,
        at("\"content\":\"is", 4),
        at("\r\n\r\n", 1),
        at("té", 2),
        at("data: [DONE]", 2),
    ];
    let stub = Stub::start(vec![Reply::sse(stream, &cuts)]).await;
    let pieces = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&pieces);
    let sink: TokenSink =
        Arc::new(move |piece| seen.lock().expect("pieces").push(piece.to_string()));
    let response = stub
        .engine()
        .infer_streaming(ask("capital?"), sink)
        .await
        .expect("an answer");
    assert_eq!(*pieces.lock().expect("pieces"), ["Par", "is é", "té"]);
    assert_eq!(response.text, "Paris été");
    assert_eq!(
        response.usage,
        TokenUsage {
            prompt_tokens: 9,
            completion_tokens: 4,
            reasoning_tokens: None,
        }
    );
    let body = &stub.bodies()[0];
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({ "include_usage": true }));
}

#[tokio::test]
async fn streamed_tool_calls_are_put_together_by_index() {
    let chunk = |calls: Value| {
        format!(
            "data: {}\n\n",
            json!({ "choices": [{ "delta": { "tool_calls": calls } }] })
        )
    };
    let events = [
        chunk(json!([{ "index": 0, "id": "call_x", "type": "function",
            "function": { "name": "weather", "arguments": "" } }])),
        chunk(
            json!([{ "index": 1, "id": "call_y", "function": { "name": "time", "arguments": "{\"tz\"" } }]),
        ),
        chunk(json!([{ "index": 0, "function": { "arguments": "{\"city\":" } }])),
        chunk(json!([{ "index": 0, "function": { "arguments": "\"Oslo\"}" } }])),
        chunk(json!([{ "index": 1, "function": { "arguments": ":\"UTC\"}" } }])),
    ];
    let stream = events.concat() + "data: [DONE]\n\n";
    let cuts: Vec<usize> = (1..stream.len()).step_by(40).collect();
    let stub = Stub::start(vec![Reply::sse(&stream, &cuts)]).await;
    let sink: TokenSink = Arc::new(|_| {});
    let response = stub
        .engine()
        .infer_streaming(ask("weather?"), sink)
        .await
        .expect("an answer");
    assert_eq!(response.text, "");
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall {
                id: "call_x".into(),
                name: "weather".into(),
                arguments: json!({ "city": "Oslo" }),
            },
            ToolCall {
                id: "call_y".into(),
                name: "time".into(),
                arguments: json!({ "tz": "UTC" }),
            },
        ]
    );
}

/// A server that ignores `stream: true` and answers with one JSON completion: its text reaches
/// the sink whole, and the answer is the completion's; a reply that is neither fails clearly.
#[tokio::test]
async fn a_json_reply_to_a_streaming_request_is_read_whole() {
    let completion = json!({
        "choices": [{ "message": { "role": "assistant", "content": "Paris" } }],
        "usage": { "prompt_tokens": 18446744073709551615u64, "completion_tokens": 1 }
    });
    let stub = Stub::start(vec![
        Reply::json(200, completion),
        Reply {
            headers: vec![("content-type", "text/plain".into())],
            ..Reply::text(200, "")
        },
    ])
    .await;
    let pieces = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&pieces);
    let sink: TokenSink =
        Arc::new(move |piece| seen.lock().expect("pieces").push(piece.to_string()));
    let engine = stub.engine();
    let response = engine
        .infer_streaming(ask("capital?"), Arc::clone(&sink))
        .await
        .expect("an answer");
    assert_eq!(response.text, "Paris");
    assert_eq!(*pieces.lock().expect("pieces"), ["Paris"]);
    assert_eq!(response.usage.prompt_tokens, u64::MAX);
    assert_eq!(response.usage.total(), u64::MAX, "added saturating");
    let failure = engine
        .infer_streaming(ask("capital?"), sink)
        .await
        .expect_err("neither shape");
    assert_eq!(failure.code, FailureCode::InferenceEngineError);
    assert!(failure.message.contains("neither events"), "{failure:?}");
}

#[tokio::test]
async fn a_stream_error_event_is_a_failure() {
    let stream = concat!(
        "data: {\"choices\":[{\"delta\":{\"content\":\"Par\"}}]}\n\n",
        "data: {\"error\":{\"message\":\"the engine died\"}}\n\n",
    );
    let stub = Stub::start(vec![Reply::sse(stream, &[])]).await;
    let sink: TokenSink = Arc::new(|_| {});
    let failure = stub
        .engine()
        .infer_streaming(ask("capital?"), sink)
        .await
        .expect_err("a failure");
    assert_eq!(failure.code, FailureCode::InferenceEngineError);
    assert!(failure.message.contains("the engine died"), "{failure:?}");
}

#[test]
fn retry_waits() {
    let header = |value: &str| {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, value.parse().expect("header value"));
        retry_after(&headers)
    };
    assert_eq!(header("2"), Some(Duration::from_secs(2)));
    assert_eq!(header(" 0 "), Some(Duration::ZERO));
    assert_eq!(header("3600"), Some(MAX_WAIT), "capped at a minute");
    assert_eq!(
        header("Wed, 21 Oct 2015 07:28:00 GMT"),
        None,
        "falls back to backoff"
    );
    assert_eq!(header("-1"), None);
    assert_eq!(retry_after(&HeaderMap::new()), None);
    let headers = |pairs: &[(&'static str, &str)]| {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, value.parse().expect("header value"));
        }
        headers
    };
    assert_eq!(
        retry_after(&headers(&[("retry-after-ms", "250"), ("retry-after", "9")])),
        Some(Duration::from_millis(250)),
        "milliseconds first"
    );
    // An exhausted quota waits for its reset, written as OpenAI does; one left does not.
    let spent = headers(&[
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", "1m30.5s"),
        ("x-ratelimit-remaining-tokens", "0"),
        ("x-ratelimit-reset-tokens", "20ms"),
    ]);
    assert_eq!(
        exhausted_reset(&spent),
        Some(MAX_WAIT),
        "the longer, capped"
    );
    let tokens_spent = headers(&[
        ("x-ratelimit-remaining-requests", "12"),
        ("x-ratelimit-reset-requests", "6m0s"),
        ("x-ratelimit-remaining-tokens", "0"),
        ("x-ratelimit-reset-tokens", "1.5s"),
    ]);
    assert_eq!(
        exhausted_reset(&tokens_spent),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(
        retry_after(&tokens_spent),
        Some(Duration::from_millis(1500)),
        "a 429 without Retry-After waits for the reset"
    );
    assert_eq!(
        exhausted_reset(&headers(&[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "soon")
        ])),
        None
    );
    let waits: Vec<u128> = (0..4).map(|n| backoff(n).as_millis()).collect();
    assert_eq!(waits, [200, 400, 800, 1600]);
    assert_eq!(backoff(40), MAX_WAIT);
}

#[test]
fn a_base_url_must_be_an_http_url_and_a_model_named() {
    let url = completions_url("http://127.0.0.1:8000/v1/").expect("a URL");
    assert_eq!(url.as_str(), "http://127.0.0.1:8000/v1/chat/completions");
    for (base_url, model) in [
        ("127.0.0.1:8000", "m"),
        ("ftp://host/v1", "m"),
        ("http://h/v1", " "),
    ] {
        let failure = OpenAiEngine::new(OpenAiConfig::new(base_url, model)).expect_err(base_url);
        assert_eq!(failure.code, FailureCode::ConfigInvalidInput, "{base_url}");
    }
}

#[test]
fn model_info_names_the_model() {
    let engine =
        OpenAiEngine::new(OpenAiConfig::new("http://127.0.0.1:1/v1", "qwen")).expect("engine");
    assert_eq!(
        engine.model_info(),
        ModelInfo {
            name: "qwen".into(),
            engine: "openai",
            constrained_decoding: true,
            price: None,
            key: None,
            context_window: None,
        }
    );
}

/// What llama-cpp-python's server (0.3.36) answers to a `json_schema` response format: HTTP 500,
/// exactly as captured from the real server.
const LLAMA_CPP_PYTHON_REFUSAL: &str = r#"{"error":{"message":"1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or 'json_object'\"}}\n\n  File \"/work/venvs/llamacpp/lib/python3.11/site-packages/llama_cpp/server/app.py\", line 376, in create_chat_completion\n    POST /v1/chat/completions","type":"internal_server_error","param":null,"code":null}}"#;

/// What vLLM answers to `tools` when it was started without a tool-call parser.
const VLLM_TOOLS_REFUSAL: &str = r#"{"object":"error","message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set","type":"BadRequestError","param":null,"code":400}"#;

fn city_schema() -> Value {
    json!({ "type": "object", "required": ["city"], "properties": { "city": { "type": "string" } } })
}

fn ask_city() -> Request {
    Request {
        json_schema: Some(city_schema()),
        ..ask("capital of France?")
    }
}

#[tokio::test]
async fn a_refused_json_schema_is_asked_again_as_json_object_and_remembered() {
    let stub = Stub::start(vec![
        Reply::text(500, LLAMA_CPP_PYTHON_REFUSAL),
        Reply::json(200, answer(json!("{ \"city\": \"Paris\" }"))),
        Reply::json(200, answer(json!("{ \"city\": \"Rome\" }"))),
    ])
    .await;
    let notices = Arc::new(Mutex::new(Vec::new()));
    let heard = Arc::clone(&notices);
    let engine = OpenAiEngine::new(OpenAiConfig {
        notice: Some(Arc::new(move |line: &str| {
            heard.lock().expect("notices").push(line.to_string())
        })),
        ..stub.config()
    })
    .expect("engine");
    let response = engine.infer(ask_city()).await.expect("an answer");
    assert_eq!(response.text, "{ \"city\": \"Paris\" }");
    assert_eq!(response.schema_mode, Some(SchemaMode::JsonObject));
    let again = engine.infer(ask_city()).await.expect("an answer");
    assert_eq!(again.schema_mode, Some(SchemaMode::JsonObject));
    let bodies = stub.bodies();
    assert_eq!(
        bodies.len(),
        3,
        "the refusal is not retried as a server error"
    );
    assert_eq!(bodies[0]["response_format"]["type"], "json_schema");
    for body in &bodies[1..] {
        assert_eq!(
            body["response_format"],
            json!({ "type": "json_object", "schema": city_schema() })
        );
        let system = body["messages"][0]["content"].as_str().unwrap_or_default();
        assert!(
            system.starts_with("be brief\n\nReply with only JSON"),
            "{system}"
        );
    }
    let notices = notices.lock().expect("notices");
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].contains("refused a `json_schema` response format")
            && notices[0].contains("Input should be 'text' or 'json_object'")
            && notices[0].ends_with("asking with `json_object` from now on"),
        "{}",
        notices[0]
    );
}

#[tokio::test]
async fn a_server_that_takes_no_response_format_gets_the_schema_in_the_prompt() {
    let refusal = || {
        Reply::json(
            400,
            json!({ "error": { "message": "Unsupported parameter: 'response_format'" } }),
        )
    };
    let stub = Stub::start(vec![
        refusal(),
        refusal(),
        Reply::sse(
            "data: {\"choices\":[{\"delta\":{\"content\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]}\n\n\
             data: [DONE]\n\n",
            &[],
        ),
    ])
    .await;
    let sink: TokenSink = Arc::new(|_| {});
    let response = stub
        .engine()
        .infer_streaming(ask_city(), sink)
        .await
        .expect("an answer");
    assert_eq!(response.text, "{\"city\": \"Paris\"}");
    assert_eq!(response.schema_mode, Some(SchemaMode::Prompt));
    let bodies = stub.bodies();
    assert_eq!(bodies.len(), 3);
    assert_eq!(bodies[1]["response_format"]["type"], "json_object");
    assert!(bodies[2].get("response_format").is_none(), "{}", bodies[2]);
    assert_eq!(bodies[2]["stream"], true);
    let system = bodies[2]["messages"][0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(system.contains(&city_schema().to_string()), "{system}");
}

#[tokio::test]
async fn refused_tools_fail_at_once_and_are_not_sent_again() {
    let stub = Stub::start(vec![Reply::text(400, VLLM_TOOLS_REFUSAL)]).await;
    let request = Request {
        tools: vec![ToolDefinition {
            name: "weather".into(),
            description: "The weather in a city.".into(),
            parameters: json!({ "type": "object" }),
        }],
        ..ask("weather in Oslo?")
    };
    let engine = stub.engine();
    for _ in 0..2 {
        let failure = failure(&engine, request.clone()).await;
        assert_eq!(
            failure.code,
            FailureCode::InferenceRequestRefused,
            "{failure:?}"
        );
        assert!(!failure.retryable);
        assert!(failure.message.contains("`tools`"), "{}", failure.message);
        assert!(
            failure
                .help
                .as_deref()
                .is_some_and(|h| h.contains("tool_calls: prompt")),
            "{failure:?}"
        );
    }
    assert_eq!(stub.bodies().len(), 1, "the second request never left");
}

#[tokio::test]
async fn a_server_error_naming_a_sent_field_is_not_retried() {
    let stub = Stub::start(vec![
        Reply::json(
            500,
            json!({ "error": { "message": "'seed' is not supported" } }),
        ),
        Reply::json(200, answer(json!("never read"))),
    ])
    .await;
    let request = Request {
        seed: Some(3),
        ..ask("hi")
    };
    let failure = failure(&stub.engine(), request).await;
    assert_eq!(failure.code, FailureCode::InferenceRequestRefused);
    assert!(failure.message.contains("`seed`"), "{}", failure.message);
    assert_eq!(stub.bodies().len(), 1);
}

#[test]
fn a_request_is_estimated_at_four_characters_a_token_plus_its_answer() {
    // "be brief" and 392 characters of question: 400 characters.
    let mut request = ask(&"x".repeat(392));
    assert_eq!(estimated_tokens(&request), 100);
    request.max_tokens = Some(50);
    assert_eq!(estimated_tokens(&request), 150);
}

mod dialects;
