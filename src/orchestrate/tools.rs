//! Declared tools at run time: argument validation, safety metadata, execution and tool events.
//!
//! The plan layer builds one [`ToolRuntime`] per declared tool. A call validates its arguments
//! against the tool's JSON Schema before anything runs, emits `tool_start`/`tool_end` events
//! carrying the `tool_call_id` that caused them (children of the model call that asked for it;
//! a call stopped mid-flight — the run cancelled, the step's timeout — still ends, `cancelled`),
//! and marks failures of non-idempotent tools as not retryable, so the executor never repeats a
//! side effect on its own. A tool the plan marked `cache: true` (only an idempotent one without
//! side effects beyond reading) is answered from the call cache when it has been called with the
//! same arguments, in the same resolved directory, on files with the same content before; its
//! `tool_end` event then says `cached`. A tool marked `approval: required` runs a call only once
//! its [`Approvals`] approve it (a tool named by `--approve`, or a chat's user saying yes); a call
//! not approved is recorded as refused.

use schemars::JsonSchema;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::events::{Event, EventData, OnDrop, SpanId, ToolOutcome, ToolResult};
use super::pipeline::StepContext;
use crate::cache::{CallCache, Key};
use crate::core::{Failure, FailureCode, Timestamp};
use crate::prompt::Templates;
use crate::tool::{
    Builtin, CommandSpec, Enforcement, McpServer, Sandbox, files_named, run_command,
};

/// What a tool may change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SideEffects {
    /// Pure computation.
    None,
    /// Reads local state.
    Read,
    /// Changes local state.
    Write,
    /// Reaches outside the machine.
    #[default]
    External,
}

/// Whether a tool's calls wait for someone to approve them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// Calls run without asking.
    #[default]
    Auto,
    /// Each call runs only once approved.
    Required,
}

/// A future that says whether a tool call may run.
pub type ApprovalFuture<'a> = Pin<Box<dyn Future<Output = Result<(), Failure>> + Send + 'a>>;

/// Someone who can be asked to approve a tool call (a chat's user at the terminal).
pub trait AskApproval: Send + Sync {
    /// Asks whether the call of `tool` with `args` may run: Ok, or the failure it ends with.
    fn ask<'a>(&'a self, tool: &'a str, args: &'a Value) -> ApprovalFuture<'a>;
}

/// Who approves the calls of tools marked `approval: required`: the tools approved for every
/// call (`--approve NAME`), and whoever is asked about the others; with nobody to ask, they
/// fail with TOOL_APPROVAL_REQUIRED.
#[derive(Clone, Default)]
pub struct Approvals {
    /// Tools whose calls need no asking.
    pub approved: Vec<String>,
    /// Who is asked about each other call; None: nobody, the call fails.
    pub ask: Option<Arc<dyn AskApproval>>,
}

impl Approvals {
    /// Whether the call of `tool` with `args` may run.
    pub async fn approve(&self, tool: &str, args: &Value) -> Result<(), Failure> {
        if self.approved.iter().any(|name| name == tool) {
            return Ok(());
        }
        match &self.ask {
            Some(asker) => asker.ask(tool, args).await,
            None => Err(Failure::new(
                FailureCode::ToolApprovalRequired,
                format!("tool `{tool}` needs approval for each call, and nobody was asked"),
            )
            .with_help(format!(
                "pass `--approve {tool}` to let it run, or call it from `pagantic chat` at a terminal to confirm each call"
            ))
            .retryable(false)),
        }
    }
}

/// A command tool before its argv is rendered.
#[derive(Debug, Clone)]
pub struct CommandTemplate {
    /// argv templates; each sees `args`, and `results` (the earlier agents' results when the
    /// tool runs as an agent of a sequential route, else an empty list).
    pub argv: Vec<String>,
    pub timeout: Duration,
    pub max_output_bytes: usize,
    pub working_dir: Option<PathBuf>,
    pub env_allow: Vec<String>,
    /// Whether a templated element may render to something starting with `-`.
    pub allow_dash_values: bool,
    /// What the program may reach, and how that is enforced.
    pub sandbox: Sandbox,
}

