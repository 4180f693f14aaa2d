//! `pagantic serve` to the clients that list models first and to MCP clients: `/v1/models`, the
//! plans as MCP tools over streamable HTTP (`--mcp`, driven by an `rmcp` client) and over stdio
//! (`--mcp-stdio`, the binary started as a client starts its tools). Every wait is on an
//! observable point (a line, a metric, an answer), never a guessed delay.

use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};

use crate::serve::{Server, client, wait_for_metric};
use crate::{command, fresh_cache_dir, root};

/// How long the server may take to answer one MCP request, or the stdio server to exit once
/// its stdin is closed: a server that hangs fails its test instead of hanging the suite.
const PATIENCE: Duration = Duration::from_secs(60);

/// `request`'s answer, within [`PATIENCE`].
async fn within<T>(what: &str, request: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, request)
        .await
        .unwrap_or_else(|_| panic!("{what} got no answer within {PATIENCE:?}"))
}

/// The token the servers here are started with.
const TOKEN: &str = "open-sesame";

/// `pagantic serve --mcp PLANS…`, with the token [`TOKEN`] when `token`.
fn mcp_server(plans: &[&str], token: bool) -> Server {
    let mut args = plans.to_vec();
    args.push("--mcp");
    if token {
        args.extend(["--token-env", "SERVE_MCP_TOKEN"]);
    }
    Server::start(&args, &[("SERVE_MCP_TOKEN", TOKEN)])
}

/// An MCP client of the server's `/mcp`, initialized.
async fn mcp_client(server: &Server) -> RunningService<RoleClient, ()> {
    let transport = StreamableHttpClientTransport::from_uri(server.url("/mcp"));
    within("the MCP handshake", ().serve(transport))
        .await
        .expect("the MCP handshake succeeds")
}

fn arguments(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        other => panic!("not an object: {other}"),
    }
}

async fn call(client: &RunningService<RoleClient, ()>, tool: &str, given: Value) -> CallToolResult {
    let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments(given));
    within(tool, client.call_tool(params))
        .await
        .expect("a tool result")
}

/// The text of a tool result's content.
fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect()
}

/// A JSON-RPC `tools/call` POSTed to `/mcp` by hand, as a stateless client may send it.
fn raw_call(server: &Server, tool: &str) -> reqwest::RequestBuilder {
    client()
        .post(server.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": { "name": tool, "arguments": {} },
        }))
}

