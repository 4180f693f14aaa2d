//! What goes wrong talking to a server, as failures with the codes the executor's retry rules
//! expect: transport errors, HTTP statuses, error bodies (read up to a cap; the engine masks its
//! secrets in every failure as it leaves, see `OpenAiEngine::infer`),
//! refusals of a part of the request (never retried), what an error teaches about the server's
//! dialect, and when and how long to wait before trying
//! again (`Retry-After`, else exponential backoff).

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use serde_json::Value;

use super::negotiate::{Lesson, Refused, lesson, refused_part};
use super::{MAX_BODY, OpenAiEngine};
use crate::core::{Failure, FailureCode};

impl OpenAiEngine {
    /// A failure to reach the server or to read its reply.
    pub(super) fn transport_failure(&self, err: &reqwest::Error) -> Failure {
        let cause = error_chain(err);
        if err.is_timeout() {
            Failure::new(
                FailureCode::InferenceTimeout,
                format!(
                    "{} did not answer within {:?}",
                    self.url, self.config.timeout
                ),
            )
        } else if err.is_connect() {
            Failure::new(
                FailureCode::InferenceModelUnavailable,
                format!("cannot connect to {}: {cause}", self.url),
            )
            // A server that is restarting or not up yet: a scheduler should try again later.
            .retryable(true)
            .with_help("check that the server is running and that `base_url` points at it")
        } else {
            Failure::new(
                FailureCode::InferenceEngineError,
                format!("the request to {} failed: {cause}", self.url),
            )
        }
    }

    /// The failure for a reply whose status is not a success, and whether to try again: never
    /// when the error names a part of `sent`, the request, that the server refuses.
    pub(super) async fn status_failure(
        &self,
        mut response: reqwest::Response,
        sent: &Value,
    ) -> AttemptError {
        let status = response.status();
        let wait = retry_after(response.headers());
        let mut body = read_body(&mut response, MAX_ERROR_BODY)
            .await
            .unwrap_or_default();
        body.truncate(MAX_ERROR_BODY);
        let text = String::from_utf8_lossy(&body);
        let about_the_request = !mentions_context_limit(&text);
        let lesson = about_the_request
            .then(|| lesson(status, &text, sent))
            .flatten();
        let refused = about_the_request
            .then(|| refused_part(status, &text, sent))
            .flatten();
        if let Some(refused) = refused {
            let said = format!("{} ({status}): {}", self.url, server_message(&body));
            return AttemptError {
                failure: self.refusal(refused, &said),
                retry: Retry::Never,
                refused: Some(refused),
                lesson,
                from_the_request: status.is_client_error(),
            };
        }
        let retry = match status {
            _ if lesson.is_some() => Retry::Never,
            StatusCode::TOO_MANY_REQUESTS => wait.map_or(Retry::Backoff, Retry::After),
            status if status.is_server_error() => Retry::Backoff,
            _ => Retry::Never,
        };
        AttemptError {
            failure: self.reply_failure(status, &body),
            retry,
            refused: None,
            lesson,
            from_the_request: status.is_client_error(),
        }
    }

    /// The failure for a part of the request the server refuses; `said` is what it said.
    pub(super) fn refusal(&self, refused: Refused, said: &str) -> Failure {
        let help = match refused {
            Refused::Tools => {
                "set `tool_calls: prompt` (or `auto`) on the step: the tools are then described \
                 in the prompt and the calls read from the answer"
            }
            Refused::ResponseFormat => {
                "the engine already tried every response format it knows; this server cannot \
                 be asked for JSON this way"
            }
            Refused::Field(_) => {
                "leave the setting out of the step (or the model), or use a server that takes it"
            }
        };
        Failure::new(
            FailureCode::InferenceRequestRefused,
            format!(
                "model `{}`: the server does not take `{}`: {said}",
                self.config.model,
                refused.field()
            ),
        )
        .with_help(help)
    }

