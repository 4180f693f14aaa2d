//! OpenTelemetry traces against a collector inside the test: a loopback OTLP/HTTP receiver that
//! answers 200 and decodes each `ExportTraceServiceRequest` (protobuf). A scripted agent's tree,
//! a batch's trace per row, `TRACEPARENT` and a served request's `traceparent` continued, the
//! `openai` engine passing it on, content only when asked for, and a collector that is not
//! there or never answers costing the run nothing but a line on stderr.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use serde_json::{Value, json};

use crate::engines::serve_on_loopback;
use crate::serve::{Server, client};
use crate::{Run, pagantic_with};

/// A span as the collector received it.
#[derive(Debug, Clone)]
pub struct Span {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: HashMap<String, Value>,
    /// The trace and span ids it links to.
    links: Vec<(String, String)>,
    service: String,
}

impl Span {
    fn int(&self, key: &str) -> i64 {
        self.attributes
            .get(key)
            .and_then(Value::as_i64)
            .unwrap_or(0)
    }

    fn text(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).and_then(Value::as_str)
    }
}

/// A collector on a loopback port that keeps every span it is sent (the docs' examples send
/// theirs to one too).
pub struct Collector {
    port: u16,
    spans: Arc<Mutex<Vec<Span>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Collector {
    pub fn start() -> Collector {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let router = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(Arc::clone(&spans));
        let (port, runtime) = serve_on_loopback(router);
        Collector {
            port,
            spans,
            _runtime: runtime,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().expect("the spans").clone()
    }

    /// The spans received once one satisfies `found` (waiting for a server's export).
    fn spans_once(&self, found: impl Fn(&Span) -> bool) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let spans = self.spans();
            if spans.iter().any(&found) {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("no such span arrived; got {:#?}", self.spans());
    }
}

async fn receive(State(kept): State<Arc<Mutex<Vec<Span>>>>, body: Bytes) -> &'static str {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf request");
    let mut spans = Vec::new();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|kv| kv.key == "service.name")
            .map(|kv| any(kv.value.as_ref().and_then(|v| v.value.as_ref())))
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
            spans.push(Span {
                name: span.name,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent: hex(&span.parent_span_id),
                attributes: span
                    .attributes
                    .into_iter()
                    .map(|kv| {
                        (
                            kv.key,
                            any(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                        )
                    })
                    .collect(),
                links: span
                    .links
                    .into_iter()
                    .map(|link| (hex(&link.trace_id), hex(&link.span_id)))
                    .collect(),
                service: service.clone(),
            });
        }
    }
    kept.lock().expect("the spans").extend(spans);
    ""
}

fn any(value: Option<&Any>) -> Value {
    match value {
        Some(Any::StringValue(text)) => json!(text),
        Some(Any::IntValue(n)) => json!(n),
        Some(Any::BoolValue(b)) => json!(b),
        Some(Any::DoubleValue(x)) => json!(x),
        Some(Any::ArrayValue(array)) => array
            .values
            .iter()
            .map(|item| any(item.value.as_ref()))
            .collect(),
        _ => Value::Null,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one `{name}` in {spans:#?}");
    found[0]
}

/// An agent that calls the calculator once, then answers (tests/compat/phoenix.sh runs it too).
const AGENT: &str = include_str!("../compat/traced-agent.yaml");

fn run_agent(extra: &[&str], env: &[(&str, &str)]) -> (Run, Value) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("agent.yaml"), AGENT).expect("plan written");
    let mut args = vec!["run", "--format", "json", "agent.yaml"];
    args.extend_from_slice(extra);
    let run = pagantic_with(dir.path(), &args, env);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record = serde_json::from_str(&run.stdout).expect("a JSON record");
    (run, record)
}

