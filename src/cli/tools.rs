//! `pagantic tools PLAN` — each tool a plan declares, and whether it can run here now: available,
//! unavailable (and why: its program is not on PATH, a directory it needs is missing), or refused
//! by the policy in force. A run checks the same things at each call; this shows them before one.
//! An MCP server is connected to, and each tool it lists is shown (`TOOL.NAME`) with whether its
//! `allow` offers it and the hash of its schema, as are the allowed names it does not list. The
//! policy's verdict on each tool is the one `validate` and `run` give (`allowed_tools`,
//! `allowed_capabilities`, `require_sandbox`), and a plan they refuse under `--policy` exits 2
//! here too. What a server sent (its tools' names, its stderr) reaches the terminal escaped. For
//! a tool that starts processes, its sandbox: what it is granted, what this machine enforces, and
//! why not where it does not.

use std::io::{self, Write};
use std::path::PathBuf;

use clap::ValueEnum;
use serde::Serialize;

use super::common::{Exit, Outcome, invalid, load_plan};
use super::report::{self, Format};
use super::{EXIT_INVALID, EXIT_OK};
use crate::core::text::terminal_safe;
use crate::orchestrate::tools::SideEffects;
use crate::orchestrate::{Resources, Standalone};
use crate::plan::tools::{McpTool, ToolEnv, ToolSpec};
use crate::plan::{self, EffectivePolicy, Plan};
use crate::tool::Enforcement;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ToolsFormat {
    /// One line per tool: its name, what it may change, and its availability.
    Text,
    /// One JSON object per line: `name`, `side_effects`, `availability` and `reason`, `sandbox` for a tool that starts processes (`network`, `filesystem`, `processes`: `granted`, `enforced` or `not_enforced`, and `why_not`), and for an MCP server's tools `allowed`, `schema_sha256` and `input_schema`.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan file.
    plan: PathBuf,
    /// A policy file that tightens the plan's own policy, as for `run --policy`.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ToolsFormat::Text)]
    format: ToolsFormat,
}

/// Whether a tool can be called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Availability {
    Available,
    /// It cannot run on this machine now (`TOOL_UNAVAILABLE` at a call).
    Unavailable,
    /// The policy in force does not allow it (`validate` refuses a step that calls it).
    Refused,
}

/// One line of the listing.
#[derive(Debug, Serialize)]
struct ToolLine {
    name: String,
    side_effects: SideEffects,
    availability: Availability,
    /// Why it is unavailable or refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// For a tool that starts processes: what its sandbox enforces here.
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<Enforcement>,
    /// For a tool of an MCP server (`TOOL.SERVER_TOOL`): whether `allow` offers it to models.
    #[serde(skip_serializing_if = "Option::is_none")]
    allowed: Option<bool>,
    /// For a tool of an MCP server: the SHA-256 of its name, description and input schema, as
    /// `pagantic lock` pins it.
    #[serde(skip_serializing_if = "Option::is_none")]
    schema_sha256: Option<String>,
    /// For a tool of an MCP server: its input schema, as the server lists it.
    #[serde(skip_serializing_if = "Option::is_none")]
    input_schema: Option<serde_json::Value>,
}

/// Lists the tools, then gives the plan the verdict `validate` and `run` give under the same
/// policy: exit 2, with their diagnostics, when the policy refuses the plan.
pub fn run(args: &Args) -> Outcome {
    let plan = load_plan(&args.plan)?;
    let (policy, policy_file) = match &args.policy {
        Some(path) => match plan::load_policy(path) {
            Ok(file) => (
                EffectivePolicy::combine(plan.raw.policy.as_ref(), Some(&file.policy)),
                Some(file),
            ),
            Err(diagnostics) => {
                report::print(&diagnostics, Format::Human)?;
                return Err(Exit::Code(EXIT_INVALID));
            }
        },
        None => (plan.policy.clone(), None),
    };
    let standalone = Standalone::start().or_else(|failure| invalid(&failure))?;
    let lines = tool_lines(&plan, &policy, standalone.resources());
    let mut stdout = io::stdout().lock();
    for line in &lines {
        match args.format {
            ToolsFormat::Json => {
                let json = serde_json::to_string(line).map_err(io::Error::from)?;
                writeln!(stdout, "{json}")?;
            }
            ToolsFormat::Text => {
                writeln!(stdout, "{}", terminal_safe(&text_line(line)))?;
                if let Some(sandbox) = &line.sandbox {
                    writeln!(stdout, "  sandbox: {}", sandbox.summary())?;
                }
            }
        }
    }
    stdout.flush()?;
    if let Some(file) = &policy_file
        && let Err(diagnostics) = plan::load_plan(&args.plan, Some(file))
    {
        report::print(&diagnostics, Format::Human)?;
        return Err(Exit::Code(EXIT_INVALID));
    }
    Ok(EXIT_OK)
}

