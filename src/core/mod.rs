//! Layer 0: the vocabulary every other layer shares — messages, tool calls, token usage, prices
//! and costs, retrieval candidates, the failure taxonomy, the W3C trace context, durations as
//! plans and flags write them (`30s`, `1m30s`); and the one way every layer reads a file whole
//! (bounded, regular files only) and writes one (atomically), in `file`, the only I/O here.
//! Nothing here depends on another module.

pub mod cost;
pub mod duration;
pub mod failure;
pub mod file;
pub mod memo;
pub mod message;
pub mod secret;
pub mod step_clock;
pub mod text;
pub mod timestamp;
pub mod trace_context;

pub use cost::{Cost, Price};
pub use failure::{Failure, FailureCategory, FailureCode};
pub use memo::Memo;
pub use message::{Candidate, Message, Role, TokenUsage, ToolCall, ToolDefinition};
pub use timestamp::Timestamp;
pub use trace_context::TraceParent;
