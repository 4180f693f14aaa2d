//! The served plans as Model Context Protocol tools, for the MCP clients people run (editors,
//! desktop assistants, other agents): each plan is a tool named as it is served, described by
//! its `description`, taking its inputs (their JSON Schema, as `GET /v1/plans` shows it).
//!
//! A call runs the plan exactly as `POST /v1/plans/{name}/runs` does — the same admission and
//! limits, the same metrics, `X-Request-Id` and `traceparent` over HTTP, its own cancellation (the client going away, or its
//! `notifications/cancelled`, cancels the run; so does the end of the drain) — and answers with
//! the plan's output: structured content when it is a JSON object, text otherwise. A run that
//! fails, inputs that do not bind, or a full queue answer a tool error (`isError`) carrying the
//! failure's code, message and help, so a model can read what went wrong; an unknown tool is a
//! protocol error.
//!
//! Two transports serve the same tools: streamable HTTP at `/mcp` on the server (`serve --mcp`),
//! stateless — every POST is answered on its own, so no session outlives a request and the drain
//! waits for nothing but runs — behind the server's Host / Origin checks and token; and stdin /
//! stdout (`serve --mcp-stdio`), for clients that start their tools as processes.

use std::borrow::Cow;
use std::io::Read as _;
use std::sync::Arc;

use axum::http::request::Parts;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt as _};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncWriteExt as _, DuplexStream};

use super::app::App;
use super::catalog::Served;
use super::metrics::Refusal;
use super::request_id::RequestId;
use super::trace_context::Caller;
use crate::core::{Failure, FailureCode};
use crate::orchestrate::{RunRecord, RunStatus};

/// The served plans as tools.
#[derive(Clone)]
pub struct PlanTools {
    app: App,
}

impl PlanTools {
    pub fn new(app: App) -> Self {
        PlanTools { app }
    }
}

/// The streamable HTTP endpoint for `/mcp`. Host, Origin, the token and the request id are
/// checked by the router's layers in front of it, as for every route; the body limit is the
/// server's.
pub fn http_service(app: App) -> StreamableHttpService<PlanTools, NeverSessionManager> {
    let max_body_bytes = app.max_body_bytes;
    let tools = PlanTools::new(app);
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(max_body_bytes)
        .disable_allowed_hosts()
        .disable_allowed_origins();
    StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// Serves the tools on stdin and stdout until the client closes its end.
pub async fn serve_stdio(tools: PlanTools) -> Result<(), Failure> {
    let broken = |e: &dyn std::fmt::Display| {
        Failure::new(
            FailureCode::ConfigInvalidInput,
            format!("the MCP client on stdin/stdout: {e}"),
        )
        .with_help(
            "start `pagantic serve --mcp-stdio` from an MCP client, which speaks on its stdin",
        )
    };
    let running = tools
        .serve((stdin_reader(), tokio::io::stdout()))
        .await
        .map_err(|e| broken(&e))?;
    running.waiting().await.map_err(|e| broken(&e))?;
    Ok(())
}

/// Stdin as an async reader, fed by a thread of its own: a read of stdin on the runtime's blocking
/// pool (a terminal, a file) would hold the runtime's shutdown after Ctrl-C until a line arrived.
fn stdin_reader() -> DuplexStream {
    const CHUNK: usize = 64 * 1024;
    let (reader, mut writer) = tokio::io::duplex(CHUNK);
    let runtime = tokio::runtime::Handle::current();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buffer = vec![0; CHUNK];
        loop {
            let read = match stdin.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => read,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let chunk = buffer.get(..read).unwrap_or_default();
            if runtime.block_on(writer.write_all(chunk)).is_err() {
                break;
            }
        }
    });
    reader
}

/// A served plan as a tool.
fn tool(served: &Served) -> Tool {
    let schema: JsonObject = match &served.inputs {
        Value::Object(schema) => schema.clone(),
        _ => JsonObject::new(),
    };
    let description = served
        .description
        .clone()
        .unwrap_or_else(|| format!("Runs the pagantic plan `{}`.", served.name));
    Tool::new_with_raw(
        served.name.clone(),
        Some(Cow::Owned(description)),
        Arc::new(schema),
    )
}

/// A tool error saying `failure` (with the run's id when one ran).
fn failed(failure: &Failure, run_id: Option<&str>) -> CallToolResult {
    let mut text = format!("{}: {}", failure.code.as_str(), failure.message);
    if let Some(help) = &failure.help {
        text.push_str("\nhelp: ");
        text.push_str(help);
    }
    let mut structured = json!({ "error": failure });
    if let Some(run_id) = run_id {
        structured["run_id"] = Value::from(run_id);
    }
    let mut result = CallToolResult::structured_error(structured);
    result.content = vec![ContentBlock::text(text)];
    result
}

