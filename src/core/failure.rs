//! The failure taxonomy: seven categories, stable codes, and whether a failure is worth retrying.
//!
//! Every failure a user can see carries one of these codes (`INFERENCE_ENGINE_ERROR`,
//! `TOOL_TIMEOUT`, …). Codes are public API: scripts match on them in run records and batch
//! output, so they are never renamed or reused. The retry rules follow the category: validation
//! and constraint failures are retried (the model may do better with the errors fed back),
//! configuration failures never are, inference failures when transient, cancellations never.

use std::fmt;

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use serde_json::Value;

/// The seven kinds of failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCategory {
    /// The model or its engine failed.
    Inference,
    /// A tool failed, timed out, or was called wrongly.
    Tool,
    /// Model output broke a decoding or format constraint (JSON, schema, grammar).
    Constraint,
    /// Output broke a validation rule.
    Validation,
    /// The orchestration itself gave up (iteration limit, no consensus, step timeout…).
    Orchestration,
    /// The plan, its inputs or the environment are wrong; retrying cannot help.
    Configuration,
    /// The run was cancelled.
    Cancellation,
}

macro_rules! failure_codes {
    ($($(#[doc = $doc:literal])* $variant:ident = $text:literal, $category:ident, $retryable:literal;)+) => {
        /// A stable failure code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum FailureCode {
            $($(#[doc = $doc])* $variant,)+
        }

        impl FailureCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [FailureCode] = &[$(FailureCode::$variant),+];

            /// The code as users see it, e.g. `TOOL_TIMEOUT`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(FailureCode::$variant => $text,)+
                }
            }

            /// The category this code belongs to.
            pub fn category(self) -> FailureCategory {
                match self {
                    $(FailureCode::$variant => FailureCategory::$category,)+
                }
            }

            /// Whether a failure with this code is retried by default.
            pub fn retryable(self) -> bool {
                match self {
                    $(FailureCode::$variant => $retryable,)+
                }
            }
        }
    };
}

