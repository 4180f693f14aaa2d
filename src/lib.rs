//! pagantic: a declarative pipeline runner for LLM work.
//!
//! People describe a pipeline once, in a YAML plan file; pagantic checks it in milliseconds,
//! builds it into a step graph and runs it: once, over every row of an input file, or as a
//! conversation. Modules follow layers that only point downward (a test enforces it):
//!
//! | layer | module | owns |
//! | --- | --- | --- |
//! | 0 | [`core`] | messages, tool calls, usage, prices and costs, candidates, the failure taxonomy |
//! | 1 | [`model_store`] | model files: the embedded models' store (`models pull`), where a local model's file comes from, GGUF inspection and Q8_0 derivation, files' hashes; below the engines, which use it |
//! | 1 | [`inference`] | the `Engine` trait, requests and responses; the local (mistral.rs), OpenAI-compatible and scripted engines |
//! | 2 | [`cache`] | the persistent call cache: SQLite under content hashes of everything that decides an answer; an engine decorator |
//! | 2 | [`constraint`] | model output to schema-valid JSON: repair, enum normalisation, schema errors |
//! | 2 | [`corpora`] | corpora: loading, chunking, BM25 and keyword retrieval; a retriever tool's candidates |
//! | 2 | [`prompt`] | minijinja templates: one configuration, static analysis |
//! | 2 | [`rerank`] | scorers behind one trait (keyword; ONNX cross- and bi-encoders) and the selection: top_k / min_score, duplicates, a character budget |
//! | 2 | [`tool`] | running tools: commands (no shell, process groups, timeouts, caps), builtins, MCP server sessions |
//! | 2 | [`validate`] | validation rules and the retry policy |
//! | 3 | [`orchestrate`] | the run session and its `Runner` (the one way into the executor, one fan-out for many runs) with the resources its builds and runs share, a pipeline's inputs, the executor over the step graph, step handlers, lifecycle, run records and ledgers, events and their sinks |
//! | 4 | [`plan`] | plan files: YAML with spans, generated schemas, checks, the step graph |
//! | 4 | [`trace`] | OpenTelemetry traces of the runs over OTLP/HTTP: an outlet the session hands every event to |
//! | 5 | [`batch`] | batch jobs: rows in, one JSON line per row out, concurrency, resume, shards |
//! | 5 | [`serve`] | plans as an HTTP service: routes, admission (slots, queue), bearer token, metrics, reloading changed plans |
//! | 5 | [`suite`] | test suites run: cases × variants through the run session, assertions scored, reports |
//! | 5 | [`cli`] | clap commands: thin adapters that translate and print |

pub mod batch;
pub mod cache;
pub mod cli;
pub mod constraint;
pub mod core;
pub mod corpora;
pub mod inference;
pub mod model_store;
pub mod orchestrate;
pub mod plan;
pub mod prompt;
pub mod rerank;
pub mod serve;
pub mod suite;
pub mod tool;
pub mod trace;
pub mod validate;
