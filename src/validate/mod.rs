//! Deterministic checks on a step's output, and the retry policy around failed attempts.
//!
//! [`Rule`]s are compiled once (regexes, JSON Schemas) and checked against a value; every broken
//! rule is reported, not just the first. [`RetryPolicy`] decides whether and when a failed attempt
//! is tried again, following the failure taxonomy (a configuration failure never is).

use std::time::Duration;

use regex::Regex;
use serde_json::Value;

use crate::core::{Failure, FailureCode};

/// A compiled validation rule.
#[derive(Debug)]
pub enum Rule {
    MinLength(usize),
    MaxLength(usize),
    Regex(Regex),
    Contains(String),
    NotContains(String),
    OneOf(Vec<String>),
    JsonSchema(Box<jsonschema::Validator>),
}

impl Rule {
    /// Compiles a regex rule.
    pub fn regex(pattern: &str) -> Result<Rule, Failure> {
        Regex::new(pattern).map(Rule::Regex).map_err(|e| {
            Failure::new(
                FailureCode::ConfigInvalidInput,
                format!("invalid regex: {e}"),
            )
        })
    }

    /// Compiles a JSON Schema rule.
    pub fn json_schema(schema: &Value) -> Result<Rule, Failure> {
        jsonschema::validator_for(schema)
            .map(|v| Rule::JsonSchema(Box::new(v)))
            .map_err(|e| {
                Failure::new(
                    FailureCode::ConfigInvalidInput,
                    format!("invalid JSON Schema: {e}"),
                )
            })
    }

    /// Why `value` breaks this rule, if it does.
    pub fn check(&self, value: &Value) -> Option<String> {
        let text = as_text(value);
        let length = text.chars().count();
        match self {
            Rule::MinLength(min) if length < *min => Some(format!(
                "is {length} characters long, under the minimum of {min}"
            )),
            Rule::MaxLength(max) if length > *max => Some(format!(
                "is {length} characters long, over the maximum of {max}"
            )),
            Rule::Regex(regex) if !regex.is_match(&text) => {
                Some(format!("does not match /{}/", regex.as_str()))
            }
            Rule::Contains(needle) if !text.contains(needle.as_str()) => {
                Some(format!("does not contain {needle:?}"))
            }
            Rule::NotContains(needle) if text.contains(needle.as_str()) => {
                Some(format!("contains {needle:?}"))
            }
            Rule::OneOf(allowed) if !allowed.iter().any(|a| a == text.trim()) => {
                Some(format!("{:?} is not one of {allowed:?}", text.trim()))
            }
            Rule::JsonSchema(validator) => {
                // Text that parses as JSON is validated as that JSON; other text as a string.
                let parsed = match value {
                    Value::String(s) => {
                        serde_json::from_str::<Value>(s).unwrap_or_else(|_| value.clone())
                    }
                    other => other.clone(),
                };
                let errors: Vec<String> = validator
                    .iter_errors(&parsed)
                    .map(|e| format!("{} (at {})", e, e.instance_path()))
                    .collect();
                (!errors.is_empty())
                    .then(|| format!("does not match the schema: {}", errors.join("; ")))
            }
            _ => None,
        }
    }
}

/// The text a rule reads: a string as is, anything else as JSON.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Checks every rule and says, for each broken one, what is wrong with `value` ("the output is
/// 12 characters long, under the minimum of 20"); empty when every rule holds.
pub fn broken_rules(rules: &[Rule], value: &Value) -> Vec<String> {
    rules
        .iter()
        .filter_map(|r| r.check(value))
        .map(|what| format!("the output {what}"))
        .collect()
}

/// When to try a failed attempt again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Wait before the second attempt; doubles after each further failure.
    pub backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 1,
            backoff: Duration::ZERO,
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `next` (2 for the first retry), or None when `failure` after
    /// `next - 1` attempts should not be retried.
    pub fn retry_after(&self, failure: &Failure, next: u32) -> Option<Duration> {
        if !failure.retryable || next > self.max_attempts {
            return None;
        }
        let doublings = next.saturating_sub(2).min(16);
        Some(self.backoff.saturating_mul(1 << doublings))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rules_report_every_broken_rule() {
        let rules = vec![
            Rule::MinLength(20),
            Rule::NotContains("I don't know".into()),
            Rule::regex("^Answer").expect("regex"),
            Rule::Contains("Paris".into()),
        ];
        assert_eq!(
            broken_rules(&rules, &json!("I don't know")),
            [
                "the output is 12 characters long, under the minimum of 20",
                "the output contains \"I don't know\"",
                "the output does not match /^Answer/",
                "the output does not contain \"Paris\"",
            ]
        );
        assert!(broken_rules(&rules, &json!("Answer: the capital is Paris.")).is_empty());
    }

    #[test]
    fn json_schema_rules_parse_text_first() {
        let rule =
            Rule::json_schema(&json!({ "type": "object", "required": ["a"] })).expect("schema");
        assert_eq!(rule.check(&json!(r#"{"a": 1}"#)), None);
        assert_eq!(rule.check(&json!({ "a": 1 })), None);
        assert!(
            rule.check(&json!("not json"))
                .is_some_and(|m| m.contains("is not of type \"object\""))
        );
        let text = Rule::json_schema(&json!({ "type": "string", "minLength": 3 })).expect("schema");
        assert_eq!(
            text.check(&json!("plain text")),
            None,
            "text that is not JSON is checked as a string"
        );
        assert!(
            rule.check(&json!("{}"))
                .is_some_and(|m| m.contains("\"a\" is a required property"))
        );
    }

    #[test]
    fn one_of_compares_trimmed_text() {
        let rule = Rule::OneOf(vec!["positive".into(), "negative".into()]);
        assert_eq!(rule.check(&json!(" positive\n")), None);
        assert!(rule.check(&json!("meh")).is_some());
    }

    #[test]
    fn retries_follow_retryability_attempts_and_doubling_backoff() {
        let policy = RetryPolicy {
            max_attempts: 4,
            backoff: Duration::from_millis(100),
        };
        let transient = Failure::new(FailureCode::InferenceTimeout, "slow");
        let permanent = Failure::new(FailureCode::ConfigTemplateError, "bad template");
        assert_eq!(
            policy.retry_after(&transient, 2),
            Some(Duration::from_millis(100))
        );
        assert_eq!(
            policy.retry_after(&transient, 3),
            Some(Duration::from_millis(200))
        );
        assert_eq!(
            policy.retry_after(&transient, 4),
            Some(Duration::from_millis(400))
        );
        assert_eq!(
            policy.retry_after(&transient, 5),
            None,
            "four attempts in all"
        );
        assert_eq!(
            policy.retry_after(&permanent, 2),
            None,
            "configuration failures never retry"
        );
    }
}
