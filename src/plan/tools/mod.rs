//! The tool kinds a plan may declare under `tools:`, and what each one needs.
//!
//! Each kind lives in its own file: its config struct (whose doc comments become the JSON
//! Schema's help text) and a [`ToolKind`] impl saying what `validate` checks in it (its argument
//! schema, its templates) and how it is built. Adding a tool kind is one file here plus one line
//! in the [`tool_kinds!`] registry, which expands to the `kind`-tagged [`ToolSpec`] enum and its
//! dispatch.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::steps::{FieldPath, OutputKind};
use crate::core::Failure;
use crate::orchestrate::tools::ToolRuntime;
use crate::tool::{McpServers, Sandbox, Sandboxes};

mod access;
mod builtin;
mod command;
mod mcp;

pub use access::{Capability, NO_ACCESS, ToolAccess};
pub use builtin::{BuiltinTool, BuiltinToolSpec};
pub use command::CommandTool;
pub use mcp::McpTool;

/// Declares the tool kinds: `Variant(Config) = "kind-name"`, each with its doc comment.
macro_rules! tool_kinds {
    ($($(#[doc = $doc:literal])* $variant:ident($config:ty) = $name:literal,)+) => {
        /// A tool steps and agents may call. `kind` picks how it runs.
        #[derive(Debug, Clone, Deserialize, JsonSchema)]
        #[serde(tag = "kind")]
        pub enum ToolSpec {
            $($(#[doc = $doc])* #[serde(rename = $name)] $variant($config),)+
        }

        impl ToolSpec {
            /// The kind's own behaviour.
            pub fn kind(&self) -> &dyn ToolKind {
                match self {
                    $(ToolSpec::$variant(tool) => tool,)+
                }
            }
        }
    };
}

tool_kinds! {
    /// Runs a program directly (never through a shell) with an argv template.
    Command(CommandTool) = "command",
    /// A tool compiled into pagantic.
    Builtin(BuiltinToolSpec) = "builtin",
    /// The tools of an MCP server (a program over stdio, or a streamable HTTP URL) named in `allow`.
    Mcp(McpTool) = "mcp",
}

/// What building a tool needs from the plan around it.
pub struct ToolEnv<'a> {
    /// The tool's name in `tools:`.
    pub name: &'a str,
    /// The directory the plan's relative paths start from.
    pub dir: &'a Path,
    /// Replace a tool that changes something with a stand-in that reports the call.
    pub dry_run: bool,
    /// The session's MCP servers (an `mcp` tool's server is one of them).
    pub mcp: &'a McpServers,
    /// What this machine's sandboxes can enforce.
    pub sandboxes: &'a Sandboxes,
}

/// Implemented by every tool kind's config.
pub trait ToolKind {
    /// The JSON Schema of the tool's arguments, as the plan writes it (checked by `validate`).
    fn parameters(&self) -> Option<&Value> {
        None
    }
    /// Templates the tool renders with the call's `args` (and `results`), and where each is written.
    fn templates(&self) -> Vec<(FieldPath, &str)> {
        Vec::new()
    }
    /// Whether the plan asks for its results to be kept in the call cache (`cache: true`).
    fn cache(&self) -> bool;
    /// Why its results must not be reused, when they must not (`validate` refuses `cache: true`
    /// then): it is not idempotent, it changes something, or its answer changes by itself.
    fn uncacheable(&self) -> Option<String>;
    /// What decides its results besides its arguments and [`files`](ToolKind::files): its kind
    /// and definition (part of a cached result's key).
    fn identity(&self) -> Value;
    /// Files of the plan's directory it runs or reads by name (a script or data file written
    /// in `argv`): the lockfile pins them, and a cached result's key holds their SHA-256.
    fn files(&self, _dir: &Path) -> Vec<PathBuf> {
        Vec::new()
    }
    /// What a call returns, as far as the plan says (`validate` checks the steps it feeds):
    /// unknown unless the kind knows.
    fn output(&self) -> OutputKind {
        OutputKind::Unknown
    }
    /// Its `requires` and `approval`: a kind has them by flattening [`ToolAccess`] into its
    /// config (`#[serde(flatten)] pub access: ToolAccess`) and returning that field here.
    fn access(&self) -> &ToolAccess {
        &NO_ACCESS
    }
    /// What it needs whatever it declares (a command starts a process): `validate` and `run`
    /// refuse it unless the policy grants these and its `requires`.
    fn implied(&self) -> Vec<Capability> {
        Vec::new()
    }
    /// The sandbox its processes start in: what its `requires` grant, enforced where this
    /// machine can.
    fn sandbox(&self, env: &ToolEnv<'_>) -> Sandbox {
        env.sandboxes
            .for_tool(self.access().grants(&self.implied()))
    }
    /// The run-time tool.
    fn build(&self, env: &ToolEnv<'_>) -> Result<ToolRuntime, Failure>;
    /// For a kind that offers a model several tools (an MCP server's allowed tools), those
    /// tools; None for a kind whose one tool is [`build`](ToolKind::build)'s.
    fn build_set(&self, _env: &ToolEnv<'_>) -> Option<Result<Vec<ToolRuntime>, Failure>> {
        None
    }
}
