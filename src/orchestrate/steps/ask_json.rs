//! Ask a model for JSON, check the answer, and ask again with the errors: the loop `structured`
//! (schema validation) and `route` (a route the agents and limits accept) share.
//!
//! Each attempt sends the request with the JSON Schema as a decoding constraint, gives the text
//! to the caller's check, and on a refusal appends the answer and the caller's correction to the
//! conversation, so the next attempt sees what was wrong. Every attempt is a recorded model call.

use serde_json::{Value, json};

use crate::core::{Failure, FailureCode, Message, TokenUsage};
use crate::inference::{Engine, Request, SchemaMode};
use crate::orchestrate::events::CallKind;
use crate::orchestrate::pipeline::StepContext;

/// What to ask and how often.
pub struct JsonQuestion<'a> {
    pub engine: &'a dyn Engine,
    /// The request of the first attempt (its `json_schema` set); later attempts add the
    /// answer and the correction to its messages.
    pub request: Request,
    /// Attempts in all (at least 1).
    pub max_attempts: u32,
    /// How the events name attempt N (`route` makes two kinds of call).
    pub call: fn(u32) -> CallKind,
}

/// An accepted answer.
#[derive(Debug)]
pub struct JsonAnswer<T> {
    pub value: T,
    /// Over every attempt.
    pub usage: TokenUsage,
    /// One record per attempt: its number, usage, whether it was accepted, and why not (and the
    /// engine's schema mode, where it negotiated one).
    pub attempts: Vec<Value>,
    /// How the engine held the accepted answer to the schema, where it negotiated that.
    pub schema_mode: Option<SchemaMode>,
}

/// Asks until `check` accepts an answer or the attempts run out. `correction` words the message
/// sent back after a refusal. A failed call (the engine's error, kept as it is so its retry
/// rules still apply) is the outer error; `Ok(Err(refusal))` says every answer was refused, with
/// the last refusal, its `details.attempts` the record of every attempt (as an accepted answer's
/// step detail has them), so a failed step says how many answers it asked for and why each was
/// refused.
pub async fn ask_json<T>(
    ctx: &StepContext,
    question: JsonQuestion<'_>,
    check: impl Fn(&str) -> Result<T, Failure>,
    correction: impl Fn(&Failure) -> String,
) -> Result<Result<JsonAnswer<T>, Failure>, Failure> {
    let JsonQuestion {
        engine,
        mut request,
        max_attempts,
        call,
    } = question;
    let mut usage = TokenUsage::default();
    let mut attempts = Vec::new();
    let mut refusal = None;
    for attempt in 1..=max_attempts.max(1) {
        let response = ctx
            .infer(engine, request.clone(), None, call(attempt))
            .await?;
        usage += response.usage;
        let mut record = json!({ "attempt": attempt, "usage": response.usage });
        if let Some(mode) = response.schema_mode {
            record["schema_mode"] = json!(mode);
        }
        match check(&response.text) {
            Ok(value) => {
                record["valid"] = json!(true);
                attempts.push(record);
                return Ok(Ok(JsonAnswer {
                    value,
                    usage,
                    attempts,
                    schema_mode: response.schema_mode,
                }));
            }
            Err(failure) => {
                record["valid"] = json!(false);
                record["error"] = json!(failure);
                attempts.push(record);
                request.messages.push(Message::assistant(response.text));
                request.messages.push(Message::user(correction(&failure)));
                refusal = Some(failure);
            }
        }
    }
    let refusal = refusal.unwrap_or_else(|| {
        Failure::new(
            FailureCode::ConstraintJsonInvalid,
            "the model gave no answer",
        )
    });
    let mut details = refusal
        .details
        .as_deref()
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(details) = details.as_object_mut() {
        details.insert("attempts".into(), Value::Array(attempts));
    }
    Ok(Err(refusal.with_details(details)))
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::inference::{ScriptedConfig, ScriptedEngine, ScriptedReply, ScriptedRule};
    use crate::orchestrate::emit::Events;

    fn context(events: &Events) -> StepContext {
        StepContext::detached("ask", events)
    }

    /// Answers `first` to the question, and 7 once told what was wrong with `first`.
    fn engine(first: &str) -> ScriptedEngine {
        ScriptedEngine::new(ScriptedConfig {
            rules: vec![ScriptedRule {
                contains: Some(format!("fix: `{first}` is not a positive integer")),
                matches: None,
                reply: ScriptedReply::Text("7".into()),
            }],
            replies: vec![ScriptedReply::Text(first.into())],
            ..ScriptedConfig::default()
        })
    }

    fn question(engine: &ScriptedEngine, max_attempts: u32) -> JsonQuestion<'_> {
        JsonQuestion {
            engine,
            request: Request {
                messages: vec![Message::user("give a number")],
                json_schema: Some(json!({ "type": "integer" })),
                ..Request::default()
            },
            max_attempts,
            call: CallKind::Attempt,
        }
    }

    fn positive(text: &str) -> Result<i64, Failure> {
        match text.trim().parse::<i64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(Failure::new(
                FailureCode::ConstraintJsonInvalid,
                format!("`{text}` is not a positive integer"),
            )),
        }
    }

    #[tokio::test]
    async fn a_refused_answer_is_sent_back_with_the_correction() {
        let events = Events::recording();
        let ctx = context(&events);
        let engine = engine("-3");
        let answer = ask_json(&ctx, question(&engine, 3), positive, |f| {
            format!("fix: {}", f.message)
        })
        .await
        .expect("the calls succeed")
        .expect("the corrected answer is accepted");
        assert_eq!(answer.value, 7);
        assert_eq!(answer.attempts.len(), 2);
        assert_eq!(answer.attempts[0]["valid"], false);
        assert_eq!(answer.attempts[1]["valid"], true);
        assert_eq!(ctx.ledger.run().model_calls(), 2);
    }

    #[tokio::test]
    async fn a_failed_call_is_the_outer_error_as_the_engine_gave_it() {
        let events = Events::recording();
        let engine = ScriptedEngine::new(ScriptedConfig {
            fail_first: 1,
            ..ScriptedConfig::echo()
        });
        let error = ask_json(&context(&events), question(&engine, 3), positive, |_| {
            "try again".into()
        })
        .await
        .expect_err("the call fails");
        assert_eq!(error.code, FailureCode::InferenceEngineError);
        assert!(error.retryable, "the engine's retry rules still apply");
    }

    #[tokio::test]
    async fn the_last_refusal_is_the_error_when_attempts_run_out() {
        let events = Events::recording();
        let ctx = context(&events);
        let engine = engine("-3");
        let error = ask_json(&ctx, question(&engine, 2), positive, |_| "try again".into())
            .await
            .expect("the calls succeed")
            .expect_err("no answer is accepted");
        assert_eq!(error.message, "`-3` is not a positive integer");
        assert_eq!(ctx.ledger.run().model_calls(), 2);
        // The error says every answer it asked for and why each was refused.
        let details = error.details.expect("details");
        let attempts = details["attempts"].as_array().expect("the attempts");
        assert_eq!(attempts.len(), 2, "{details}");
        assert!(attempts.iter().all(|a| a["valid"] == false), "{details}");
        assert_eq!(attempts[1]["attempt"], 2);
        assert_eq!(
            attempts[1]["error"]["message"],
            "`-3` is not a positive integer"
        );
    }
}
