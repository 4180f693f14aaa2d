//! The scripted engine: deterministic answers for tests, examples and `--dry-run`.
//!
//! It answers from rules matched against the last user message, else from a list of replies
//! (in turn; the last repeats), else by echoing the last user message. Asked for JSON valid
//! against a schema and given nothing explicit to say, it answers with a small instance of that
//! schema, so structured steps can be dry-run. It can fail its first N calls and stall before
//! answering, to exercise retries and timeouts. Token counts are word counts; streamed, an answer
//! arrives word by word.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use regex::Regex;
use serde_json::{Value, json};

use super::{
    CacheStatus, Engine, EngineFuture, EngineIdentity, ModelInfo, Request, Response, Timings,
    TokenSink, example_with_text,
};
use crate::core::{Failure, FailureCode, Role, TokenUsage, ToolCall, text};

/// What a scripted model answers: text, or a call of a tool.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptedReply {
    Text(String),
    /// A native tool call (for testing agents), with the text the model writes beside it.
    Call {
        tool: String,
        arguments: serde_json::Value,
        text: String,
    },
}

impl ScriptedReply {
    /// The reply as JSON, for the engine's identity.
    fn to_json(&self) -> Value {
        match self {
            ScriptedReply::Text(text) => json!(text),
            ScriptedReply::Call {
                tool,
                arguments,
                text,
            } => {
                let mut call = json!({ "tool": tool, "arguments": arguments });
                if !text.is_empty() {
                    call["text"] = json!(text);
                }
                call
            }
        }
    }
}

impl From<&str> for ScriptedReply {
    fn from(text: &str) -> Self {
        ScriptedReply::Text(text.to_string())
    }
}

/// A reply chosen by the last user message.
#[derive(Debug, Clone)]
pub struct ScriptedRule {
    /// Applies when the message contains this text.
    pub contains: Option<String>,
    /// Applies when the message matches this regex.
    pub matches: Option<Regex>,
    pub reply: ScriptedReply,
}

/// How a scripted engine answers.
#[derive(Debug, Clone, Default)]
pub struct ScriptedConfig {
    pub rules: Vec<ScriptedRule>,
    pub replies: Vec<ScriptedReply>,
    pub echo: bool,
    /// Fail this many calls first with a retryable INFERENCE_ENGINE_ERROR.
    pub fail_first: u32,
    /// Wait this long before each answer.
    pub stall: Option<Duration>,
}

impl ScriptedConfig {
    /// The configuration `--dry-run` substitutes for every model: echo everything.
    pub fn echo() -> Self {
        ScriptedConfig {
            echo: true,
            ..ScriptedConfig::default()
        }
    }
}

/// A deterministic engine.
#[derive(Debug)]
pub struct ScriptedEngine {
    config: ScriptedConfig,
    calls: AtomicUsize,
    failures: AtomicU32,
}

impl ScriptedEngine {
    pub fn new(config: ScriptedConfig) -> Self {
        ScriptedEngine {
            config,
            calls: AtomicUsize::new(0),
            failures: AtomicU32::new(0),
        }
    }

    /// How many requests it has received.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn answer(&self, request: &Request, call: usize) -> Result<ScriptedReply, Failure> {
        let last_user = request
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map_or("", |m| m.content.as_str());
        let rule = self.config.rules.iter().find(|rule| {
            rule.contains
                .as_ref()
                .is_none_or(|c| last_user.contains(c.as_str()))
                && rule.matches.as_ref().is_none_or(|r| r.is_match(last_user))
        });
        if let Some(rule) = rule {
            return Ok(rule.reply.clone());
        }
        if let Some(reply) = self.config.replies.get(call).or(self.config.replies.last()) {
            return Ok(reply.clone());
        }
        if let Some(schema) = &request.json_schema {
            let text = if self.config.echo { last_user } else { "" };
            return Ok(ScriptedReply::Text(
                example_with_text(schema, text).to_string(),
            ));
        }
        if self.config.echo {
            return Ok(ScriptedReply::Text(last_user.to_string()));
        }
        Err(Failure::new(
            FailureCode::ConfigNoEngine,
            "the scripted model has no rule, reply or echo for this request",
        )
        .with_help("give the scripted model `replies`, `rules`, or `echo: true`"))
    }
}

