//! The local engine: a GGUF model run in-process by mistral.rs.
//!
//! The model is loaded once, on first use, and shared by every step and batch row (and every model
//! of the same file, through the [`LocalLoads`] the session owns). It is loaded with
//! F32 activations (mistral.rs's builder would pick F16 on CPU, which takes a slow serial path) on
//! the CPU. Decoding constraints (JSON Schema, regex, Lark) go to mistral.rs's llguidance. No
//! mistral.rs type leaves this module.
//!
//! With `max_batch` 1 (what plans use) requests reach mistral.rs one at a time, with its prefix
//! cache on: a request whose prompt starts like an earlier one's (the system prompt,
//! instructions and few-shot examples of batch rows) prefills only the rest. One at a time
//! because mistral.rs 0.8.1's scheduler corrupts greedy answers when sequences of different
//! lengths run together, prefix cache or not (`examples/prefix_cache_check.rs` reproduces it),
//! and batching gains nothing on a CPU anyway. With `max_batch` above 1 requests go to mistral.rs
//! concurrently and its scheduler batches them, prefix cache off: kept to measure and reproduce
//! that.
//!
//! The engine itself (`engine/`, whose `translate` turns pagantic's requests into mistral.rs's and
//! its answers back) is the `local` feature, on by default.
//! A build without it (`--no-default-features`) compiles `without_engine.rs` in its place, which
//! has the same names: there a [`LocalModel`] keeps its name and cache identity, so the call
//! cache can replay its calls, but every call it would make fails with `CONFIG_NO_ENGINE` and
//! the way to get the engine. That one `mod` line is where the two builds differ.

#[cfg_attr(not(feature = "local"), path = "without_engine.rs")]
mod engine;

use std::sync::Arc;

use super::{Engine, EngineFuture, EngineIdentity, ModelInfo, Request, TokenSink};
use crate::model_store::{LocalSource, Notice};
// `LocalLoads` and `missing_local_engine`, and where the build has the engine, `LocalConfig`
// and `LocalEngine`.
pub use engine::*;

/// How to run a local model, whatever its file.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalSettings {
    /// Most sequences decoded together. 1: one request at a time, with the prefix cache on.
    pub max_batch: usize,
    /// Refuse requests whose prompt and `max_tokens` would not fit in this many tokens.
    pub context_length: Option<u32>,
    /// Pass JSON Schemas and grammars to llguidance (else schemas are left to the caller's
    /// checks after decoding, and grammars are refused).
    pub decoder_constraints: bool,
}

impl LocalSettings {
    /// The most tokens one call may hold: the configured `context_length`, which requests are
    /// held to, else what the model was `trained` for (known once its file is read).
    pub fn context_window(&self, trained: Option<u64>) -> Option<u64> {
        self.context_length.map(u64::from).or(trained)
    }
}

/// A local model loaded on first use, so commands that never call it never pay for it; a failed
/// load is remembered and reported to every caller.
pub struct LocalModel {
    source: LocalSource,
    settings: LocalSettings,
    /// Its file's load, shared with every model of the same source and `max_batch`.
    load: engine::Load,
}

impl LocalModel {
    /// A model of `source`, sharing the load of any model of `loads` still in use with the same
    /// source and `max_batch`: the models of a plan and its sub-plans, or two models that differ
    /// only in `context_length` or `decoder_constraints`, then read the file once. `notice` is
    /// told when the engine pulls or loads the file.
    pub fn shared(
        source: LocalSource,
        settings: LocalSettings,
        notice: Notice,
        loads: &LocalLoads,
    ) -> Arc<LocalModel> {
        let key = format!("{}|{}", source.describe(), settings.max_batch);
        Arc::new(LocalModel {
            load: loads.share(key, notice),
            source,
            settings,
        })
    }
}

impl Engine for LocalModel {
    fn infer(&self, request: Request) -> EngineFuture<'_> {
        engine::infer(self, request)
    }

    fn infer_streaming(&self, request: Request, sink: TokenSink) -> EngineFuture<'_> {
        engine::infer_streaming(self, request, sink)
    }

    fn model_info(&self) -> ModelInfo {
        ModelInfo {
            name: self.source.describe(),
            engine: "mistralrs",
            constrained_decoding: self.settings.decoder_constraints,
            price: None,
            key: None,
            context_window: self.settings.context_window(self.load.trained()),
        }
    }

    /// The model file (for an embedded model, the SHA-256 its pull verifies, so a cached answer
    /// needs no pull or load) and whether decoding enforces constraints.
    fn identity(&self) -> Option<EngineIdentity> {
        let (model, file) = self.source.identity();
        Some(EngineIdentity {
            settings: serde_json::json!({
                "engine": "mistralrs",
                "model": model,
                "decoder_constraints": self.settings.decoder_constraints,
                // mistral.rs 0.8.1 mixes up sequences it decodes together, so answers depend on
                // the batch size; keying on it also keeps answers cached before runs went one at
                // a time from ever being read.
                "max_batch": self.settings.max_batch,
            }),
            file,
        })
    }
}