/// The agent's run is one trace: the workflow, the agent under it, a chat span per round under
/// the agent, the tool under the chat span that asked for it; the chat spans' tokens add up to
/// the record's, and no prompt content is exported.
#[test]
fn an_agent_run_is_one_trace_whose_tree_and_tokens_match_its_record() {
    let collector = Collector::start();
    let (_, record) = run_agent(&["--otlp", &collector.url()], &[]);
    let spans = collector.spans();
    let root = one(&spans, "invoke_workflow traced");
    assert_eq!(root.parent, "", "the run is the root");
    assert_eq!(root.text("pagantic.run_id"), record["run_id"].as_str());
    assert_eq!(root.text("pagantic.status"), Some("complete"));
    assert_eq!(root.service, "pagantic");
    assert_eq!(
        record["trace_id"].as_str(),
        Some(root.trace_id.as_str()),
        "{record}"
    );
    assert!(
        spans.iter().all(|s| s.trace_id == root.trace_id),
        "{spans:#?}"
    );
    let agent = one(&spans, "invoke_agent solve");
    assert_eq!(agent.parent, root.span_id);
    assert_eq!(agent.text("gen_ai.operation.name"), Some("invoke_agent"));
    let chats = named(&spans, "chat scripted");
    assert_eq!(chats.len(), 2, "{spans:#?}");
    assert!(chats.iter().all(|chat| chat.parent == agent.span_id));
    assert!(
        chats
            .iter()
            .all(|c| c.text("gen_ai.provider.name") == Some("pagantic.scripted"))
    );
    let tool = one(&spans, "execute_tool calculator");
    let asked = chats
        .iter()
        .find(|chat| chat.span_id == tool.parent)
        .expect("the tool hangs under a chat span");
    assert_eq!(asked.text("pagantic.call"), Some("round 1"));
    let reasons = |chat: &Span| chat.attributes["gen_ai.response.finish_reasons"].clone();
    assert_eq!(reasons(asked), json!(["tool_call"]));
    let answered = chats.iter().find(|c| c.span_id != asked.span_id);
    assert_eq!(answered.map(|c| reasons(c)), Some(json!(["stop"])));
    assert!(
        chats
            .iter()
            .all(|c| c.int("gen_ai.request.max_tokens") == 64)
    );
    assert_eq!(tool.text("gen_ai.tool.name"), Some("calculator"));
    assert!(tool.text("gen_ai.tool.call.id").is_some());
    let tokens = |key: &str| chats.iter().map(|chat| chat.int(key)).sum::<i64>();
    assert_eq!(
        json!(tokens("gen_ai.usage.input_tokens")),
        record["usage"]["prompt_tokens"]
    );
    assert_eq!(
        json!(tokens("gen_ai.usage.output_tokens")),
        record["usage"]["completion_tokens"]
    );
    assert!(tokens("gen_ai.usage.input_tokens") > 0);
    let content = [
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
    ];
    assert!(
        spans
            .iter()
            .all(|s| content.iter().all(|k| !s.attributes.contains_key(*k))),
        "no content by default: {spans:#?}"
    );
}

