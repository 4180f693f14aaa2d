//! The servers' dialects against stub servers replaying what each sends: a schema ignored with
//! a 200 (llama.cpp's server when its grammar conversion fails), Text Generation Inference's
//! `response_format`, OpenAI's `max_completion_tokens`, LM Studio's refusal of `json_object`,
//! Ollama's tool calls lost in a stream, and a negotiated dialect remembered by the next engine.

use std::collections::HashMap;

use super::*;
use crate::core::Memo;

/// What Text Generation Inference answers to OpenAI's `response_format` shape (its
/// deserialiser's message, quoted in its issue tracker).
const TGI_REFUSAL: &str = "Failed to deserialize the JSON body into the target type: \
    response_format: missing field `value` at line 1 column 168";

/// What OpenAI answers to `max_tokens` from its newer models.
const OPENAI_MAX_TOKENS_REFUSAL: &str = r#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}"#;

/// What LM Studio answers to `{"type": "json_object"}`.
const LMSTUDIO_REFUSAL: &str =
    r#"{"error":"'response_format.type' must be 'json_schema' or 'text'"}"#;

/// A store in memory, as the call cache's would be across runs.
#[derive(Default)]
struct Kept(Mutex<HashMap<[u8; 32], (String, String)>>);

impl Memo for Kept {
    fn recall(&self, key: [u8; 32]) -> Option<String> {
        let kept = self.0.lock().expect("kept");
        kept.get(&key).map(|(_, value)| value.clone())
    }
    fn remember(&self, kind: &'static str, key: [u8; 32], value: String) {
        let mut kept = self.0.lock().expect("kept");
        kept.insert(key, (kind.to_string(), value));
    }
    fn file_sha256(&self, _: &std::path::Path) -> Option<String> {
        None
    }
}

/// The `response_format` type of each request the stub received (null where none was sent).
fn format_types(stub: &Stub) -> Vec<Value> {
    let bodies = stub.bodies();
    let types = bodies
        .iter()
        .map(|body| body["response_format"]["type"].clone());
    types.collect()
}

fn engine_with(stub: &Stub, change: impl FnOnce(&mut OpenAiConfig)) -> OpenAiEngine {
    let mut config = stub.config();
    change(&mut config);
    OpenAiEngine::new(config).expect("engine")
}

/// A server that cannot compile a schema, ignores it and answers 200 with prose: the answer
/// says the schema was ignored (so the call counts as unconstrained), while an answer that
/// conforms keeps its mode.
#[tokio::test]
async fn an_answer_that_ignores_the_schema_is_marked_ignored() {
    let stub = Stub::start(vec![
        Reply::json(200, answer(json!("The capital is Paris."))),
        Reply::json(200, answer(json!("{\"city\": \"Paris\"}"))),
    ])
    .await;
    let engine = stub.engine();
    let ignored = engine.infer(ask_city()).await.expect("an answer");
    assert_eq!(ignored.text, "The capital is Paris.");
    assert_eq!(ignored.schema_mode, Some(SchemaMode::Ignored));
    assert!(!SchemaMode::Ignored.decoded());
    let held = engine.infer(ask_city()).await.expect("an answer");
    assert_eq!(held.schema_mode, Some(SchemaMode::JsonSchema));
    let bodies = stub.bodies();
    assert_eq!(
        bodies[1]["response_format"]["type"], "json_schema",
        "an ignored schema is no refusal: the mode stays"
    );
}

/// Text Generation Inference refuses OpenAI's shape naming the `value` it wants: the same
/// request goes again at once in its shape, and later requests start there.
#[tokio::test]
async fn tgi_s_response_format_is_learned_from_its_error() {
    let stub = Stub::start(vec![
        Reply::text(422, TGI_REFUSAL),
        Reply::json(200, answer(json!("{\"city\": \"Paris\"}"))),
        Reply::json(200, answer(json!("{\"city\": \"Rome\"}"))),
    ])
    .await;
    let engine = stub.engine();
    for _ in 0..2 {
        let response = engine.infer(ask_city()).await.expect("an answer");
        assert_eq!(response.schema_mode, Some(SchemaMode::JsonSchema));
    }
    let bodies = stub.bodies();
    assert_eq!(bodies.len(), 3);
    assert_eq!(bodies[0]["response_format"]["type"], "json_schema");
    for body in &bodies[1..] {
        assert_eq!(
            body["response_format"],
            json!({ "type": "json", "value": city_schema() })
        );
    }
}

