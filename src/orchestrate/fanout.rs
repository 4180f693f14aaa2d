//! Many runs through one [`Runner`]: a batch's rows, a test suite's cases — and every later
//! "one run per item" — share this one loop instead of each keeping a copy of it.
//!
//! The work hands out runs one at a time ([`FanOut::next`]) only when a slot is free, so an input
//! of any length is never held whole; at most `concurrency` runs are in flight, each a task on
//! the session's runtime with its own run id. Each record is handed back as its run ends
//! ([`FanOut::finished`], in order of completion), on the caller's task, so the work can write,
//! score or count without locks. A cancellation stops new runs from starting; the runs in flight
//! see the same cancellation, end as CANCELLED records, and are handed back like any other.

use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::pipeline::Pipeline;
use super::record::RunRecord;
use super::session::{RunRequest, Runner};
use crate::core::Failure;

/// One run to start: a pipeline, its bound inputs, the names added to its templates' scope (a
/// batch row's `row`), which repeat of the same run it is (see [`RunRequest::sample`]), and what
/// the work needs to know the run by when it ends.
pub struct Job<T> {
    pub pipeline: Arc<Pipeline>,
    pub inputs: Value,
    pub globals: Map<String, Value>,
    pub sample: Option<u32>,
    pub tag: T,
}

/// Work made of many runs; see the module docs.
pub trait FanOut {
    /// What the work knows a run by (a row, a case number).
    type Tag: Send + 'static;

    /// The next run to start, or None when there is none left or the work stops starting runs
    /// (`--fail-fast`). Items that end without a run (a row that cannot be bound) are dealt with
    /// here, before the next run is handed out. An error ends the whole fan-out.
    fn next(&mut self) -> Result<Option<Job<Self::Tag>>, Failure>;

    /// The run of `tag` ended with `record` (in the order runs end). An error ends the whole
    /// fan-out; the runs still in flight are abandoned.
    fn finished(
        &mut self,
        tag: Self::Tag,
        record: RunRecord,
    ) -> impl Future<Output = Result<(), Failure>>;

    /// Whether a run that ends can make new runs ready after [`FanOut::next`] said there were
    /// none (a reduce's next fold level waits on the runs of the level before): then `next` is
    /// asked again after every finished run, and the fan-out ends when it has none and nothing
    /// is in flight. False by default: a None from `next` is the end.
    fn refills(&self) -> bool {
        false
    }

    /// What the work knows the run of `tag` by, as attributes of its trace's root span (a batch
    /// row's id, a test case and its variant). None by default.
    fn trace_attributes(&self, tag: &Self::Tag) -> Vec<(&'static str, String)> {
        let _ = tag;
        Vec::new()
    }
}