/// Content capture, by flag or by the conventions' variable, puts the tool's arguments and
/// result in its span and each call's messages and answer in its chat span — in the trace
/// only: the events file holds no prompt.
#[test]
fn prompts_answers_and_tool_content_are_exported_only_when_asked_for() {
    for (flags, env) in [
        (vec!["--trace-content"], vec![]),
        (
            vec![],
            vec![("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")],
        ),
    ] {
        let collector = Collector::start();
        let url = collector.url();
        let kept = tempfile::tempdir().expect("temp dir");
        let events = kept.path().join("events.jsonl");
        let events_arg = events.to_string_lossy().into_owned();
        let mut args = vec!["--otlp", url.as_str(), "--events", events_arg.as_str()];
        args.extend(flags);
        run_agent(&args, &env);
        let spans = collector.spans();
        let events = std::fs::read_to_string(&events).expect("the events file");
        assert!(!events.contains("six times seven"), "{events}");
        assert!(
            events.contains(r#""finish_reason":"tool_call""#),
            "{events}"
        );
        assert!(events.contains(r#""max_tokens":64"#), "{events}");
        let chats = named(&spans, "chat scripted");
        let messages = |key: &str| -> Vec<Value> {
            let texts = chats.iter().filter_map(|chat| chat.text(key));
            texts
                .map(|t| serde_json::from_str(t).expect("JSON"))
                .collect()
        };
        let asked = json!([{ "role": "user", "parts": [{ "type": "text", "content": "What is six times seven?" }] }]);
        assert!(
            messages("gen_ai.input.messages").contains(&asked),
            "{chats:#?}"
        );
        let answer = json!([{ "role": "assistant", "parts": [{ "type": "text", "content": "The answer is 42." }], "finish_reason": "stop" }]);
        assert!(
            messages("gen_ai.output.messages").contains(&answer),
            "{chats:#?}"
        );
        let tool = one(&spans, "execute_tool calculator");
        let arguments = tool.text("gen_ai.tool.call.arguments").expect("arguments");
        assert!(arguments.contains("6 * 7"), "{arguments}");
        assert!(
            tool.text("gen_ai.tool.call.result")
                .is_some_and(|r| r.contains("42"))
        );
    }
}

/// `TRACEPARENT` (from a CI system or a scheduler) is continued: the run's root span is its
/// child, in its trace; the service name comes from `OTEL_SERVICE_NAME`; the endpoint from
/// `OTEL_EXPORTER_OTLP_ENDPOINT`.
#[test]
fn the_environment_s_traceparent_and_service_name_are_honoured() {
    let collector = Collector::start();
    let url = collector.url();
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (_, record) = run_agent(
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", url.as_str()),
            ("TRACEPARENT", parent),
            ("OTEL_SERVICE_NAME", "nightly-eval"),
        ],
    );
    let spans = collector.spans();
    let root = one(&spans, "invoke_workflow traced");
    assert_eq!(root.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(root.parent, "00f067aa0ba902b7");
    assert_eq!(root.service, "nightly-eval");
    assert_eq!(record["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
}

/// A batch of 5 rows is 6 traces: the batch's own, and one per row whose root links to the
/// batch's span and names the row; the summary says no span was dropped.
#[test]
fn a_batch_exports_one_trace_per_row_linked_to_the_batch() {
    let collector = Collector::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = "version: 1\nname: rows\ninputs:\n  text: { type: string }\nmodels:\n  echo: { kind: scripted, echo: true }\nsteps:\n  - { name: say, type: infer, model: echo, template: \"{{ inputs.text }}\" }\n";
    std::fs::write(dir.path().join("rows.yaml"), plan).expect("plan written");
    let rows: String = (1..=5)
        .map(|n| format!("{{\"text\": \"row {n}\"}}\n"))
        .collect();
    std::fs::write(dir.path().join("rows.jsonl"), rows).expect("rows written");
    let url = collector.url();
    let run = pagantic_with(
        dir.path(),
        &[
            "run",
            "rows.yaml",
            "--batch",
            "rows.jsonl",
            "--otlp",
            &url,
            "--quiet",
            "--summary",
            "summary.json",
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let summary = std::fs::read_to_string(dir.path().join("summary.json")).expect("a summary");
    let summary: Value = serde_json::from_str(&summary).expect("JSON");
    assert_eq!(summary["trace_spans_dropped"], 0, "{summary}");
    let spans = collector.spans();
    let batch = one(&spans, "pagantic batch");
    assert_eq!(batch.parent, "");
    let roots = named(&spans, "invoke_workflow rows");
    assert_eq!(roots.len(), 5, "{spans:#?}");
    let traces: std::collections::HashSet<&str> =
        roots.iter().map(|r| r.trace_id.as_str()).collect();
    assert_eq!(traces.len(), 5, "a trace per row");
    assert!(!traces.contains(batch.trace_id.as_str()));
    let mut rows: Vec<&str> = roots
        .iter()
        .filter_map(|root| root.text("pagantic.batch.row"))
        .collect();
    rows.sort_unstable();
    assert_eq!(rows, ["1", "2", "3", "4", "5"]);
    // Each output line names its row's trace.
    for line in run.stdout_json_lines() {
        let trace = line["trace_id"].as_str().expect("a trace id");
        let root = roots.iter().find(|root| root.trace_id == trace);
        let row = root.and_then(|root| root.text("pagantic.batch.row"));
        assert_eq!(row, line["row"].as_str(), "{line}");
    }
    for root in &roots {
        assert_eq!(
            root.links,
            [(batch.trace_id.clone(), batch.span_id.clone())]
        );
        let chats = spans
            .iter()
            .filter(|s| s.trace_id == root.trace_id && s.name == "chat scripted");
        assert_eq!(chats.count(), 1);
    }
}

/// A collector that refuses connections, or accepts them and never answers, costs the run
/// nothing: it completes (exit 0) and says once on stderr how many spans were not exported.
/// (A hang fails the test through the command's own limit, not a wall clock.)
#[test]
fn a_collector_that_is_not_there_or_never_answers_does_not_fail_the_run() {
    // A listener nobody accepts from: connections sit in its backlog, requests never answered.
    let hole = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let black_hole = format!("http://{}", hole.local_addr().expect("address"));
    for url in [format!("http://{}", crate::REFUSING_ADDRESS), black_hole] {
        let (run, record) = run_agent(&["--otlp", &url], &[]);
        assert_eq!(record["status"], "complete", "{url}");
        assert_eq!(drop_reports(&run).len(), 1, "{url}: {}", run.stderr);
    }
    drop(hole);
}

/// The lines of `run`'s stderr that report spans not exported.
fn drop_reports(run: &Run) -> Vec<&str> {
    run.stderr
        .lines()
        .filter(|line| line.contains("were not exported"))
        .collect()
}

/// Spans that do not fit in the queue are dropped, not waited for: the run completes, and the
/// line that says so names the knobs that keep them (the queue's size, the export thread's
/// priority). A nice value that is not one is said and left at its default.
#[test]
fn spans_a_full_queue_refuses_are_said_with_the_knobs_that_keep_them() {
    let collector = Collector::start();
    let small = [
        ("OTEL_BSP_MAX_QUEUE_SIZE", "2"),
        // No export before the run ends: the queue holds 2 of the agent's 5 spans.
        ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
        ("PAGANTIC_TRACE_EXPORT_NICE", "-5"),
    ];
    let (run, record) = run_agent(&["--otlp", &collector.url()], &small);
    assert_eq!(record["status"], "complete");
    assert_eq!(
        drop_reports(&run),
        [
            "pagantic: 3 trace span(s) were not exported: did not fit in the queue of 2 spans (raise OTEL_BSP_MAX_QUEUE_SIZE, or set PAGANTIC_TRACE_EXPORT_NICE=0 on a busy machine)"
        ],
        "{}",
        run.stderr
    );
    assert_eq!(collector.spans().len(), 2);
    assert!(
        run.stderr.contains(
            "pagantic: PAGANTIC_TRACE_EXPORT_NICE is not a nice value from 0 to 19: the export thread runs at 10"
        ),
        "{}",
        run.stderr
    );
    let (run, _) = run_agent(
        &["--otlp", &collector.url()],
        &[("PAGANTIC_TRACE_EXPORT_NICE", "0")],
    );
    assert!(drop_reports(&run).is_empty(), "{}", run.stderr);
    assert!(!run.stderr.contains("nice value"), "{}", run.stderr);
    assert_eq!(collector.spans().len(), 2 + 5);
}

/// A collector that answers an error loses the whole export, and one that takes it but rejects
/// part of it (an OTLP partial success) loses that part: the run completes either way and the
/// count is said once. `OTEL_EXPORTER_OTLP_HEADERS` reaches the collector, percent-decoded, and
/// is never printed.
#[test]
fn refused_and_partly_rejected_exports_are_counted_and_headers_reach_the_collector() {
    let secret = [(
        "OTEL_EXPORTER_OTLP_HEADERS",
        "x-api-key=s3cr%3Dt,x-team=evals",
    )];
    let failing = Router::new().route(
        "/v1/traces",
        post(|| async { (axum::http::StatusCode::SERVICE_UNAVAILABLE, "try later") }),
    );
    let (port, _failing) = serve_on_loopback(failing);
    let (run, record) = run_agent(&["--otlp", &format!("http://127.0.0.1:{port}")], &secret);
    assert_eq!(record["status"], "complete");
    // The agent's five spans: the run, the agent, two model calls and the tool.
    assert_eq!(
        drop_reports(&run),
        [
            "pagantic: 5 trace span(s) were not exported: the collector was unreachable, too slow, or refused them"
        ],
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("s3cr"), "{}", run.stderr);

    let seen = Arc::new(Mutex::new(Vec::new()));
    let partial = Router::new()
        .route("/v1/traces", post(reject_two))
        .with_state(Arc::clone(&seen));
    let (port, _partial) = serve_on_loopback(partial);
    let (run, _) = run_agent(&["--otlp", &format!("http://127.0.0.1:{port}")], &secret);
    let reports = drop_reports(&run);
    assert_eq!(reports.len(), 1, "{}", run.stderr);
    assert!(reports[0].contains(" 2 trace span(s)"), "{}", run.stderr);
    assert!(!run.stderr.contains("s3cr"), "{}", run.stderr);
    let seen = seen.lock().expect("headers").clone();
    assert_eq!(seen, [("s3cr=t".to_string(), "evals".to_string())]);
}

/// The API key and team headers of each export a collector was sent.
type SeenHeaders = Arc<Mutex<Vec<(String, String)>>>;

/// Takes every export, keeping its API key and team headers, and says it rejected two spans.
async fn reject_two(
    State(seen): State<SeenHeaders>,
    headers: HeaderMap,
) -> ([(&'static str, &'static str); 1], Vec<u8>) {
    let header = |name: &str| {
        let value = headers.get(name).and_then(|v| v.to_str().ok());
        value.unwrap_or_default().to_string()
    };
    let pair = (header("x-api-key"), header("x-team"));
    seen.lock().expect("headers").push(pair);
    let answer = ExportTraceServiceResponse {
        partial_success: Some(ExportTracePartialSuccess {
            rejected_spans: 2,
            error_message: "spans too old".into(),
        }),
    };
    (
        [("content-type", "application/x-protobuf")],
        answer.encode_to_vec(),
    )
}

/// The `openai` engine sends the chat span's `traceparent` to the server, so the server's own
/// spans join the run's trace.
#[test]
fn the_openai_engine_sends_the_chat_span_s_traceparent() {
    let collector = Collector::start();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let router = Router::new()
        .route("/v1/chat/completions", post(answer))
        .with_state(Arc::clone(&seen));
    let (port, _server) = serve_on_loopback(router);
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = format!(
        "version: 1\nname: remote\nmodels:\n  remote: {{ kind: openai, base_url: \"http://127.0.0.1:{port}/v1\", model: served }}\nsteps:\n  - {{ name: greet, type: infer, model: remote, template: Hello. }}\n"
    );
    std::fs::write(dir.path().join("remote.yaml"), plan).expect("plan written");
    let url = collector.url();
    let args = [
        "run",
        "--no-stream",
        "--format",
        "json",
        "remote.yaml",
        "--otlp",
        &url,
    ];
    let run = pagantic_with(dir.path(), &args, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let chat = one(&collector.spans(), "chat served").clone();
    assert_eq!(chat.text("gen_ai.provider.name"), Some("openai"));
    let sent = seen.lock().expect("headers").clone();
    assert_eq!(sent, [format!("00-{}-{}-01", chat.trace_id, chat.span_id)]);
}

async fn answer(
    State(seen): State<Arc<Mutex<Vec<String>>>>,
    headers: HeaderMap,
) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    if let Some(parent) = headers.get("traceparent").and_then(|v| v.to_str().ok()) {
        seen.lock().expect("headers").push(parent.to_string());
    }
    let body = json!({
        "id": "c1",
        "object": "chat.completion",
        "model": "served",
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": "Hi" }, "finish_reason": "stop" }],
        "usage": { "prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4 }
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
}

/// `serve` continues a request's `traceparent`: the run's root span is the caller's span's
/// child, and the trace id comes back in `X-Trace-Id` and the record.
#[test]
fn serve_continues_a_request_s_traceparent_and_returns_the_trace_id() {
    let collector = Collector::start();
    let url = collector.url();
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = dir.path().join("hello.yaml");
    let text = "version: 1\nname: hello\nmodels:\n  echo: { kind: scripted, echo: true }\nsteps:\n  - { name: say, type: infer, model: echo, template: Hello. }\n";
    std::fs::write(&plan, text).expect("plan written");
    let plan = plan.to_string_lossy().into_owned();
    let server = Server::start(&[plan.as_str(), "--otlp", &url], &[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let (trace_header, record) = runtime.block_on(async {
        let response = client()
            .post(server.url("/v1/plans/hello/runs"))
            .header("traceparent", parent)
            .json(&json!({}))
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), 200);
        let header = response
            .headers()
            .get("x-trace-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        (header, response.json::<Value>().await.expect("a record"))
    });
    let trace = "0af7651916cd43dd8448eb211c80319c";
    assert_eq!(trace_header.as_deref(), Some(trace));
    assert_eq!(record["trace_id"], trace);
    let spans = collector.spans_once(|s| s.name == "invoke_workflow hello");
    let root = one(&spans, "invoke_workflow hello");
    assert_eq!(
        (root.trace_id.as_str(), root.parent.as_str()),
        (trace, "b7ad6b7169203331")
    );
}

/// SIGTERM (what Kubernetes and Slurm send) cancels the run, and the spans still queued are sent
/// before the process ends: the run's span says `cancelled`, and so does the step it stopped.
#[test]
fn sigterm_cancels_the_run_and_its_spans_are_still_sent() {
    let collector = Collector::start();
    let url = collector.url();
    let child = crate::spawn(&["run", "tests/plans/cancel.yaml", "--otlp", &url]);
    // The quick step's span is sent as soon as it ends: the run is in the step that stalls.
    collector.spans_once(|s| s.name == "step quick");
    crate::send_signal(&child, nix::sys::signal::Signal::SIGTERM);
    let output = crate::finish_within(child, crate::RUN_LIMIT);
    assert_eq!(output.status.code(), Some(75));
    let spans = collector.spans();
    let root = one(&spans, "invoke_workflow cancel");
    assert_eq!(root.text("pagantic.status"), Some("cancelled"));
    let long = one(&spans, "step long");
    assert_eq!(long.text("pagantic.step.status"), Some("cancelled"));
    assert_eq!(long.parent, root.span_id);
}
