//! One step's part of a run, as its own task: `standby_for` and `when` (skipped steps), then its
//! attempts — each bounded by the step's timeout and recorded as a `step_start` / `step_end` pair
//! of events — and the retries between them that the retry policy and the failure's taxonomy
//! allow. An attempt stopped mid-flight (a cancelled run drops its task) still records its end,
//! as `cancelled`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinError;

use super::events::{EventData, OnDrop, SkipReason, SpanId, StepOutcome};
use super::pipeline::{StepContext, StepHandler, StepNode, StepOutput};
use super::record::StepStatus;
use crate::core::step_clock::StepClock;
use crate::core::{Failure, FailureCode};
use crate::validate::RetryPolicy;

/// What one step task reports back.
pub(super) struct Finished {
    pub index: usize,
    pub status: StepStatus,
    pub attempts: u32,
    pub duration: Duration,
    pub result: Result<StepOutput, Failure>,
}

impl Finished {
    /// The report of step `index` whose task panicked: a bug, recorded as the step's own
    /// failure so the run still ends with a record.
    pub fn panicked(index: usize, error: JoinError) -> Self {
        let message = match error.try_into_panic() {
            Ok(payload) => match payload.downcast::<String>() {
                Ok(text) => *text,
                Err(payload) => payload
                    .downcast_ref::<&str>()
                    .map_or_else(|| "no message".to_string(), |text| text.to_string()),
            },
            Err(error) => error.to_string(),
        };
        Finished {
            index,
            status: StepStatus::Failed,
            attempts: 1,
            duration: Duration::ZERO,
            result: Err(Failure::new(
                FailureCode::OrchestrationStepPanicked,
                format!("the step's handler panicked: {message}"),
            )
            .with_help("this is a bug in pagantic; please report it with the plan that caused it")),
        }
    }
}

/// One step's run: `when`, attempts, timeouts, retries, and its events.
pub(super) struct StepTask {
    index: usize,
    standby_for: Option<String>,
    when: Option<String>,
    retry: RetryPolicy,
    timeout: Option<Duration>,
    handler: Arc<dyn StepHandler>,
}

impl StepTask {
    /// The task of step `index`; `default_timeout` bounds its attempts when it sets no timeout.
    pub fn new(index: usize, step: &StepNode, default_timeout: Option<Duration>) -> Self {
        StepTask {
            index,
            standby_for: step.standby_for.clone(),
            when: step.when.clone(),
            retry: step.retry,
            timeout: step.timeout.or(default_timeout),
            handler: Arc::clone(&step.handler),
        }
    }

    pub async fn run(self, mut ctx: StepContext) -> Finished {
        let started = Instant::now();
        let finish = |status, attempts, result| Finished {
            index: self.index,
            status,
            attempts,
            duration: started.elapsed(),
            result,
        };
        let skip = |why: SkipReason| {
            let events = &ctx.events;
            events.emit(
                Some(&ctx.step),
                events.new_span(),
                Some(ctx.span),
                EventData::StepSkipped(why),
            );
            finish(StepStatus::Skipped, 0, Ok(StepOutput::default()))
        };
        if let Some(owner) = &self.standby_for {
            return skip(SkipReason::StandbyFor(owner.clone()));
        }
        if let Some(when) = &self.when {
            match ctx.templates.is_true(when, &ctx.scope) {
                Ok(true) => {}
                Ok(false) => return skip(SkipReason::When(when.clone())),
                Err(error) => return finish(StepStatus::Failed, 0, Err(error)),
            }
        }
        let parent = ctx.span;
        let mut attempt = 1;
        loop {
            let span = ctx.events.new_span();
            ctx.span = span;
            // An attempt bounded by a timeout runs on a clock of its own.
            ctx.clock = match self.timeout {
                Some(_) => StepClock::for_attempt(),
                None => StepClock::default(),
            };
            let result = self.attempt(&ctx, parent, attempt).await;
            ctx.span = parent;
            let failure = match result {
                Ok(output) => return finish(StepStatus::Ok, attempt, Ok(output)),
                Err(failure) => failure,
            };
            let Some(delay) = self.retry.retry_after(&failure, attempt + 1) else {
                return finish(StepStatus::Failed, attempt, Err(failure));
            };
            ctx.events.emit(
                Some(&ctx.step),
                span,
                Some(parent),
                EventData::StepRetry {
                    next_attempt: attempt + 1,
                    delay_ms: delay.as_millis() as u64,
                    code: failure.code,
                },
            );
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    /// Attempt number `attempt`, in the span `ctx.span` (a child of `parent`), bounded by the
    /// step's timeout, between its `step_start` and `step_end` events.
    async fn attempt(
        &self,
        ctx: &StepContext,
        parent: SpanId,
        attempt: u32,
    ) -> Result<StepOutput, Failure> {
        let (events, step, span) = (&ctx.events, ctx.step.as_str(), ctx.span);
        ctx.ledger.attempt_started();
        events.emit(
            Some(step),
            span,
            Some(parent),
            EventData::StepStart { attempt },
        );
        let started = Instant::now();
        let end = |outcome| {
            events.emit(
                Some(step),
                span,
                Some(parent),
                EventData::StepEnd {
                    outcome,
                    attempt,
                    duration_ms: started.elapsed().as_secs_f64() * 1000.0,
                },
            )
        };
        let cancelled = OnDrop::new(|| end(StepOutcome::Cancelled));
        let result = match self.timeout {
            Some(limit) => match ctx.clock.bound(limit, self.handler.run(ctx)).await {
                Some(result) => result,
                None => Err(Failure::new(
                    FailureCode::OrchestrationStepTimeout,
                    format!("step `{step}` ran past its timeout of {limit:?}"),
                )),
            },
            None => self.handler.run(ctx).await,
        };
        cancelled.disarm();
        end(match &result {
            Ok(output) => StepOutcome::Ok {
                usage: output.usage,
            },
            Err(failure) => StepOutcome::Failed {
                error: failure.clone(),
            },
        });
        result
    }
}
