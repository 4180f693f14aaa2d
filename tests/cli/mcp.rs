//! Tools from MCP servers (`kind: mcp`): an agent on a scripted model uses the tools of an MCP
//! server written here with rmcp, over stdio and over streamable HTTP, and the containment and
//! bounds around it hold.
//!
//! The stdio server is this test executable run again: `stdio_server` (ignored in ordinary runs)
//! serves MCP on stdin/stdout when the marker argument [`SERVER_MARKER`] is on its command line.
//! The harness's own lines on stdout ("running 1 test") are not JSON, and MCP clients skip them;
//! `--quiet` keeps it from writing the test's name, unterminated, before the first message.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

use crate::{Run, pagantic_with, step};

/// The argument that turns `stdio_server` into an MCP server.
const SERVER_MARKER: &str = "pagantic-mcp-test-server";

/// How long a test waits for a process to die before it fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// The server: `echo`, `add` (structured), `secret`, `env` (the names of its environment),
/// `hang` (writes its pid and a child's to `$MCP_TEST_PIDFILE`, then never answers), `die`
/// (exits mid-call), `flood` (50 MB of text), `wide` (an input schema of 1,001 properties), and
/// `extra` when `MCP_TEST_EXTRA_TOOL` is set, `connect` (to `127.0.0.1:$MCP_TEST_CONNECT`, saying
/// whether it could) when that is set. When its standard input closes it ends, writing
/// `ended` to the file `$MCP_TEST_ENDED` names on its way out.
#[derive(Clone)]
struct TestServer;

fn schema(value: Value) -> Arc<Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(Map::new()),
    }
}

fn listed_tools() -> Vec<Tool> {
    let empty = || schema(json!({ "type": "object" }));
    let wide: Map<String, Value> = (0..1001)
        .map(|i| (format!("p{i}"), json!({ "type": "string" })))
        .collect();
    let mut tools = vec![
        Tool::new(
            "echo",
            "Says the text back.",
            schema(json!({
                "type": "object", "required": ["text"],
                "properties": { "text": { "type": "string" } }
            })),
        ),
        Tool::new(
            "add",
            "Adds two numbers.",
            schema(json!({
                "type": "object", "required": ["a", "b"],
                "properties": { "a": { "type": "number" }, "b": { "type": "number" } }
            })),
        ),
        Tool::new("secret", "Tells a secret.", empty()),
        Tool::new("env", "Lists its environment's names.", empty()),
        Tool::new("hang", "Never answers.", empty()),
        Tool::new("die", "Exits mid-call.", empty()),
        Tool::new("flood", "Answers 50 MB.", empty()),
        Tool::new(
            "wide",
            "Takes too many arguments.",
            schema(json!({ "type": "object", "properties": wide })),
        ),
    ];
    if std::env::var_os("MCP_TEST_EXTRA_TOOL").is_some() {
        tools.push(Tool::new("extra", "Appears later.", empty()));
    }
    if std::env::var_os("MCP_TEST_CONNECT").is_some() {
        tools.push(Tool::new("connect", "Connects to a port.", empty()));
    }
    tools
}

/// Writes this process's pid and a `sleep` child's to the file `MCP_TEST_PIDFILE` names.
fn write_pids() {
    let Some(file) = std::env::var_os("MCP_TEST_PIDFILE") else {
        return;
    };
    let mut child = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .expect("sleep starts");
    let pids = format!("{} {}\n", std::process::id(), child.id());
    // Reaped by a thread of its own, so that its death shows; it dies with the process group.
    std::thread::spawn(move || child.wait());
    std::fs::write(file, pids).expect("pid file written");
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(listed_tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let text = |text: String| CallToolResult::success(vec![ContentBlock::text(text)]);
        let result = match &*request.name {
            "echo" => text(args["text"].as_str().unwrap_or_default().to_string()),
            "add" => {
                let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
                CallToolResult::structured(json!({ "sum": sum }))
            }
            "secret" => text("the secret".into()),
            "env" => {
                let mut names: Vec<String> = std::env::vars_os()
                    .filter_map(|(name, _)| name.into_string().ok())
                    .collect();
                names.sort();
                text(names.join(" "))
            }
            "hang" => {
                write_pids();
                tokio::time::sleep(Duration::from_secs(3600)).await;
                text("woke".into())
            }
            "die" => {
                eprintln!("dying on purpose");
                std::process::exit(3);
            }
            "flood" => text("x".repeat(50_000_000)),
            "connect" => {
                let port = std::env::var("MCP_TEST_CONNECT").unwrap_or_default();
                match std::net::TcpStream::connect(format!("127.0.0.1:{port}")) {
                    Ok(_) => text("connected".into()),
                    Err(error) => text(format!("cannot connect: {error}")),
                }
            }
            other => {
                return Err(ErrorData::invalid_params(format!("no tool {other}"), None));
            }
        };
        Ok(result.into())
    }
}

