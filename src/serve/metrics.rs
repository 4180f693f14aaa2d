//! The server's metrics, kept in a `prometheus-client` registry and written in the OpenMetrics
//! text format: runs by plan and status, run and step durations as histograms, tokens and model
//! calls by plan, refused requests by reason, and the gauges of the moment (runs in flight,
//! requests queued). The registry owns the encoding, label escaping included, so this module
//! only says what is counted and under which labels. Token counts come from model servers and
//! cache rows, so they are added saturating: a server claiming 2^64 − 1 tokens pins the counter
//! at its largest value rather than wrapping it or failing the run (the server's modules deny
//! clippy's `arithmetic_side_effects`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder, text};
use prometheus_client::metrics::counter::{Atomic, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::orchestrate::{RunRecord, RunStatus, StepStatus};

/// The media type of what [`Metrics::render`] writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the duration buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
];

/// Why a request was refused before it ran (a label of `pagantic_requests_refused_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    BadRequest,
    Unauthorized,
    /// From a web page of a foreign origin, or to a host name the server does not answer to.
    Forbidden,
    NotFound,
    TooLarge,
    /// Its body did not arrive within the body timeout.
    TooSlow,
    QueueFull,
}

impl EncodeLabelValue for Refusal {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(match self {
            Refusal::BadRequest => "bad_request",
            Refusal::Unauthorized => "unauthorized",
            Refusal::Forbidden => "forbidden",
            Refusal::NotFound => "not_found",
            Refusal::TooLarge => "too_large",
            Refusal::TooSlow => "too_slow",
            Refusal::QueueFull => "queue_full",
        })
    }
}

/// How a run ended (a label of `pagantic_runs_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum RunOutcome {
    Complete,
    Error,
    Cancelled,
}

impl From<RunStatus> for RunOutcome {
    fn from(status: RunStatus) -> Self {
        match status {
            RunStatus::Complete => RunOutcome::Complete,
            RunStatus::Error => RunOutcome::Error,
            RunStatus::Cancelled => RunOutcome::Cancelled,
        }
    }
}

impl EncodeLabelValue for RunOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(match self {
            RunOutcome::Complete => "complete",
            RunOutcome::Error => "error",
            RunOutcome::Cancelled => "cancelled",
        })
    }
}

/// Which tokens a count is of (a label of `pagantic_tokens_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum TokenKind {
    Prompt,
    Completion,
}

