//! Tools from MCP servers: one client session per server for the whole session ([`McpServers`],
//! which the session owns), reached over stdio (a child process) or streamable HTTP, with the
//! rmcp SDK.
//!
//! A stdio server is contained like a command tool: started directly (never through a shell),
//! with a cleared environment (only `PATH` and the allowed variables), in its working directory
//! and its own process group, its standard error read and capped. A call that runs past its
//! timeout or is dropped (the run cancelled) kills that process group, and the next call starts
//! the server again; so does a call after the server exited. What the server may reach (the
//! network, files) and the containment of what it starts are its [`Sandbox`]'s, as for a command.
//!
//! Client sessions live on the session's async runtime, which [`McpServers`] is given, so a server
//! outlives the runs and batch rows that share it and can be reached from plan building, which
//! is not async (listing a server's tools waits for the runtime to do it). A server still running
//! when its [`McpServers`] is dropped (with the session) is let go, not killed: it sees its
//! standard input close, as when pagantic exits. Every answer is
//! bounded: a message over [`MAX_MESSAGE_BYTES`] is dropped by the transport, a listing reads at
//! most [`MAX_LIST_PAGES`] pages, [`MAX_LISTED_TOOLS`] tools and [`MAX_LISTED_BYTES`] (and stops
//! once it has every tool it was asked for), a tool's input
//! schema over [`MAX_SCHEMA_BYTES`] or [`MAX_SCHEMA_PROPERTIES`] is refused, and a result is cut
//! at the tool's `max_output_bytes`. Every failure leaves with the server's secrets (its
//! headers' values, its URL's credentials) masked, whatever the server echoed.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ErrorCode, PaginatedRequestParams,
};
use rmcp::service::{RoleClient, RunningService, ServiceError, ServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Child;
use tokio::runtime::{Handle, RuntimeFlavor};

use super::command::{GroupKiller, check_working_dir, passed_env, spawn_failure, tail};
use super::sandbox::{Enforcement, Sandbox};
use crate::core::secret::Secrets;
use crate::core::{Failure, FailureCode};

/// Largest message a server may send (one JSON-RPC line over stdio, one response over HTTP);
/// a larger one is dropped, and the call waiting for it ends at its timeout.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// Largest input schema of a tool offered to a model, serialised.
pub const MAX_SCHEMA_BYTES: usize = 1024 * 1024;
/// Most properties an input schema may declare, counted through every nested `properties`.
pub const MAX_SCHEMA_PROPERTIES: usize = 1000;
/// Most pages of a server's tool listing (`tools/list`) read.
pub const MAX_LIST_PAGES: usize = 64;
/// Most tools one listing keeps.
pub const MAX_LISTED_TOOLS: usize = 4096;
/// Most bytes of tool definitions (names, descriptions, schemas, serialised) one listing keeps.
pub const MAX_LISTED_BYTES: usize = 16 * 1024 * 1024;
/// How much of a stdio server's standard error is kept (its end) to explain a failure.
const STDERR_KEPT_CHARS: usize = 2000;
/// How long a failure waits for a server that ended to finish writing its stderr.
const STDERR_GRACE: Duration = Duration::from_secs(2);

/// How pagantic reaches a server.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program and its arguments, each passed as written.
        argv: Vec<String>,
        /// The directory it runs in; None keeps ours.
        working_dir: Option<PathBuf>,
        /// Variables passed through from ours besides `PATH`; all others are cleared.
        env_allow: Vec<String>,
        /// What the server may reach, and how that is enforced.
        sandbox: Sandbox,
    },
    /// A streamable HTTP endpoint.
    Http {
        url: String,
        /// `(header, environment variable)`: each header's value is read from the variable when
        /// pagantic connects, and never printed.
        headers_env: Vec<(String, String)>,
    },
}

impl McpTransport {
    /// What a message built from the server's replies must not show, as the environment holds
    /// it now: an HTTP server's headers' values and its URL's credentials; the values of the
    /// variables a stdio server is handed (an API token it reads), which its stderr may print.
    fn secrets(&self) -> Secrets {
        let (secrets, variables): (Secrets, Vec<&String>) = match self {
            McpTransport::Stdio { env_allow, .. } => (Secrets::new(), env_allow.iter().collect()),
            McpTransport::Http { url, headers_env } => (
                Secrets::new().with_url(url),
                headers_env.iter().map(|(_, variable)| variable).collect(),
            ),
        };
        variables
            .into_iter()
            .filter_map(|variable| std::env::var(variable).ok())
            .fold(secrets, |secrets, value| secrets.with(&value))
    }