#[test]
#[ignore = "the MCP server the other tests start, as this executable with a marker argument"]
fn stdio_server() {
    if !std::env::args().any(|arg| arg == SERVER_MARKER) {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let running = TestServer
            .serve(rmcp::transport::stdio())
            .await
            .expect("serves");
        let _ = running.waiting().await;
    });
    if let Some(file) = std::env::var_os("MCP_TEST_ENDED") {
        std::fs::write(file, "ended").expect("the end is written");
    }
}

/// A copy of this executable that no rebuild replaces while the tests run (`/proc/self/exe`
/// reads even after the file was rebuilt under us), made once per test process; the copies of
/// test processes that have ended are removed first.
fn server_exe() -> &'static Path {
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-servers");
        std::fs::create_dir_all(&dir).expect("scratch directory");
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix("server-").unwrap_or_default();
            if pid.is_empty() || !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let copy = dir.join(format!("server-{}", std::process::id()));
        std::fs::copy("/proc/self/exe", &copy).expect("the test executable is copied");
        copy
    })
}

/// The `command:` that starts this executable as the stdio server, as YAML.
fn server_command() -> String {
    let exe = server_exe();
    json!([
        exe,
        "--ignored",
        "--exact",
        "--nocapture",
        "--quiet",
        "--test-threads=1",
        "mcp::stdio_server",
        SERVER_MARKER
    ])
    .to_string()
}

/// A plan in a fresh directory: `tools` and `steps` as YAML, the scripted model `caller`
/// replying `replies` (a YAML list).
fn plan(tools: &str, replies: &str, steps: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = format!(
        "version: 1\nname: mcp\nmodels:\n  caller:\n    kind: scripted\n    replies: {replies}\ntools:\n{tools}\nsteps:\n{steps}\n"
    );
    let path = dir.path().join("plan.yaml");
    std::fs::write(&path, text).expect("plan written");
    (dir, path)
}

/// An agent step offered `tools`.
fn agent(tools: &str) -> String {
    format!(
        "  - name: ask\n    type: agent\n    model: caller\n    template: Use the tools.\n    tools: [{tools}]"
    )
}

