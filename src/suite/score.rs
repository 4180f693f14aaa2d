//! Scoring one assertion against one case's run record: each assertion gives a score from 0 to
//! 1, passes when the score reaches its threshold, and says what was expected and what was got.
//!
//! Each assertion kind is scored in its own file under `score/`, by a [`Score`] impl on the
//! kind's config (declared in `plan::suite::assertions`, which also holds its checks). The
//! dispatch from an [`Assertion`] to its kind's impl is generated from that module's registry,
//! so a new kind needs only its `mod` line here. The deterministic checks are computed in those
//! files; `similar` embeds with the scorer it is handed and `judge` runs the judge pipeline (see
//! [`super::graders`]).

use serde_json::Value;

use super::graders::Graders;
use crate::core::Failure;
use crate::orchestrate::{RunRecord, RunStatus, StepRecord, StepStatus};
use crate::plan::suite::Assertion;
use crate::plan::suite::assertions::for_each_assertion;

mod contains;
mod equals;
mod fails_with;
mod hit_at_k;
mod icontains;
mod is_json;
mod json_path;
mod json_schema;
mod judge;
mod max_cost;
mod max_latency;
mod max_tokens;
mod mrr;
mod not_contains;
mod one_of;
mod recall_at_k;
mod regex;
mod retrieval;
mod similar;
mod starts_with;
mod status;

/// What the assertion is checked against: the run, or one of its steps.
pub struct Subject<'a> {
    pub output: Option<&'a Value>,
    pub status: &'static str,
    pub error: Option<&'a Failure>,
    pub duration_ms: f64,
    pub tokens: u64,
    pub cost: Option<f64>,
}

impl<'a> Subject<'a> {
    /// The run's figures, or those of its step `name` (None when there is no such step).
    pub fn of(record: &'a RunRecord, step: Option<&str>) -> Option<Subject<'a>> {
        match step {
            None => Some(Subject {
                output: record.output.as_ref(),
                status: match record.status {
                    RunStatus::Complete => "complete",
                    RunStatus::Error => "error",
                    RunStatus::Cancelled => "cancelled",
                },
                error: record.error.as_ref(),
                duration_ms: record.duration_ms,
                tokens: record.usage.total(),
                cost: record.cost.map(|c| c.amount()),
            }),
            Some(name) => record
                .steps
                .iter()
                .find(|s| s.name == name)
                .map(Subject::of_step),
        }
    }

    fn of_step(step: &'a StepRecord) -> Subject<'a> {
        Subject {
            output: step.output.as_ref(),
            status: match step.status {
                StepStatus::Ok => "complete",
                StepStatus::Failed => "error",
                StepStatus::Skipped => "skipped",
                StepStatus::Cancelled => "cancelled",
                StepStatus::NotRun => "not_run",
            },
            error: step.error.as_ref(),
            duration_ms: step.duration_ms,
            tokens: step.total_usage().total(),
            cost: step.cost.map(|c| c.amount()),
        }
    }

    /// The output as text: a string as it is, any other value as compact JSON.
    pub fn text(&self) -> String {
        match self.output {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
        }
    }

    /// The output as JSON: a string is parsed (inside a ```json fence too), any other value is
    /// itself.
    pub fn json(&self) -> Option<Value> {
        match self.output? {
            Value::String(text) => parse_json_text(text),
            Value::Null => None,
            other => Some(other.clone()),
        }
    }
}

fn parse_json_text(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    let unfenced = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or(trimmed);
    serde_json::from_str(unfenced.trim()).ok()
}

/// An assertion's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub score: f64,
    pub expected: String,
    pub got: String,
    /// Why, when there is more to say than expected and got (a judge's reason, an error).
    pub note: Option<String>,
}

impl Scored {
    /// A score between 0 and 1.
    fn metric(score: f64, expected: impl Into<String>, got: impl Into<String>) -> Scored {
        Scored {
            score,
            expected: expected.into(),
            got: got.into(),
            note: None,
        }
    }

    /// A pass (1) or a fail (0).
    fn check(passed: bool, expected: impl Into<String>, got: impl Into<String>) -> Scored {
        Scored::metric(if passed { 1.0 } else { 0.0 }, expected, got)
    }

