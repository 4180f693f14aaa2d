//! `kind: command` — a program run directly (never through a shell) with an argv template.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{ToolEnv, ToolKind};
use crate::core::Failure;
use crate::orchestrate::tools::{CommandTemplate, SideEffects, ToolAction, ToolRuntime};
use crate::plan::duration::DurationSpec;
use crate::plan::steps::FieldPath;

/// Default timeout of a command tool.
const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);
/// Default output cap of a command tool.
const DEFAULT_TOOL_OUTPUT: usize = 64 * 1024;

/// Runs a program directly (never through a shell) with an argv template.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandTool {
    /// What the tool does, for the model.
    pub description: String,
    /// The program and its arguments; each element is a template that sees `args` (the call's arguments) and `results` (when the tool runs as an agent of a sequential route, the earlier agents' results — `[{agent, arguments, output}]`; an empty list elsewhere).
    #[schemars(length(min = 1))]
    pub argv: Vec<String>,
    /// JSON Schema of the arguments; calls are validated against it before running.
    #[serde(default)]
    pub parameters: Option<Value>,
    /// Longest the program may run; it and its children are killed after (default 30s).
    #[serde(default)]
    pub timeout: Option<DurationSpec>,
    /// Most bytes of output kept (default 65536); the rest is cut and marked.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_output_bytes: Option<u64>,
    /// Working directory, relative to the plan file.
    #[serde(default)]
    pub working_dir: Option<String>,
    /// Environment variables passed through; all others are cleared.
    #[serde(default)]
    pub env: Vec<String>,
    /// Let a templated argv element begin with `-`. Off by default: a value a model chose would otherwise reach the program as an option (`--output=file`), so such a call is refused (TOOL_INVALID_ARGUMENTS). A literal `--` earlier in `argv` also lets the values after it through, for programs that read it as the end of options.
    #[serde(default)]
    pub allow_dash_values: bool,
    /// What the tool may change (default `external`, the most cautious).
    #[serde(default)]
    pub side_effects: SideEffects,
    /// Whether calling it twice is the same as once; only idempotent tools are retried automatically.
    #[serde(default)]
    pub idempotent: bool,
}

impl ToolKind for CommandTool {
    fn parameters(&self) -> Option<&Value> {
        self.parameters.as_ref()
    }

    fn templates(&self) -> Vec<(FieldPath, &str)> {
        self.argv
            .iter()
            .enumerate()
            .map(|(i, arg)| (vec!["argv".into(), i.to_string()], arg.as_str()))
            .collect()
    }

    fn build(&self, env: &ToolEnv<'_>) -> Result<ToolRuntime, Failure> {
        let action = if env.dry_run
            && matches!(
                self.side_effects,
                SideEffects::Write | SideEffects::External
            ) {
            ToolAction::DryRun
        } else {
            ToolAction::Command(CommandTemplate {
                argv: self.argv.clone(),
                timeout: self.timeout.map_or(DEFAULT_TOOL_TIMEOUT, |t| t.get()),
                max_output_bytes: self.max_output_bytes.map_or(DEFAULT_TOOL_OUTPUT, |m| {
                    usize::try_from(m).unwrap_or(usize::MAX)
                }),
                working_dir: Some(env.dir.join(self.working_dir.as_deref().unwrap_or("."))),
                env_allow: self.env.clone(),
                allow_dash_values: self.allow_dash_values,
            })
        };
        ToolRuntime::new(
            env.name.to_string(),
            self.description.clone(),
            self.parameters.clone().unwrap_or(Value::Null),
            self.side_effects,
            self.idempotent,
            action,
        )
    }
}
