//! [`CachedEngine`]: stands in front of any engine, answering from the cache what it has seen
//! and storing what the engine answers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use super::CallCache;
use super::key::CallKeys;
use crate::core::{Failure, FailureCode, TokenUsage, ToolCall};
use crate::inference::{
    CacheStatus, Engine, EngineFuture, EngineIdentity, ModelInfo, Request, Response, SchemaMode,
    Timings, TokenSink,
};

/// An answer as the cache keeps it.
#[derive(Serialize, Deserialize)]
struct StoredAnswer {
    text: String,
    #[serde(default)]
    tool_calls: Vec<ToolCall>,
    usage: TokenUsage,
    prompt_ms: f64,
    completion_ms: f64,
    /// How the schema was held to when the answer was made (see [`SchemaMode`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    schema_mode: Option<SchemaMode>,
}

/// The value a cache entry of a model call holds for `answer`, with only the fields an answer
/// has; None when `answer` is not one (a cassette's line that only looks like an entry).
pub(super) fn canonical_answer(answer: &Value) -> Option<String> {
    let answer = StoredAnswer::deserialize(answer).ok()?;
    serde_json::to_string(&answer).ok()
}

/// An engine behind the call cache.
pub struct CachedEngine {
    inner: Arc<dyn Engine>,
    cache: Arc<CallCache>,
    /// The keys of its calls, from the engine's identity with its model file's SHA-256, worked
    /// out on the first call (a file is hashed once); None when the engine cannot be cached.
    keys: OnceCell<Option<CallKeys>>,
}

impl CachedEngine {
    pub fn new(inner: Arc<dyn Engine>, cache: Arc<CallCache>) -> Self {
        CachedEngine {
            inner,
            cache,
            keys: OnceCell::new(),
        }
    }

    async fn keys(&self) -> Option<&CallKeys> {
        self.keys
            .get_or_init(|| async {
                let EngineIdentity { settings, file } = self.inner.identity()?;
                let Some(path) = file else {
                    return Some(CallKeys::new(&settings));
                };
                let cache = Arc::clone(&self.cache);
                let sha256 = tokio::task::spawn_blocking(move || cache.file_sha256(&path))
                    .await
                    .ok()
                    .flatten()?;
                let identity = json!({ "settings": settings, "file_sha256": sha256 });
                Some(CallKeys::new(&identity))
            })
            .await
            .as_ref()
    }

    async fn call(&self, request: Request, sink: Option<TokenSink>) -> Result<Response, Failure> {
        let keys = match self.keys().await {
            Some(keys) if self.cache.usable() => keys,
            _ if self.cache.only() => return Err(self.miss(false)),
            _ => return self.pass_through(request, sink).await,
        };
        let key = keys.key(&request);
        if let Some(stored) = self.cache.get(&key)
            && let Ok(answer) = serde_json::from_str::<StoredAnswer>(&stored.value)
        {
            self.cache
                .count(true, answer.usage.total(), stored.duration_ms);
            if let Some(sink) = sink {
                sink(&answer.text);
            }
            return Ok(Response {
                text: answer.text,
                tool_calls: answer.tool_calls,
                usage: answer.usage,
                timings: Timings {
                    prompt: duration(answer.prompt_ms),
                    completion: duration(answer.completion_ms),
                    load: Duration::ZERO,
                },
                cache: CacheStatus::Hit {
                    original: duration(stored.duration_ms),
                },
                schema_mode: answer.schema_mode,
            });
        }
        if self.cache.only() {
            return Err(self.miss(true));
        }
        self.cache.count(false, 0, 0.0);
        let started = Instant::now();
        let pacing = request.context.pacing.clone();
        let paced_before = pacing.get();
        let mut response = self.pass_through(request, sink).await?;
        // What the answer took to make: not the model's load, nor a wait for its pace.
        let duration_ms = started
            .elapsed()
            .saturating_sub(response.timings.load)
            .saturating_sub(pacing.get().since(paced_before).waited)
            .as_secs_f64()
            * 1000.0;
        let answer = StoredAnswer {
            text: response.text.clone(),
            tool_calls: response.tool_calls.clone(),
            usage: response.usage,
            prompt_ms: response.timings.prompt.as_secs_f64() * 1000.0,
            completion_ms: response.timings.completion.as_secs_f64() * 1000.0,
            schema_mode: response.schema_mode,
        };
        if let Ok(value) = serde_json::to_string(&answer) {
            self.cache
                .put(key, "call", value, response.usage.total(), duration_ms);
        }
        response.cache = CacheStatus::Miss;
        Ok(response)
    }

