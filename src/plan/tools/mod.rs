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

mod builtin;
mod command;

pub use builtin::{BuiltinTool, BuiltinToolSpec};
pub use command::CommandTool;

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
}

/// What building a tool needs from the plan around it.
pub struct ToolEnv<'a> {
    /// The tool's name in `tools:`.
    pub name: &'a str,
    /// The directory the plan's relative paths start from.
    pub dir: &'a Path,
    /// Replace a tool that changes something with a stand-in that reports the call.
    pub dry_run: bool,
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
    /// The run-time tool.
    fn build(&self, env: &ToolEnv<'_>) -> Result<ToolRuntime, Failure>;
}
