//! `kind: builtin` — a tool compiled into pagantic (calculator, read_file, current_time).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Capability, ToolAccess, ToolEnv, ToolKind};
use crate::core::Failure;
use crate::orchestrate::tools::{SideEffects, ToolAction, ToolRuntime};
use crate::plan::steps::OutputKind;
use crate::tool::Builtin;

/// A tool compiled into pagantic.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct BuiltinToolSpec {
    /// Which built-in tool.
    pub builtin: BuiltinTool,
    /// Override the tool's description for the model.
    #[serde(default)]
    pub description: Option<String>,
    /// For `read_file`: the directory files may be read from, relative to the plan file.
    #[serde(default)]
    pub root: Option<String>,
    /// Keep the tool's results in the call cache, so that a later call with the same arguments, in this run or a later one, is answered without running it (default false). For `calculator` and `read_file` (which then answers with what it read the first time); `current_time` is refused.
    #[serde(default)]
    pub cache: bool,
    #[serde(flatten)]
    pub access: ToolAccess,
}

/// Tools compiled into pagantic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BuiltinTool {
    /// Evaluates arithmetic expressions.
    Calculator,
    /// Reads a text file inside `root`.
    ReadFile,
    /// The current date and time (UTC).
    CurrentTime,
}

impl ToolKind for BuiltinToolSpec {
    /// A JSON object (`{"result": …}`, `{"path": …, "content": …}`, `{"utc": …, "unix": …}`).
    fn output(&self) -> OutputKind {
        OutputKind::Json(Some("object".into()))
    }

    fn cache(&self) -> bool {
        self.cache
    }

    fn access(&self) -> &ToolAccess {
        &self.access
    }

    /// `read_file` reads files.
    fn implied(&self) -> Vec<Capability> {
        match self.builtin {
            BuiltinTool::ReadFile => vec![Capability::Filesystem],
            BuiltinTool::Calculator | BuiltinTool::CurrentTime => Vec::new(),
        }
    }

    fn uncacheable(&self) -> Option<String> {
        (self.builtin == BuiltinTool::CurrentTime)
            .then(|| "`current_time` answers differently at every call".to_string())
    }

    fn identity(&self) -> Value {
        json!({ "kind": "builtin", "builtin": self.builtin, "root": self.root })
    }

    fn build(&self, env: &ToolEnv<'_>) -> Result<ToolRuntime, Failure> {
        let builtin = match self.builtin {
            BuiltinTool::Calculator => Builtin::Calculator,
            BuiltinTool::CurrentTime => Builtin::CurrentTime,
            BuiltinTool::ReadFile => Builtin::ReadFile {
                root: env.dir.join(self.root.as_deref().unwrap_or(".")),
            },
        };
        let (own_description, parameters) = builtin.definition();
        let side_effects = match builtin {
            Builtin::Calculator => SideEffects::None,
            Builtin::ReadFile { .. } | Builtin::CurrentTime => SideEffects::Read,
        };
        ToolRuntime::new(
            env.name.to_string(),
            self.description
                .clone()
                .unwrap_or_else(|| own_description.to_string()),
            parameters,
            side_effects,
            true,
            ToolAction::Builtin(builtin),
        )
    }
}
