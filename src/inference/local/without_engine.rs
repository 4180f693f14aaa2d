//! The local engine's place in a build without it (`--no-default-features`), with the names the
//! engine has: a [`LocalModel`] keeps its name and cache identity, so the call cache can replay
//! its calls, but every call it would make fails with `CONFIG_NO_ENGINE` and the way to get the
//! engine; a plan's build refuses such a model unless only the cache may answer.

use super::LocalModel;
use crate::core::{Failure, FailureCode};
use crate::inference::{EngineFuture, Request, TokenSink};
use crate::model_store::Notice;

/// The loads of local models: in this build there are none to share.
#[derive(Default)]
pub struct LocalLoads;

/// One model's load: none.
pub(super) struct Load;

impl LocalLoads {
    pub(super) fn share(&self, _key: String, _notice: Notice) -> Load {
        Load
    }
}

impl Load {
    /// Nothing is ever loaded, so what the model was trained for stays unknown.
    pub(super) fn trained(&self) -> Option<u64> {
        None
    }
}

/// Why local model `model` cannot be built for a run in this build (only the call cache can
/// answer for it here).
pub fn missing_local_engine(model: &str) -> Option<Failure> {
    Some(no_engine(model))
}

/// Fails: this build has no engine to run `model` on.
pub(super) fn infer(model: &LocalModel, _: Request) -> EngineFuture<'_> {
    Box::pin(async move { Err(no_engine(&model.source.describe())) })
}

/// Fails: this build has no engine to run `model` on.
pub(super) fn infer_streaming(model: &LocalModel, _: Request, _: TokenSink) -> EngineFuture<'_> {
    Box::pin(async move { Err(no_engine(&model.source.describe())) })
}

/// The failure of every call of local model `model`, with the ways to get or avoid the engine.
fn no_engine(model: &str) -> Failure {
    Failure::new(
        FailureCode::ConfigNoEngine,
        format!("model `{model}`: this pagantic was built without its local engine (mistral.rs)"),
    )
    .with_help(
        "install the default build (`cargo install --locked --path .`), run with --dry-run for stand-ins, --cache-only or --cassette FILE to replay recorded calls, or use a `kind: openai` model",
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::inference::{Engine, LocalSettings};
    use crate::model_store::LocalSource;

    #[tokio::test]
    async fn without_the_local_engine_a_call_says_how_to_get_one() {
        let model = LocalModel::shared(
            LocalSource::File("/models/a.gguf".into()),
            LocalSettings {
                max_batch: 1,
                context_length: None,
                decoder_constraints: true,
            },
            Arc::new(|_: &str| {}),
            &LocalLoads,
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