/// What a finished run answers: its output (structured when a JSON object), or its failure.
fn answer(record: &RunRecord) -> CallToolResult {
    if record.status != RunStatus::Complete {
        let cancelled = Failure::new(FailureCode::CancelledSignal, "the run was cancelled");
        let failure = record.error.as_ref().unwrap_or(&cancelled);
        return failed(failure, Some(&record.run_id));
    }
    output(record.output.as_ref())
}

/// A plan's output as a tool's: structured content when a JSON object (MCP's structured content
/// is an object), text otherwise — a string as it is, any other JSON as JSON text.
fn output(value: Option<&Value>) -> CallToolResult {
    match value {
        Some(object @ Value::Object(_)) => CallToolResult::structured(object.clone()),
        Some(Value::String(text)) => CallToolResult::success(vec![ContentBlock::text(text)]),
        Some(other) => CallToolResult::success(vec![ContentBlock::text(other.to_string())]),
        None => CallToolResult::success(Vec::new()),
    }
}

impl PlanTools {
    /// Runs the plan `name` on `arguments` as a request to `/v1/plans/{name}/runs` would, until
    /// it ends or `context` is cancelled (then the run is cancelled and its record answered).
    async fn run(
        &self,
        name: &str,
        arguments: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let app = &self.app;
        let served = app.plan(name).map_err(|refused| {
            app.metrics.refused(refused.why);
            ErrorData::invalid_params(refused.failure.message, None)
        })?;
        let inputs = match served.pipeline.bind_object(&arguments) {
            Ok(inputs) => inputs,
            Err(failure) => {
                app.metrics.refused(Refusal::BadRequest);
                return Ok(failed(&failure, None));
            }
        };
        let permit = match app.admit().await {
            Ok(permit) => permit,
            Err(refused) => {
                app.metrics.refused(refused.why);
                return Ok(failed(&refused.failure, None));
            }
        };
        // Over HTTP, the request's `X-Request-Id` and `traceparent`, as for any route.
        let http = context.extensions.get::<Parts>();
        let request_id = http
            .and_then(|parts| parts.extensions.get::<RequestId>())
            .map(|RequestId(id)| id.clone());
        let caller = match http {
            Some(parts) => Caller::of(request_id, &parts.headers),
            None => Caller::from(request_id),
        };
        let (handle, cancel_if_gone) = app.start(served, inputs, Map::new(), caller, permit, None);
        tokio::pin!(handle);
        let joined = tokio::select! {
            joined = &mut handle => joined,
            () = context.ct.cancelled() => {
                drop(cancel_if_gone);
                handle.await
            }
        };
        match joined {
            Ok(record) => Ok(answer(&record)),
            Err(_) => Err(ErrorData::internal_error("the run crashed", None)),
        }
    }
}

impl ServerHandler for PlanTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("pagantic", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Each tool runs one pipeline (a pagantic plan) on the inputs given and answers \
                 its output; a failed run answers its failure's code, message and help.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let plans = self.app.catalog.all();
        Ok(ListToolsResult::with_all_items(
            plans.values().map(|served| tool(served)).collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.app.catalog.get(name).map(|served| tool(&served))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let result = self.run(&request.name, arguments, &context).await?;
        Ok(result.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(result: &CallToolResult) -> Vec<&str> {
        result
            .content
            .iter()
            .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
            .collect()
    }

    #[test]
    fn only_an_object_is_structured_content() {
        let object = json!({ "name": "Ada" });
        let structured = output(Some(&object));
        assert_eq!(structured.structured_content, Some(object));
        assert_eq!(text(&structured), [r#"{"name":"Ada"}"#]);
        let said = output(Some(&json!("plain words")));
        assert_eq!(said.structured_content, None);
        assert_eq!(text(&said), ["plain words"]);
        let list = output(Some(&json!([1, 2])));
        assert_eq!(list.structured_content, None);
        assert_eq!(text(&list), ["[1,2]"]);
        assert!(output(None).content.is_empty());
        assert_eq!(output(None).is_error, Some(false));
    }

    #[test]
    fn a_failure_is_a_tool_error_with_its_code_message_and_help() {
        let failure = Failure::new(FailureCode::ToolTimeout, "the tool took too long")
            .with_help("raise its timeout");
        let result = failed(&failure, Some("run-1"));
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            text(&result),
            ["TOOL_TIMEOUT: the tool took too long\nhelp: raise its timeout"]
        );
        let structured = result.structured_content.expect("the failure as JSON");
        assert_eq!(structured["error"]["code"], "TOOL_TIMEOUT");
        assert_eq!(structured["run_id"], "run-1");
        let refused = failed(&Failure::new(FailureCode::ConfigInvalidInput, "no"), None);
        let structured = refused.structured_content.expect("the failure as JSON");
        assert!(structured.get("run_id").is_none());
    }
}
