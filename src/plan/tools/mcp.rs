//! `kind: mcp` — the tools of a Model Context Protocol server, reached as a child process over
//! stdio (`command`) or over streamable HTTP (`url`).
//!
//! One entry offers a model each tool of the server named in `allow`, with the server's name,
//! description and input schema; the server's other tools do not exist for it. `validate` checks
//! the entry without starting anything; the server is reached when a run that offers its tools
//! is prepared (or by `pagantic tools` and `pagantic lock`).

use std::time::Duration;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Capability, ToolAccess, ToolEnv, ToolKind};
use crate::core::duration::DurationSpec;
use crate::core::{Failure, FailureCode};
use crate::orchestrate::tools::{McpCall, SideEffects, ToolAction, ToolRuntime};
use crate::tool::{McpServer, McpServerSpec, McpToolDefinition, McpTransport};

/// Default timeout of a connection to an MCP server and of each call.
const DEFAULT_MCP_TIMEOUT: Duration = Duration::from_secs(30);
/// Default cap of an MCP tool's result.
const DEFAULT_MCP_OUTPUT: usize = 64 * 1024;

/// The tools of an MCP server: started as a program (`command`, over stdio) or reached at a `url` (streamable HTTP); exactly one of the two.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    { "type": "object", "required": ["command"] },
    { "type": "object", "required": ["url"] },
]))]
pub struct McpTool {
    /// The server's program and its arguments, started directly (never through a shell) in its own process group, speaking MCP on its standard input and output: `[npx, -y, "@modelcontextprotocol/server-filesystem", ./docs]`.
    #[serde(default)]
    #[schemars(length(min = 1))]
    pub command: Option<Vec<String>>,
    /// The URL of a streamable HTTP MCP server (`http://127.0.0.1:8000/mcp`).
    #[serde(default)]
    #[schemars(regex(pattern = r"^https?://"))]
    pub url: Option<String>,
    /// The server's tools a model may call, by their names on the server; its other tools do not exist for the model. Each is offered with the server's description and input schema, and its arguments are checked against that schema before a call.
    #[schemars(length(min = 1), extend("uniqueItems" = true))]
    pub allow: Vec<String>,
    /// For `command`: environment variables passed through to the server; all others are cleared (`PATH` is always passed).
    #[serde(default)]
    pub env: Vec<String>,
    /// For `url`: HTTP headers sent with every request, each read from the environment variable named here (`Authorization: MCP_TOKEN`); values are never printed.
    #[serde(default)]
    pub headers_env: IndexMap<String, String>,
    /// For `command`: working directory, relative to the plan file.
    #[serde(default)]
    pub working_dir: Option<String>,
    /// Longest connecting or one call may take (default 30s); a `command` server is killed with its process group after it, and started again at the next call.
    #[serde(default)]
    pub timeout: Option<DurationSpec>,
    /// Most bytes of a result kept (default 65536); the rest is cut and marked. A structured result over it is returned as its text, cut.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_output_bytes: Option<u64>,
    /// What the server's tools may change (default `external`, the most cautious): the server's own hints are not trusted.
    #[serde(default)]
    pub side_effects: SideEffects,
    /// Whether calling a tool twice is the same as once; only idempotent tools are retried automatically.
    #[serde(default)]
    pub idempotent: bool,
    #[serde(flatten)]
    pub access: ToolAccess,
}

impl McpTool {
    /// The fields set that do not apply to how the server is reached, each with that way
    /// (`command` or `url`): `env` and `working_dir` are a started program's, `headers_env` a
    /// URL's requests'. Such a field would otherwise be silently unused.
    pub fn misplaced(&self) -> Vec<(&'static str, &'static str)> {
        let mut misplaced = Vec::new();
        if self.url.is_some() {
            if !self.env.is_empty() {
                misplaced.push(("env", "url"));
            }
            if self.working_dir.is_some() {
                misplaced.push(("working_dir", "url"));
            }
        }
        if self.command.is_some() && !self.headers_env.is_empty() {
            misplaced.push(("headers_env", "command"));
        }
        misplaced
    }

    /// The server this entry names, as the client connects to it.
    pub fn server_spec(&self, env: &ToolEnv<'_>) -> McpServerSpec {
        let transport = match (&self.command, &self.url) {
            (_, Some(url)) => McpTransport::Http {
                url: url.clone(),
                headers_env: self
                    .headers_env
                    .iter()
                    .map(|(header, variable)| (header.clone(), variable.clone()))
                    .collect(),
            },
            (command, None) => McpTransport::Stdio {
                argv: command.clone().unwrap_or_default(),
                working_dir: Some(env.dir.join(self.working_dir.as_deref().unwrap_or("."))),
                env_allow: self.env.clone(),
                sandbox: self.sandbox(env),
            },
        };
        McpServerSpec {
            transport,
            timeout: self.timeout.map_or(DEFAULT_MCP_TIMEOUT, |t| t.get()),
        }
    }