impl Engine for ScriptedEngine {
    fn infer(&self, request: Request) -> EngineFuture<'_> {
        Box::pin(async move {
            let call = self.calls.fetch_add(1, Ordering::SeqCst);
            if let Some(stall) = self.config.stall {
                tokio::time::sleep(stall).await;
            }
            if self.failures.fetch_add(1, Ordering::SeqCst) < self.config.fail_first {
                return Err(Failure::new(
                    FailureCode::InferenceEngineError,
                    format!(
                        "scripted failure {} of {}",
                        call + 1,
                        self.config.fail_first
                    ),
                ));
            }
            let (text, tool_calls) = match self.answer(&request, call)? {
                ScriptedReply::Text(text) => (text, Vec::new()),
                ScriptedReply::Call {
                    tool,
                    arguments,
                    text,
                } => (
                    text,
                    vec![ToolCall {
                        id: format!("scripted_call_{}", call + 1),
                        name: tool,
                        arguments,
                    }],
                ),
            };
            let prompt_tokens = request
                .messages
                .iter()
                .map(|m| text::words(&m.content).count() as u64)
                .sum();
            let completion_tokens = text::words(&text).count() as u64;
            Ok(Response {
                text,
                tool_calls,
                usage: TokenUsage {
                    prompt_tokens,
                    completion_tokens,
                    reasoning_tokens: None,
                },
                timings: Timings::default(),
                cache: CacheStatus::Unused,
                schema_mode: None,
            })
        })
    }

    /// The answer word by word (each word with the space before it), once it is known.
    fn infer_streaming(&self, request: Request, sink: TokenSink) -> EngineFuture<'_> {
        Box::pin(async move {
            let response = self.infer(request).await?;
            for piece in word_pieces(&response.text) {
                sink(piece);
            }
            Ok(response)
        })
    }

    fn model_info(&self) -> ModelInfo {
        ModelInfo {
            name: "scripted".into(),
            engine: "scripted",
            constrained_decoding: false,
            price: None,
            key: None,
            context_window: None,
        }
    }

    /// Its rules, reply and echo setting — unless it has several replies, given in turn: then
    /// an answer depends on how many calls came before, not on the request.
    fn identity(&self) -> Option<EngineIdentity> {
        let config = &self.config;
        if config.replies.len() > 1 {
            return None;
        }
        let rules: Vec<Value> = config
            .rules
            .iter()
            .map(|rule| {
                json!({
                    "contains": rule.contains,
                    "matches": rule.matches.as_ref().map(Regex::as_str),
                    "reply": rule.reply.to_json(),
                })
            })
            .collect();
        let replies: Vec<Value> = config.replies.iter().map(ScriptedReply::to_json).collect();
        Some(EngineIdentity {
            settings: json!({
                "engine": "scripted",
                "rules": rules,
                "replies": replies,
                "echo": config.echo,
            }),
            file: None,
        })
    }
}