impl CommandTemplate {
    /// The argv for a call: every element rendered with `args` and `results` in scope. A
    /// templated element that renders to something starting with `-` would reach the program as
    /// an option the model chose (`sort` given `--output=file` writes a file), so it is refused
    /// unless the tool allows it or a literal `--` comes before it in argv.
    pub fn render(
        &self,
        tool: &str,
        templates: &Templates,
        args: &Value,
        results: &[Value],
    ) -> Result<Vec<String>, Failure> {
        let scope = json!({ "args": args, "results": results });
        let mut options_ended = false;
        let mut argv = Vec::with_capacity(self.argv.len());
        for (index, part) in self.argv.iter().enumerate() {
            let rendered = templates.render_str(part, &scope)?;
            let templated = part.contains("{{") || part.contains("{%");
            if index > 0
                && templated
                && rendered.starts_with('-')
                && !self.allow_dash_values
                && !options_ended
            {
                let shown: String = rendered.chars().take(40).collect();
                return Err(Failure::new(
                    FailureCode::ToolInvalidArguments,
                    format!(
                        "tool `{tool}`: argument {index} would be `{shown}`, which the program \
                         would read as an option; values from a call may not start with `-`"
                    ),
                )
                .with_help(
                    "put a literal `--` before it in argv if the program takes that as the end \
                     of options, or set `allow_dash_values: true` on the tool",
                )
                .retryable(false));
            }
            options_ended |= index > 0 && !templated && part == "--";
            argv.push(rendered);
        }
        Ok(argv)
    }
}

/// A tool of an MCP server.
#[derive(Debug, Clone)]
pub struct McpCall {
    pub server: Arc<McpServer>,
    /// The tool's name on the server.
    pub tool: String,
    /// Most bytes of a result kept; the rest is cut and marked.
    pub max_output_bytes: usize,
    /// Why it cannot be called, and the fix, when it cannot: the server was not reached when
    /// the run was prepared, it has no such tool, or the tool's schema is over a bound.
    pub unavailable: Option<Failure>,
}

/// How a tool runs.
#[derive(Debug, Clone)]
pub enum ToolAction {
    Command(CommandTemplate),
    Builtin(Builtin),
    Mcp(McpCall),
    /// `--dry-run` stand-in for tools with side effects: reports the call instead of making it.
    DryRun,
}

impl ToolAction {
    /// Why the tool cannot run on this machine, if it cannot: a command that is not on `PATH`
    /// (or not at its path), a working directory or a `read_file` root that does not exist.
    pub fn unavailable(&self) -> Option<String> {
        match self {
            ToolAction::Command(command) => {
                if let Some(dir) = &command.working_dir
                    && !dir.is_dir()
                {
                    return Some(format!("its working_dir {} does not exist", dir.display()));
                }
                let program = command.argv.first()?;
                if program.contains("{{") {
                    return None;
                }
                // An executable file, as the OS would find it: on PATH, or relative to the
                // working directory when the name has a `/`.
                let base = match &command.working_dir {
                    Some(dir) => dir.clone(),
                    None => std::env::current_dir().unwrap_or_default(),
                };
                let found = which::which_in(program, std::env::var_os("PATH"), base).is_ok();
                (!found).then(|| format!("`{program}` is not an executable program on PATH"))
            }
            ToolAction::Builtin(Builtin::ReadFile { root }) if !root.is_dir() => {
                Some(format!("its root {} does not exist", root.display()))
            }
            ToolAction::Mcp(call) => call.unavailable.as_ref().map(|f| f.message.clone()),
            ToolAction::Builtin(_) | ToolAction::DryRun => None,
        }
    }
}

/// Where a tool's results are kept, and what besides a call's arguments decides them.
pub struct ToolCache {
    pub cache: Arc<CallCache>,
    /// The tool's name, definition and the SHA-256 of the files it names.
    pub identity: Value,
}