impl Runner {
    /// Runs `work`'s jobs, at most `concurrency` at once, until it has none left or `cancel`
    /// turns true; returns whether it was cancelled.
    pub async fn run_many<W: FanOut>(
        &self,
        work: &mut W,
        concurrency: usize,
        mut cancel: watch::Receiver<bool>,
    ) -> Result<bool, Failure> {
        // Each job is a run of its own, never the session's (whose id is the fan-out's).
        self.keep_session_run_id();
        let mut running: JoinSet<(W::Tag, RunRecord)> = JoinSet::new();
        let mut cancelled = *cancel.borrow();
        let mut cancel_closed = false;
        let mut exhausted = false;
        loop {
            // The runs in flight see a cancellation too, and may end (and be handed back) before
            // this loop hears of it: the value is read, not only waited for.
            cancelled |= *cancel.borrow();
            while !cancelled && !exhausted && running.len() < concurrency.max(1) {
                match work.next()? {
                    Some(job) => {
                        let runner = self.clone();
                        let request = RunRequest {
                            globals: job.globals,
                            sample: job.sample,
                            cancel: Some(cancel.clone()),
                            trace_attributes: work.trace_attributes(&job.tag),
                            ..RunRequest::default()
                        };
                        running.spawn(async move {
                            let record = runner.run(&job.pipeline, job.inputs, request).await;
                            (job.tag, record)
                        });
                    }
                    None => exhausted = true,
                }
            }
            if running.is_empty() {
                return Ok(cancelled);
            }
            tokio::select! {
                joined = running.join_next() => {
                    // A run's task that panicked has no record to hand back: it is left out,
                    // and a resumed batch runs its row again.
                    if let Some(Ok((tag, record))) = joined {
                        work.finished(tag, record).await?;
                        exhausted &= !work.refills();
                    }
                }
                changed = cancel.changed(), if !cancelled && !cancel_closed => {
                    match changed {
                        // The sender is gone: nothing can cancel these runs any more.
                        Err(_) => cancel_closed = true,
                        Ok(()) => cancelled = *cancel.borrow(),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;

    use super::*;
    use crate::orchestrate::RunStatus;
    use crate::orchestrate::pipeline::{
        Rendered, StepContext, StepFuture, StepHandler, StepNode, StepOutput,
    };
    use crate::prompt::Templates;

    /// A step that echoes its input's `n` after `n` milliseconds.
    struct Echo;

    impl StepHandler for Echo {
        fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
            Box::pin(async move {
                let n = ctx.scope["inputs"]["n"].as_u64().unwrap_or(0);
                tokio::time::sleep(std::time::Duration::from_millis(n)).await;
                Ok(StepOutput {
                    output: json!(n),
                    ..StepOutput::default()
                })
            })
        }
        fn render(&self, _: &StepContext) -> Result<Rendered, Failure> {
            Ok(Rendered::Text(String::new()))
        }
    }

    fn echo_pipeline() -> Arc<Pipeline> {
        Arc::new(Pipeline {
            name: "echo".into(),
            steps: vec![StepNode {
                name: "echo".into(),
                kind: "tool",
                needs: Vec::new(),
                upstream: Vec::new(),
                reads: Vec::new(),
                when: None,
                retry: Default::default(),
                timeout: None,
                handler: Arc::new(Echo),
                standby_for: None,
                continue_on_error: false,
                feedback: None,
            }],
            output: None,
            vars: json!({}),
            templates: Arc::new(Templates::new(None)),
            inputs: Default::default(),
            step_timeout: None,
            max_cost: None,
            trace_shape: Default::default(),
            reduce: None,
        })
    }

    /// Hands out `items` and keeps what came back, with the most runs it saw in flight.
    struct Probe {
        pipeline: Arc<Pipeline>,
        items: Vec<u64>,
        next: usize,
        started: usize,
        ended: Vec<(usize, RunStatus, Value)>,
        most_in_flight: usize,
        stop_after: Option<usize>,
        /// Turned true as the first run is handed back (a run that saw a cancellation first).
        cancel_on_end: Option<watch::Sender<bool>>,
        /// Hands out the next job only once the one before has ended (a chain of levels).
        chained: bool,
    }

    impl Probe {
        fn new(items: Vec<u64>) -> Self {
            Probe {
                pipeline: echo_pipeline(),
                items,
                next: 0,
                started: 0,
                ended: Vec::new(),
                most_in_flight: 0,
                stop_after: None,
                cancel_on_end: None,
                chained: false,
            }
        }
    }

    impl FanOut for Probe {
        type Tag = usize;

        fn next(&mut self) -> Result<Option<Job<usize>>, Failure> {
            if self.stop_after.is_some_and(|n| self.ended.len() >= n)
                || (self.chained && self.started > self.ended.len())
            {
                return Ok(None);
            }
            let Some(&n) = self.items.get(self.next) else {
                return Ok(None);
            };
            let tag = self.next;
            self.next += 1;
            self.started += 1;
            self.most_in_flight = self.most_in_flight.max(self.started - self.ended.len());
            Ok(Some(Job {
                pipeline: Arc::clone(&self.pipeline),
                inputs: json!({ "n": n }),
                globals: Map::new(),
                sample: None,
                tag,
            }))
        }

        async fn finished(&mut self, tag: usize, record: RunRecord) -> Result<(), Failure> {
            let output = record.output.unwrap_or(Value::Null);
            self.ended.push((tag, record.status, output));
            if let Some(cancel) = &self.cancel_on_end {
                cancel.send_replace(true);
            }
            Ok(())
        }

        fn refills(&self) -> bool {
            self.chained
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_job_runs_once_at_most_n_at_a_time_each_with_its_own_run_id() {
        let runner = Runner::standalone(4);
        let mut work = Probe::new(vec![30, 10, 20, 5, 1]);
        let cancelled = runner
            .run_many(&mut work, 2, runner.cancellation())
            .await
            .expect("runs");
        assert!(!cancelled);
        assert_eq!(work.most_in_flight, 2);
        let tags: BTreeSet<usize> = work.ended.iter().map(|(tag, _, _)| *tag).collect();
        assert_eq!(tags, (0..5).collect());
        for (tag, status, output) in &work.ended {
            assert_eq!(*status, RunStatus::Complete);
            assert_eq!(output, &json!(work.items[*tag]));
        }
        assert_eq!(work.ended[0].0, 1, "handed back in order of completion");
    }

    /// Work whose next job waits on the one before (a reduce's next fold level) says "none now"
    /// while it runs, and is asked again when it ends: every job still runs.
    #[tokio::test(start_paused = true)]
    async fn work_that_refills_is_asked_again_after_each_run_ends() {
        let runner = Runner::standalone(4);
        let mut work = Probe::new(vec![5, 5, 5]);
        work.chained = true;
        runner
            .run_many(&mut work, 4, runner.cancellation())
            .await
            .expect("runs");
        let tags: Vec<usize> = work.ended.iter().map(|(tag, _, _)| *tag).collect();
        assert_eq!(tags, [0, 1, 2]);
        assert_eq!(work.most_in_flight, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_work_stops_starting_runs_and_the_ones_in_flight_still_end() {
        let runner = Runner::standalone(4);
        let mut work = Probe::new(vec![10, 20, 30, 40, 50]);
        work.stop_after = Some(1);
        runner
            .run_many(&mut work, 2, runner.cancellation())
            .await
            .expect("runs");
        assert_eq!(work.started, 2, "none starts once the work stops");
        assert_eq!(work.ended.len(), 2, "the one in flight still ended");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancellation_starts_nothing_more_and_hands_back_cancelled_records() {
        let runner = Runner::standalone(4);
        let (cancel, receiver) = watch::channel(false);
        let mut work = Probe::new(vec![1_000, 1_000, 1_000, 1_000]);
        let fan_out = runner.run_many(&mut work, 2, receiver);
        let stop = async {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            cancel.send_replace(true);
        };
        let (cancelled, ()) = tokio::join!(fan_out, stop);
        assert!(cancelled.expect("runs"));
        assert_eq!(work.started, 2);
        let statuses: Vec<RunStatus> = work.ended.iter().map(|(_, s, _)| *s).collect();
        assert_eq!(statuses, [RunStatus::Cancelled, RunStatus::Cancelled]);
    }

    /// The last run can end, and be handed back, after a cancellation this loop has not yet
    /// heard of: the fan-out still says it was cancelled.
    #[tokio::test(start_paused = true)]
    async fn a_cancellation_seen_first_by_the_runs_still_counts() {
        let runner = Runner::standalone(4);
        let (cancel, receiver) = watch::channel(false);
        let mut work = Probe::new(vec![10]);
        work.cancel_on_end = Some(cancel);
        let cancelled = runner.run_many(&mut work, 1, receiver).await;
        assert!(cancelled.expect("runs"));
    }
}