    /// What a reply with this (unsuccessful) status and error body means.
    pub(super) fn reply_failure(&self, status: StatusCode, body: &[u8]) -> Failure {
        let said = server_message(body);
        match status {
            StatusCode::TOO_MANY_REQUESTS => Failure::new(
                FailureCode::InferenceRateLimited,
                format!("{} is rate-limiting requests: {said}", self.url),
            ),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Failure::new(
                FailureCode::InferenceModelUnavailable,
                format!("{} refused the credentials ({status}): {said}", self.url),
            )
            .with_help(
                "check the API key in the environment variable the model's configuration \
                 names; it must be set and valid for this server",
            ),
            StatusCode::NOT_FOUND => Failure::new(
                FailureCode::InferenceModelUnavailable,
                format!(
                    "{} has no model `{}` (404): {said}",
                    self.config.base_url, self.config.model
                ),
            )
            .with_help(
                "check `base_url` (it usually ends in /v1) and that the server serves the model",
            ),
            StatusCode::BAD_REQUEST if mentions_context_limit(&String::from_utf8_lossy(body)) => {
                Failure::new(
                    FailureCode::InferenceContextExceeded,
                    format!("the prompt does not fit the model's context: {said}"),
                )
                .with_help("shorten the prompt, retrieve fewer passages, or lower max_tokens")
            }
            status if status.is_server_error() => Failure::new(
                FailureCode::InferenceEngineError,
                format!("{} failed ({status}): {said}", self.url),
            ),
            status => Failure::new(
                FailureCode::InferenceEngineError,
                format!("{} rejected the request ({status}): {said}", self.url),
            )
            .retryable(false),
        }
    }

    /// An error the server reported inside a successful reply or a stream.
    pub(super) fn reported_error(&self, error: &Value) -> Failure {
        let said = error_message(error).unwrap_or_else(|| error.to_string());
        Failure::new(
            FailureCode::InferenceEngineError,
            format!("the server reported an error: {}", excerpt(&said)),
        )
    }
}

/// Whether to try again after a failed attempt, and when.
pub(super) enum Retry {
    Never,
    /// After the wait the server asked for (already capped).
    After(Duration),
    /// After the exponential backoff for this retry.
    Backoff,
}

/// A failed attempt.
pub(super) struct AttemptError {
    pub(super) failure: Failure,
    pub(super) retry: Retry,
    /// The part of the request the server refused, when its error names one.
    pub(super) refused: Option<Refused>,
    /// What the error teaches about the server's dialect, when it says how to ask instead.
    pub(super) lesson: Option<Lesson>,
    /// Whether the server said the request itself is wrong (a 4xx), rather than failed (a 5xx,
    /// which may pass): what it teaches is remembered at once only then.
    pub(super) from_the_request: bool,
}

impl AttemptError {
    /// A failure that ends the call as it is: nothing to retry, refuse or learn.
    pub(super) fn final_failure(failure: Failure) -> Self {
        AttemptError {
            failure,
            retry: Retry::Never,
            refused: None,
            lesson: None,
            from_the_request: false,
        }
    }
}

/// The wait before retry number `retries` (from 0): 200 ms, 400 ms, 800 ms…, at most a minute.
pub(super) fn backoff(retries: u32) -> Duration {
    BACKOFF_START
        .saturating_mul(2u32.saturating_pow(retries))
        .min(MAX_WAIT)
}

/// The wait a server asks for before the next request: `retry-after-ms`, a `Retry-After` in
/// seconds, or what [`exhausted_reset`] reads; at most [`MAX_WAIT`].
pub(super) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let millis = header_number(headers, "retry-after-ms").map(|ms| ms / 1000.0);
    let seconds = millis.or_else(|| header_number(headers, RETRY_AFTER.as_str()));
    seconds
        .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
        .or_else(|| exhausted_reset(headers))
        .map(|wait| wait.min(MAX_WAIT))
}

