//! `kind: command` — a program run directly (never through a shell) with an argv template.

use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Capability, ToolAccess, ToolEnv, ToolKind};
use crate::core::Failure;
use crate::core::duration::DurationSpec;
use crate::orchestrate::tools::{CommandTemplate, SideEffects, ToolAction, ToolRuntime};
use crate::plan::steps::{FieldPath, OutputKind};

/// Default timeout of a command tool.
const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);
/// Default output cap of a command tool.
const DEFAULT_TOOL_OUTPUT: usize = 64 * 1024;

/// Runs a program directly (never through a shell) with an argv template.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
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
    /// Keep the tool's results in the call cache, so that a later call with the same arguments, in this run or a later one, is answered without running it (default false). Only for a tool that is `idempotent: true` with `side_effects` `none` or `read`. The key covers the tool's definition, its arguments and the contents of the files its `argv` names in the plan's directory (a script, a data file), so editing one runs the tool again; other state a `read` tool reads is not covered.
    #[serde(default)]
    pub cache: bool,
    #[serde(flatten)]
    pub access: ToolAccess,
}

impl CommandTool {
    /// The directory its program runs in.
    fn run_dir(&self, dir: &Path) -> PathBuf {
        dir.join(self.working_dir.as_deref().unwrap_or("."))
    }
}

impl ToolKind for CommandTool {
    /// The program's standard output, as text.
    fn output(&self) -> OutputKind {
        OutputKind::Text
    }

    fn cache(&self) -> bool {
        self.cache
    }

    fn access(&self) -> &ToolAccess {
        &self.access
    }

    /// A program is a process; variables passed through are the environment's.
    fn implied(&self) -> Vec<Capability> {
        let mut implied = vec![Capability::Process];
        if !self.env.is_empty() {
            implied.push(Capability::Environment);
        }
        implied
    }

    fn uncacheable(&self) -> Option<String> {
        let changes = match self.side_effects {
            SideEffects::None | SideEffects::Read => None,
            SideEffects::Write => Some("write"),
            SideEffects::External => Some("external"),
        };
        match (self.idempotent, changes) {
            (false, _) => Some("it is not `idempotent: true`".to_string()),
            (true, Some(changes)) => Some(format!("its side_effects are `{changes}`")),
            (true, None) => None,
        }
    }

    fn identity(&self) -> Value {
        json!({
            "kind": "command",
            "argv": self.argv,
            "parameters": self.parameters,
            "max_output_bytes": self.max_output_bytes,
            "working_dir": self.working_dir,
            "env": self.env,
        })
    }

    /// Every literal (untemplated) argv element, the program included, that names a file
    /// inside the tool's working directory: `./lookup.sh`, `tools/search.py`, `data/rows.jsonl`.
    fn files(&self, dir: &Path) -> Vec<PathBuf> {
        let base = self.run_dir(dir);
        self.argv
            .iter()
            .filter(|arg| {
                !arg.contains("{{")
                    && !arg.contains("{%")
                    && !arg.starts_with('-')
                    && !Path::new(arg).is_absolute()
                    && !arg.split('/').any(|part| part == "..")
            })
            .map(|arg| base.join(arg))
            .filter(|path| path.is_file())
            .collect()
    }

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
                working_dir: Some(self.run_dir(env.dir)),
                env_allow: self.env.clone(),
                allow_dash_values: self.allow_dash_values,
                sandbox: self.sandbox(env),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(argv: &[&str], working_dir: Option<&str>) -> CommandTool {
        CommandTool {
            description: "a tool".into(),
            argv: argv.iter().map(|a| a.to_string()).collect(),
            parameters: None,
            timeout: None,
            max_output_bytes: None,
            working_dir: working_dir.map(str::to_string),
            env: Vec::new(),
            allow_dash_values: false,
            side_effects: SideEffects::Read,
            idempotent: true,
            cache: true,
            access: ToolAccess::default(),
        }
    }

    #[test]
    fn the_files_a_tool_names_are_the_literal_argv_elements_that_are_files_here() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("tools/data")).expect("dirs");
        for file in ["run.sh", "tools/search.py", "tools/data/rows.jsonl", "-v"] {
            std::fs::write(dir.path().join(file), "x").expect("written");
        }
        let named = tool(
            &[
                "./run.sh",
                "tools/search.py",
                "{{ args.q }}",
                "-v",
                "missing.txt",
                "tools",
                "/etc/hostname",
                "../x",
            ],
            None,
        );
        assert_eq!(
            named.files(dir.path()),
            [
                dir.path().join("./run.sh"),
                dir.path().join("tools/search.py")
            ]
        );
        let inside = tool(&["python3", "search.py", "data/rows.jsonl"], Some("tools"));
        assert_eq!(
            inside.files(dir.path()),
            [
                dir.path().join("tools/search.py"),
                dir.path().join("tools/data/rows.jsonl")
            ]
        );
    }

    #[test]
    fn only_an_idempotent_tool_that_changes_nothing_may_be_cached() {
        let cases = [
            (true, SideEffects::None, None),
            (true, SideEffects::Read, None),
            (
                true,
                SideEffects::Write,
                Some("its side_effects are `write`"),
            ),
            (
                true,
                SideEffects::External,
                Some("its side_effects are `external`"),
            ),
            (
                false,
                SideEffects::None,
                Some("it is not `idempotent: true`"),
            ),
        ];
        for (idempotent, side_effects, expected) in cases {
            let spec = CommandTool {
                idempotent,
                side_effects,
                ..tool(&["echo"], None)
            };
            assert_eq!(spec.uncacheable().as_deref(), expected, "{side_effects:?}");
        }
    }
}