    /// The server as messages name it: its program or its URL.
    fn shown(&self) -> String {
        match self {
            McpTransport::Stdio { argv, .. } => {
                format!("`{}`", argv.first().map_or("", String::as_str))
            }
            McpTransport::Http { url, .. } => url.clone(),
        }
    }
}

/// A server and the limits of the calls made to it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct McpServerSpec {
    pub transport: McpTransport,
    /// Longest a connection or a call may take; a stdio server is killed after it.
    pub timeout: Duration,
}

/// A tool a server lists.
#[derive(Debug, Clone, PartialEq)]
pub struct McpToolDefinition {
    pub name: String,
    pub description: String,
    /// The JSON Schema of its arguments, as the server gave it.
    pub input_schema: Value,
    /// SHA-256 (hex) of the tool's name, description and input schema: it changes when the
    /// server changes what the model would see.
    pub sha256: String,
}

impl McpToolDefinition {
    fn new(tool: &rmcp::model::Tool) -> Self {
        let input_schema = Value::Object(tool.input_schema.as_ref().clone());
        let description = tool.description.as_deref().unwrap_or_default().to_string();
        let hashed =
            json!({ "name": tool.name, "description": description, "input_schema": input_schema });
        McpToolDefinition {
            name: tool.name.to_string(),
            description,
            sha256: format!("{:x}", Sha256::digest(hashed.to_string().as_bytes())),
            input_schema,
        }
    }

    /// Why its input schema may not be offered to a model, when it may not: over
    /// [`MAX_SCHEMA_BYTES`] serialised, or declaring over [`MAX_SCHEMA_PROPERTIES`] properties.
    pub fn over_bounds(&self) -> Option<String> {
        let bytes = self.input_schema.to_string().len();
        if bytes > MAX_SCHEMA_BYTES {
            return Some(format!(
                "its input schema is {bytes} bytes, over the bound of {MAX_SCHEMA_BYTES}"
            ));
        }
        let properties = count_properties(&self.input_schema);
        (properties > MAX_SCHEMA_PROPERTIES).then(|| {
            format!(
                "its input schema declares {properties} properties, over the bound of {MAX_SCHEMA_PROPERTIES}"
            )
        })
    }
}

/// Every property declared anywhere in a schema (the keys of each `properties` object).
fn count_properties(schema: &Value) -> usize {
    match schema {
        Value::Object(map) => {
            let here = match map.get("properties") {
                Some(Value::Object(properties)) => properties.len(),
                _ => 0,
            };
            here + map.values().map(count_properties).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(count_properties).sum(),
        _ => 0,
    }
}

/// The MCP servers a session reaches, each with one client session shared by every tool and
/// run that names it; they live on the runtime they are given (the session's).
pub struct McpServers {
    runtime: Handle,
    servers: Mutex<HashMap<McpServerSpec, Arc<McpServer>>>,
}

impl McpServers {
    /// Servers whose sessions will live on `runtime` (a multi-threaded one: listing a server's
    /// tools blocks the caller until a worker of the runtime has done it).
    pub fn new(runtime: Handle) -> Self {
        McpServers {
            runtime,
            servers: Mutex::default(),
        }
    }

    /// The server of `spec`, shared by every tool and run that names it.
    pub fn server(&self, spec: McpServerSpec) -> Arc<McpServer> {
        let mut servers = self.servers.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(servers.entry(spec.clone()).or_insert_with(|| {
            Arc::new(McpServer {
                spec,
                runtime: self.runtime.clone(),
                session: tokio::sync::Mutex::new(None),
            })
        }))
    }
}

impl Drop for McpServers {
    /// The servers still running when their session ends are let go, not killed: each sees its
    /// standard input close, and ends as it would when pagantic exits.
    fn drop(&mut self) {
        let servers = self
            .servers
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for server in servers.values() {
            if let Ok(current) = server.session.try_lock()
                && let Some(session) = current.as_ref()
            {
                session.let_go();
            }
        }
    }
}

/// A call dropped before its answer (the run cancelled, a step's timeout): its task on the
/// session's runtime is aborted and, since the server may still be working on it, a stdio
/// server's process group is killed at once, before the process can exit.
struct Abandon {
    task: tokio::task::AbortHandle,
    server: Option<Arc<McpServer>>,
}

impl Abandon {
    fn disarm(mut self) {
        self.server = None;
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            self.task.abort();
            // Not held during a call, only while connecting (then there is nothing to kill yet).
            if let Ok(current) = server.session.try_lock()
                && let Some(session) = current.as_ref()
            {
                session.kill();
            }
        }
    }
}