    /// Its server, among the session's.
    pub fn server(&self, env: &ToolEnv<'_>) -> std::sync::Arc<McpServer> {
        env.mcp.server(self.server_spec(env))
    }

    /// The tools it offers a model: each allowed one, as the server lists it. A tool that cannot
    /// be offered (the server was not reached, it has no such tool, its schema is over a bound
    /// or invalid) is built unavailable, saying why: a step that calls it fails
    /// `TOOL_UNAVAILABLE`, and an agent is not offered it.
    pub fn build_allowed(&self, env: &ToolEnv<'_>) -> Result<Vec<ToolRuntime>, Failure> {
        if env.dry_run
            && matches!(
                self.side_effects,
                SideEffects::Write | SideEffects::External
            )
        {
            return self
                .allow
                .iter()
                .map(|name| self.runtime(name, None, ToolAction::DryRun))
                .collect();
        }
        let server = self.server(env);
        let listed = server.list_tools(Some(&self.allow));
        self.allow
            .iter()
            .map(|name| {
                let found = match &listed {
                    Ok(tools) => tools.iter().find(|tool| &tool.name == name).ok_or_else(|| {
                        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
                        refused(
                            format!(
                                "its MCP server has no tool `{name}` (it has: {})",
                                crate::core::text::excerpt(&names.join(", "), 500)
                            ),
                            "fix the name in `allow`; `pagantic tools PLAN` lists the server's tools",
                        )
                    }),
                    Err(failure) => Err(failure.clone()),
                };
                let found = found.and_then(|tool| match tool.over_bounds() {
                    Some(why) => Err(refused(
                        format!("MCP tool `{name}` is refused: {why}"),
                        "a model cannot be offered it: leave it out of `allow`",
                    )),
                    None => Ok(tool),
                });
                let call = |unavailable| {
                    ToolAction::Mcp(McpCall {
                        server: std::sync::Arc::clone(&server),
                        tool: name.clone(),
                        max_output_bytes: self.max_output_bytes.map_or(DEFAULT_MCP_OUTPUT, |m| {
                            usize::try_from(m).unwrap_or(usize::MAX)
                        }),
                        unavailable,
                    })
                };
                match found {
                    Ok(tool) => self
                        .runtime(name, Some(tool), call(None))
                        .or_else(|failure| self.runtime(name, None, call(Some(failure)))),
                    Err(why) => self.runtime(name, None, call(Some(why))),
                }
            })
            .collect()
    }

    fn runtime(
        &self,
        name: &str,
        tool: Option<&McpToolDefinition>,
        action: ToolAction,
    ) -> Result<ToolRuntime, Failure> {
        let (description, parameters) = match tool {
            Some(tool) => (tool.description.clone(), tool.input_schema.clone()),
            None => (format!("MCP tool `{name}`"), Value::Null),
        };
        ToolRuntime::new(
            name.to_string(),
            description,
            parameters,
            self.side_effects,
            self.idempotent,
            action,
        )
    }
}

/// Why an allowed tool cannot be offered, and the fix.
fn refused(message: String, help: &str) -> Failure {
    Failure::new(FailureCode::ToolUnavailable, message).with_help(help)
}

impl ToolKind for McpTool {
    fn cache(&self) -> bool {
        false
    }

    fn access(&self) -> &ToolAccess {
        &self.access
    }

    /// A `command` server is a process (reading the environment when it passes `env`
    /// through); a `url` server is on the network.
    fn implied(&self) -> Vec<Capability> {
        if self.url.is_some() {
            return vec![Capability::Network];
        }
        let mut implied = vec![Capability::Process];
        if !self.env.is_empty() {
            implied.push(Capability::Environment);
        }
        implied
    }

    fn uncacheable(&self) -> Option<String> {
        Some("an MCP server's answers are its own".to_string())
    }

    fn identity(&self) -> Value {
        json!({
            "kind": "mcp",
            "command": self.command,
            "url": self.url,
            "allow": self.allow,
            "env": self.env,
            "working_dir": self.working_dir,
        })
    }

    fn build_set(&self, env: &ToolEnv<'_>) -> Option<Result<Vec<ToolRuntime>, Failure>> {
        Some(self.build_allowed(env))
    }

    /// The one allowed tool, for a `tool` step or a route agent, which call one tool.
    fn build(&self, env: &ToolEnv<'_>) -> Result<ToolRuntime, Failure> {
        match self.allow.as_slice() {
            [_] => self.build_allowed(env)?.pop().ok_or_else(|| {
                Failure::new(FailureCode::ToolNotFound, format!("tool `{}` offers no tool", env.name))
            }),
            several => Err(Failure::new(
                FailureCode::ConfigInvalidInput,
                format!(
                    "tool `{}` offers {} tools of its MCP server; a `tool` step or a route agent calls one",
                    env.name,
                    several.len()
                ),
            )
            .with_help("declare another `kind: mcp` entry for the same server with only that tool in `allow`")),
        }
    }
}
