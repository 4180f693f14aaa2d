//! The local engine: a GGUF model run in-process by mistral.rs.
//!
//! The model is loaded once per process and shared by every step and batch row. It is loaded with
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
//! [`translate`] turns pagantic's requests into mistral.rs's and its answers back.
//!
//! The engine itself ([`engine`], with [`translate`]) is the `local` feature, on by default. A
//! build without it (`--no-default-features`) still has [`LocalModel`] — its name and cache
//! identity, so the call cache can replay its calls — but every call it would make fails with
//! [`FailureCode::ConfigNoEngine`] and the way to get the engine.

#[cfg(feature = "local")]
mod engine;
#[cfg(feature = "local")]
mod translate;

use std::sync::Arc;

use super::source::{LocalSource, Notice};
use super::{Engine, EngineFuture, EngineIdentity, ModelInfo, Request, TokenSink};
#[cfg(not(feature = "local"))]
use crate::core::{Failure, FailureCode};
#[cfg(feature = "local")]
pub use engine::{LocalConfig, LocalEngine};

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
    /// Where the engine announces a pull or a load.
    #[cfg_attr(
        not(feature = "local"),
        expect(dead_code, reason = "only the engine pulls and loads")
    )]
    notice: Notice,
    /// The file's load, shared with every model of the same source and `max_batch`.
    #[cfg(feature = "local")]
    loaded: Arc<engine::SharedLoad>,
}

impl LocalModel {
    pub fn new(source: LocalSource, settings: LocalSettings, notice: Notice) -> Self {
        LocalModel {
            source,
            settings,
            notice,
            #[cfg(feature = "local")]
            loaded: Arc::default(),
        }
    }

    /// This model (a build without the local engine has no load to share).
    #[cfg(not(feature = "local"))]
    pub fn shared(self) -> Arc<LocalModel> {
        Arc::new(self)
    }
}

/// The failure of every call of a local model in a build without the local engine (only the
/// call cache can answer for it there).
#[cfg(not(feature = "local"))]
pub fn no_local_engine(model: &str) -> Failure {
    Failure::new(
        FailureCode::ConfigNoEngine,
        format!("model `{model}`: this pagantic was built without its local engine (mistral.rs)"),
    )
    .with_help(
        "install the default build (`cargo install --locked --path .`), run with --dry-run for stand-ins, --cache-only or --cassette FILE to replay recorded calls, or use a `kind: openai` model",
    )
}

impl Engine for LocalModel {
    #[cfg(feature = "local")]
    fn infer(&self, request: Request) -> EngineFuture<'_> {
        Box::pin(async move { self.engine().await?.infer(request).await })
    }

    #[cfg(feature = "local")]
    fn infer_streaming(&self, request: Request, sink: TokenSink) -> EngineFuture<'_> {
        Box::pin(async move { self.engine().await?.infer_streaming(request, sink).await })
    }

    #[cfg(not(feature = "local"))]
    fn infer(&self, _: Request) -> EngineFuture<'_> {
        Box::pin(async move { Err(no_local_engine(&self.source.describe())) })
    }

    #[cfg(not(feature = "local"))]
    fn infer_streaming(&self, _: Request, _: TokenSink) -> EngineFuture<'_> {
        Box::pin(async move { Err(no_local_engine(&self.source.describe())) })
    }

    fn model_info(&self) -> ModelInfo {
        #[cfg(feature = "local")]
        let trained = match self.loaded.get() {
            Some(Ok(weights)) => weights.context_length,
            _ => None,
        };
        #[cfg(not(feature = "local"))]
        let trained = None;
        ModelInfo {
            name: self.source.describe(),
            engine: "mistralrs",
            constrained_decoding: self.settings.decoder_constraints,
            price: None,
            context_window: self.settings.context_window(trained),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "local")]
    #[test]
    fn models_with_the_same_source_and_batch_size_share_one_load() {
        let quiet: Notice = Arc::new(|_: &str| {});
        let make = |path: &str, max_batch, context_length, decoder_constraints| {
            let settings = LocalSettings {
                max_batch,
                context_length,
                decoder_constraints,
            };
            LocalModel::new(LocalSource::File(path.into()), settings, Arc::clone(&quiet)).shared()
        };
        let first = make("/models/a.gguf", 8, None, true);
        let same_load = |other: Arc<LocalModel>| Arc::ptr_eq(&first.loaded, &other.loaded);
        assert!(same_load(make("/models/a.gguf", 8, None, true)));
        assert!(same_load(make("/models/a.gguf", 8, Some(512), false)));
        assert!(!same_load(make("/models/a.gguf", 1, None, true)));
        assert!(!same_load(make("/models/b.gguf", 8, None, true)));
    }

    #[cfg(not(feature = "local"))]
    #[tokio::test]
    async fn without_the_local_engine_a_call_says_how_to_get_one() {
        let model = LocalModel::new(
            LocalSource::File("/models/a.gguf".into()),
            LocalSettings {
                max_batch: 1,
                context_length: None,
                decoder_constraints: true,
            },
            Arc::new(|_: &str| {}),
        );
        let failure = model
            .infer(Request::default())
            .await
            .expect_err("no engine");
        assert_eq!(failure.code, FailureCode::ConfigNoEngine);
        assert!(
            failure.message.contains("without its local engine"),
            "{}",
            failure.message
        );
    }
}
