//! Layer 3: running a built pipeline — the run session, the executor over the step graph, the
//! step handlers, the lifecycle, run records and events.
//!
//! The plan layer builds a [`Pipeline`] (steps with resolved handlers and dependencies, and the
//! contract a run is held to: its input declarations and step timeout); this layer knows nothing
//! about YAML. Every command runs pipelines through a [`Session`]. The executor starts every step
//! whose dependencies are done, up to `max_parallel` at a time, applies `when`, timeouts and
//! retries (by the failure taxonomy), stops scheduling at the first failure (unless the step may
//! be continued past), sends the run back to a model step when a check with feedback fails,
//! cancels on request, and returns a [`RunRecord`] that keeps every completed step's output
//! whatever happened.

mod events;
mod executor;
pub mod inputs;
mod pipeline;
mod record;
mod session;
pub mod steps;
pub mod tools;
pub mod voting;

pub use events::{
    CacheTally, Event, EventData, Events, Observer, Sent, SkipReason, SpanId, StepOutcome,
    ToolOutcome, Watch, new_run_id,
};
pub use executor::{RunOptions, execute, render_step};
pub use pipeline::{
    Feedback, Pipeline, Rendered, StepContext, StepFuture, StepHandler, StepLedger, StepNode,
    StepOutput,
};
pub use record::{AnsweredBy, Lifecycle, RunRecord, RunStatus, StepRecord, StepStatus, VoteRecord};
pub use session::{RunRequest, Runner, Session, SessionOptions};