impl EncodeLabelValue for TokenKind {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(match self {
            TokenKind::Prompt => "prompt",
            TokenKind::Completion => "completion",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PlanLabels {
    plan: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RunLabels {
    plan: String,
    status: RunOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StepLabels {
    plan: String,
    step: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TokenLabels {
    plan: String,
    kind: TokenKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RefusalLabels {
    reason: Refusal,
}

/// A count that stops at `u64::MAX` instead of wrapping.
#[derive(Debug, Default)]
struct Saturating(AtomicU64);

impl Atomic<u64> for Saturating {
    fn inc(&self) -> u64 {
        self.inc_by(1)
    }

    fn inc_by(&self, by: u64) -> u64 {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                Some(now.saturating_add(by))
            })
            .unwrap_or_else(|now| now)
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A counter of tokens (see [`Saturating`]).
type TokenCounter = Counter<u64, Saturating>;

/// A histogram over [`BUCKETS`]: what the duration families make for each new label set.
fn duration_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

type DurationFamily<Labels> = Family<Labels, Histogram, fn() -> Histogram>;

/// What the server has done since it started: the registry that writes it, and the handles of
/// the families and gauges registered in it.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    runs: Family<RunLabels, Counter>,
    run_seconds: DurationFamily<PlanLabels>,
    step_seconds: DurationFamily<StepLabels>,
    tokens: Family<TokenLabels, TokenCounter>,
    model_calls: Family<PlanLabels, Counter>,
    cache_hits: Family<PlanLabels, Counter>,
    refused: Family<RefusalLabels, Counter>,
    runs_in_flight: Gauge,
    queue_depth: Gauge,
    connections_open: Gauge,
    connections_busy: Gauge,
}

/// The gauges, read when the metrics are written.
pub struct Gauges {
    pub running: usize,
    pub queued: usize,
    /// Connections open, and those of them answering a request.
    pub connections: usize,
    pub busy_connections: usize,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let runs = Family::default();
        // Counter names go without `_total` (the encoder appends it to every sample), histogram
        // names without their unit (appended too), and help texts without a full stop (added).
        registry.register(
            "pagantic_runs",
            "Runs finished, by plan and status",
            runs.clone(),
        );
        let run_seconds = DurationFamily::new_with_constructor(duration_histogram as fn() -> _);
        registry.register_with_unit(
            "pagantic_run_duration",
            "How long runs took, by plan",
            Unit::Seconds,
            run_seconds.clone(),
        );
        let step_seconds = DurationFamily::new_with_constructor(duration_histogram as fn() -> _);
        registry.register_with_unit(
            "pagantic_step_duration",
            "How long steps took (all attempts), by plan and step",
            Unit::Seconds,
            step_seconds.clone(),
        );
        let tokens = Family::default();
        registry.register(
            "pagantic_tokens",
            "Tokens of model calls, by plan and kind (prompt or completion)",
            tokens.clone(),
        );
        let model_calls = Family::default();
        registry.register(
            "pagantic_model_calls",
            "Model calls that reached a model (every attempt, vote and tool round), by plan",
            model_calls.clone(),
        );
        let cache_hits = Family::default();
        registry.register(
            "pagantic_cache_hits",
            "Model calls the call cache answered, by plan",
            cache_hits.clone(),
        );
        let refused = Family::default();
        registry.register(
            "pagantic_requests_refused",
            "Requests refused before they ran, by reason",
            refused.clone(),
        );
        let runs_in_flight = Gauge::default();
        registry.register(
            "pagantic_runs_in_flight",
            "Runs running now",
            runs_in_flight.clone(),
        );
        let queue_depth = Gauge::default();
        registry.register(
            "pagantic_queue_depth",
            "Requests waiting for a run slot",
            queue_depth.clone(),
        );
        let connections_open = Gauge::default();
        registry.register(
            "pagantic_connections_open",
            "Client connections open",
            connections_open.clone(),
        );
        let connections_busy = Gauge::default();
        registry.register(
            "pagantic_connections_busy",
            "Client connections answering a request",
            connections_busy.clone(),
        );
        Metrics {
            registry,
            runs,
            run_seconds,
            step_seconds,
            tokens,
            model_calls,
            cache_hits,
            refused,
            runs_in_flight,
            queue_depth,
            connections_open,
            connections_busy,
        }
    }
}

impl Metrics {
    /// Counts a finished run of `plan`: its status, its duration and its steps', its tokens.
    pub fn record_run(&self, plan: &str, record: &RunRecord) {
        let labels = RunLabels {
            plan: plan.to_string(),
            status: record.status.into(),
        };
        self.runs.get_or_create(&labels).inc();
        self.run_seconds
            .get_or_create(&PlanLabels {
                plan: plan.to_string(),
            })
            .observe(record.duration_ms / 1000.0);
        for step in &record.steps {
            if matches!(step.status, StepStatus::NotRun | StepStatus::Skipped) {
                continue;
            }
            let labels = StepLabels {
                plan: plan.to_string(),
                step: step.name.clone(),
            };
            self.step_seconds
                .get_or_create(&labels)
                .observe(step.duration_ms / 1000.0);
        }
        for (kind, count) in [
            (TokenKind::Prompt, record.usage.prompt_tokens),
            (TokenKind::Completion, record.usage.completion_tokens),
        ] {
            let labels = TokenLabels {
                plan: plan.to_string(),
                kind,
            };
            self.tokens.get_or_create(&labels).inc_by(count);
        }
    }

    /// Counts one model call made by a run of `plan`: one that reached its model, or one the
    /// call cache answered (`cached`).
    pub fn model_call(&self, plan: &str, cached: bool) {
        let counted = if cached {
            &self.cache_hits
        } else {
            &self.model_calls
        };
        counted
            .get_or_create(&PlanLabels {
                plan: plan.to_string(),
            })
            .inc();
    }

    /// Counts a request refused before it ran.
    pub fn refused(&self, why: Refusal) {
        self.refused
            .get_or_create(&RefusalLabels { reason: why })
            .inc();
    }

    /// Everything, in the OpenMetrics text format (served as [`CONTENT_TYPE`]), with the gauges
    /// set to `gauges` first.
    pub fn render(&self, gauges: &Gauges) -> Result<String, std::fmt::Error> {
        self.runs_in_flight.set(gauge_value(gauges.running));
        self.queue_depth.set(gauge_value(gauges.queued));
        self.connections_open.set(gauge_value(gauges.connections));
        self.connections_busy
            .set(gauge_value(gauges.busy_connections));
        let mut out = String::new();
        text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// A count as a gauge's value (saturating: no server queues 2^63 requests).
fn gauge_value(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
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
            request_id: None,
            trace_id: None,
            plan: "p".into(),
            status,
            output: None,
            steps: vec![step, StepRecord::not_run("later", "template")],
            usage: TokenUsage {
                prompt_tokens: 5,
                completion_tokens: 7,
                reasoning_tokens: None,
            },
            cost: None,
            model_calls: 1,
            cache: crate::orchestrate::CacheTally::default(),
            rate_limit: crate::inference::Pacing::default(),
            duration_ms,
            started_at: crate::core::Timestamp::now(),
            ended_at: crate::core::Timestamp::now(),
            error: None,
        }
    }

    fn render(metrics: &Metrics, running: usize, queued: usize) -> String {
        metrics
            .render(&Gauges {
                running,
                queued,
                connections: 0,
                busy_connections: 0,
            })
            .expect("the metrics are written")
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
        let text = render(&metrics, 2, 1);
        for line in [
            "pagantic_runs_total{plan=\"qa\",status=\"complete\"} 1",
            "pagantic_runs_total{plan=\"qa\",status=\"error\"} 1",
            "pagantic_run_duration_seconds_bucket{le=\"0.05\",plan=\"qa\"} 1",
            "pagantic_run_duration_seconds_bucket{le=\"2.5\",plan=\"qa\"} 2",
            "pagantic_run_duration_seconds_bucket{le=\"+Inf\",plan=\"qa\"} 2",
            "pagantic_run_duration_seconds_sum{plan=\"qa\"} 2.04",
            "pagantic_run_duration_seconds_count{plan=\"qa\"} 2",
            "pagantic_step_duration_seconds_count{plan=\"qa\",step=\"ask\"} 2",
            "pagantic_tokens_total{plan=\"qa\",kind=\"prompt\"} 10",
            "pagantic_tokens_total{plan=\"qa\",kind=\"completion\"} 14",
            "pagantic_model_calls_total{plan=\"qa\"} 1",
            "pagantic_cache_hits_total{plan=\"qa\"} 2",
            "pagantic_requests_refused_total{reason=\"queue_full\"} 1",
            "pagantic_runs_in_flight 2",
            "pagantic_queue_depth 1",
            "# TYPE pagantic_runs counter",
            "# TYPE pagantic_run_duration_seconds histogram",
            "# TYPE pagantic_queue_depth gauge",
            "# HELP pagantic_runs Runs finished, by plan and status.",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
        assert!(
            !text.contains("step=\"later\""),
            "a step that never ran is not timed"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn token_counts_from_a_server_saturate_instead_of_wrapping() {
        let metrics = Metrics::default();
        let mut huge = record(RunStatus::Complete, 1.0);
        huge.usage.prompt_tokens = u64::MAX;
        metrics.record_run("qa", &huge);
        metrics.record_run("qa", &huge);
        let text = render(&metrics, 0, 0);
        let line = format!(
            "pagantic_tokens_total{{plan=\"qa\",kind=\"prompt\"}} {}",
            u64::MAX
        );
        assert!(text.lines().any(|l| l == line), "{text}");
        assert!(
            text.lines()
                .any(|l| l == "pagantic_runs_total{plan=\"qa\",status=\"complete\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn gauges_show_the_values_of_the_latest_render() {
        let metrics = Metrics::default();
        render(&metrics, 3, 4);
        let text = render(&metrics, 0, 0);
        assert!(
            text.lines().any(|l| l == "pagantic_runs_in_flight 0"),
            "{text}"
        );
        assert!(
            text.lines().any(|l| l == "pagantic_queue_depth 0"),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let metrics = Metrics::default();
        metrics.model_call("a\"b\\c\nd", false);
        let text = render(&metrics, 0, 0);
        assert!(
            text.lines()
                .any(|l| l == "pagantic_model_calls_total{plan=\"a\\\"b\\\\c\\nd\"} 1"),
            "{text}"
        );
    }
}