fn run_json(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (Run, Value) {
    let run = pagantic_with(dir, args, env);
    let record = serde_json::from_str(&run.stdout).unwrap_or(Value::Null);
    (run, record)
}

/// The agent calls `echo` and `add`, is refused `secret` (not allowed) and an `echo` with
/// arguments its schema refuses, and answers.
fn an_agent_uses_the_allowed_tools(server: &str) {
    let tools = format!(
        "  files:\n    kind: mcp\n    {server}\n    allow: [echo, add]\n    side_effects: none"
    );
    let replies = r#"
      - { call: { tool: echo, arguments: { text: hello } } }
      - { call: { tool: add, arguments: { a: 2, b: 3 } } }
      - { call: { tool: secret, arguments: {} } }
      - { call: { tool: echo, arguments: { text: 7 } } }
      - done"#;
    let (dir, _) = plan(&tools, replies, &agent("files"));
    let (run, record) = run_json(dir.path(), &["run", "plan.yaml", "--format", "json"], &[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, run.stdout);
    assert_eq!(record["output"], "done");
    let calls = &step(&record, "ask")["detail"]["tool_calls"];
    assert_eq!(calls[0]["ok"], true, "{calls}");
    assert_eq!(calls[0]["result"]["text"], "hello");
    assert_eq!(calls[1]["ok"], true, "{calls}");
    assert_eq!(calls[1]["result"]["text"], r#"{"sum":5.0}"#);
    assert_eq!(calls[2]["ok"], false);
    assert_eq!(calls[2]["error"]["code"], "TOOL_NOT_FOUND", "{calls}");
    assert_eq!(calls[3]["ok"], false);
    assert_eq!(
        calls[3]["error"]["code"], "TOOL_INVALID_ARGUMENTS",
        "{calls}"
    );
    assert!(
        calls[3]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("do not match its schema")),
        "{calls}"
    );
}

#[test]
fn an_agent_uses_the_allowed_tools_of_a_stdio_server() {
    an_agent_uses_the_allowed_tools(&format!("command: {}", server_command()));
}

#[test]
fn an_agent_uses_the_allowed_tools_of_an_http_server() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let url = runtime.block_on(serve_http());
    an_agent_uses_the_allowed_tools(&format!("url: {url}"));
}

/// Serves [`TestServer`] over streamable HTTP on a loopback port; returns its URL.
async fn serve_http() -> String {
    serve_http_with(TestServer).await
}

/// Serves `server` (each session a clone of it) over streamable HTTP on a loopback port, on the
/// runtime this runs on; returns its URL.
pub(crate) async fn serve_http_with<S>(server: S) -> String
where
    S: ServerHandler + Clone + Send + Sync + 'static,
{
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let service: StreamableHttpService<S, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(server.clone()),
        Default::default(),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{address}/mcp")
}

/// A `tool` step calling the one allowed tool `tool` of the stdio server, with `extra` YAML
/// lines on the tool.
fn tool_step_plan(tool: &str, extra: &str) -> (tempfile::TempDir, PathBuf) {
    let tools = format!(
        "  server:\n    kind: mcp\n    command: {}\n    allow: [{tool}]\n    side_effects: none\n{extra}",
        server_command()
    );
    let steps =
        "  - name: call\n    type: tool\n    tool: server\n    args: {}\n    on_error: continue";
    plan(&tools, "[done]", steps)
}

/// The failure of step `call` in a run record.
fn failure_of(record: &Value) -> &Value {
    &step(record, "call")["error"]
}

/// Whether a process exists and is not a zombie.
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
        !state.is_some_and(|s| s.starts_with('Z') || s.starts_with('X'))
    })
}

fn assert_dies(pid: &str) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while alive(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} is still running after {PATIENCE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_server_that_hangs_is_killed_with_its_process_group_at_the_timeout() {
    // Without the sandbox, whose PID namespace would hide the pids the server writes (and end
    // them anyway): the process group alone must take them down.
    let (dir, _) = tool_step_plan("hang", "    timeout: 3s\n    env: [MCP_TEST_PIDFILE]");
    let pidfile = dir.path().join("pids");
    let pidfile = pidfile.to_str().expect("utf-8");
    let (run, record) = run_json(
        dir.path(),
        &["run", "plan.yaml", "--format", "json"],
        &[("MCP_TEST_PIDFILE", pidfile), ("PAGANTIC_SANDBOX", "off")],
    );
    assert_eq!(run.code, 0, "on_error: continue: {}", run.stderr);
    let failure = failure_of(&record);
    assert_eq!(failure["code"], "TOOL_TIMEOUT", "{record}");
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|m| m.contains("3s timeout") && m.contains("were killed")),
        "{failure}"
    );
    let pids = std::fs::read_to_string(pidfile).expect("the server wrote its pids");
    let pids: Vec<&str> = pids.split_whitespace().collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    for pid in pids {
        assert_dies(pid);
    }
}