    /// A fail because the assertion could not be scored at all; `note` says why.
    fn broken(expected: impl Into<String>, note: impl Into<String>) -> Scored {
        Scored::metric(0.0, expected, String::new()).noted(note)
    }

    /// The same result, with `note` saying why.
    fn noted(self, note: impl Into<String>) -> Scored {
        Scored {
            note: Some(note.into()),
            ..self
        }
    }
}

/// What an assertion is scored with: the run or step it checks, the case's inputs (a judge reads
/// them), and the graders the model-based assertions use.
pub struct Scoring<'a> {
    pub subject: &'a Subject<'a>,
    pub input: &'a Value,
    pub graders: &'a Graders,
}

/// Implemented by every assertion kind's config: its score against a run.
pub trait Score {
    /// Scores the assertion (its templates already rendered).
    fn score(&self, on: &Scoring<'_>) -> impl Future<Output = Scored>;
}

/// Expands the assertion registry into [`score`], the dispatch to each kind's [`Score`] impl.
macro_rules! score_dispatch {
    ($($(#[doc = $doc:literal])* $variant:ident($config:ty) = $name:literal,)+) => {
        /// Scores `assertion` (its templates already rendered) against `subject`; `input` is the
        /// case's inputs, for a judge.
        pub async fn score(
            assertion: &Assertion,
            subject: &Subject<'_>,
            input: &Value,
            graders: &Graders,
        ) -> Scored {
            let on = Scoring {
                subject,
                input,
                graders,
            };
            match assertion {
                $(Assertion::$variant(config) => config.score(&on).await,)+
            }
        }
    };
}

for_each_assertion!(score_dispatch);

/// A value written in a report: text as it is, anything else as JSON.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `equals`: text is compared with the output's text, both trimmed; any other value with the
/// output's JSON.
fn equals(subject: &Subject<'_>, want: &Value) -> bool {
    match want {
        Value::String(text) => subject.text().trim() == text.trim(),
        other => subject.json().is_some_and(|got| values_equal(&got, other)),
    }
}

/// JSON equality where numbers compare by value (1 equals 1.0) and text is trimmed.
fn values_equal(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::String(a), Value::String(b)) => a.trim() == b.trim(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| values_equal(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, x)| b.get(k).is_some_and(|y| values_equal(x, y)))
        }
        (a, b) => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn subject(output: &Value) -> Subject<'_> {
        Subject {
            output: Some(output),
            status: "complete",
            error: None,
            duration_ms: 120.0,
            tokens: 40,
            cost: None,
        }
    }

    fn parse(yaml_json: Value) -> Assertion {
        serde_json::from_value(yaml_json).expect("an assertion")
    }

    fn run(assertion: Value, output: Value) -> Scored {
        let graders = Graders::none();
        let assertion = parse(assertion);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(score(&assertion, &subject(&output), &Value::Null, &graders))
    }

    #[test]
    fn text_checks() {
        let answer = json!("  Use --resume to continue.\n");
        let cases = [
            (json!({"type": "contains", "value": "--resume"}), 1.0),
            (json!({"type": "contains", "value": "--RESUME"}), 0.0),
            (json!({"type": "icontains", "value": "--RESUME"}), 1.0),
            (
                json!({"type": "not_contains", "value": "I don't know"}),
                1.0,
            ),
            (json!({"type": "starts_with", "value": "Use"}), 1.0),
            (json!({"type": "regex", "value": "^\\s*Use .*resume"}), 1.0),
            (
                json!({"type": "equals", "value": "Use --resume to continue."}),
                1.0,
            ),
            (json!({"type": "equals", "value": "Use --resume"}), 0.0),
            (json!({"type": "is_json"}), 0.0),
            (
                json!({"type": "one_of", "value": ["x", "Use --resume to continue."]}),
                1.0,
            ),
        ];
        for (assertion, want) in cases {
            assert_eq!(
                run(assertion.clone(), answer.clone()).score,
                want,
                "{assertion}"
            );
        }
    }