/// A declared tool, ready to call.
pub struct ToolRuntime {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
    validator: Option<jsonschema::Validator>,
    pub side_effects: SideEffects,
    pub idempotent: bool,
    pub action: ToolAction,
    /// Where its results are kept (a tool the plan marked `cache: true`); None: it always runs.
    cache: Option<ToolCache>,
    /// Who approves each call, for a tool marked `approval: required`; None: calls run unasked.
    approvals: Option<Approvals>,
}

impl ToolRuntime {
    /// A tool; its parameter schema is compiled once here.
    pub fn new(
        name: String,
        description: String,
        parameters: Value,
        side_effects: SideEffects,
        idempotent: bool,
        action: ToolAction,
    ) -> Result<Self, Failure> {
        let validator = match parameters {
            Value::Null => None,
            ref schema => Some(jsonschema::validator_for(schema).map_err(|e| {
                Failure::new(
                    FailureCode::ConfigInvalidInput,
                    format!("tool `{name}` has an invalid parameters schema: {e}"),
                )
            })?),
        };
        Ok(ToolRuntime {
            name,
            description,
            parameters,
            validator,
            side_effects,
            idempotent,
            action,
            cache: None,
            approvals: None,
        })
    }

    /// What its processes may reach and what of that this machine enforces: None for a tool
    /// that starts no process (a builtin, a dry run's stand-in, an MCP server over HTTP).
    pub fn enforcement(&self) -> Option<&Enforcement> {
        match &self.action {
            ToolAction::Command(command) => Some(&command.sandbox.enforcement),
            ToolAction::Mcp(call) => call.server.enforcement(),
            ToolAction::Builtin(_) | ToolAction::DryRun => None,
        }
    }

    /// Why the tool cannot run here now (`TOOL_UNAVAILABLE`, saying why), if it cannot.
    pub fn unavailable(&self) -> Option<Failure> {
        let reason = self.action.unavailable()?;
        let help = match &self.action {
            ToolAction::Mcp(McpCall {
                unavailable:
                    Some(Failure {
                        help: Some(help), ..
                    }),
                ..
            }) => help.as_str(),
            _ => {
                "install the program or create the directory; `pagantic tools PLAN` lists every tool's availability"
            }
        };
        Some(
            Failure::new(
                FailureCode::ToolUnavailable,
                format!("tool `{}` is unavailable: {reason}", self.name),
            )
            .with_help(help)
            .retryable(false),
        )
    }

    /// This tool, each of its calls run only once `approvals` approve it.
    pub fn approved_by(self, approvals: Approvals) -> Self {
        ToolRuntime {
            approvals: Some(approvals),
            ..self
        }
    }

    /// This tool, answering from `cache` the calls it has answered before.
    pub fn caching(self, cache: ToolCache) -> Self {
        ToolRuntime {
            cache: Some(cache),
            ..self
        }
    }

    /// Validates `args`, runs the tool, and reports it as events under `call_id`, children of
    /// `parent`: the model call that asked for it, or the step's span when no model did.
    pub async fn call(
        &self,
        args: &Value,
        call_id: &str,
        ctx: &StepContext,
        parent: SpanId,
    ) -> Result<Value, Failure> {
        self.call_after(args, &[], call_id, ctx, parent).await
    }

