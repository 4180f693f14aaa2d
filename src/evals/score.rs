//! Scoring one assertion against one case's run record: each assertion gives a score from 0 to
//! 1, passes when the score reaches its threshold, and says what was expected and what was got.
//!
//! The deterministic checks are computed here; `similar` embeds with the scorer it is handed and
//! `judge` runs the judge pipeline (see [`super::graders`]).

use serde_json::Value;

use super::graders::Graders;
use super::paths::json_at;
use crate::core::Failure;
use crate::orchestrate::{RunRecord, RunStatus, StepRecord, StepStatus};
use crate::plan::suite::Assertion;
use crate::plan::suite::assertion::{ExpectedStatus, RankCheck};

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
    fn check(passed: bool, expected: impl Into<String>, got: impl Into<String>) -> Scored {
        Scored {
            score: if passed { 1.0 } else { 0.0 },
            expected: expected.into(),
            got: got.into(),
            note: None,
        }
    }

    fn metric(score: f64, expected: impl Into<String>, got: impl Into<String>) -> Scored {
        Scored {
            score,
            expected: expected.into(),
            got: got.into(),
            note: None,
        }
    }

    fn broken(expected: impl Into<String>, note: impl Into<String>) -> Scored {
        Scored {
            score: 0.0,
            expected: expected.into(),
            got: String::new(),
            note: Some(note.into()),
        }
    }
}