/// `compat: tgi` sends its shape from the first request.
#[tokio::test]
async fn a_named_dialect_is_spoken_from_the_first_request() {
    let stub = Stub::start(vec![Reply::json(
        200,
        answer(json!("{\"city\": \"Paris\"}")),
    )])
    .await;
    let engine = engine_with(&stub, |config| config.compat = Some(Compat::Tgi));
    engine.infer(ask_city()).await.expect("an answer");
    assert_eq!(stub.bodies()[0]["response_format"]["type"], "json");
}

/// OpenAI's newer models refuse `max_tokens`: the request goes again with
/// `max_completion_tokens`; `compat: openai` sends that from the start.
#[tokio::test]
async fn max_completion_tokens_is_learned_or_named() {
    let stub = Stub::start(vec![
        Reply::text(400, OPENAI_MAX_TOKENS_REFUSAL),
        Reply::json(200, answer(json!("hi"))),
        Reply::json(200, answer(json!("hi"))),
    ])
    .await;
    let capped = || Request {
        max_tokens: Some(7),
        ..ask("hi")
    };
    stub.engine().infer(capped()).await.expect("an answer");
    engine_with(&stub, |config| config.compat = Some(Compat::OpenAi))
        .infer(capped())
        .await
        .expect("an answer");
    let bodies = stub.bodies();
    assert_eq!(bodies.len(), 3, "one refusal, then two answers");
    assert_eq!(bodies[0]["max_tokens"], 7);
    for body in &bodies[1..] {
        assert_eq!(body["max_completion_tokens"], 7, "{body}");
        assert!(body.get("max_tokens").is_none(), "{body}");
    }
}

/// LM Studio refuses `json_object`: with `compat: lmstudio`, a refused `json_schema` goes
/// straight to the prompt; negotiating, the refusal of `json_object` does the same one request
/// later.
#[tokio::test]
async fn lm_studio_is_never_asked_for_json_object_when_named() {
    let stub = Stub::start(vec![
        Reply::json(
            400,
            json!({ "error": "json_schema: unsupported schema keyword" }),
        ),
        Reply::json(200, answer(json!("{\"city\": \"Paris\"}"))),
        Reply::json(400, json!({ "error": "json_schema: unsupported" })),
        Reply::text(400, LMSTUDIO_REFUSAL),
        Reply::json(200, answer(json!("{\"city\": \"Paris\"}"))),
    ])
    .await;
    let named = engine_with(&stub, |config| config.compat = Some(Compat::LmStudio));
    let answered = named.infer(ask_city()).await.expect("an answer");
    assert_eq!(answered.schema_mode, Some(SchemaMode::Prompt));
    let negotiated = stub.engine().infer(ask_city()).await.expect("an answer");
    assert_eq!(negotiated.schema_mode, Some(SchemaMode::Prompt));
    let types = format_types(&stub);
    assert_eq!(
        types,
        [
            json!("json_schema"),
            Value::Null,
            json!("json_schema"),
            json!("json_object"),
            Value::Null
        ]
    );
}

/// Ollama loses tool calls in a stream: with `compat: ollama` a streaming request with tools is
/// asked without streaming (its text reaches the sink whole), one without tools still streams.
#[tokio::test]
async fn ollama_is_asked_for_tool_calls_without_streaming() {
    let call = json!({
        "choices": [{ "message": { "role": "assistant", "content": "", "tool_calls": [
            { "id": "c1", "type": "function",
              "function": { "name": "weather", "arguments": "{\"city\":\"Oslo\"}" } }
        ] } }]
    });
    let stub = Stub::start(vec![
        Reply::json(200, call),
        Reply::sse(
            "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n",
            &[],
        ),
    ])
    .await;
    let engine = engine_with(&stub, |config| config.compat = Some(Compat::Ollama));
    let with_tools = Request {
        tools: vec![ToolDefinition {
            name: "weather".into(),
            description: "The weather in a city.".into(),
            parameters: json!({ "type": "object" }),
        }],
        ..ask("weather in Oslo?")
    };
    let sink: TokenSink = Arc::new(|_| {});
    let response = engine
        .infer_streaming(with_tools, Arc::clone(&sink))
        .await
        .expect("an answer");
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].arguments, json!({ "city": "Oslo" }));
    let plain = engine
        .infer_streaming(ask("hi"), sink)
        .await
        .expect("an answer");
    assert_eq!(plain.text, "hi");
    let bodies = stub.bodies();
    assert!(bodies[0].get("stream").is_none(), "{}", bodies[0]);
    assert!(bodies[0].get("tools").is_some());
    assert_eq!(bodies[1]["stream"], true);
}