/// One MCP server: its session, started at first use and again after it died.
pub struct McpServer {
    spec: McpServerSpec,
    /// The runtime its session lives on.
    runtime: Handle,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
}

impl McpServer {
    /// What its process may reach and what of that is enforced here: None for a server reached
    /// over HTTP, which pagantic does not start.
    pub fn enforcement(&self) -> Option<&Enforcement> {
        match &self.spec.transport {
            McpTransport::Stdio { sandbox, .. } => Some(&sandbox.enforcement),
            McpTransport::Http { .. } => None,
        }
    }
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// A live connection, and for a stdio server its process.
struct Session {
    service: RunningService<RoleClient, ()>,
    process: Option<ServerProcess>,
    /// Set when the session must not be used again (its process was killed).
    dead: AtomicBool,
}

/// A stdio server's process: its group, the child and the end of what it wrote on stderr.
struct ServerProcess {
    /// The private temporary directory its sandbox lets it write, removed with it.
    _temp: Option<tempfile::TempDir>,
    group: Mutex<GroupKiller>,
    /// None once the server was let go (see [`McpServers`]'s drop).
    child: Mutex<Option<Child>>,
    stderr: Arc<Mutex<String>>,
    /// Becomes true once its stderr has been read to its end.
    stderr_read: tokio::sync::watch::Receiver<bool>,
}

impl Session {
    /// Kills a stdio server's process group; the session is not used again.
    fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
        if let Some(process) = &self.process {
            process
                .group
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .kill();
        }
    }

    /// Lets a stdio server's process go: neither it nor its group is killed from now on, not
    /// even when dropped; it ends when its standard input closes.
    fn let_go(&self) {
        if let Some(process) = &self.process {
            process
                .group
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .let_go();
            let child = process
                .child
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            // A child dropped is killed (`kill_on_drop`, for the servers abandoned mid-call).
            std::mem::forget(child);
        }
    }

    fn usable(&self) -> bool {
        !self.dead.load(Ordering::SeqCst) && !self.service.is_closed()
    }

    /// How the server's process ended and what it said last, for a failure's message.
    async fn epitaph(&self) -> String {
        match &self.process {
            Some(process) => epitaph_of(process).await,
            None => String::new(),
        }
    }
}

/// How a server's process ended (when it has) and the end of its stderr, once the stderr is
/// read to its end (for at most [`STDERR_GRACE`]: a child it started may hold it open).
async fn epitaph_of(process: &ServerProcess) -> String {
    let mut read = process.stderr_read.clone();
    let _ = tokio::time::timeout(STDERR_GRACE, read.wait_for(|done| *done)).await;
    let status = process
        .child
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .as_mut()
        .and_then(|child| child.try_wait().ok().flatten());
    let mut said = match status {
        Some(status) => format!(" (it exited: {status})"),
        None => String::new(),
    };
    let stderr = process
        .stderr
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .trim_end()
        .to_string();
    if !stderr.is_empty() {
        said.push_str(&format!(
            "; its stderr: {}",
            tail(&stderr, STDERR_KEPT_CHARS)
        ));
    }
    said
}

impl McpServer {
    /// The tools the server lists, connecting first if needed: every one, or (with `wanted`)
    /// until those named are all found. Blocks: for plan building and the CLI. A listing past
    /// its bounds (pages, tools, bytes) before it has what it needs fails.
    pub fn list_tools(
        self: &Arc<Self>,
        wanted: Option<&[String]>,
    ) -> Result<Vec<McpToolDefinition>, Failure> {
        let server = Arc::clone(self);
        let wanted = wanted.map(<[String]>::to_vec);
        let listed = self.block_on(async move { server.list_here(wanted.as_deref()).await });
        self.masked(listed)
    }

