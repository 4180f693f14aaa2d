//! What a batch has done so far: the counts its progress line shows as each row or group ends,
//! and the summary they end as. Every number comes from the runs' records — what their calls
//! spent, what they waited for their models' pace — so nothing is counted twice or missed.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{End, Progress, StepTimes, Summary, part};
use crate::core::{Cost, Failure, TokenUsage};
use crate::orchestrate::{CacheTally, RunRecord, RunStatus};

/// What the batch has done so far, for the progress line and the summary.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) counts: Progress,
    durations: BTreeMap<String, Vec<f64>>,
    usage: TokenUsage,
    cost: Option<Cost>,
    cache: CacheTally,
    /// Failed rows whose failure may pass.
    failed_retryably: usize,
    /// Skipped rows an earlier run recorded as failed.
    pub(super) skipped_failed: usize,
}

impl Tally {
    /// Counts a row's run.
    pub(super) fn add(&mut self, record: &RunRecord) {
        self.spend(record);
        self.outcome(record.status, record.error.as_ref());
    }

    /// Counts what a run spent and waited: model calls, cache, step times, tokens, cost, and
    /// its calls' waits for their models' pace.
    pub(super) fn spend(&mut self, record: &RunRecord) {
        self.counts.model_calls += record.model_calls;
        self.counts.rate_limit = self.counts.rate_limit.and(record.rate_limit);
        self.cache += record.cache;
        for step in &record.steps {
            self.durations
                .entry(step.name.clone())
                .or_default()
                .push(step.duration_ms);
        }
        self.counts.tokens = self.counts.tokens.saturating_add(record.usage.total());
        self.usage += record.usage;
        self.cost = Cost::sum(self.cost, record.cost);
    }

    /// Counts an item (a row, a group) that ended with `status`.
    pub(super) fn outcome(&mut self, status: RunStatus, error: Option<&Failure>) {
        if status == RunStatus::Complete {
            self.counts.ok += 1;
        } else {
            self.counts.failed += 1;
            self.failed_retryably += usize::from(error.is_some_and(Failure::transient));
        }
    }

    /// Tells `progress` the counts so far, `started` when the batch started and `total` once
    /// the input is counted.
    pub(super) fn show(
        &mut self,
        started: Instant,
        total: &OnceLock<usize>,
        progress: &dyn Fn(&Progress),
    ) {
        self.counts.elapsed = started.elapsed();
        self.counts.total = total.get().copied();
        progress(&self.counts);
    }

    /// The summary of a batch that ended (`cancelled` by a signal or not) after `wall`.
    pub(super) fn summary(self, cancelled: bool, origin: part::Origin, wall: Duration) -> Summary {
        let counts = self.counts;
        let end = if cancelled {
            End::Preempted
        } else if self.failed_retryably > 0 {
            End::Retry
        } else if counts.failed + self.skipped_failed > 0 {
            End::Failed
        } else {
            End::Complete
        };
        Summary {
            end,
            rows_ok: counts.ok,
            rows_failed: counts.failed,
            rows_failed_retryably: self.failed_retryably,
            rows_skipped: counts.skipped,
            rows_skipped_failed: self.skipped_failed,
            cancelled,
            origin,
            usage: self.usage,
            cost: self.cost,
            model_calls: counts.model_calls,
            cache: self.cache,
            wall_ms: wall.as_secs_f64() * 1000.0,
            rows_per_s: (counts.ok + counts.failed) as f64 / wall.as_secs_f64().max(1e-9),
            steps: self
                .durations
                .into_iter()
                .map(|(name, times)| (name, percentiles(times)))
                .collect(),
            rate_limit_wait_ms: counts.rate_limit.waited.as_secs_f64() * 1000.0,
            rate_limited: counts.rate_limit.rate_limited,
            grouped: None,
            map: None,
            trace_spans_dropped: None,
        }
    }
}

/// The median and 95th percentile of a step's durations.
fn percentiles(mut times: Vec<f64>) -> StepTimes {
    times.sort_by(f64::total_cmp);
    let at = |q: f64| {
        if times.is_empty() {
            0.0
        } else {
            times[((times.len() - 1) as f64 * q).round() as usize]
        }
    };
    StepTimes {
        p50_ms: at(0.5),
        p95_ms: at(0.95),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::Pacing;

    #[test]
    fn percentiles_of_durations() {
        let times = percentiles((1..=100).map(f64::from).collect());
        assert_eq!((times.p50_ms, times.p95_ms), (51.0, 95.0));
    }

    /// The rate-limit waits the progress and the summary show are those the runs' records
    /// booked, added up.
    #[test]
    fn rate_limit_waits_come_from_the_records() {
        let record = |waited_ms: u64, rate_limited: u64| {
            let mut record = RunRecord::empty("run", RunStatus::Complete);
            record.rate_limit = Pacing {
                waited: Duration::from_millis(waited_ms),
                rate_limited,
            };
            record
        };
        let mut tally = Tally::default();
        tally.add(&record(250, 1));
        tally.spend(&record(0, 0));
        tally.add(&record(1_000, 2));
        assert_eq!(
            tally.counts.rate_limit,
            Pacing {
                waited: Duration::from_millis(1_250),
                rate_limited: 3,
            }
        );
        let origin = part::Origin {
            shard: None,
            input_sha256: None,
            plan_sha256: String::new(),
        };
        let summary = tally.summary(false, origin, Duration::from_secs(1));
        assert_eq!(
            (summary.rate_limit_wait_ms, summary.rate_limited),
            (1_250.0, 3)
        );
    }
}
