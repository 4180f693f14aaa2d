//! Layer 2: executing tools — programs run from an argv, the tools compiled into pagantic, and
//! the tools of MCP servers.
//!
//! This module owns the part of a tool call that touches the operating system, so that its safety
//! rules live in one place: a command runs directly (never through a shell), in its own process
//! group that is killed as a whole on timeout or cancellation, with a cleared environment and
//! capped output, under a sandbox ([`sandbox`]) that holds it to what its `requires` grant and
//! contains every process it starts. The built-in tools (`calculator`, `read_file`,
//! `current_time`) are pure Rust and need nothing installed.
//!
//! Templates, argument schemas and policies are the caller's business: [`run_command`] receives
//! final argv strings and [`Builtin::call`] arguments already validated against
//! [`Builtin::definition`]. Every failure is a [`Failure`](crate::core::Failure) with a `TOOL_…`
//! code (or `CONFIG_FILE_ERROR` when the plan points at a directory that does not exist).

mod builtin;
mod calculator;
mod command;
mod mcp;
pub mod sandbox;

pub use builtin::Builtin;
pub use command::{CommandOutput, CommandSpec, files_named, run_command};
pub use mcp::{
    MAX_MESSAGE_BYTES, MAX_SCHEMA_BYTES, MAX_SCHEMA_PROPERTIES, McpServer, McpServerSpec,
    McpServers, McpToolDefinition, McpTransport,
};
pub use sandbox::{Enforcement, Grants, Sandbox, Sandboxes};
