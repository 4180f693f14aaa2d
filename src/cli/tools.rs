//! `pagantic tools PLAN` — each tool a plan declares, and whether it can run here now: available,
//! unavailable (and why: its program is not on PATH, a directory it needs is missing), or refused
//! by the policy in force. A run checks the same things at each call; this shows them before one.

use std::io::{self, Write};
use std::path::PathBuf;

use clap::ValueEnum;
use serde::Serialize;

use super::common::{Exit, Outcome, load_plan};
use super::report::{self, Format};
use super::{EXIT_INVALID, EXIT_OK};
use crate::plan::policy::{Limit, PolicyOrigin};
use crate::plan::tools::ToolEnv;
use crate::plan::{self, EffectivePolicy, Plan};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ToolsFormat {
    /// One line per tool: its name, what it may change, and its availability.
    Text,
    /// One JSON object per line: `name`, `side_effects`, `availability` and `reason`.
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
    side_effects: crate::orchestrate::tools::SideEffects,
    availability: Availability,
    /// Why it is unavailable or refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

pub fn run(args: &Args) -> Outcome {
    let plan = load_plan(&args.plan)?;
    let policy = match &args.policy {
        Some(path) => match plan::load_policy(path) {
            Ok(file) => EffectivePolicy::combine(plan.raw.policy.as_ref(), Some(&file.policy)),
            Err(diagnostics) => {
                report::print(&diagnostics, Format::Human)?;
                return Err(Exit::Code(EXIT_INVALID));
            }
        },
        None => plan.policy.clone(),
    };
    let lines = tool_lines(&plan, &policy);
    let mut stdout = io::stdout().lock();
    for line in &lines {
        match args.format {
            ToolsFormat::Json => {
                let json = serde_json::to_string(line).map_err(io::Error::from)?;
                writeln!(stdout, "{json}")?;
            }
            ToolsFormat::Text => {
                let mut shown = word(line.availability);
                if let Some(reason) = &line.reason {
                    shown = format!("{shown}: {reason}");
                }
                let side_effects = word(line.side_effects);
                writeln!(
                    stdout,
                    "{}  side effects: {side_effects}  {shown}",
                    line.name
                )?;
            }
        }
    }
    stdout.flush()?;
    Ok(EXIT_OK)
}

/// Each declared tool, built as a run would build it, with its availability under `policy`.
fn tool_lines(plan: &Plan, policy: &EffectivePolicy) -> Vec<ToolLine> {
    let dir = plan.dir();
    plan.raw
        .tools
        .iter()
        .map(|(name, spec)| {
            let env = ToolEnv {
                name,
                dir: &dir,
                dry_run: false,
            };
            let refused = refusal(name, policy);
            let (side_effects, unavailable) = match spec.kind().build(&env) {
                Ok(tool) => (tool.side_effects, tool.action.unavailable()),
                Err(failure) => (Default::default(), Some(failure.message)),
            };
            let (availability, reason) = match (refused, unavailable) {
                (Some(why), _) => (Availability::Refused, Some(why)),
                (None, Some(why)) => (Availability::Unavailable, Some(why)),
                (None, None) => (Availability::Available, None),
            };
            ToolLine {
                name: name.clone(),
                side_effects,
                availability,
                reason,
            }
        })
        .collect()
}

/// Why the policy refuses tool `name`, when it does.
fn refusal(name: &str, policy: &EffectivePolicy) -> Option<String> {
    let Limit { value, origin } = policy.allowed_tools.as_ref()?;
    if value.iter().any(|allowed| allowed == name) {
        return None;
    }
    let whose = match origin {
        PolicyOrigin::Plan => "the plan's policy",
        PolicyOrigin::File => "the --policy file",
    };
    Some(format!("not in the `allowed_tools` of {whose}"))
}

/// A unit variant's name as it is written in YAML and JSON.
fn word(value: impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
}
