//! Layer 0: the vocabulary every other layer shares — messages, tool calls, token usage, prices
//! and costs, retrieval candidates, and the failure taxonomy. Nothing here does I/O or depends on
//! another module.

pub mod cost;
pub mod failure;
pub mod memo;
pub mod message;
pub mod step_clock;
pub mod text;

pub use cost::{Cost, Price};
pub use failure::{Failure, FailureCategory, FailureCode};
pub use memo::Memo;
pub use message::{Candidate, Message, Role, TokenUsage, ToolCall, ToolDefinition};