    /// [`call`](Self::call) for an agent of a sequential route: a command's argv templates see
    /// `results`, the results of the agents that ran before it.
    pub async fn call_after(
        &self,
        args: &Value,
        results: &[Value],
        call_id: &str,
        ctx: &StepContext,
        parent: SpanId,
    ) -> Result<Value, Failure> {
        // Checked at each call: a program can vanish (or a directory go) during a long batch.
        if let Some(failure) = self.unavailable() {
            record_refusal(ctx, parent, call_id, &self.name, args, &failure);
            return Err(failure);
        }
        if let Some(validator) = &self.validator {
            let errors: Vec<String> = validator
                .iter_errors(args)
                .map(|e| format!("{e} (at `{}`)", e.instance_path()))
                .collect();
            if !errors.is_empty() {
                let failure = Failure::new(
                    FailureCode::ToolInvalidArguments,
                    format!(
                        "arguments for tool `{}` do not match its schema: {}",
                        self.name,
                        errors.join("; ")
                    ),
                );
                record_refusal(ctx, parent, call_id, &self.name, args, &failure);
                return Err(failure);
            }
        }
        // Asked after the arguments are known to be valid: nobody approves a call that cannot run.
        if let Some(approvals) = &self.approvals
            && let Err(failure) = approvals.approve(&self.name, args).await
        {
            record_refusal(ctx, parent, call_id, &self.name, args, &failure);
            return Err(failure);
        }
        let span = ctx.events.new_span();
        let emit = |data| emit_tool_event(ctx, span, parent, call_id, data);
        emit(EventData::ToolStart {
            tool: self.name.clone(),
            args: args.clone(),
            sandbox: self.enforcement().cloned(),
        });
        let started = Instant::now();
        let elapsed_ms = || started.elapsed().as_secs_f64() * 1000.0;
        let kept = match &self.cache {
            Some(kept) => {
                let reads = self.reads(args, results, ctx, &kept.cache).await;
                let key = Key::of("tool", &[&kept.identity, args, &results, &reads]);
                Some((&kept.cache, key))
            }
            None => None,
        };
        if let Some((cache, key)) = &kept
            && let Some(stored) = cache.get(key)
            && let Ok(value) = serde_json::from_str::<Value>(&stored.value)
        {
            cache.count(true, 0, stored.duration_ms);
            ctx.ledger.served_from_cache(format!("tool {}", self.name));
            emit(EventData::ToolEnd {
                tool: self.name.clone(),
                outcome: ToolOutcome::Ok {
                    result: ToolResult::of(&value),
                },
                duration_ms: elapsed_ms(),
                cached: true,
            });
            return Ok(value);
        }
        let cancelled = OnDrop::new(|| {
            emit(EventData::ToolEnd {
                tool: self.name.clone(),
                outcome: ToolOutcome::Cancelled,
                duration_ms: elapsed_ms(),
                cached: false,
            })
        });
        let result = self.execute(args, results, ctx).await;
        cancelled.disarm();
        let outcome = match &result {
            Ok(value) => ToolOutcome::Ok {
                result: ToolResult::of(value),
            },
            Err(error) => ToolOutcome::Failed {
                error: error.clone(),
            },
        };
        let duration_ms = elapsed_ms();
        // Under `--cache-only` too: a tool needs no model, so a miss runs it (and keeps it).
        if let (Some((cache, key)), Ok(value)) = (kept, &result) {
            cache.count(false, 0, 0.0);
            if let Ok(text) = serde_json::to_string(value) {
                cache.put(key, "tool", text, 0, duration_ms);
            }
        }
        emit(EventData::ToolEnd {
            tool: self.name.clone(),
            outcome,
            duration_ms,
            cached: false,
        });
        result.map_err(|failure| {
            if self.idempotent {
                failure
            } else {
                failure.retryable(false)
            }
        })
    }