/// Scores `assertion` (its templates already rendered) against `subject`; `input` is the case's
/// inputs, for a judge.
pub async fn score(
    assertion: &Assertion,
    subject: &Subject<'_>,
    input: &Value,
    graders: &Graders<'_>,
) -> Scored {
    match assertion {
        Assertion::Equals(check) => {
            let got = subject.text();
            Scored::check(equals(subject, &check.value), shown(&check.value), got)
        }
        Assertion::Contains(check) => {
            let got = subject.text();
            Scored::check(got.contains(&check.value), &check.value, got)
        }
        Assertion::Icontains(check) => {
            let got = subject.text();
            let passed = got.to_lowercase().contains(&check.value.to_lowercase());
            Scored::check(passed, &check.value, got)
        }
        Assertion::NotContains(check) => {
            let got = subject.text();
            Scored::check(
                !got.contains(&check.value),
                format!("no `{}`", check.value),
                got,
            )
        }
        Assertion::StartsWith(check) => {
            let got = subject.text();
            Scored::check(
                got.trim_start().starts_with(&check.value),
                &check.value,
                got,
            )
        }
        Assertion::Regex(check) => match regex::Regex::new(&check.value) {
            Ok(pattern) => {
                let got = subject.text();
                Scored::check(pattern.is_match(&got), format!("/{}/", check.value), got)
            }
            Err(e) => Scored::broken(&check.value, format!("invalid regular expression: {e}")),
        },
        Assertion::IsJson(_) => Scored::check(subject.json().is_some(), "JSON", subject.text()),
        Assertion::JsonSchema(check) => {
            let got = subject.text();
            let Some(json) = subject.json() else {
                return Scored::check(false, "JSON valid against the schema", got);
            };
            match jsonschema::validator_for(&check.value) {
                Ok(validator) => {
                    let errors: Vec<String> = validator
                        .iter_errors(&json)
                        .map(|e| format!("{e} at `{}`", e.instance_path().as_str()))
                        .collect();
                    let mut scored =
                        Scored::check(errors.is_empty(), "JSON valid against the schema", got);
                    if !errors.is_empty() {
                        scored.note = Some(errors.join("; "));
                    }
                    scored
                }
                Err(e) => Scored::broken("a valid schema", e.to_string()),
            }
        }
        Assertion::JsonPath(check) => {
            let expected = match (&check.equals, &check.contains) {
                (Some(value), _) => format!("{} = {}", check.path, shown(value)),
                (None, Some(text)) => format!("{} contains {text}", check.path),
                (None, None) => format!("{} present", check.path),
            };
            let found = subject
                .json()
                .and_then(|json| json_at(&json, &check.path).cloned());
            let Some(found) = found else {
                return Scored::check(false, expected, format!("no `{}`", check.path));
            };
            let text = match &found {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let passed = check
                .equals
                .as_ref()
                .is_none_or(|want| values_equal(&found, want))
                && check.contains.as_ref().is_none_or(|c| text.contains(c));
            Scored::check(passed, expected, text)
        }
        Assertion::OneOf(check) => {
            let passed = check.value.iter().any(|want| equals(subject, want));
            let choices: Vec<String> = check.value.iter().map(shown).collect();
            Scored::check(
                passed,
                format!("one of {}", choices.join(", ")),
                subject.text(),
            )
        }
        Assertion::MaxLatency(check) => {
            let limit = check.value.get().as_secs_f64() * 1000.0;
            Scored::check(
                subject.duration_ms <= limit,
                format!("≤ {}", check.value),
                format!("{:.0} ms", subject.duration_ms),
            )
        }
        Assertion::MaxTokens(check) => Scored::check(
            subject.tokens <= check.value,
            format!("≤ {} tokens", check.value),
            format!("{} tokens", subject.tokens),
        ),
        Assertion::MaxCost(check) => {
            let cost = subject.cost.unwrap_or(0.0);
            Scored::check(
                cost <= check.value,
                format!("≤ {}", check.value),
                subject.cost.map_or("unpriced".into(), |c| c.to_string()),
            )
        }
        Assertion::FailsWith(check) => {
            let got = subject.error.map_or_else(
                || subject.status.to_string(),
                |e| e.code.as_str().to_string(),
            );
            Scored::check(got == check.value, &check.value, got)
        }
        Assertion::Status(check) => {
            let want = match check.value {
                ExpectedStatus::Complete => "complete",
                ExpectedStatus::Error => "error",
                ExpectedStatus::Skipped => "skipped",
            };
            Scored::check(subject.status == want, want, subject.status)
        }
        Assertion::HitAtK(check) => retrieval(check, subject, Metric::Hit),
        Assertion::RecallAtK(check) => retrieval(check, subject, Metric::Recall),
        Assertion::Mrr(check) => retrieval(check, subject, Metric::Reciprocal),
        Assertion::Similar(check) => {
            let got = subject.text();
            match graders.similarity(check.model.as_deref()) {
                Ok(scorer) => match scorer.score(&check.value, &[got.as_str()]) {
                    Ok(scores) => {
                        let cosine = scores.values.first().copied().unwrap_or(0.0);
                        let mut scored = Scored::metric(cosine.clamp(0.0, 1.0), &check.value, got);
                        scored.note = Some(format!("similarity {cosine:.3} ({})", scorer.name()));
                        scored
                    }
                    Err(failure) => Scored::broken(&check.value, failure.message),
                },
                Err(failure) => Scored::broken(&check.value, failure.message),
            }
        }
        Assertion::Judge(check) => {
            let got = subject.text();
            match graders
                .judge(&check.model, &check.rubric, &got, input)
                .await
            {
                Ok(verdict) => {
                    let score = if verdict.pass { verdict.score } else { 0.0 };
                    let mut scored = Scored::metric(score, &check.rubric, got);
                    scored.note = Some(format!(
                        "judge: {} ({:.2}) — {}",
                        if verdict.pass { "pass" } else { "fail" },
                        verdict.score,
                        verdict.reason
                    ));
                    scored
                }
                Err(failure) => Scored::broken(&check.rubric, failure.message),
            }
        }
    }
}

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

#[derive(Clone, Copy)]
enum Metric {
    Hit,
    Recall,
    Reciprocal,
}

/// A retrieval metric over the first `k` candidates of the subject's output.
fn retrieval(check: &RankCheck, subject: &Subject<'_>, metric: Metric) -> Scored {
    let wanted = check.sources.names();
    let sources: Vec<String> = subject
        .output
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|c| c.get("source").map(shown).unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    let k = check.k.map_or(sources.len(), |k| k as usize);
    let top = &sources[..k.min(sources.len())];
    let score = metric_value(top, &wanted, metric);
    let expected = format!("{} in the top {k}", wanted.join(", "));
    let got = if top.is_empty() {
        "no candidates".to_string()
    } else {
        top.iter()
            .map(|s| short_source(s))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Scored::metric(score, expected, got)
}

/// hit@k, recall@k or the reciprocal rank of `top` (the first k sources) against `wanted`.
fn metric_value(top: &[String], wanted: &[String], metric: Metric) -> f64 {
    let relevant = |source: &str| wanted.iter().any(|w| source_matches(source, w));
    match metric {
        Metric::Hit => f64::from(u8::from(top.iter().any(|s| relevant(s)))),
        Metric::Recall => {
            if wanted.is_empty() {
                return 1.0;
            }
            let found = wanted
                .iter()
                .filter(|w| top.iter().any(|s| source_matches(s, w)))
                .count();
            found as f64 / wanted.len() as f64
        }
        Metric::Reciprocal => top
            .iter()
            .position(|s| relevant(s))
            .map_or(0.0, |rank| 1.0 / (rank + 1) as f64),
    }
}

/// A candidate's source matches an expected name when equal, or when it ends with `/name`.
fn source_matches(source: &str, wanted: &str) -> bool {
    source == wanted || source.ends_with(&format!("/{wanted}"))
}

/// The last path component of a source, for short reports.
fn short_source(source: &str) -> &str {
    source.rsplit('/').next().unwrap_or(source)
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
