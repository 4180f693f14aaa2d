//! pagantic: a declarative pipeline runner for LLM work.
//!
//! People describe a pipeline once, in a YAML plan file; pagantic checks it in milliseconds,
//! builds it into a step graph and (in later layers) runs it. Modules follow layers that only
//! point downward (a test enforces it):
//!
//! | layer | module | owns |
//! | --- | --- | --- |
//! | 0 | [`core`] | messages, tool calls, usage, candidates, the failure taxonomy |
//! | 2 | [`prompt`] | minijinja templates: one configuration, static analysis |
//! | 4 | [`plan`] | plan files: YAML with spans, generated schemas, checks, the step graph |
//! | 5 | [`cli`] | clap commands: thin adapters that translate and print |

pub mod cli;
pub mod core;
pub mod plan;
pub mod prompt;