    /// [`list_tools`](Self::list_tools), on the session's runtime: page after page, within the
    /// bounds.
    async fn list_here(
        &self,
        wanted: Option<&[String]>,
    ) -> Result<Vec<McpToolDefinition>, Failure> {
        let session = self.session().await?;
        let mut listed: Vec<McpToolDefinition> = Vec::new();
        let (mut cursor, mut bytes) = (None, 0usize);
        for _ in 0..MAX_LIST_PAGES {
            let params = PaginatedRequestParams::default().with_cursor(cursor);
            let page = self
                .answer(
                    &session,
                    "listing its tools",
                    session.service.list_tools(Some(params)),
                )
                .await?;
            for tool in &page.tools {
                let tool = McpToolDefinition::new(tool);
                bytes = bytes
                    .saturating_add(tool.name.len())
                    .saturating_add(tool.description.len())
                    .saturating_add(tool.input_schema.to_string().len());
                if listed.len() >= MAX_LISTED_TOOLS || bytes > MAX_LISTED_BYTES {
                    return Err(self.listing_too_long(&format!(
                        "more than {MAX_LISTED_TOOLS} tools or {MAX_LISTED_BYTES} bytes of them"
                    )));
                }
                listed.push(tool);
            }
            let found_all = wanted.is_some_and(|wanted| {
                wanted
                    .iter()
                    .all(|name| listed.iter().any(|tool| &tool.name == name))
            });
            cursor = page.next_cursor;
            if cursor.is_none() || found_all {
                return Ok(listed);
            }
        }
        Err(self.listing_too_long(&format!("more than {MAX_LIST_PAGES} pages")))
    }

    /// A listing that went past its bounds.
    fn listing_too_long(&self, past: &str) -> Failure {
        Failure::new(
            FailureCode::ToolServerFailed,
            format!(
                "MCP server {} lists {past} before ending its listing",
                self.spec.transport.shown()
            ),
        )
        .with_help("the server's `tools/list` does not end: fix or replace the server")
        .retryable(false)
    }

    /// `result` with the server's secrets masked in its failure.
    fn masked<T>(&self, result: Result<T, Failure>) -> Result<T, Failure> {
        result.map_err(|failure| self.spec.transport.secrets().failure(failure))
    }

    /// Calls tool `name` with `args` (already checked against its schema) and returns its
    /// result: its structured content when it has some, else its text, cut at
    /// `max_output_bytes`. Dropping the returned future stops the call (and kills a stdio
    /// server's process group).
    pub async fn call(
        self: &Arc<Self>,
        name: &str,
        args: &Value,
        max_output_bytes: usize,
    ) -> Result<Value, Failure> {
        let server = Arc::clone(self);
        let (name, args) = (name.to_string(), args.clone());
        let task = self
            .runtime
            .spawn(async move { server.call_here(&name, args).await });
        let abandoned = Abandon {
            task: task.abort_handle(),
            server: Some(Arc::clone(self)),
        };
        let result = task.await;
        abandoned.disarm();
        let result = result
            .map_err(|error| {
                Failure::new(
                    FailureCode::ToolServerFailed,
                    format!(
                        "the call to MCP server {} ended abnormally: {error}",
                        self.spec.transport.shown()
                    ),
                )
            })
            .and_then(|result| result);
        Ok(result_value(self.masked(result)?, max_output_bytes))
    }