failure_codes! {
    /// The engine reported an error while generating.
    InferenceEngineError = "INFERENCE_ENGINE_ERROR", Inference, true;
    /// The engine did not answer in time.
    InferenceTimeout = "INFERENCE_TIMEOUT", Inference, true;
    /// The server asked us to slow down (HTTP 429).
    InferenceRateLimited = "INFERENCE_RATE_LIMITED", Inference, true;
    /// The model cannot be loaded or reached (missing, corrupt or unsupported file; server down).
    InferenceModelUnavailable = "INFERENCE_MODEL_UNAVAILABLE", Inference, false;
    /// The prompt does not fit the model's context window.
    InferenceContextExceeded = "INFERENCE_CONTEXT_EXCEEDED", Inference, false;
    /// The server refused a part of the request it does not support (tools, a response format); the same request cannot succeed.
    InferenceRequestRefused = "INFERENCE_REQUEST_REFUSED", Inference, false;
    /// No tool of that name is declared (or offered to the step).
    ToolNotFound = "TOOL_NOT_FOUND", Tool, false;
    /// The tool is declared but cannot run here now: its program is not on PATH, a directory it needs is missing; the message says which.
    ToolUnavailable = "TOOL_UNAVAILABLE", Tool, false;
    /// The arguments do not match the tool's schema.
    ToolInvalidArguments = "TOOL_INVALID_ARGUMENTS", Tool, false;
    /// The tool ran past its timeout and was killed.
    ToolTimeout = "TOOL_TIMEOUT", Tool, true;
    /// The tool ran and failed (non-zero exit, error result).
    ToolExecutionFailed = "TOOL_EXECUTION_FAILED", Tool, true;
    /// A policy forbids calling this tool.
    ToolNotAllowed = "TOOL_NOT_ALLOWED", Tool, false;
    /// The tool is marked `approval: required` and nobody approved the call: it is not named by `--approve`, and there was nobody to ask (not a chat at a terminal).
    ToolApprovalRequired = "TOOL_APPROVAL_REQUIRED", Tool, false;
    /// The tool is marked `approval: required` and the user declined the call when asked.
    ToolApprovalDenied = "TOOL_APPROVAL_DENIED", Tool, false;
    /// The tool ran, but its output does not have the shape its caller needs (a retriever tool's candidates).
    ToolBadOutput = "TOOL_BAD_OUTPUT", Tool, false;
    /// An MCP server could not be started or reached, or closed the connection during a call (it crashed or exited); the message says which and how to fix it.
    ToolServerFailed = "TOOL_SERVER_FAILED", Tool, true;
    /// The output is not JSON, even after repair.
    ConstraintJsonInvalid = "CONSTRAINT_JSON_INVALID", Constraint, true;
    /// The JSON does not validate against the schema.
    ConstraintSchemaViolation = "CONSTRAINT_SCHEMA_VIOLATION", Constraint, true;
    /// The decoder rejected the grammar or could not satisfy it.
    ConstraintGrammarRejected = "CONSTRAINT_GRAMMAR_REJECTED", Constraint, false;
    /// A validation rule failed.
    ValidationRuleFailed = "VALIDATION_RULE_FAILED", Validation, true;
    /// An agent loop reached its iteration limit.
    OrchestrationIterationLimit = "ORCHESTRATION_ITERATION_LIMIT", Orchestration, false;
    /// Voting found no answer with enough confidence.
    OrchestrationNoConsensus = "ORCHESTRATION_NO_CONSENSUS", Orchestration, true;
    /// A routed plan does not match the declared agents or the policy.
    OrchestrationStepMismatch = "ORCHESTRATION_STEP_MISMATCH", Orchestration, true;
    /// A step ran past its timeout.
    OrchestrationStepTimeout = "ORCHESTRATION_STEP_TIMEOUT", Orchestration, true;
    /// A step could not run because a step it needs failed.
    OrchestrationDependencyFailed = "ORCHESTRATION_DEPENDENCY_FAILED", Orchestration, false;
    /// The run's model calls cost more than the policy's `max_cost`.
    OrchestrationCostExceeded = "ORCHESTRATION_COST_EXCEEDED", Orchestration, false;
    /// A step's handler panicked: a bug in pagantic, recorded as that step's failure.
    OrchestrationStepPanicked = "ORCHESTRATION_STEP_PANICKED", Orchestration, false;
    /// A model the plan uses has no engine.
    ConfigNoEngine = "CONFIG_NO_ENGINE", Configuration, false;
    /// A required input is missing or has the wrong type.
    ConfigInvalidInput = "CONFIG_INVALID_INPUT", Configuration, false;
    /// A template failed to render (e.g. an undefined variable at run time).
    ConfigTemplateError = "CONFIG_TEMPLATE_ERROR", Configuration, false;
    /// A file the plan needs (corpus, prompt, schema) is missing or unreadable.
    ConfigFileError = "CONFIG_FILE_ERROR", Configuration, false;
    /// `--cache-only`: a model call was not in the call cache (or the cache cannot be read).
    CacheMiss = "CACHE_MISS", Configuration, false;
    /// The run was interrupted (Ctrl-C, SIGTERM).
    CancelledSignal = "CANCELLED_SIGNAL", Cancellation, false;
    /// The step was not run because the run was stopped before it.
    CancelledNotRun = "CANCELLED_NOT_RUN", Cancellation, false;
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FailureCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A failure: its code, what happened, and (when known) what to do.
///
/// As JSON (run records, events, batch lines) it is `code`, `category` (derived from the code),
/// `message`, `help` when known, `retryable`, and `details` when the failure has structured facts
/// to give (the broken rules, the schema errors, a tool's exit status).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Failure {
    pub code: FailureCode,
    pub message: String,
    pub help: Option<String>,
    /// Whether retrying may help; starts as the code's default.
    pub retryable: bool,
    /// Structured facts about the failure, for programs reading the record (boxed: most
    /// failures have none, and a failure travels in every `Result`).
    pub details: Option<Box<Value>>,
}

impl Serialize for Failure {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = 4 + usize::from(self.help.is_some()) + usize::from(self.details.is_some());
        let mut out = serializer.serialize_struct("Failure", fields)?;
        out.serialize_field("code", &self.code)?;
        out.serialize_field("category", &self.category())?;
        out.serialize_field("message", &self.message)?;
        if let Some(help) = &self.help {
            out.serialize_field("help", help)?;
        }
        out.serialize_field("retryable", &self.retryable)?;
        if let Some(details) = &self.details {
            out.serialize_field("details", details)?;
        }
        out.end()
    }
}

