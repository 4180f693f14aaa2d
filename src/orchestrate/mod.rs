//! Layer 3: running a built pipeline — the run session, the executor over the step graph, the
//! step handlers, the lifecycle, run records, run ledgers and events.
//!
//! The plan layer builds a [`Pipeline`] (steps with resolved handlers and dependencies, and the
//! contract a run is held to: its input declarations and step timeout); this layer knows nothing
//! about YAML. Every command runs pipelines through a [`Session`], and every run — one run, a
//! batch row, a test case, a judge, a chat turn, a served request, a route's sub-plan — goes
//! through its [`Runner`], the only caller of the executor.
//!
//! | file | owns |
//! | --- | --- |
//! | `session.rs` | the session and its [`Runner`]: runtime, signals, end state, nested runs |
//! | `resources.rs` | what a session's builds and runs share: MCP servers, model loads, file hashes |
//! | `fanout.rs` | [`Runner::run_many`]: many runs, bounded and cancellable |
//! | `executor/` | one run over the step graph: start ready steps, record their ends |
//! | `schedule.rs` | which steps wait for which; feedback loops send the run back |
//! | `attempt.rs` | one step's attempts: `when`, timeout, retry, their events |
//! | `scope.rs` | what a step's templates see, and the run's final output |
//! | `ledger.rs` | what a run and its steps spend: calls, cache tally, cost, the cost limit |
//! | `events.rs` | the typed events a run emits, with ids and spans |
//! | `emit.rs` | one run's emitter: its id, clock and spans; nested runs linked to their step |
//! | `sinks.rs` | where events go: the JSON Lines file, observers |
//! | `traces.rs` | what runs tell a trace exporter (the [`Tracer`] trait) and a run's trace ids |
//! | `record.rs` | the run record |
//! | `pipeline.rs` | the runnable pipeline, step handlers and their context |
//! | `inputs.rs` | a pipeline's declared inputs, and binding given values to them |
//! | `tools.rs` | declared tools at run time: arguments checked, safety, execution, tool events |
//! | `voting.rs` | voting over candidates: majority, unanimity, similarity, per field |
//! | `steps/` | one handler per step type |
//!
//! Traces are exported by an outlet above this layer (the `trace` module): a session is opened
//! with a [`Tracer`] and hands it every event of every run, as it hands them to its sinks.

mod attempt;
mod emit;
mod events;
mod executor;
mod fanout;
pub mod inputs;
mod ledger;
mod pipeline;
mod record;
mod resources;
mod schedule;
mod scope;
mod session;
mod sinks;
pub mod steps;
pub mod tools;
mod traces;
pub mod voting;

pub use emit::Events;
pub use events::{
    AgentOutcome, CallContent, CallKind, Event, EventData, Observer, RunIds, Sent, SkipReason,
    SpanId, StepOutcome, ToolOutcome, ToolResult, Watch,
};
pub use fanout::{FanOut, Job};
pub use ledger::{RunLedger, StepLedger};
pub use pipeline::{
    Feedback, GroupBy, NestedRun, NestedRuns, Pipeline, Reduce, Rendered, StepContext, StepFuture,
    StepHandler, StepNode, StepOutput,
};
pub use record::{
    AnsweredBy, CacheTally, Lifecycle, RunRecord, RunStatus, StepRecord, StepStatus, VoteRecord,
};
#[cfg(test)]
pub(crate) use resources::for_tests as test_resources;
pub use resources::{Resources, Standalone};
pub use session::{RunRequest, Runner, Session, SessionOptions};
pub use sinks::{EventSink, JsonLinesFile, Observing, Sinks};
pub use traces::{Origin, RunTrace, TraceShape, TracedRun, Tracer};