    /// Runs `work` on the session's runtime and waits for it, from a caller that is not async
    /// (plan building, the CLI). On a worker of a multi-threaded runtime the worker hands its
    /// other tasks over first, so waiting holds none of them up.
    fn block_on<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, Failure>> + Send + 'static,
    ) -> Result<T, Failure> {
        let (sender, receiver) = std::sync::mpsc::channel();
        self.runtime.spawn(async move {
            let _ = sender.send(work.await);
        });
        let on_a_worker = Handle::try_current()
            .is_ok_and(|current| current.runtime_flavor() == RuntimeFlavor::MultiThread);
        let received = if on_a_worker {
            tokio::task::block_in_place(|| receiver.recv())
        } else {
            receiver.recv()
        };
        received.unwrap_or_else(|_| {
            Err(Failure::new(
                FailureCode::ToolServerFailed,
                "the MCP session ended abnormally",
            ))
        })
    }

    /// [`call`](Self::call), on the session's runtime.
    async fn call_here(&self, name: &str, args: Value) -> Result<CallToolResult, Failure> {
        let arguments = match args {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return Err(Failure::new(
                    FailureCode::ToolInvalidArguments,
                    format!(
                        "the arguments of MCP tool `{name}` must be a JSON object, not {other}"
                    ),
                ));
            }
        };
        let params = CallToolRequestParams::new(name.to_string()).with_arguments(arguments);
        let session = self.session().await?;
        let doing = format!("running tool `{name}`");
        let result = self
            .answer(&session, &doing, session.service.call_tool(params))
            .await?;
        if result.is_error == Some(true) {
            let text = tail(&text_of(&result.content), STDERR_KEPT_CHARS);
            return Err(Failure::new(
                FailureCode::ToolExecutionFailed,
                format!("MCP tool `{name}` reported an error: {text}"),
            ));
        }
        Ok(result)
    }

    /// What a request to the server answered, within the timeout (after which a stdio server
    /// is killed).
    async fn answer<T>(
        &self,
        session: &Session,
        doing: &str,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(self.spec.timeout, request).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(error)) => Err(self.service_failure(session, doing, error).await),
            Err(_) => {
                session.kill();
                Err(self.timed_out(doing))
            }
        }
    }

    /// The live session, connecting when there is none or the last one died.
    async fn session(&self) -> Result<Arc<Session>, Failure> {
        let mut current = self.session.lock().await;
        if let Some(session) = current.as_ref()
            && session.usable()
        {
            return Ok(Arc::clone(session));
        }
        if let Some(old) = current.take() {
            old.kill();
        }
        let session = Arc::new(self.connect().await?);
        *current = Some(Arc::clone(&session));
        Ok(session)
    }

    async fn connect(&self) -> Result<Session, Failure> {
        match &self.spec.transport {
            McpTransport::Stdio {
                argv,
                working_dir,
                env_allow,
                sandbox,
            } => {
                self.start(argv, working_dir.as_ref(), env_allow, sandbox)
                    .await
            }
            McpTransport::Http { url, headers_env } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                config.custom_headers = headers(headers_env)?;
                config.max_json_response_size = MAX_MESSAGE_BYTES;
                config.max_sse_event_size = MAX_MESSAGE_BYTES;
                let transport = StreamableHttpClientTransport::from_config(config);
                let service = tokio::time::timeout(self.spec.timeout, ().serve(transport))
                    .await
                    .map_err(|_| self.timed_out("connecting"))?
                    .map_err(|error| self.unreachable(&error.to_string(), ""))?;
                Ok(Session {
                    service,
                    process: None,
                    dead: AtomicBool::new(false),
                })
            }
        }
    }

    /// Starts a stdio server and opens its session.
    async fn start(
        &self,
        argv: &[String],
        working_dir: Option<&PathBuf>,
        env_allow: &[String],
        sandbox: &Sandbox,
    ) -> Result<Session, Failure> {
        let Some(program) = argv.first() else {
            return Err(Failure::new(
                FailureCode::ToolServerFailed,
                "the MCP server's command is empty: there is no program to start",
            )
            .retryable(false));
        };
        if let Some(dir) = working_dir {
            check_working_dir(program, dir).await?;
        }
        let prepared = sandbox.prepare(
            argv,
            working_dir.map(PathBuf::as_path),
            passed_env(env_allow),
        )?;
        let mut command = prepared.command;
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|error| {
            let failure = spawn_failure(program, &error);
            Failure {
                code: FailureCode::ToolServerFailed,
                message: format!("the MCP server could not be started: {}", failure.message),
                ..failure
            }
        })?;
        let group = GroupKiller::new(child.id());
        let stderr = Arc::new(Mutex::new(String::new()));
        let (stderr_ended, stderr_read) = tokio::sync::watch::channel(false);
        if let Some(pipe) = child.stderr.take() {
            let kept = Arc::clone(&stderr);
            tokio::spawn(async move {
                keep_tail(pipe, kept).await;
                let _ = stderr_ended.send(true);
            });
        }
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(Failure::new(
                FailureCode::ToolServerFailed,
                format!("`{program}` was started without its standard input and output"),
            ));
        };
        let process = ServerProcess {
            _temp: prepared.temp,
            group: Mutex::new(group),
            child: Mutex::new(Some(child)),
            stderr,
            stderr_read,
        };
        let transport =
            AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(MAX_MESSAGE_BYTES);
        let service = tokio::time::timeout(self.spec.timeout, ().serve(transport)).await;
        match service {
            Ok(Ok(service)) => Ok(Session {
                service,
                process: Some(process),
                dead: AtomicBool::new(false),
            }),
            Ok(Err(error)) => {
                let said = epitaph_of(&process).await;
                process
                    .group
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .kill();
                Err(self.unreachable(&error.to_string(), &said))
            }
            Err(_) => {
                process
                    .group
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .kill();
                Err(self.timed_out("starting"))
            }
        }
    }

    fn timed_out(&self, doing: &str) -> Failure {
        let killed = match self.spec.transport {
            McpTransport::Stdio { .. } => {
                "; it and every process it started were killed, and the next call starts it again"
            }
            McpTransport::Http { .. } => "",
        };
        Failure::new(
            FailureCode::ToolTimeout,
            format!(
                "MCP server {} took longer than its {:?} timeout {doing}{killed}",
                self.spec.transport.shown(),
                self.spec.timeout
            ),
        )
    }

    /// A server that could not be started, reached or initialised.
    fn unreachable(&self, error: &str, said: &str) -> Failure {
        let help = match &self.spec.transport {
            McpTransport::Stdio { argv, .. } => format!(
                "run `{}` by hand to see whether it starts and speaks MCP on stdin/stdout; `pagantic tools PLAN` connects to each server and lists its tools",
                argv.join(" ")
            ),
            McpTransport::Http { url, .. } => format!(
                "is an MCP server listening at {url} (streamable HTTP), and are the variables its headers come from set? `pagantic tools PLAN` connects to each server and lists its tools"
            ),
        };
        Failure::new(
            FailureCode::ToolServerFailed,
            format!(
                "MCP server {} could not be reached: {error}{said}",
                self.spec.transport.shown()
            ),
        )
        .with_help(help)
    }

    /// A request that failed: the server's own error, or the connection lost.
    async fn service_failure(
        &self,
        session: &Session,
        doing: &str,
        error: ServiceError,
    ) -> Failure {
        match error {
            ServiceError::McpError(error) => {
                let code = match error.code {
                    ErrorCode::INVALID_PARAMS => FailureCode::ToolInvalidArguments,
                    ErrorCode::METHOD_NOT_FOUND => FailureCode::ToolNotFound,
                    _ => FailureCode::ToolExecutionFailed,
                };
                Failure::new(
                    code,
                    format!(
                        "MCP server {} answered an error {doing}: {} (code {})",
                        self.spec.transport.shown(),
                        error.message,
                        error.code.0
                    ),
                )
            }
            ServiceError::Timeout { .. } => {
                session.kill();
                self.timed_out(doing)
            }
            other => {
                let said = session.epitaph().await;
                session.kill();
                Failure::new(
                    FailureCode::ToolServerFailed,
                    format!(
                        "MCP server {} closed the connection while {doing}: {other}{said}",
                        self.spec.transport.shown()
                    ),
                )
                .with_help("the server crashed or exited; the next call starts it again. Run its command by hand to see why it stops")
            }
        }
    }
}