impl Failure {
    /// A failure with the code's default retryability.
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            help: None,
            retryable: code.retryable(),
            details: None,
        }
    }

    /// Adds structured details (written as the `details` key).
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    /// Adds a help line.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Overrides whether a retry may help (e.g. a non-idempotent tool is never retried).
    pub fn retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// The category of this failure.
    pub fn category(&self) -> FailureCategory {
        self.code.category()
    }

    /// Whether the same work may succeed later without any change — the run was stopped (a
    /// signal, a preemption), or the model failed in a way worth retrying (a rate limit, a server
    /// error, a timeout), after the step's own retries — so a scheduler should run it again (exit
    /// 75) rather than give up. What the model answered (constraints, validation), tools, and the
    /// plan's own mistakes are permanent: running again changes nothing.
    pub fn transient(&self) -> bool {
        match self.category() {
            FailureCategory::Cancellation => true,
            FailureCategory::Inference => self.retryable,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_screaming_snake_case_prefixed_by_their_category() {
        let mut seen = std::collections::HashSet::new();
        for code in FailureCode::ALL {
            let text = code.as_str();
            assert!(seen.insert(text), "{text} is used twice");
            assert!(
                text.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
                "{text}"
            );
            let prefix = match code.category() {
                FailureCategory::Inference => "INFERENCE_",
                FailureCategory::Tool => "TOOL_",
                FailureCategory::Constraint => "CONSTRAINT_",
                FailureCategory::Validation => "VALIDATION_",
                FailureCategory::Orchestration => "ORCHESTRATION_",
                FailureCategory::Configuration => "CONFIG_",
                FailureCategory::Cancellation => "CANCELLED_",
            };
            // The one code named after what it is about rather than its category: scripts
            // replaying a cache match on it.
            assert!(
                text.starts_with(prefix) || *code == FailureCode::CacheMiss,
                "{text} should start with {prefix}"
            );
        }
    }

    #[test]
    fn retry_rules_follow_the_category() {
        for code in FailureCode::ALL {
            match code.category() {
                FailureCategory::Validation | FailureCategory::Constraint
                    if *code != FailureCode::ConstraintGrammarRejected =>
                {
                    assert!(code.retryable(), "{code} should retry")
                }
                FailureCategory::Configuration | FailureCategory::Cancellation => {
                    assert!(!code.retryable(), "{code} must never retry")
                }
                _ => {}
            }
        }
    }

    #[test]
    fn transient_failures_are_stops_and_retryable_model_failures() {
        let transient = |code: FailureCode| Failure::new(code, "").transient();
        assert!(transient(FailureCode::InferenceRateLimited));
        assert!(transient(FailureCode::InferenceEngineError));
        assert!(transient(FailureCode::InferenceTimeout));
        assert!(transient(FailureCode::CancelledSignal));
        assert!(!transient(FailureCode::InferenceContextExceeded));
        assert!(!transient(FailureCode::ValidationRuleFailed));
        assert!(!transient(FailureCode::ConfigInvalidInput));
        assert!(!transient(FailureCode::ToolTimeout));
        let unreachable = Failure::new(FailureCode::InferenceModelUnavailable, "").retryable(true);
        assert!(unreachable.transient());
    }

    #[test]
    fn failures_display_their_code() {
        let failure = Failure::new(FailureCode::ToolTimeout, "`wc` ran past 5s");
        assert_eq!(failure.to_string(), "TOOL_TIMEOUT: `wc` ran past 5s");
        assert!(failure.retryable);
        assert!(!failure.retryable(false).retryable);
    }

    #[test]
    fn failures_serialise_with_their_category_and_details() {
        let plain = Failure::new(FailureCode::ToolTimeout, "too slow");
        assert_eq!(
            serde_json::to_string(&plain).expect("json"),
            r#"{"code":"TOOL_TIMEOUT","category":"tool","message":"too slow","retryable":true}"#
        );
        let full = Failure::new(FailureCode::ValidationRuleFailed, "too short")
            .with_help("write more")
            .with_details(serde_json::json!({ "broken": ["is too short"] }));
        assert_eq!(
            serde_json::to_value(&full).expect("json"),
            serde_json::json!({
                "code": "VALIDATION_RULE_FAILED",
                "category": "validation",
                "message": "too short",
                "help": "write more",
                "retryable": true,
                "details": { "broken": ["is too short"] },
            })
        );
    }
}