    /// What a call reads besides its arguments, for its cache key: the canonical directory it
    /// works in (a command's working directory, `read_file`'s root) and the SHA-256 of each file
    /// it reads (the file `read_file` opens; each file a command's rendered argv names). The same
    /// plan in two folders, or a file edited between two runs, is then a different call.
    async fn reads(
        &self,
        args: &Value,
        results: &[Value],
        ctx: &StepContext,
        cache: &Arc<CallCache>,
    ) -> Value {
        let (dir, files) = match &self.action {
            ToolAction::Builtin(builtin) => builtin.reads(args),
            ToolAction::DryRun | ToolAction::Mcp(_) => (None, Vec::new()),
            ToolAction::Command(command) => {
                let dir = match &command.working_dir {
                    Some(dir) => dir.canonicalize().ok(),
                    None => std::env::current_dir().ok(),
                };
                let argv = command.render(&self.name, &ctx.templates, args, results);
                let files = match (&dir, argv) {
                    (Some(dir), Ok(argv)) => files_named(&argv, dir),
                    _ => Vec::new(),
                };
                (dir, files)
            }
        };
        let cache = Arc::clone(cache);
        // Hashing reads files (each hash is remembered by size and time in the cache): off the
        // runtime's workers.
        let hashed = tokio::task::spawn_blocking(move || {
            files
                .into_iter()
                .map(|file| {
                    let sha256 = cache.file_sha256(&file);
                    (file.display().to_string(), sha256)
                })
                .collect::<std::collections::BTreeMap<_, _>>()
        })
        .await
        .unwrap_or_default();
        json!({ "dir": dir, "files": hashed })
    }

    async fn execute(
        &self,
        args: &Value,
        results: &[Value],
        ctx: &StepContext,
    ) -> Result<Value, Failure> {
        match &self.action {
            ToolAction::Builtin(builtin) => {
                // Builtins do blocking file I/O and arithmetic: on a thread of their own, so no
                // runtime worker waits on them and the step's timeout can always fire.
                let (builtin, args) = (builtin.clone(), args.clone());
                tokio::task::spawn_blocking(move || builtin.call(&args))
                    .await
                    .map_err(|e| {
                        Failure::new(
                            FailureCode::ToolExecutionFailed,
                            format!("tool `{}` ended abnormally: {e}", self.name),
                        )
                        .retryable(false)
                    })?
            }
            ToolAction::DryRun => Ok(json!({ "dry_run": true, "tool": self.name, "args": args })),
            ToolAction::Mcp(call) => {
                call.server
                    .call(&call.tool, args, call.max_output_bytes)
                    .await
            }
            ToolAction::Command(command) => {
                let argv = command.render(&self.name, &ctx.templates, args, results)?;
                let spec = CommandSpec {
                    argv,
                    timeout: command.timeout,
                    max_output_bytes: command.max_output_bytes,
                    working_dir: command.working_dir.clone(),
                    env_allow: command.env_allow.clone(),
                    sandbox: command.sandbox.clone(),
                };
                let output = run_command(&spec).await?;
                let mut text = output.stdout;
                if output.truncated {
                    text.push_str(&format!(
                        "\n[output truncated at {} bytes]",
                        command.max_output_bytes
                    ));
                }
                Ok(Value::String(text))
            }
        }
    }
}

/// Records a tool call that never ran — an unknown tool, arguments its schema refuses — as a
/// start and an end with status `refused` and the failure, children of `parent` (the model call
/// that asked for it), so events show every call a model made.
pub fn record_refusal(
    ctx: &StepContext,
    parent: SpanId,
    call_id: &str,
    tool: &str,
    args: &Value,
    failure: &Failure,
) {
    let span = ctx.events.new_span();
    let emit = |data| emit_tool_event(ctx, span, parent, call_id, data);
    emit(EventData::ToolStart {
        tool: tool.to_string(),
        args: args.clone(),
        sandbox: None,
    });
    emit(EventData::ToolEnd {
        tool: tool.to_string(),
        outcome: ToolOutcome::Refused {
            error: failure.clone(),
        },
        duration_ms: 0.0,
        cached: false,
    });
}