/// The headers of an HTTP server, each value read from its environment variable.
fn headers(
    headers_env: &[(String, String)],
) -> Result<HashMap<reqwest::header::HeaderName, reqwest::header::HeaderValue>, Failure> {
    headers_env
        .iter()
        .map(|(header, variable)| {
            let name = reqwest::header::HeaderName::from_bytes(header.as_bytes()).map_err(|_| {
                Failure::new(
                    FailureCode::ConfigInvalidInput,
                    format!("`{header}` is not a valid HTTP header name"),
                )
            })?;
            let value = std::env::var(variable).map_err(|_| {
                Failure::new(
                    FailureCode::ToolServerFailed,
                    format!("the environment variable `{variable}` (for header `{header}`) is not set"),
                )
                .with_help(format!("set `{variable}` before running the plan"))
                .retryable(false)
            })?;
            let mut value = reqwest::header::HeaderValue::from_str(&value).map_err(|_| {
                Failure::new(
                    FailureCode::ConfigInvalidInput,
                    format!("the value of `{variable}` (for header `{header}`) is not a valid header value"),
                )
            })?;
            value.set_sensitive(true);
            Ok((name, value))
        })
        .collect()
}

/// Reads a pipe to its end, keeping its last [`STDERR_KEPT_CHARS`] characters.
async fn keep_tail(mut pipe: impl AsyncRead + Unpin, kept: Arc<Mutex<String>>) {
    let mut chunk = vec![0; 8192];
    while let Ok(read) = pipe.read(&mut chunk).await {
        if read == 0 {
            break;
        }
        let mut kept = kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        kept.push_str(&String::from_utf8_lossy(&chunk[..read]));
        if kept.len() > 2 * STDERR_KEPT_CHARS {
            *kept = tail(&kept, STDERR_KEPT_CHARS);
        }
    }
}

