//! Layer 0: the vocabulary every other layer shares — messages, tool calls, token usage, retrieval
//! candidates, and the failure taxonomy. Nothing here does I/O or depends on another module.

pub mod failure;
pub mod message;
pub mod text;

pub use failure::{Failure, FailureCategory, FailureCode};
pub use message::{Candidate, Message, Role, TokenUsage, ToolCall, ToolDefinition};