fn emit_tool_event(
    ctx: &StepContext,
    span: SpanId,
    parent: SpanId,
    call_id: &str,
    data: EventData,
) {
    ctx.events.emit_event(Event {
        run_id: ctx.events.run_id().to_string(),
        at: Timestamp::now(),
        at_ms: ctx.events.elapsed_ms(),
        step: Some(ctx.step.clone()),
        span,
        parent_span: Some(parent),
        parent_run_id: None,
        tool_call_id: Some(call_id.to_string()),
        request_id: None,
        data,
    });
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use super::*;

    fn command(program: &str, working_dir: &Path) -> ToolAction {
        ToolAction::Command(CommandTemplate {
            argv: vec![program.to_string()],
            timeout: Duration::from_secs(1),
            max_output_bytes: 1024,
            working_dir: Some(working_dir.to_path_buf()),
            env_allow: Vec::new(),
            allow_dash_values: false,
            sandbox: Sandbox::none(),
        })
    }

    fn template(argv: &[&str], allow_dash_values: bool) -> CommandTemplate {
        CommandTemplate {
            argv: argv.iter().map(|a| a.to_string()).collect(),
            timeout: Duration::from_secs(1),
            max_output_bytes: 1024,
            working_dir: None,
            env_allow: Vec::new(),
            allow_dash_values,
            sandbox: Sandbox::none(),
        }
    }

    #[test]
    fn a_value_starting_with_a_dash_is_not_passed_as_an_option() {
        let templates = Templates::new(None);
        let sort = template(&["sort", "{{ args.file }}"], false);
        let attack = json!({ "file": "--output=/tmp/pwned" });
        let failure = sort
            .render("sort", &templates, &attack, &[])
            .expect_err("refused");
        assert_eq!(failure.code, FailureCode::ToolInvalidArguments);
        assert!(
            failure.message.contains("`--output=/tmp/pwned`"),
            "{}",
            failure.message
        );
        assert_eq!(
            sort.render("sort", &templates, &json!({ "file": "notes.txt" }), &[]),
            Ok(vec!["sort".to_string(), "notes.txt".to_string()])
        );
        // A literal option in the plan is the author's, not the model's.
        let reverse = template(&["sort", "-r", "{{ args.file }}"], false);
        assert!(
            reverse
                .render("sort", &templates, &json!({ "file": "a" }), &[])
                .is_ok()
        );
        // After a literal `--`, or when the tool allows it, a dash value goes through.
        let ended = template(&["grep", "--", "{{ args.pattern }}"], false);
        let dash = json!({ "pattern": "-v" });
        assert!(ended.render("grep", &templates, &dash, &[]).is_ok());
        let allowed = template(&["calc", "{{ args.pattern }}"], true);
        assert!(allowed.render("calc", &templates, &dash, &[]).is_ok());
    }

    #[test]
    fn argv_templates_see_the_earlier_results_and_an_empty_list_without_them() {
        let templates = Templates::new(None);
        let echo = template(
            &[
                "echo",
                "{{ args.n }}",
                "{{ results | length }}",
                "{% for r in results %}{{ r.agent }}={{ r.output }} {% endfor %}",
            ],
            false,
        );
        let earlier = [json!({ "agent": "search", "output": "aero-14" })];
        assert_eq!(
            echo.render("echo", &templates, &json!({ "n": 1 }), &earlier),
            Ok(["echo", "1", "1", "search=aero-14 "]
                .map(String::from)
                .to_vec())
        );
        assert_eq!(
            echo.render("echo", &templates, &json!({ "n": 2 }), &[]),
            Ok(["echo", "2", "0", ""].map(String::from).to_vec())
        );
    }

    #[test]
    fn only_an_executable_program_is_available() {
        let dir = tempfile::tempdir().expect("temp dir");
        let script = dir.path().join("tool.sh");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").expect("written");
        let not_yet = command("./tool.sh", dir.path()).unavailable();
        assert!(
            not_yet.is_some_and(|why| why.contains("not an executable program")),
            "a file without the execute bit is not a program"
        );
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .expect("made executable");
        assert_eq!(command("./tool.sh", dir.path()).unavailable(), None);
        assert_eq!(
            command("sh", dir.path()).unavailable(),
            None,
            "found on PATH"
        );
        assert!(
            command("pagantic-no-such-program", dir.path())
                .unavailable()
                .is_some()
        );
    }
}