    #[test]
    fn json_checks_read_structured_output_and_json_text() {
        let label = json!(
            "```json\n{\"sentiment\": \"positive\", \"rating\": 5, \"topics\": [\"battery\"]}\n```"
        );
        let schema = json!({"type": "object", "required": ["sentiment"], "properties": {"rating": {"type": "integer", "maximum": 5}}});
        let cases = [
            (json!({"type": "is_json"}), 1.0),
            (json!({"type": "json_schema", "value": schema}), 1.0),
            (
                json!({"type": "json_path", "path": "sentiment", "equals": "positive"}),
                1.0,
            ),
            (
                json!({"type": "json_path", "path": "$.rating", "equals": 5.0}),
                1.0,
            ),
            (
                json!({"type": "json_path", "path": "topics[0]", "contains": "batt"}),
                1.0,
            ),
            (json!({"type": "json_path", "path": "topics[1]"}), 0.0),
            (
                json!({"type": "equals", "value": {"sentiment": "positive", "rating": 5, "topics": ["battery"]}}),
                1.0,
            ),
        ];
        for (assertion, want) in cases {
            assert_eq!(
                run(assertion.clone(), label.clone()).score,
                want,
                "{assertion}"
            );
        }
        let invalid = run(
            json!({"type": "json_schema", "value": {"type": "object", "required": ["label"]}}),
            label,
        );
        assert_eq!(invalid.score, 0.0);
        assert!(invalid.note.is_some_and(|n| n.contains("label")));
    }

    #[test]
    fn record_checks() {
        let out = json!("x");
        assert_eq!(
            run(json!({"type": "max_latency", "value": "1s"}), out.clone()).score,
            1.0
        );
        assert_eq!(
            run(
                json!({"type": "max_latency", "value": "100ms"}),
                out.clone()
            )
            .score,
            0.0
        );
        assert_eq!(
            run(json!({"type": "max_tokens", "value": 40}), out.clone()).score,
            1.0
        );
        assert_eq!(
            run(json!({"type": "max_tokens", "value": 39}), out.clone()).score,
            0.0
        );
        assert_eq!(
            run(json!({"type": "max_cost", "value": 0.0}), out.clone()).score,
            1.0
        );
        assert_eq!(
            run(json!({"type": "status", "value": "complete"}), out.clone()).score,
            1.0
        );
        let failed = run(
            json!({"type": "fails_with", "value": "VALIDATION_RULE_FAILED"}),
            out,
        );
        assert_eq!((failed.score, failed.got.as_str()), (0.0, "complete"));
    }

    #[test]
    fn retrieval_metrics() {
        let candidates = json!([
            {"content": "a", "source": "../corpus/docs/steps.md"},
            {"content": "b", "source": "../corpus/docs/batch.md"},
            {"content": "c", "source": "../corpus/docs/models.md"},
        ]);
        let cases = [
            (
                json!({"type": "hit_at_k", "k": 1, "sources": ["batch.md"]}),
                0.0,
            ),
            (
                json!({"type": "hit_at_k", "k": 2, "sources": ["batch.md"]}),
                1.0,
            ),
            (
                json!({"type": "recall_at_k", "k": 2, "sources": ["batch.md", "models.md"]}),
                0.5,
            ),
            (
                json!({"type": "recall_at_k", "sources": ["batch.md", "models.md"]}),
                1.0,
            ),
            (json!({"type": "mrr", "sources": "batch.md"}), 0.5),
            (json!({"type": "mrr", "sources": ["nothing.md"]}), 0.0),
            (
                json!({"type": "hit_at_k", "k": 3, "sources": ["docs/steps.md"]}),
                1.0,
            ),
            (
                json!({"type": "hit_at_k", "k": 3, "sources": ["eps.md"]}),
                0.0,
            ),
        ];
        for (assertion, want) in cases {
            assert_eq!(
                run(assertion.clone(), candidates.clone()).score,
                want,
                "{assertion}"
            );
        }
        let scored = run(
            json!({"type": "hit_at_k", "k": 2, "sources": ["x.md"]}),
            candidates,
        );
        assert_eq!(scored.got, "steps.md, batch.md");
    }

    #[test]
    fn similarity_on_the_keyword_stand_in() {
        let scored = run(
            json!({"type": "similar", "value": "resume a batch"}),
            json!("to resume a batch pass --resume"),
        );
        assert_eq!(scored.score, 1.0);
        assert!(scored.note.is_some_and(|n| n.contains("keyword")));
    }
}