/// An engine that remembers what it negotiates with the stub in `kept`, as model `model`.
fn remembering(stub: &Stub, kept: &Arc<Kept>, model: &str) -> OpenAiEngine {
    let memo = Arc::clone(kept) as Arc<dyn Memo>;
    let model = model.to_string();
    engine_with(stub, move |config| {
        config.memo = Some(memo);
        config.model = model;
    })
}

/// What one engine negotiated from a 4xx (the server saying the request is wrong) is where the
/// next engine of the same server and model starts (the next run, through the call cache's
/// store); another model starts afresh, and a named dialect neither reads nor writes the store.
#[tokio::test]
async fn a_negotiated_dialect_is_remembered_for_the_next_engine() {
    let refusal =
        json!({ "error": { "message": "'response_format' of type json_schema is not supported" } });
    let stub = Stub::start(vec![
        Reply::json(400, refusal),
        Reply::json(200, answer(json!("{\"city\": \"Paris\"}"))),
        Reply::json(200, answer(json!("{\"city\": \"Rome\"}"))),
        Reply::json(200, answer(json!("{\"city\": \"Oslo\"}"))),
    ])
    .await;
    let kept = Arc::new(Kept::default());
    remembering(&stub, &kept, "test-model")
        .infer(ask_city())
        .await
        .expect("an answer");
    {
        let kept = kept.0.lock().expect("kept");
        assert_eq!(kept.len(), 1);
        let (kind, value) = kept.values().next().expect("an entry");
        assert_eq!(kind, "negotiated");
        assert!(value.contains("\"schema_mode\":\"json_object\""), "{value}");
        assert!(value.contains("\"unconfirmed\":null"), "{value}");
    }
    let next = remembering(&stub, &kept, "test-model")
        .infer(ask_city())
        .await
        .expect("an answer");
    assert_eq!(next.schema_mode, Some(SchemaMode::JsonObject));
    remembering(&stub, &kept, "other-model")
        .infer(ask_city())
        .await
        .expect("an answer");
    let types = format_types(&stub);
    assert_eq!(
        types,
        [
            json!("json_schema"),
            json!("json_object"),
            json!("json_object"),
            json!("json_schema")
        ],
        "the next engine skips the refused first attempt; another model does not"
    );
}

/// A refusal in a 5xx may be a passing failure whose text happens to name a field: the next
/// engine does not start from what it taught until the same refusal comes again (here, in the
/// next engine), which confirms it for the one after.
#[tokio::test]
async fn a_refusal_in_a_server_error_is_remembered_once_it_comes_again() {
    let stub = Stub::start(vec![
        Reply::text(500, LLAMA_CPP_PYTHON_REFUSAL),
        Reply::json(200, answer(json!("{\"city\": \"Paris\"}"))),
        Reply::text(500, LLAMA_CPP_PYTHON_REFUSAL),
        Reply::json(200, answer(json!("{\"city\": \"Rome\"}"))),
        Reply::json(200, answer(json!("{\"city\": \"Oslo\"}"))),
    ])
    .await;
    let kept = Arc::new(Kept::default());
    for _ in 0..3 {
        let answered = remembering(&stub, &kept, "test-model")
            .infer(ask_city())
            .await
            .expect("an answer");
        assert_eq!(answered.schema_mode, Some(SchemaMode::JsonObject));
    }
    assert_eq!(
        format_types(&stub),
        [
            json!("json_schema"),
            json!("json_object"),
            json!("json_schema"),
            json!("json_object"),
            json!("json_object")
        ],
        "the second engine pays the refusal again; the third does not"
    );
}