/// Each served plan is a model, behind the token; an unknown one is OpenAI's 404.
#[tokio::test]
async fn served_plans_are_listed_as_models() {
    let server = mcp_server(
        &["tests/plans/serve/echo.yaml", "tests/plans/failing.yaml"],
        true,
    );
    let get = |path: &str, token: Option<&str>| {
        let mut request = client().get(server.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let listed = get("/v1/models", Some(TOKEN)).await.expect("an answer");
    assert_eq!(listed.status(), StatusCode::OK);
    let listed: Value = listed.json().await.expect("JSON");
    assert_eq!(listed["object"], "list");
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|model| model["id"].as_str().expect("an id"))
        .collect();
    assert_eq!(ids, ["echo", "failing"]);
    let echo = &listed["data"][0];
    assert_eq!(echo["object"], "model");
    assert_eq!(echo["owned_by"], "pagantic");
    assert!(echo["created"].as_u64().is_some_and(|t| t > 0), "{echo}");

    let one: Value = get("/v1/models/echo", Some(TOKEN))
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    assert_eq!(&one, echo);

    let unknown = get("/v1/models/ecko", Some(TOKEN))
        .await
        .expect("an answer");
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let unknown: Value = unknown.json().await.expect("JSON");
    assert_eq!(unknown["error"]["code"], "model_not_found");
    assert_eq!(unknown["error"]["type"], "invalid_request_error");
    let message = unknown["error"]["message"].as_str().expect("a message");
    assert!(message.contains("`echo`"), "names the closest: {message}");

    for path in ["/v1/models", "/v1/models/echo"] {
        let without = get(path, None).await.expect("an answer");
        assert_eq!(without.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
}

/// An MCP client lists the plans as tools and calls them: text output as text, a JSON object as
/// structured content, a failed run and unbindable inputs as tool errors with the failure's
/// code; each call a run like any other, counted in the metrics.
#[tokio::test]
async fn an_mcp_client_lists_and_calls_the_served_plans() {
    let server = mcp_server(
        &[
            "tests/plans/serve/echo.yaml",
            "tests/plans/failing.yaml",
            "tests/plans/serve_mcp/profile.yaml",
        ],
        false,
    );
    let client = mcp_client(&server).await;
    let info = client.peer_info().expect("the server introduced itself");
    let name = info.server_info.as_ref().map(|i| i.name.as_str());
    assert_eq!(name, Some("pagantic"));
    assert!(info.capabilities.tools.is_some());

    let tools = within("tools/list", client.list_all_tools())
        .await
        .expect("tools listed");
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(names, ["echo", "failing", "profile"]);
    let echo = &tools[0];
    assert_eq!(
        echo.description.as_deref(),
        Some("Echoes the question back, three steps deep.")
    );
    assert_eq!(echo.input_schema["required"], json!(["question"]));
    assert_eq!(
        echo.input_schema["properties"]["times"],
        json!({ "type": "integer", "default": 1 })
    );

    let echoed = call(&client, "echo", json!({ "question": "hi", "times": 2 })).await;
    assert_eq!(echoed.is_error, Some(false));
    assert_eq!(text(&echoed), "echo: hi x2");
    assert_eq!(echoed.structured_content, None);

    let profile = call(&client, "profile", json!({ "person": "Ada" })).await;
    assert_eq!(profile.is_error, Some(false));
    assert_eq!(
        profile.structured_content,
        Some(json!({ "name": "Ada Lovelace", "born": 1815 }))
    );

    let failed = call(&client, "failing", json!({})).await;
    assert_eq!(failed.is_error, Some(true));
    assert!(
        text(&failed).starts_with("VALIDATION_RULE_FAILED: "),
        "{}",
        text(&failed)
    );
    let error = failed.structured_content.expect("the failure as JSON");
    assert_eq!(error["error"]["code"], "VALIDATION_RULE_FAILED");
    assert!(error["run_id"].is_string(), "{error}");

    let unbound = call(&client, "echo", json!({ "times": "two" })).await;
    assert_eq!(unbound.is_error, Some(true));
    let said = text(&unbound);
    assert!(said.starts_with("CONFIG_INVALID_INPUT: "), "{said}");
    assert!(said.contains("missing input `question`"), "{said}");

    let unknown = within("ecko", client.call_tool(CallToolRequestParams::new("ecko")))
        .await
        .expect_err("an unknown tool is a protocol error");
    assert!(unknown.to_string().contains("no plan `ecko`"), "{unknown}");
    within("closing", client.cancel()).await.expect("closed");

    for line in [
        r#"pagantic_runs_total{plan="echo",status="complete"} 1"#,
        r#"pagantic_runs_total{plan="profile",status="complete"} 1"#,
        r#"pagantic_runs_total{plan="failing",status="error"} 1"#,
        r#"pagantic_requests_refused_total{reason="bad_request"} 1"#,
    ] {
        wait_for_metric(&server, line).await;
    }
}

/// `/mcp` is behind the token and the Host / Origin checks of every route.
#[tokio::test]
async fn the_mcp_endpoint_needs_the_token_and_refuses_web_pages() {
    let server = mcp_server(&["tests/plans/serve/echo.yaml"], true);
    let without = raw_call(&server, "echo").send().await.expect("an answer");
    assert_eq!(without.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(without.headers()["www-authenticate"], "Bearer");
    let from_page = raw_call(&server, "echo")
        .bearer_auth(TOKEN)
        .header("origin", "https://evil.example")
        .send()
        .await
        .expect("an answer");
    assert_eq!(from_page.status(), StatusCode::FORBIDDEN);
    let rebound = raw_call(&server, "echo")
        .bearer_auth(TOKEN)
        .header("host", "attacker.example")
        .send()
        .await
        .expect("an answer");
    assert_eq!(rebound.status(), StatusCode::FORBIDDEN);
    let answered = raw_call(&server, "echo")
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("an answer");
    assert_eq!(answered.status(), StatusCode::OK);
    let answer: Value = answered.json().await.expect("a JSON-RPC answer");
    assert_eq!(answer["result"]["isError"], true, "echo needs a question");

    // A client of an older, handshake-based revision is answered in that revision.
    let handshake = client()
        .post(server.url("/mcp"))
        .bearer_auth(TOKEN)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "test", "version": "1" },
            },
        }))
        .send()
        .await
        .expect("an answer");
    assert_eq!(handshake.status(), StatusCode::OK);
    let answer: Value = handshake.json().await.expect("a JSON-RPC answer");
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-06-18",
        "{answer}"
    );
    assert_eq!(answer["result"]["serverInfo"]["name"], "pagantic");
}

/// A client that goes away mid-call cancels the plan's run, as on `/v1/plans/{name}/runs`.
#[tokio::test]
async fn an_mcp_client_that_disconnects_cancels_its_run() {
    let server = mcp_server(&["tests/plans/serve/slow.yaml"], false);
    let request = tokio::spawn(raw_call(&server, "slow").send());
    wait_for_metric(&server, "pagantic_runs_in_flight 1").await;
    request.abort();
    wait_for_metric(
        &server,
        r#"pagantic_runs_total{plan="slow",status="cancelled"} 1"#,
    )
    .await;
    wait_for_metric(&server, "pagantic_runs_in_flight 0").await;
}

/// `serve --mcp-stdio`: started as an MCP client starts a tool, it speaks the protocol on stdout
/// (its news on stderr), runs the plans, and exits 0 when the client closes its stdin.
#[tokio::test]
async fn serve_mcp_stdio_speaks_on_stdin_and_stdout_until_closed() {
    let mut child = tokio::process::Command::from(command(&fresh_cache_dir()))
        .args([
            "serve",
            "--mcp-stdio",
            "tests/plans/serve/echo.yaml",
            "tests/plans/failing.yaml",
        ])
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("pagantic starts");
    let stdin = child.stdin.take().expect("stdin piped");
    let stdout = child.stdout.take().expect("stdout piped");
    let client = within("the MCP handshake", ().serve((stdout, stdin)))
        .await
        .expect("the MCP handshake");
    let tools = within("tools/list", client.list_all_tools())
        .await
        .expect("tools listed");
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(names, ["echo", "failing"]);
    let echoed = call(&client, "echo", json!({ "question": "hi" })).await;
    assert_eq!(text(&echoed), "echo: hi x1");
    let failed = call(&client, "failing", json!({})).await;
    assert_eq!(failed.is_error, Some(true));
    within("closing", client.cancel()).await.expect("closed");
    let output = tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .expect("the server exits once its stdin is closed")
        .expect("waited");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("serving echo, failing as MCP tools on stdin/stdout"),
        "{stderr}"
    );
}