/// When the server says a quota is used up — `x-ratelimit-remaining-requests` or
/// `x-ratelimit-remaining-tokens` is 0 — how long until it is reset, from the matching
/// `x-ratelimit-reset-requests` or `-tokens` (`1s`, `6m0s`, `20ms`, or seconds); the longer of
/// the two; at most [`MAX_WAIT`].
pub(super) fn exhausted_reset(headers: &HeaderMap) -> Option<Duration> {
    ["requests", "tokens"]
        .into_iter()
        .filter(|quota| {
            header_number(headers, &format!("x-ratelimit-remaining-{quota}")) == Some(0.0)
        })
        .filter_map(|quota| {
            let reset = headers.get(format!("x-ratelimit-reset-{quota}"))?;
            reset_duration(reset.to_str().ok()?)
        })
        .max()
        .map(|wait| wait.min(MAX_WAIT))
}

/// A header's value as a number, when it is a finite, non-negative one.
fn header_number(headers: &HeaderMap, name: &str) -> Option<f64> {
    let value: f64 = headers.get(name)?.to_str().ok()?.trim().parse().ok()?;
    (value.is_finite() && value >= 0.0).then_some(value)
}

/// A reset time as OpenAI-compatible servers write it: Go-style durations (`1s`, `6m0s`,
/// `1m30.5s`, `20ms`, `1h2m`) or plain seconds.
fn reset_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let mut seconds = 0.0;
    let mut rest = text;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let scale = match unit {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return None,
        };
        seconds += number.parse::<f64>().ok()? * scale;
        rest = next;
    }
    Duration::try_from_secs_f64(seconds).ok()
}

/// Whether an error reply says the prompt is too long for the model.
pub(super) fn mentions_context_limit(text: &str) -> bool {
    let text = text.to_lowercase();
    [
        "context length",
        "context_length",
        "maximum context",
        "context window",
    ]
    .iter()
    .any(|phrase| text.contains(phrase))
}

/// The body of a reply, reading at most a little past `limit` bytes.
pub(super) async fn read_body(
    response: &mut reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    while body.len() <= limit {
        match response.chunk().await? {
            Some(chunk) => body.extend_from_slice(&chunk),
            None => break,
        }
    }
    Ok(body)
}

pub(super) fn too_long() -> Failure {
    malformed(format!(
        "the server's answer is longer than {} MiB",
        MAX_BODY / 1024 / 1024
    ))
}

/// A successful reply that is not an answer (not JSON, not UTF-8, no choice, too long): the
/// server's bug, which asking again does not fix — not retried, and permanent for a scheduler
/// (exit 1), as the official OpenAI client treats it. Rate limits, server errors, timeouts and
/// refused connections stay transient.
pub(super) fn malformed(message: String) -> Failure {
    Failure::new(FailureCode::InferenceEngineError, message)
        .retryable(false)
        .with_help(
            "the server answered 200 with something that is not a chat completion: check that \
             base_url points at an OpenAI-compatible API, and the server's logs",
        )
}

/// What an error reply says: the `error.message` of the API when there is one, else the text.
pub(super) fn server_message(body: &[u8]) -> String {
    let text = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|value| error_message(&value))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    if text.is_empty() {
        "(no message)".into()
    } else {
        excerpt(&text)
    }
}

/// The message in `{"error": {"message": …}}`, `{"error": "…"}`, `{"message": …}` or
/// `{"detail": "…"}`, the shapes OpenAI-compatible servers use.
pub(super) fn error_message(value: &Value) -> Option<String> {
    let error = value.get("error").unwrap_or(value);
    [error.get("message"), Some(error), value.get("detail")]
        .into_iter()
        .flatten()
        .find_map(|v| v.as_str().map(str::to_string))
}

/// The first characters of `text`.
pub(super) fn excerpt(text: &str) -> String {
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// An error and its causes, joined.
pub(super) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// How much of an error reply is read.
pub(super) const MAX_ERROR_BODY: usize = 64 * 1024;

/// How many characters of a server's message go into a failure.
pub(super) const MAX_MESSAGE_CHARS: usize = 500;

/// The first backoff wait; each retry doubles it.
pub(super) const BACKOFF_START: Duration = Duration::from_millis(200);

/// The longest wait between two attempts, whatever the server asks.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(60);