/// The text blocks of a result, one after another; other blocks are named.
fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => format!("[image {}]", image.mime_type),
            ContentBlock::Audio(_) => "[audio]".to_string(),
            _ => "[resource]".to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a call returns: its structured content when it has some and it fits in
/// `max_output_bytes`, else its text cut there and marked, like a command's output.
fn result_value(result: CallToolResult, max_output_bytes: usize) -> Value {
    if let Some(structured) = result.structured_content
        && structured.to_string().len() <= max_output_bytes
    {
        return structured;
    }
    let mut text = text_of(&result.content);
    if text.len() > max_output_bytes {
        let mut cut = max_output_bytes;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(&format!("\n[output truncated at {max_output_bytes} bytes]"));
    }
    Value::String(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_are_counted_through_every_level() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": { "type": "string" },
                "b": { "type": "object", "properties": { "c": {}, "d": {} } },
            },
            "anyOf": [{ "properties": { "e": {} } }],
        });
        assert_eq!(count_properties(&schema), 5);
    }

    #[test]
    fn a_schema_over_a_bound_is_refused_with_its_size() {
        let properties: Map<String, Value> = (0..=MAX_SCHEMA_PROPERTIES)
            .map(|i| (format!("p{i}"), json!({})))
            .collect();
        let many = McpToolDefinition {
            name: "many".into(),
            description: String::new(),
            input_schema: json!({ "type": "object", "properties": properties }),
            sha256: String::new(),
        };
        let why = many.over_bounds().expect("refused");
        assert!(why.contains("1001 properties"), "{why}");
        let big = McpToolDefinition {
            input_schema: json!({ "description": "x".repeat(MAX_SCHEMA_BYTES) }),
            ..many.clone()
        };
        assert!(
            big.over_bounds()
                .expect("refused")
                .contains("bytes, over the bound")
        );
        let fine = McpToolDefinition {
            input_schema: json!({ "type": "object" }),
            ..many
        };
        assert_eq!(fine.over_bounds(), None);
    }

    #[test]
    fn a_result_is_its_structured_content_or_its_text_cut_at_the_cap() {
        let text = CallToolResult::success(vec![
            ContentBlock::text("héllo"),
            ContentBlock::text("world"),
        ]);
        assert_eq!(result_value(text.clone(), 100), json!("héllo\nworld"));
        assert_eq!(
            result_value(text, 2),
            json!("h\n[output truncated at 2 bytes]"),
            "never half a character"
        );
        let mut structured = CallToolResult::success(vec![ContentBlock::text("{\"n\":1}")]);
        structured.structured_content = Some(json!({ "n": 1 }));
        assert_eq!(result_value(structured.clone(), 100), json!({ "n": 1 }));
        assert_eq!(
            result_value(structured, 3),
            json!("{\"n\n[output truncated at 3 bytes]")
        );
    }
}