#[test]
fn a_server_that_dies_mid_call_is_a_clear_error() {
    let (dir, _) = tool_step_plan("die", "");
    let (run, record) = run_json(dir.path(), &["run", "plan.yaml", "--format", "json"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let failure = failure_of(&record);
    assert_eq!(failure["code"], "TOOL_SERVER_FAILED", "{record}");
    let message = failure["message"].as_str().unwrap_or_default();
    assert!(message.contains("closed the connection"), "{message}");
    assert!(
        message.contains("dying on purpose"),
        "its stderr is quoted: {message}"
    );
}

/// A server still running when pagantic ends is let go, not killed: it sees its standard input
/// close and ends its own way (this one writes a file on its way out).
#[test]
fn a_server_still_running_at_the_end_ends_its_own_way() {
    let (dir, _) = tool_step_plan(
        "secret",
        "    env: [MCP_TEST_ENDED]\n    requires: [filesystem]",
    );
    let ended = dir.path().join("ended");
    let (run, record) = run_json(
        dir.path(),
        &["run", "plan.yaml", "--format", "json"],
        &[("MCP_TEST_ENDED", ended.to_str().expect("utf-8"))],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(step(&record, "call")["status"], "ok", "{record}");
    let deadline = std::time::Instant::now() + PATIENCE;
    while !ended.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not end its own way within {PATIENCE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn fifty_megabytes_of_result_are_capped() {
    let (dir, _) = tool_step_plan("flood", "    max_output_bytes: 1000\n    timeout: 60s");
    let (run, record) = run_json(dir.path(), &["run", "plan.yaml", "--format", "json"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let output = step(&record, "call")["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(output.starts_with(&"x".repeat(1000)), "{}", output.len());
    assert!(
        output.ends_with("[output truncated at 1000 bytes]"),
        "{output}"
    );
    assert!(output.len() < 1100, "{}", output.len());
}

#[test]
fn a_tool_whose_schema_is_over_the_bound_is_refused() {
    let (dir, _) = tool_step_plan("wide", "");
    let (run, record) = run_json(dir.path(), &["run", "plan.yaml", "--format", "json"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let failure = failure_of(&record);
    assert_eq!(failure["code"], "TOOL_UNAVAILABLE", "{record}");
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|m| m.contains("1001 properties, over the bound of 1000")),
        "{failure}"
    );
}

#[test]
fn only_allow_listed_variables_reach_the_server() {
    let (dir, _) = tool_step_plan("env", "    env: [MCP_TEST_SHOWN]");
    let (run, record) = run_json(
        dir.path(),
        &["run", "plan.yaml", "--format", "json"],
        &[("MCP_TEST_SHOWN", "1"), ("MCP_TEST_HIDDEN", "1")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let output = step(&record, "call")["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // `TMPDIR` is the sandbox's private directory, set by pagantic, not passed through.
    let names: Vec<&str> = output.split(' ').filter(|name| *name != "TMPDIR").collect();
    assert_eq!(names, ["MCP_TEST_SHOWN", "PATH"], "{record}");
}

/// A server that does not `require` `network` runs in a network namespace of its own: it cannot
/// reach a listener on the host's loopback. Switched off (`PAGANTIC_SANDBOX=off`), it can.
#[test]
fn a_server_without_network_cannot_reach_the_hosts_loopback() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    listener.set_nonblocking(true).expect("non-blocking");
    let port = listener.local_addr().expect("address").port().to_string();
    let (dir, _) = tool_step_plan("connect", "    env: [MCP_TEST_CONNECT]");
    let output = |sandbox: &str| {
        let env = [
            ("MCP_TEST_CONNECT", port.as_str()),
            ("PAGANTIC_SANDBOX", sandbox),
        ];
        let listed = pagantic_with(
            dir.path(),
            &["tools", "plan.yaml", "--format", "json"],
            &env,
        );
        let network = listed.stdout_json_lines()[0]["sandbox"]["network"].clone();
        let (run, record) = run_json(dir.path(), &["run", "plan.yaml", "--format", "json"], &env);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let said = step(&record, "call")["output"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        (network, said)
    };
    let (network, said) = output("on");
    if network == "enforced" {
        assert!(said.starts_with("cannot connect"), "{said}");
        assert_eq!(
            listener.accept().map(|_| ()).map_err(|e| e.kind()),
            Err(std::io::ErrorKind::WouldBlock),
            "nothing may have connected"
        );
    } else {
        assert_eq!(network, "not_enforced", "the server's sandbox is shown");
    }
    let (network, said) = output("off");
    assert_eq!(network, "not_enforced");
    assert_eq!(said, "connected");
    assert!(
        listener.accept().is_ok(),
        "the unsandboxed server connected"
    );
}

#[test]
fn a_server_that_cannot_start_is_unavailable_with_the_fix() {
    let tools =
        "  server:\n    kind: mcp\n    command: [pagantic-test-no-such-server]\n    allow: [echo]";
    let steps = "  - name: call\n    type: tool\n    tool: server\n    args: {}";
    let (dir, _) = plan(tools, "[done]", steps);
    let (run, record) = run_json(dir.path(), &["run", "plan.yaml", "--format", "json"], &[]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    let failure = failure_of(&record);
    assert_eq!(failure["code"], "TOOL_UNAVAILABLE", "{record}");
    let message = failure["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("`pagantic-test-no-such-server` was not found"),
        "{message}"
    );
    assert!(
        failure["help"]
            .as_str()
            .is_some_and(|help| help.contains("installed and on PATH")),
        "the fix: {failure}"
    );
}

#[test]
fn tools_lists_every_server_tool_and_the_allow_list_entries_it_lacks() {
    let tools = format!(
        "  files:\n    kind: mcp\n    command: {}\n    allow: [echo, missing]\n    side_effects: read",
        server_command()
    );
    let (dir, _) = plan(&tools, "[done]", &agent("files"));
    let run = pagantic_with(dir.path(), &["tools", "plan.yaml", "--format", "json"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = run.stdout_json_lines();
    let line = |name: &str| {
        lines
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {}", run.stdout))
    };
    assert_eq!(line("files.echo")["allowed"], true);
    assert_eq!(line("files.echo")["availability"], "available");
    assert_eq!(
        line("files.echo")["schema_sha256"].as_str().map(str::len),
        Some(64)
    );
    assert_eq!(line("files.secret")["allowed"], false);
    assert_eq!(line("files.wide")["allowed"], false);
    assert_eq!(line("files.missing")["availability"], "unavailable");
    assert!(
        line("files.missing")["reason"]
            .as_str()
            .is_some_and(|r| r.contains("the server has no tool `missing`")),
        "{}",
        run.stdout
    );
    let text = pagantic_with(dir.path(), &["tools", "plan.yaml"], &[]);
    assert!(
        text.stdout
            .contains("files.echo  side effects: read  available"),
        "{}",
        text.stdout
    );
}

#[test]
fn locked_refuses_a_server_whose_tools_changed() {
    let tools = format!(
        "  files:\n    kind: mcp\n    command: {}\n    allow: [echo]\n    env: [MCP_TEST_EXTRA_TOOL]\n    side_effects: none",
        server_command()
    );
    let (dir, _) = plan(&tools, "[done]", &agent("files"));
    let locked = pagantic_with(dir.path(), &["lock", "plan.yaml"], &[]);
    assert_eq!(locked.code, 0, "{}", locked.stderr);
    let lock: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("plan.yaml.lock")).expect("lockfile"),
    )
    .expect("JSON");
    assert!(lock["mcp"]["files"]["echo"].is_string(), "{lock}");
    let pinned = lock["mcp"]["files"]
        .as_object()
        .map_or(0, |tools| tools.len());
    assert!(pinned > 1, "every tool the server lists is pinned: {lock}");
    let counted = format!(", {pinned} MCP tools of 1 servers)\n");
    assert!(
        locked.stderr.ends_with(&counted),
        "the pinned tools are counted: {}",
        locked.stderr
    );
    let same = pagantic_with(dir.path(), &["run", "plan.yaml", "--locked"], &[]);
    assert_eq!(same.code, 0, "{}", same.stderr);
    let changed = pagantic_with(
        dir.path(),
        &["run", "plan.yaml", "--locked"],
        &[("MCP_TEST_EXTRA_TOOL", "1")],
    );
    assert_eq!(changed.code, 2, "{}", changed.stderr);
    assert!(
        changed.stderr.contains("MCP server of tool `files`"),
        "{}",
        changed.stderr
    );
    assert!(changed.stderr.contains("extra"), "{}", changed.stderr);
}

#[test]
fn dry_run_stands_in_for_a_server_with_side_effects() {
    let tools =
        "  server:\n    kind: mcp\n    command: [pagantic-test-no-such-server]\n    allow: [echo]";
    let steps = "  - name: call\n    type: tool\n    tool: server\n    args: { text: hi }";
    let (dir, _) = plan(tools, "[done]", steps);
    let (run, record) = run_json(
        dir.path(),
        &["run", "plan.yaml", "--dry-run", "--format", "json"],
        &[],
    );
    assert_eq!(run.code, 0, "nothing is started: {}", run.stderr);
    assert_eq!(step(&record, "call")["output"]["dry_run"], true, "{record}");
}

/// Waits for the server to write its pids to `pidfile` (a whole line), for at most [`PATIENCE`].
fn read_pids(pidfile: &Path) -> Vec<String> {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        if let Ok(text) = std::fs::read_to_string(pidfile)
            && text.ends_with('\n')
        {
            return text.split_whitespace().map(str::to_string).collect();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server never wrote {}",
            pidfile.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn cancelling_a_run_kills_the_server_and_its_process_group() {
    let (dir, _) = tool_step_plan("hang", "    timeout: 300s\n    env: [MCP_TEST_PIDFILE]");
    let pidfile = dir.path().join("pids");
    let cache = crate::fresh_cache_dir();
    let child = crate::command(&cache)
        .args(["run", "plan.yaml"])
        .current_dir(dir.path())
        .env("MCP_TEST_PIDFILE", &pidfile)
        // Without the sandbox, as for the timeout above.
        .env("PAGANTIC_SANDBOX", "off")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("pagantic starts");
    let pids = read_pids(&pidfile);
    assert_eq!(pids.len(), 2, "{pids:?}");
    crate::send_signal(&child, nix::sys::signal::Signal::SIGINT);
    let output = crate::finish_within(child, PATIENCE);
    assert_ne!(output.status.code(), Some(0), "the run was cancelled");
    for pid in &pids {
        assert_dies(pid);
    }
}

#[test]
fn validate_checks_an_mcp_tool_without_starting_anything() {
    let cases = [
        // the tool's fields, what the diagnostic says
        (
            "command: [pagantic-test-no-such-server]\n    url: http://127.0.0.1:1/mcp\n    allow: [echo]",
            "`command`, `url`",
        ),
        ("allow: [echo]", "`command`, `url`"),
        ("command: [x]\n    allow: []", "needs at least 1 item"),
        ("command: [x]\n    allow: [echo, echo]", "allow"),
        ("url: ftp://example.com\n    allow: [echo]", "url"),
    ];
    for (fields, expected) in cases {
        let tools = format!("  server:\n    kind: mcp\n    {fields}");
        let (dir, _) = plan(&tools, "[done]", &agent("server"));
        let run = pagantic_with(dir.path(), &["validate", "plan.yaml"], &[]);
        assert_eq!(run.code, 2, "{fields}: {}{}", run.stdout, run.stderr);
        let said = format!("{}{}", run.stdout, run.stderr);
        assert!(said.contains(expected), "{fields}: {said}");
    }
    let tools =
        "  server:\n    kind: mcp\n    command: [pagantic-test-no-such-server]\n    allow: [echo]";
    let (dir, _) = plan(tools, "[done]", &agent("server"));
    let valid = pagantic_with(dir.path(), &["validate", "plan.yaml"], &[]);
    assert_eq!(valid.code, 0, "nothing is started: {}", valid.stderr);
}
