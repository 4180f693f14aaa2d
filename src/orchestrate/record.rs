//! The run record: what ran, how it ended, what each step produced — kept whatever happened.

use serde::Serialize;
use serde_json::Value;

use std::time::Duration;

use crate::core::{Cost, Failure, Timestamp, TokenUsage};
use crate::inference::{CacheStatus, Pacing};

/// The lifecycle of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Lifecycle {
    Init,
    Plan,
    Prepare,
    Execute,
    Validate,
    Complete,
    Error,
    Cancelled,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Complete,
    Error,
    Cancelled,
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// It ran and succeeded.
    Ok,
    /// Its `when` was false.
    Skipped,
    /// It failed after its retries (with `continued` set when the run went on past it).
    Failed,
    /// It was running when the run was cancelled.
    Cancelled,
    /// It never started (an earlier failure or a cancellation stopped the run).
    NotRun,
}

/// One step's part of the record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepRecord {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub status: StepStatus,
    pub attempts: u32,
    pub duration_ms: f64,
    /// When it started and ended, by the wall clock; null for a step that did not run.
    pub started_at: Option<Timestamp>,
    pub ended_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    pub usage: TokenUsage,
    /// What its model calls cost over all its attempts, at the models' declared prices; null
    /// when none of them was priced.
    pub cost: Option<Cost>,
    /// How a voting step decided, when it voted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vote: Option<VoteRecord>,
    /// Its model calls the call cache answered (`call`, `attempt 2`, `vote 1`, `round 3`…), in
    /// the order they ended; the others reached the model.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cached_calls: Vec<String>,
    /// How the output was obtained (attempts, repairs, votes…), when the step says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Failure>,
    /// It failed and the run went on past it (`on_error: continue`): its output is null.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub continued: bool,
    /// Its earlier runs, oldest first, when a check sent the run back to it or through it
    /// (a validate step's `feedback`): each with its own attempts, output or error.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<StepRecord>,
}

impl StepRecord {
    /// A record of a step that has not run yet.
    pub fn not_run(name: &str, kind: &'static str) -> Self {
        StepRecord {
            name: name.to_string(),
            kind,
            status: StepStatus::NotRun,
            attempts: 0,
            duration_ms: 0.0,
            started_at: None,
            ended_at: None,
            output: None,
            usage: TokenUsage::default(),
            cost: None,
            vote: None,
            cached_calls: Vec::new(),
            detail: None,
            error: None,
            continued: false,
            earlier: Vec::new(),
        }
    }

    /// It ended now, after running for `duration`.
    pub fn ended_after(&mut self, duration: Duration) {
        let ended_at = Timestamp::now();
        self.duration_ms = duration.as_secs_f64() * 1000.0;
        self.started_at = Some(ended_at.before(duration));
        self.ended_at = Some(ended_at);
    }

    /// The tokens of this run of the step and of its earlier runs.
    pub fn total_usage(&self) -> TokenUsage {
        self.earlier.iter().fold(self.usage, |mut total, earlier| {
            total += earlier.total_usage();
            total
        })
    }

    /// Starts the step over: this run becomes the last of its earlier runs.
    pub fn start_over(&mut self) {
        let mut earlier = std::mem::take(&mut self.earlier);
        let fresh = StepRecord::not_run(&self.name, self.kind);
        earlier.push(std::mem::replace(self, fresh));
        self.earlier = earlier;
    }
}

/// How a voting (`redundant`) step's vote went, in its step entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VoteRecord {
    /// The winning answer's confidence, between 0 and 1.
    pub confidence: f64,
    /// The candidate (numbered from 1, in the order they were asked) whose answer won; null
    /// when none did as a whole (a `field_majority` answer assembled from several) or when the
    /// fallback answered.
    pub winner: Option<u32>,
    /// Who answered: `vote`, or `fallback` when confidence was below `min_confidence` and the
    /// fallback step answered instead.
    pub answered_by: AnsweredBy,
    /// The fallback step, when it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// Candidates asked.
    pub asked: u32,
    /// Candidates that voted: those that answered (and, with a schema, validly).
    pub voted: u32,
    /// The winner's support over the candidates asked, not only those that voted
    /// (`confidence × voted ÷ asked`): 2 of 3 agreeing reads 0.67 even when the third failed.
    pub agreement: f64,
}

/// Who gave a voting step's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnsweredBy {
    Vote,
    Fallback,
}

/// What the call cache did for a run's (or a batch's) model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CacheTally {
    /// Calls it answered.
    pub hits: u64,
    /// Calls it was asked about and did not have (the model answered, and it stored that).
    pub misses: u64,
    /// Tokens the answered calls had used when they were made.
    pub tokens_saved: u64,
    /// How long the answered calls had taken when they were made.
    pub ms_saved: f64,
}

impl CacheTally {
    /// Adds one call's part: answered from the cache (saving `tokens` and the original call's
    /// time), or asked and not found.
    pub fn count(&mut self, status: CacheStatus, tokens: u64) {
        match status {
            CacheStatus::Unused => {}
            CacheStatus::Miss => self.misses += 1,
            CacheStatus::Hit { original } => {
                self.hits += 1;
                // `tokens` is what a cache row claims: the sums saturate.
                self.tokens_saved = self.tokens_saved.saturating_add(tokens);
                self.ms_saved += original.as_secs_f64() * 1000.0;
            }
        }
    }
}

impl std::ops::AddAssign for CacheTally {
    fn add_assign(&mut self, other: CacheTally) {
        self.hits += other.hits;
        self.misses += other.misses;
        self.tokens_saved = self.tokens_saved.saturating_add(other.tokens_saved);
        self.ms_saved += other.ms_saved;
    }
}

/// The whole record of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRecord {
    pub run_id: String,
    /// The id the caller gave the run (`serve`'s `X-Request-Id`), when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The OpenTelemetry trace the run's spans belong to, when traces are exported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    pub plan: String,
    pub status: RunStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    pub steps: Vec<StepRecord>,
    pub usage: TokenUsage,
    /// What the run's model calls cost (the sum of its steps'); null when none was priced.
    pub cost: Option<Cost>,
    /// Model calls the run made (every attempt, vote and tool round, its sub-plans' included),
    /// not counting those the call cache answered.
    pub model_calls: u64,
    /// What the call cache did for the run's calls.
    pub cache: CacheTally,
    /// What the run's model calls waited for their models' rate limits, and the 429s they were
    /// answered; left out when they neither waited nor were refused.
    #[serde(skip_serializing_if = "Pacing::is_none")]
    pub rate_limit: Pacing,
    pub duration_ms: f64,
    /// When it started and ended, by the wall clock.
    pub started_at: Timestamp,
    pub ended_at: Timestamp,
    /// The failure that ended the run, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Failure>,
}

#[cfg(test)]
impl RunRecord {
    /// The record of a run `run_id` that ended with `status` having run no step and spent
    /// nothing, for a test to fill in.
    pub fn empty(run_id: &str, status: RunStatus) -> RunRecord {
        RunRecord {
            run_id: run_id.into(),
            request_id: None,
            trace_id: None,
            plan: "p".into(),
            status,
            output: None,
            steps: Vec::new(),
            usage: TokenUsage::default(),
            cost: None,
            model_calls: 0,
            cache: CacheTally::default(),
            rate_limit: Pacing::default(),
            duration_ms: 0.0,
            started_at: Timestamp::now(),
            ended_at: Timestamp::now(),
            error: None,
        }
    }
}
