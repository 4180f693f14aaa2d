//! Messages, tool calls and token usage exchanged with engines; retrieval candidates.
//!
//! Token counts come from outside (a model server's reply, a cache row, a file): they are read
//! saturating and added saturating, so no count a server or a file claims can fail a run or
//! overflow a sum.
#![deny(clippy::arithmetic_side_effects)]

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    /// Tool calls the assistant made in this message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    fn plain(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::plain(Role::System, content)
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(Role::User, content)
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self::plain(Role::Assistant, content)
    }

    /// The result of the tool call `id`.
    pub fn tool_result(id: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            tool_call_id: Some(id.into()),
            ..Self::plain(Role::Tool, content)
        }
    }
}

/// A call of a tool requested by a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

/// A tool as offered to a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// Tokens used by one or more model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    #[serde(deserialize_with = "saturating_count")]
    pub prompt_tokens: u64,
    #[serde(deserialize_with = "saturating_count")]
    pub completion_tokens: u64,
    /// Of the completion tokens, those the model spent reasoning before its answer, when its
    /// server reports them (an OpenAI-compatible server's
    /// `completion_tokens_details.reasoning_tokens`); absent when it does not. Part of
    /// `completion_tokens`, so they are priced and counted there too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

impl TokenUsage {
    /// Prompt and completion tokens together (at most `u64::MAX`).
    pub fn total(self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// Adds saturating: a sum stops at `u64::MAX`.
impl std::ops::AddAssign for TokenUsage {
    fn add_assign(&mut self, other: TokenUsage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
        // Reported by any of the calls summed: their sum; by none: still unknown.
        self.reasoning_tokens = match (self.reasoning_tokens, other.reasoning_tokens) {
            (None, None) => None,
            (mine, theirs) => Some(mine.unwrap_or(0).saturating_add(theirs.unwrap_or(0))),
        };
    }
}

/// Reads a token count as a server, a cache row or a file wrote it, never failing on its size:
/// a count past `u64::MAX` (or written as a float) is clamped to the range, a negative one is 0,
/// and `null` is 0.
pub fn saturating_count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    deserializer.deserialize_any(Count)
}

/// The visitor of [`saturating_count`].
struct Count;

impl<'de> Visitor<'de> for Count {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a token count")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<u64, E> {
        Ok(value)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<u64, E> {
        Ok(u64::try_from(value).unwrap_or(0))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<u64, E> {
        Ok(u64::try_from(value).unwrap_or(u64::MAX))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<u64, E> {
        Ok(u64::try_from(value.max(0)).unwrap_or(u64::MAX))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<u64, E> {
        // `as` saturates: NaN and negatives give 0, anything past the range `u64::MAX`.
        Ok(value as u64)
    }

    fn visit_unit<E: de::Error>(self) -> Result<u64, E> {
        Ok(0)
    }

    fn visit_none<E: de::Error>(self) -> Result<u64, E> {
        Ok(0)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<u64, D::Error> {
        deserializer.deserialize_any(Count)
    }
}

/// A retrieved or reranked passage: the unit `retrieve` and `rerank` steps pass along.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub content: String,
    pub source: String,
    pub score: f64,
    #[serde(default)]
    pub metadata: serde_json::Map<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_outside_saturate_instead_of_failing() {
        let read = |json: &str| -> TokenUsage { serde_json::from_str(json).expect("read") };
        let huge = read(r#"{"prompt_tokens": 18446744073709551616, "completion_tokens": -3}"#);
        assert_eq!(huge.prompt_tokens, u64::MAX);
        assert_eq!(huge.completion_tokens, 0);
        let odd = read(r#"{"prompt_tokens": 1e30, "completion_tokens": null}"#);
        assert_eq!((odd.prompt_tokens, odd.completion_tokens), (u64::MAX, 0));
        assert_eq!(
            read(r#"{"prompt_tokens": 5, "completion_tokens": 7.0}"#).total(),
            12
        );
        assert!(
            serde_json::from_str::<TokenUsage>(r#"{"prompt_tokens": "5", "completion_tokens": 1}"#)
                .is_err()
        );
    }

    #[test]
    fn sums_stop_at_the_largest_count() {
        let mut sum = TokenUsage {
            prompt_tokens: u64::MAX,
            completion_tokens: 1,
            reasoning_tokens: None,
        };
        assert_eq!(sum.total(), u64::MAX);
        sum += sum;
        assert_eq!(sum.prompt_tokens, u64::MAX);
        assert_eq!(sum.completion_tokens, 2);
        assert_eq!(sum.reasoning_tokens, None, "no call reported any");
    }

    #[test]
    fn reasoning_tokens_are_summed_over_the_calls_that_report_them() {
        let reasoned = TokenUsage {
            prompt_tokens: 3,
            completion_tokens: 10,
            reasoning_tokens: Some(6),
        };
        let mut sum = TokenUsage::default();
        sum += reasoned;
        sum += TokenUsage::default();
        sum += reasoned;
        assert_eq!(sum.reasoning_tokens, Some(12));
        assert_eq!(sum.completion_tokens, 20);
        let line = serde_json::to_string(&TokenUsage::default()).expect("json");
        assert_eq!(line, r#"{"prompt_tokens":0,"completion_tokens":0}"#);
        let written = serde_json::to_string(&sum).expect("json");
        let read: TokenUsage = serde_json::from_str(&written).expect("read back");
        assert_eq!(read, sum);
    }
}