/// `text` cut before each word: every piece but the first starts with the whitespace before its
/// word, so the pieces put together are `text`.
fn word_pieces(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let word_at = rest
            .find(|c: char| !c.is_whitespace())
            .unwrap_or(rest.len());
        let end = rest[word_at..]
            .find(char::is_whitespace)
            .map_or(rest.len(), |n| word_at + n);
        let (piece, after) = rest.split_at(end);
        rest = after;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Message;

    fn ask(text: &str) -> Request {
        Request {
            messages: vec![Message::system("be brief"), Message::user(text)],
            ..Request::default()
        }
    }

    #[tokio::test]
    async fn rules_then_replies_then_echo() {
        let engine = ScriptedEngine::new(ScriptedConfig {
            rules: vec![
                ScriptedRule {
                    contains: Some("capital".into()),
                    matches: None,
                    reply: "Paris".into(),
                },
                ScriptedRule {
                    contains: None,
                    matches: Some(Regex::new("(?i)^hello").expect("regex")),
                    reply: "hi".into(),
                },
            ],
            replies: vec!["one".into(), "two".into()],
            echo: true,
            ..ScriptedConfig::default()
        });
        let text = |r: Result<Response, Failure>| r.expect("answer").text;
        assert_eq!(
            text(engine.infer(ask("the capital of France?")).await),
            "Paris"
        );
        assert_eq!(text(engine.infer(ask("HELLO there")).await), "hi");
        assert_eq!(
            text(engine.infer(ask("x")).await),
            "two",
            "replies are indexed by call number"
        );
        assert_eq!(
            text(engine.infer(ask("y")).await),
            "two",
            "the last reply repeats"
        );
        assert_eq!(engine.calls(), 4);
    }

    #[tokio::test]
    async fn echo_counts_words_as_tokens() {
        let engine = ScriptedEngine::new(ScriptedConfig::echo());
        let response = engine.infer(ask("three little words")).await.expect("echo");
        assert_eq!(response.text, "three little words");
        assert_eq!(
            response.usage,
            TokenUsage {
                prompt_tokens: 5,
                completion_tokens: 3,
                reasoning_tokens: None,
            }
        );
    }

    #[tokio::test]
    async fn a_streamed_answer_arrives_word_by_word() {
        let engine = ScriptedEngine::new(ScriptedConfig::echo());
        let pieces = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink: TokenSink = {
            let pieces = std::sync::Arc::clone(&pieces);
            std::sync::Arc::new(move |piece: &str| {
                pieces.lock().expect("pieces").push(piece.to_string());
            })
        };
        let response = engine
            .infer_streaming(ask(" three  little\nwords "), sink)
            .await
            .expect("echo");
        let pieces = pieces.lock().expect("pieces").clone();
        assert_eq!(pieces, [" three", "  little", "\nwords", " "]);
        assert_eq!(pieces.concat(), response.text);
    }

    #[tokio::test]
    async fn json_requests_get_an_instance_of_the_schema() {
        let engine = ScriptedEngine::new(ScriptedConfig::echo());
        let schema = serde_json::json!({ "type": "object", "required": ["label"], "properties": { "label": { "enum": ["a", "b"] } } });
        let request = Request {
            json_schema: Some(schema),
            ..ask("classify")
        };
        assert_eq!(
            engine.infer(request).await.expect("json").text,
            r#"{"label":"a"}"#
        );
    }

    #[tokio::test]
    async fn failing_first_calls_then_answering() {
        let engine = ScriptedEngine::new(ScriptedConfig {
            fail_first: 2,
            ..ScriptedConfig::echo()
        });
        for _ in 0..2 {
            let failure = engine.infer(ask("x")).await.expect_err("fails");
            assert_eq!(failure.code, FailureCode::InferenceEngineError);
            assert!(failure.retryable);
        }
        assert!(engine.infer(ask("x")).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn stalling_takes_the_configured_time() {
        let engine = ScriptedEngine::new(ScriptedConfig {
            stall: Some(Duration::from_secs(30)),
            ..ScriptedConfig::echo()
        });
        let started = tokio::time::Instant::now();
        engine.infer(ask("x")).await.expect("answer");
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test]
    async fn nothing_to_say_is_a_configuration_failure() {
        let engine = ScriptedEngine::new(ScriptedConfig::default());
        let failure = engine.infer(ask("x")).await.expect_err("no answer");
        assert_eq!(failure.code, FailureCode::ConfigNoEngine);
    }
}