    async fn pass_through(
        &self,
        request: Request,
        sink: Option<TokenSink>,
    ) -> Result<Response, Failure> {
        match sink {
            Some(sink) => self.inner.infer_streaming(request, sink).await,
            None => self.inner.infer(request).await,
        }
    }

    /// The failure of a call that must come from the cache or a cassette and did not: `missing`
    /// when it is not there, else because the cache cannot be read.
    fn miss(&self, missing: bool) -> Failure {
        let (flag, from) = self.cache.replay_source();
        let model = self.inner.model_info().name;
        let message = if missing {
            format!("{flag}: the call of model `{model}` is not in {from}")
        } else {
            format!(
                "{flag}: the call of model `{model}` must come from {from}, which cannot be read"
            )
        };
        let fill = if flag == "--cassette" {
            "record the cassette again (--record FILE) on a run that reaches the model"
        } else {
            "run once without --cache-only to fill the cache"
        };
        Failure::new(FailureCode::CacheMiss, message).with_help(format!(
            "{fill}; a changed prompt, input, model or setting is a new call"
        ))
    }
}

fn duration(ms: f64) -> Duration {
    Duration::try_from_secs_f64(ms / 1000.0).unwrap_or_default()
}

impl Engine for CachedEngine {
    fn infer(&self, request: Request) -> EngineFuture<'_> {
        Box::pin(self.call(request, None))
    }

    fn infer_streaming(&self, request: Request, sink: TokenSink) -> EngineFuture<'_> {
        Box::pin(self.call(request, Some(sink)))
    }

    fn model_info(&self) -> ModelInfo {
        self.inner.model_info()
    }

    fn identity(&self) -> Option<EngineIdentity> {
        self.inner.identity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheMode, CacheSettings};
    use crate::core::Message;
    use crate::inference::{ScriptedConfig, ScriptedEngine, ScriptedReply};

    fn cache(dir: &std::path::Path, mode: CacheMode) -> Arc<CallCache> {
        let settings = CacheSettings {
            mode,
            dir: Some(dir.to_path_buf()),
            ..CacheSettings::default()
        };
        CallCache::open(&settings, Arc::default())
            .expect("opens")
            .expect("on")
    }

    fn ask(text: &str) -> Request {
        Request {
            messages: vec![Message::user(text)],
            ..Request::default()
        }
    }

    #[tokio::test]
    async fn a_second_process_is_answered_from_the_cache_without_calling_the_model() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = Arc::new(ScriptedEngine::new(ScriptedConfig::echo()));
        {
            let engine = CachedEngine::new(first.clone(), cache(dir.path(), CacheMode::ReadWrite));
            let answer = engine.infer(ask("hello")).await.expect("answers");
            assert_eq!(answer.cache, CacheStatus::Miss);
        }
        let second = Arc::new(ScriptedEngine::new(ScriptedConfig::echo()));
        let engine = CachedEngine::new(second.clone(), cache(dir.path(), CacheMode::ReadWrite));
        let answer = engine.infer(ask("hello")).await.expect("answers");
        assert!(matches!(answer.cache, CacheStatus::Hit { .. }));
        assert_eq!(answer.text, "hello");
        assert_eq!(second.calls(), 0);
        let other = engine.infer(ask("goodbye")).await.expect("answers");
        assert_eq!(other.cache, CacheStatus::Miss);
        assert_eq!((first.calls(), second.calls()), (1, 1));
    }

    #[tokio::test]
    async fn cache_only_fails_a_call_it_has_not_seen() {
        let dir = tempfile::tempdir().expect("temp dir");
        let inner = Arc::new(ScriptedEngine::new(ScriptedConfig::echo()));
        let engine = CachedEngine::new(inner.clone(), cache(dir.path(), CacheMode::Only));
        let failure = engine.infer(ask("hello")).await.expect_err("a miss");
        assert_eq!(failure.code, FailureCode::CacheMiss);
        assert_eq!(inner.calls(), 0);
    }

    #[tokio::test]
    async fn an_engine_without_an_identity_is_never_cached() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = ScriptedConfig {
            replies: vec![ScriptedReply::from("one"), ScriptedReply::from("two")],
            ..ScriptedConfig::default()
        };
        let inner = Arc::new(ScriptedEngine::new(config));
        let engine = CachedEngine::new(inner.clone(), cache(dir.path(), CacheMode::ReadWrite));
        let first = engine.infer(ask("hello")).await.expect("answers");
        let second = engine.infer(ask("hello")).await.expect("answers");
        assert_eq!((first.text.as_str(), second.text.as_str()), ("one", "two"));
        assert_eq!(second.cache, CacheStatus::Unused);
    }
}