/// A line of the text listing. Its name, reason and what else a server sent are the server's
/// text: the caller prints it through `terminal_safe`.
fn text_line(line: &ToolLine) -> String {
    let mut shown = word(line.availability);
    if let Some(reason) = &line.reason {
        shown = format!("{shown}: {reason}");
    }
    let side_effects = word(line.side_effects);
    if let Some(allowed) = line.allowed {
        shown.push_str(if allowed {
            "  allowed"
        } else {
            "  not allowed"
        });
    }
    if let Some(sha256) = &line.schema_sha256 {
        shown.push_str(&format!("  schema {}", &sha256[..sha256.len().min(12)]));
    }
    format!("{}  side effects: {side_effects}  {shown}", line.name)
}

/// Each declared tool, built as a run would build it, with its availability under `policy`;
/// for an MCP server, each tool it lists and each allowed one it lacks.
fn tool_lines(plan: &Plan, policy: &EffectivePolicy, resources: &Resources) -> Vec<ToolLine> {
    let dir = plan.dir();
    plan.raw
        .tools
        .iter()
        .flat_map(|(name, spec)| {
            let env = ToolEnv {
                name,
                dir: &dir,
                dry_run: false,
                mcp: &resources.mcp,
                sandboxes: &resources.sandboxes,
            };
            let refused = policy.tool_refusal(name, spec.kind());
            if let ToolSpec::Mcp(server) = spec {
                return mcp_lines(server, &env, refused, policy);
            }
            let (side_effects, unavailable, sandbox) = match spec.kind().build(&env) {
                Ok(tool) => (
                    tool.side_effects,
                    tool.action.unavailable(),
                    tool.enforcement().cloned(),
                ),
                Err(failure) => (Default::default(), Some(failure.message), None),
            };
            let refused = refused.or_else(|| policy.sandbox_refusal(sandbox.as_ref()));
            vec![ToolLine {
                sandbox,
                ..line(name.clone(), side_effects, refused, unavailable)
            }]
        })
        .collect()
}

/// A line, available unless the policy refuses it or it cannot run.
fn line(
    name: String,
    side_effects: SideEffects,
    refused: Option<String>,
    unavailable: Option<String>,
) -> ToolLine {
    let (availability, reason) = match (refused, unavailable) {
        (Some(why), _) => (Availability::Refused, Some(why)),
        (None, Some(why)) => (Availability::Unavailable, Some(why)),
        (None, None) => (Availability::Available, None),
    };
    ToolLine {
        name,
        side_effects,
        availability,
        reason,
        sandbox: None,
        allowed: None,
        schema_sha256: None,
        input_schema: None,
    }
}

/// The lines of an MCP server's tools, connecting to it: one per tool it lists (`TOOL.NAME`),
/// whether `allow` offers it and its schema's hash, and one per allowed name it does not list;
/// one line for the server when it cannot be reached.
fn mcp_lines(
    server: &McpTool,
    env: &ToolEnv<'_>,
    refused: Option<String>,
    policy: &EffectivePolicy,
) -> Vec<ToolLine> {
    let reached = server.server(env);
    let sandbox = reached.enforcement().cloned();
    let refused = refused.or_else(|| policy.sandbox_refusal(sandbox.as_ref()));
    let line = |name, side_effects, refused, unavailable| ToolLine {
        sandbox: sandbox.clone(),
        ..line(name, side_effects, refused, unavailable)
    };
    let listed = match reached.list_tools(None) {
        Ok(listed) => listed,
        Err(failure) => {
            let reason = Some(failure.message);
            return vec![line(
                env.name.to_string(),
                server.side_effects,
                refused,
                reason,
            )];
        }
    };
    let named = |tool: &str| format!("{}.{tool}", env.name);
    let mut lines: Vec<ToolLine> = listed
        .into_iter()
        .map(|tool| {
            let unavailable = tool.over_bounds();
            ToolLine {
                allowed: Some(server.allow.contains(&tool.name)),
                schema_sha256: Some(tool.sha256),
                input_schema: Some(tool.input_schema),
                ..line(
                    named(&tool.name),
                    server.side_effects,
                    refused.clone(),
                    unavailable,
                )
            }
        })
        .collect();
    for missing in &server.allow {
        if !lines.iter().any(|l| l.name == named(missing)) {
            let reason = Some(format!("the server has no tool `{missing}`"));
            lines.push(ToolLine {
                allowed: Some(true),
                ..line(named(missing), server.side_effects, refused.clone(), reason)
            });
        }
    }
    lines
}

/// A unit variant's name as it is written in YAML and JSON.
fn word(value: impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
}
