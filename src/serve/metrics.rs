//! The server's metrics, written in the Prometheus text format by hand: runs by plan and status,
//! run and step durations as histograms, tokens and model calls by plan, refused requests by
//! reason, and the gauges of the moment (runs in flight, requests queued).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use crate::orchestrate::{RunRecord, RunStatus, StepStatus};

/// Upper bounds of the duration buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
];

/// Why a request was refused before it ran (a label of `pagantic_requests_refused_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    BadRequest,
    Unauthorized,
    NotFound,
    TooLarge,
    QueueFull,
}

impl Refusal {
    fn label(self) -> &'static str {
        match self {
            Refusal::BadRequest => "bad_request",
            Refusal::Unauthorized => "unauthorized",
            Refusal::NotFound => "not_found",
            Refusal::TooLarge => "too_large",
            Refusal::QueueFull => "queue_full",
        }
    }
}

#[derive(Debug, Default, Clone)]
struct Histogram {
    /// Observations per bucket (not cumulative; summed when written).
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if let Some(bucket) = BUCKETS.iter().position(|bound| seconds <= *bound) {
            self.buckets[bucket] += 1;
        }
        self.count += 1;
        self.sum += seconds;
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (bound, count) in BUCKETS.iter().zip(self.buckets) {
            cumulative += count;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

#[derive(Debug, Default)]
struct Counts {
    runs: BTreeMap<(String, &'static str), u64>,
    run_seconds: BTreeMap<String, Histogram>,
    step_seconds: BTreeMap<(String, String), Histogram>,
    tokens: BTreeMap<(String, &'static str), u64>,
    model_calls: BTreeMap<String, u64>,
    cache_hits: BTreeMap<String, u64>,
    refused: BTreeMap<Refusal, u64>,
}

/// What the server has done since it started.
#[derive(Debug, Default)]
pub struct Metrics {
    counts: Mutex<Counts>,
}

/// The gauges, read when the metrics are written.
pub struct Gauges {
    pub running: usize,
    pub queued: usize,
}

impl Metrics {
    /// Counts a finished run of `plan`: its status, its duration and its steps', its tokens.
    pub fn record_run(&self, plan: &str, record: &RunRecord) {
        let Ok(mut counts) = self.counts.lock() else {
            return;
        };
        let status = match record.status {
            RunStatus::Complete => "complete",
            RunStatus::Error => "error",
            RunStatus::Cancelled => "cancelled",
        };
        *counts.runs.entry((plan.to_string(), status)).or_default() += 1;
        counts
            .run_seconds
            .entry(plan.to_string())
            .or_default()
            .observe(record.duration_ms / 1000.0);
        for step in &record.steps {
            if matches!(step.status, StepStatus::NotRun | StepStatus::Skipped) {
                continue;
            }
            counts
                .step_seconds
                .entry((plan.to_string(), step.name.clone()))
                .or_default()
                .observe(step.duration_ms / 1000.0);
        }
        *counts
            .tokens
            .entry((plan.to_string(), "prompt"))
            .or_default() += record.usage.prompt_tokens;
        *counts
            .tokens
            .entry((plan.to_string(), "completion"))
            .or_default() += record.usage.completion_tokens;
    }

    /// Counts one model call made by a run of `plan`: one that reached its model, or one the
    /// call cache answered (`cached`).
    pub fn model_call(&self, plan: &str, cached: bool) {
        if let Ok(mut counts) = self.counts.lock() {
            let counted = if cached {
                &mut counts.cache_hits
            } else {
                &mut counts.model_calls
            };
            *counted.entry(plan.to_string()).or_default() += 1;
        }
    }

    /// Counts a request refused before it ran.
    pub fn refused(&self, why: Refusal) {
        if let Ok(mut counts) = self.counts.lock() {
            *counts.refused.entry(why).or_default() += 1;
        }
    }

    /// Everything, in the Prometheus text format (version 0.0.4).
    pub fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::new();
        let Ok(counts) = self.counts.lock() else {
            return out;
        };
        let runs = counts.runs.iter().map(|((plan, status), count)| {
            (
                format!("plan=\"{}\",status=\"{status}\"", escape(plan)),
                *count,
            )
        });
        counter(
            &mut out,
            "pagantic_runs_total",
            "Runs finished, by plan and status.",
            runs,
        );
        let runs = counts
            .run_seconds
            .iter()
            .map(|(plan, histogram)| (format!("plan=\"{}\"", escape(plan)), histogram));
        histograms(
            &mut out,
            "pagantic_run_duration_seconds",
            "How long runs took, by plan.",
            runs,
        );
        let steps = counts.step_seconds.iter().map(|((plan, step), histogram)| {
            let labels = format!("plan=\"{}\",step=\"{}\"", escape(plan), escape(step));
            (labels, histogram)
        });
        histograms(
            &mut out,
            "pagantic_step_duration_seconds",
            "How long steps took (all attempts), by plan and step.",
            steps,
        );
        let tokens = counts.tokens.iter().map(|((plan, kind), count)| {
            (format!("plan=\"{}\",kind=\"{kind}\"", escape(plan)), *count)
        });
        counter(
            &mut out,
            "pagantic_tokens_total",
            "Tokens of model calls, by plan and kind (prompt or completion).",
            tokens,
        );
        counter(
            &mut out,
            "pagantic_model_calls_total",
            "Model calls that reached a model (every attempt, vote and tool round), by plan.",
            by_plan(&counts.model_calls),
        );
        counter(
            &mut out,
            "pagantic_cache_hits_total",
            "Model calls the call cache answered, by plan.",
            by_plan(&counts.cache_hits),
        );
        let refused = counts
            .refused
            .iter()
            .map(|(why, count)| (format!("reason=\"{}\"", why.label()), *count));
        counter(
            &mut out,
            "pagantic_requests_refused_total",
            "Requests refused before they ran, by reason.",
            refused,
        );
        header(
            &mut out,
            "pagantic_runs_in_flight",
            "gauge",
            "Runs running now.",
        );
        let _ = writeln!(out, "pagantic_runs_in_flight {}", gauges.running);
        header(
            &mut out,
            "pagantic_queue_depth",
            "gauge",
            "Requests waiting for a run slot.",
        );
        let _ = writeln!(out, "pagantic_queue_depth {}", gauges.queued);
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A counter: its header, then one line per set of labels.
fn counter(out: &mut String, name: &str, help: &str, rows: impl Iterator<Item = (String, u64)>) {
    header(out, name, "counter", help);
    for (labels, value) in rows {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// A histogram: its header, then the buckets, sum and count per set of labels.
fn histograms<'a>(
    out: &mut String,
    name: &str,
    help: &str,
    rows: impl Iterator<Item = (String, &'a Histogram)>,
) {
    header(out, name, "histogram", help);
    for (labels, histogram) in rows {
        histogram.write(out, name, &labels);
    }
}

/// A label value with `\`, `"` and line breaks escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Counts by plan, labelled `plan="…"`.
fn by_plan(counts: &BTreeMap<String, u64>) -> impl Iterator<Item = (String, u64)> + '_ {
    counts
        .iter()
        .map(|(plan, count)| (format!("plan=\"{}\"", escape(plan)), *count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::TokenUsage;
    use crate::orchestrate::StepRecord;

    fn record(status: RunStatus, duration_ms: f64) -> RunRecord {
        let mut step = StepRecord::not_run("ask", "infer");
        step.status = StepStatus::Ok;
        step.duration_ms = 30.0;
        RunRecord {
            run_id: "r".into(),
            plan: "p".into(),
            status,
            output: None,
            steps: vec![step, StepRecord::not_run("later", "template")],
            usage: TokenUsage {
                prompt_tokens: 5,
                completion_tokens: 7,
            },
            cost: None,
            duration_ms,
            error: None,
        }
    }

    #[test]
    fn runs_are_counted_by_plan_and_status_with_their_durations_and_tokens() {
        let metrics = Metrics::default();
        metrics.record_run("qa", &record(RunStatus::Complete, 40.0));
        metrics.record_run("qa", &record(RunStatus::Error, 2000.0));
        metrics.model_call("qa", false);
        metrics.model_call("qa", true);
        metrics.model_call("qa", true);
        metrics.refused(Refusal::QueueFull);
        let text = metrics.render(&Gauges {
            running: 2,
            queued: 1,
        });
        for line in [
            "pagantic_runs_total{plan=\"qa\",status=\"complete\"} 1",
            "pagantic_runs_total{plan=\"qa\",status=\"error\"} 1",
            "pagantic_run_duration_seconds_bucket{plan=\"qa\",le=\"0.05\"} 1",
            "pagantic_run_duration_seconds_bucket{plan=\"qa\",le=\"2.5\"} 2",
            "pagantic_run_duration_seconds_bucket{plan=\"qa\",le=\"+Inf\"} 2",
            "pagantic_run_duration_seconds_sum{plan=\"qa\"} 2.04",
            "pagantic_step_duration_seconds_count{plan=\"qa\",step=\"ask\"} 2",
            "pagantic_tokens_total{plan=\"qa\",kind=\"completion\"} 14",
            "pagantic_model_calls_total{plan=\"qa\"} 1",
            "pagantic_cache_hits_total{plan=\"qa\"} 2",
            "pagantic_requests_refused_total{reason=\"queue_full\"} 1",
            "pagantic_runs_in_flight 2",
            "pagantic_queue_depth 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
        assert!(
            !text.contains("step=\"later\""),
            "a step that never ran is not timed"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
