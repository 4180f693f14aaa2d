//! The executor's tests: scheduling, parallelism, retries, timeouts, feedback loops,
//! cancellation and panics, on probe steps under a paused clock.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use indexmap::IndexMap;
use serde_json::json;

use super::*;
use crate::inference::CacheStatus;
use crate::orchestrate::events::{EventData, StepOutcome};
use crate::orchestrate::ledger::Booking;
use crate::orchestrate::pipeline::{Feedback, StepFuture, StepHandler, StepNode, StepOutput};
use crate::orchestrate::steps::{PromptSource, Template};
use crate::prompt::Templates;
use crate::validate::RetryPolicy;

/// The lifecycle states among `events`, in order.
fn lifecycle_states(events: &[crate::orchestrate::Event]) -> Vec<Lifecycle> {
    events
        .iter()
        .filter_map(|e| match e.data {
            EventData::Lifecycle { state } => Some(state),
            _ => None,
        })
        .collect()
}

/// A handler that sleeps, may fail its first attempts, and records when it ran.
struct Probe {
    sleep: Duration,
    fail_first: u32,
    failure: FailureCode,
    calls: AtomicU32,
    output: Value,
    log: Arc<Mutex<Vec<(String, tokio::time::Instant, tokio::time::Instant)>>>,
}

impl StepHandler for Probe {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            let start = tokio::time::Instant::now();
            tokio::time::sleep(self.sleep).await;
            self.log.lock().expect("log").push((
                ctx.step.clone(),
                start,
                tokio::time::Instant::now(),
            ));
            if self.calls.fetch_add(1, Ordering::SeqCst) < self.fail_first {
                return Err(Failure::new(self.failure, "probe failure"));
            }
            let usage = TokenUsage {
                prompt_tokens: 1,
                completion_tokens: 2,
                reasoning_tokens: None,
            };
            // Tokens reach the record through the ledger, as a model call books them.
            let booking = Booking {
                usage,
                cost: None,
                cache: CacheStatus::Unused,
                rate_limit: Default::default(),
            };
            ctx.ledger.book_call("call", booking);
            Ok(StepOutput {
                output: self.output.clone(),
                usage,
                detail: None,
            })
        })
    }

    fn render(&self, _: &StepContext) -> Result<Rendered, Failure> {
        Ok(Rendered::Text(String::new()))
    }
}

type Log = Arc<Mutex<Vec<(String, tokio::time::Instant, tokio::time::Instant)>>>;

struct Spec {
    name: &'static str,
    needs: Vec<usize>,
    sleep_ms: u64,
    fail_first: u32,
    failure: FailureCode,
    retry: RetryPolicy,
    timeout: Option<Duration>,
    when: Option<&'static str>,
    continue_on_error: bool,
    feedback: Option<Feedback>,
}

fn spec(name: &'static str, needs: &[usize], sleep_ms: u64) -> Spec {
    Spec {
        name,
        needs: needs.to_vec(),
        sleep_ms,
        fail_first: 0,
        failure: FailureCode::ValidationRuleFailed,
        retry: RetryPolicy::default(),
        timeout: None,
        when: None,
        continue_on_error: false,
        feedback: None,
    }
}

fn pipeline(specs: Vec<Spec>, log: &Log) -> Pipeline {
    let mut steps: Vec<StepNode> = Vec::new();
    for s in specs {
        let mut upstream: BTreeSet<usize> = s.needs.iter().copied().collect();
        for &n in &s.needs {
            upstream.extend(steps[n].upstream.iter().copied());
        }
        steps.push(StepNode {
            name: s.name.into(),
            kind: "probe",
            needs: s.needs,
            reads: upstream.iter().copied().collect(),
            upstream: upstream.into_iter().collect(),
            when: s.when.map(str::to_string),
            standby_for: None,
            continue_on_error: s.continue_on_error,
            feedback: s.feedback,
            retry: s.retry,
            timeout: s.timeout,
            handler: Arc::new(Probe {
                sleep: Duration::from_millis(s.sleep_ms),
                fail_first: s.fail_first,
                failure: s.failure,
                calls: AtomicU32::new(0),
                output: json!(format!("{} done", s.name)),
                log: Arc::clone(log),
            }),
        });
    }
    Pipeline {
        name: "test".into(),
        steps,
        output: None,
        vars: json!({}),
        templates: Arc::new(Templates::new(None)),
        inputs: IndexMap::new(),
        step_timeout: None,
        max_cost: None,
        trace_shape: Default::default(),
        reduce: None,
    }
}

fn statuses(record: &RunRecord) -> Vec<(String, StepStatus)> {
    record
        .steps
        .iter()
        .map(|s| (s.name.clone(), s.status))
        .collect()
}

#[tokio::test]
async fn a_chain_passes_each_output_on_as_input() {
    let templates = Arc::new(Templates::new(None));
    let step = |name: &str, text: &str, needs: Vec<usize>, upstream: Vec<usize>| StepNode {
        name: name.into(),
        kind: "template",
        needs,
        reads: upstream.clone(),
        upstream,
        when: None,
        standby_for: None,
        continue_on_error: false,
        feedback: None,
        retry: RetryPolicy::default(),
        timeout: None,
        handler: Arc::new(Template {
            source: PromptSource::Inline(text.into()),
        }),
    };
    let pipeline = Pipeline {
        name: "chain".into(),
        steps: vec![
            step("a", "{{ inputs.word }}", vec![], vec![]),
            step("b", "{{ input }}-b", vec![0], vec![0]),
            step(
                "c",
                "{{ input }}-c ({{ steps.a.output }})",
                vec![1],
                vec![0, 1],
            ),
        ],
        output: Some("{{ steps.c.output | upper }}".into()),
        vars: json!({}),
        templates,
        inputs: IndexMap::new(),
        step_timeout: None,
        max_cost: None,
        trace_shape: Default::default(),
        reduce: None,
    };
    let record = execute(
        &pipeline,
        json!({ "word": "x" }),
        options(4),
        &Events::recording(),
    )
    .await;
    assert_eq!(record.status, RunStatus::Complete, "{:?}", record.error);
    assert_eq!(record.steps[2].output, Some(json!("x-b-c (x)")));
    assert_eq!(record.output, Some(json!("X-B-C (X)")));
}

#[tokio::test(start_paused = true)]
async fn independent_steps_overlap_and_max_parallel_bounds_them() {
    for (max_parallel, expected_ms) in [(4, 300), (1, 400)] {
        let log = Log::default();
        let p = pipeline(
            vec![
                spec("a", &[], 100),
                spec("b", &[0], 100),
                spec("c", &[0], 100),
                spec("d", &[1, 2], 100),
            ],
            &log,
        );
        let started = tokio::time::Instant::now();
        let record = execute(&p, json!({}), options(max_parallel), &Events::recording()).await;
        assert_eq!(record.status, RunStatus::Complete);
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(expected_ms),
            "max_parallel {max_parallel}"
        );
        let log = log.lock().expect("log");
        let window = |name: &str| {
            log.iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, s, e)| (*s, *e))
                .expect("ran")
        };
        let (b_start, b_end) = window("b");
        let (c_start, c_end) = window("c");
        let overlap = b_start < c_end && c_start < b_end;
        assert_eq!(
            overlap,
            max_parallel > 1,
            "b and c overlap only when allowed"
        );
        let (d_start, _) = window("d");
        assert!(d_start >= b_end.max(c_end), "the join waits for both");
    }
}

#[tokio::test]
async fn a_false_when_skips_the_step_and_its_successor_sees_null() {
    let log = Log::default();
    let mut skipped = spec("b", &[0], 0);
    skipped.when = Some("inputs.enabled");
    let p = pipeline(vec![spec("a", &[], 0), skipped, spec("c", &[1], 0)], &log);
    let record = execute(
        &p,
        json!({ "enabled": false }),
        options(2),
        &Events::recording(),
    )
    .await;
    assert_eq!(record.status, RunStatus::Complete);
    assert_eq!(record.steps[1].status, StepStatus::Skipped);
    assert_eq!(record.steps[2].status, StepStatus::Ok);
}

#[tokio::test(start_paused = true)]
async fn retries_follow_the_taxonomy_with_doubling_backoff() {
    let retry = RetryPolicy {
        max_attempts: 3,
        backoff: Duration::from_millis(100),
    };
    // A validation failure twice, then success: three attempts, 100 + 200 ms of backoff.
    let log = Log::default();
    let mut flaky = spec("flaky", &[], 0);
    flaky.fail_first = 2;
    flaky.retry = retry;
    let started = tokio::time::Instant::now();
    let record = execute(
        &pipeline(vec![flaky], &log),
        json!({}),
        options(1),
        &Events::recording(),
    )
    .await;
    assert_eq!(record.status, RunStatus::Complete);
    assert_eq!(record.steps[0].attempts, 3);
    assert_eq!(started.elapsed(), Duration::from_millis(300));
    // A configuration failure is never retried.
    let mut broken = spec("broken", &[], 0);
    broken.fail_first = 5;
    broken.failure = FailureCode::ConfigTemplateError;
    broken.retry = retry;
    let record = execute(
        &pipeline(vec![broken], &log),
        json!({}),
        options(1),
        &Events::recording(),
    )
    .await;
    assert_eq!(record.status, RunStatus::Error);
    assert_eq!(record.steps[0].attempts, 1);
    assert_eq!(
        record.error.map(|e| e.code),
        Some(FailureCode::ConfigTemplateError)
    );
}

#[tokio::test(start_paused = true)]
async fn a_step_past_its_timeout_fails_and_is_retried_as_transient() {
    let log = Log::default();
    let mut slow = spec("slow", &[], 10_000);
    slow.timeout = Some(Duration::from_secs(1));
    slow.retry = RetryPolicy {
        max_attempts: 2,
        backoff: Duration::ZERO,
    };
    let started = tokio::time::Instant::now();
    let record = execute(
        &pipeline(vec![slow], &log),
        json!({}),
        options(1),
        &Events::recording(),
    )
    .await;
    assert_eq!(record.status, RunStatus::Error);
    assert_eq!(record.steps[0].attempts, 2);
    assert_eq!(
        record.error.map(|e| e.code),
        Some(FailureCode::OrchestrationStepTimeout)
    );
    assert_eq!(started.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn the_pipeline_step_timeout_bounds_steps_that_set_none() {
    let log = Log::default();
    let mut own = spec("own", &[], 3_000);
    own.timeout = Some(Duration::from_secs(5));
    let mut pipeline = pipeline(vec![own, spec("default", &[0], 3_000)], &log);
    pipeline.step_timeout = Some(Duration::from_secs(2));
    let started = tokio::time::Instant::now();
    let record = execute(&pipeline, json!({}), options(1), &Events::recording()).await;
    // `own` sets 5 s and finishes in 3; `default` gets the pipeline's 2 s and times out.
    assert_eq!(record.steps[0].status, StepStatus::Ok);
    assert_eq!(record.steps[1].status, StepStatus::Failed);
    assert_eq!(
        record.error.map(|e| e.code),
        Some(FailureCode::OrchestrationStepTimeout)
    );
    assert_eq!(started.elapsed(), Duration::from_secs(5));
}

/// An engine whose every call first waits `load` for its model, off the calling step's clock.
struct SlowToLoad {
    load: Duration,
}

impl crate::inference::Engine for SlowToLoad {
    fn infer(&self, request: crate::inference::Request) -> crate::inference::EngineFuture<'_> {
        Box::pin(async move {
            request
                .context
                .clock
                .off(tokio::time::sleep(self.load))
                .await;
            Ok(crate::inference::Response {
                text: "loaded".into(),
                ..Default::default()
            })
        })
    }

    fn model_info(&self) -> crate::inference::ModelInfo {
        crate::inference::ModelInfo {
            name: "slow-to-load".into(),
            engine: "test",
            constrained_decoding: false,
            price: None,
            key: None,
            context_window: None,
        }
    }
}

/// A step that calls its model once and answers with the model's text.
struct CallsModel(SlowToLoad);

impl StepHandler for CallsModel {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            let request = crate::inference::Request::default();
            let call = crate::orchestrate::events::CallKind::Single;
            let answer = ctx.infer(&self.0, request, None, call).await?;
            Ok(StepOutput {
                output: json!(answer.text),
                ..StepOutput::default()
            })
        })
    }

    fn render(&self, _: &StepContext) -> Result<Rendered, Failure> {
        Ok(Rendered::Text(String::new()))
    }
}

/// The executor's timeout and the engine's wait for a load meet through the clock the attempt's
/// model calls carry: a model that takes 5 s to load does not fail a step with a 1 s timeout,
/// and a step with no timeout of its own gets the clock of the pipeline's.
#[tokio::test(start_paused = true)]
async fn a_model_s_load_is_not_charged_to_the_calling_step_s_timeout() {
    let log = Log::default();
    let mut pipeline = pipeline(vec![spec("ask", &[], 0), spec("again", &[0], 0)], &log);
    pipeline.steps[0].timeout = Some(Duration::from_secs(1));
    pipeline.step_timeout = Some(Duration::from_secs(1));
    for step in &mut pipeline.steps {
        step.handler = Arc::new(CallsModel(SlowToLoad {
            load: Duration::from_secs(5),
        }));
    }
    let started = tokio::time::Instant::now();
    let record = execute(&pipeline, json!({}), options(1), &Events::recording()).await;
    assert_eq!(
        statuses(&record),
        [
            ("ask".to_string(), StepStatus::Ok),
            ("again".to_string(), StepStatus::Ok)
        ]
    );
    assert_eq!(record.output, Some(json!("loaded")));
    assert_eq!(started.elapsed(), Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn a_failure_stops_scheduling_but_keeps_what_completed() {
    let log = Log::default();
    let mut failing = spec("b", &[0], 10);
    failing.fail_first = 1;
    failing.failure = FailureCode::ToolExecutionFailed;
    let p = pipeline(
        vec![
            spec("a", &[], 0),
            failing,
            spec("c", &[1], 0),
            spec("slow_branch", &[0], 50),
            spec("after", &[3], 0),
        ],
        &log,
    );
    let record = execute(&p, json!({}), options(4), &Events::recording()).await;
    assert_eq!(record.status, RunStatus::Error);
    assert_eq!(
        statuses(&record),
        vec![
            ("a".into(), StepStatus::Ok),
            ("b".into(), StepStatus::Failed),
            ("c".into(), StepStatus::NotRun),
            ("slow_branch".into(), StepStatus::Ok),
            ("after".into(), StepStatus::NotRun),
        ]
    );
    assert_eq!(record.steps[0].output, Some(json!("a done")));
    assert_eq!(
        record.steps[2].error.as_ref().map(|e| e.code),
        Some(FailureCode::OrchestrationDependencyFailed)
    );
    assert_eq!(
        record.steps[4].error.as_ref().map(|e| e.code),
        Some(FailureCode::CancelledNotRun)
    );
}

#[tokio::test(start_paused = true)]
async fn cancelling_aborts_steps_in_flight_and_keeps_finished_ones() {
    let log = Log::default();
    let p = pipeline(
        vec![
            spec("quick", &[], 10),
            spec("long", &[0], 60_000),
            spec("never", &[1], 0),
        ],
        &log,
    );
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let options = RunOptions::new(2, cancel_rx);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _ = cancel_tx.send(true);
    });
    let started = tokio::time::Instant::now();
    let events = Events::recording();
    let record = execute(&p, json!({}), options, &events).await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "did not wait for the long step"
    );
    // The aborted attempt still ends: its step_end says it was cancelled.
    let ends: Vec<(String, StepOutcome)> = events
        .recorded()
        .into_iter()
        .filter_map(|e| match e.data {
            EventData::StepEnd { outcome, .. } => Some((e.step.unwrap_or_default(), outcome)),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert_eq!(ends[1], ("long".into(), StepOutcome::Cancelled));
    assert_eq!(record.status, RunStatus::Cancelled);
    assert_eq!(
        statuses(&record),
        vec![
            ("quick".into(), StepStatus::Ok),
            ("long".into(), StepStatus::Cancelled),
            ("never".into(), StepStatus::NotRun)
        ]
    );
    assert_eq!(
        record.error.map(|e| e.code),
        Some(FailureCode::CancelledSignal)
    );
    assert_eq!(record.steps[0].output, Some(json!("quick done")));
}

#[tokio::test]
async fn a_step_that_may_fail_is_continued_past_and_its_error_is_readable() {
    let log = Log::default();
    let mut optional = spec("lookup", &[], 0);
    optional.fail_first = 5;
    optional.failure = FailureCode::ToolExecutionFailed;
    optional.continue_on_error = true;
    let mut p = pipeline(vec![optional, spec("answer", &[0], 0)], &log);
    p.steps[1].handler = Arc::new(Template {
        source: PromptSource::Inline(
            "[{{ input }}] {{ steps.lookup.error.code }}: {{ steps.lookup.error.category }}".into(),
        ),
    });
    let record = execute(&p, json!({}), options(2), &Events::recording()).await;
    assert_eq!(record.status, RunStatus::Complete, "{:?}", record.error);
    assert_eq!(record.steps[0].status, StepStatus::Failed);
    assert!(record.steps[0].continued);
    assert_eq!(
        record.steps[0].error.as_ref().map(|e| e.code),
        Some(FailureCode::ToolExecutionFailed)
    );
    assert_eq!(
        record.output,
        Some(json!("[None] TOOL_EXECUTION_FAILED: tool"))
    );
    // Without `on_error: continue` the same failure stops the run.
    let mut required = spec("lookup", &[], 0);
    required.fail_first = 5;
    required.failure = FailureCode::ToolExecutionFailed;
    let record = execute(
        &pipeline(vec![required, spec("answer", &[0], 0)], &log),
        json!({}),
        options(2),
        &Events::recording(),
    )
    .await;
    assert_eq!(record.status, RunStatus::Error);
    assert_eq!(record.steps[1].status, StepStatus::NotRun);
}

/// A model stand-in: its answer counts the feedback messages it was given, and it keeps them.
struct Drafts {
    seen: Arc<Mutex<Vec<Vec<crate::core::Message>>>>,
}

impl StepHandler for Drafts {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            self.seen.lock().expect("seen").push(ctx.feedback.clone());
            Ok(StepOutput {
                output: json!(format!("draft {}", ctx.feedback.len())),
                ..StepOutput::default()
            })
        })
    }

    fn render(&self, _: &StepContext) -> Result<Rendered, Failure> {
        Ok(Rendered::Text(String::new()))
    }
}

/// answer → polish → check (feedback to answer), and `side`, which also reads answer.
fn feedback_loop(max_attempts: u32) -> (Pipeline, Arc<Mutex<Vec<Vec<crate::core::Message>>>>) {
    let log = Log::default();
    let mut check = spec("check", &[1], 0);
    check.feedback = Some(Feedback {
        step: 0,
        max_attempts,
    });
    let mut p = pipeline(
        vec![
            spec("answer", &[], 0),
            spec("polish", &[0], 0),
            check,
            spec("side", &[0], 0),
        ],
        &log,
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    p.steps[0].handler = Arc::new(Drafts {
        seen: Arc::clone(&seen),
    });
    p.steps[1].handler = Arc::new(Template {
        source: PromptSource::Inline("{{ input }}!".into()),
    });
    p.steps[2].handler = Arc::new(crate::orchestrate::steps::Validate {
        rules: vec![crate::validate::Rule::Contains("draft 4".into())],
        expressions: Vec::new(),
    });
    p.steps[3].handler = Arc::new(Template {
        source: PromptSource::Inline("side saw {{ input }}".into()),
    });
    (p, seen)
}

#[tokio::test]
async fn a_failed_check_sends_the_run_back_to_the_model_step_with_feedback() {
    let (p, seen) = feedback_loop(3);
    let events = Events::recording();
    let record = execute(&p, json!({}), options(4), &events).await;
    assert_eq!(record.status, RunStatus::Complete, "{:?}", record.error);
    // Three answers: the first with no feedback, then each with every earlier answer and
    // what was wrong with it.
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen.iter().map(Vec::len).collect::<Vec<_>>(), [0, 2, 4]);
    assert_eq!(seen[2][0].content, "draft 0");
    assert!(
        seen[2][3]
            .content
            .contains("the output does not contain \"draft 4\""),
        "{}",
        seen[2][3].content
    );
    assert_eq!(record.steps[2].output, Some(json!("draft 4!")));
    // The record keeps every earlier run of the loop's steps; `side` ran once, on the answer
    // that passed.
    let earlier = |i: usize| record.steps[i].earlier.len();
    assert_eq!(
        (earlier(0), earlier(1), earlier(2), earlier(3)),
        (2, 2, 2, 0)
    );
    assert_eq!(
        record.steps[2].earlier[0].error.as_ref().map(|e| e.code),
        Some(FailureCode::ValidationRuleFailed)
    );
    assert_eq!(record.steps[3].output, Some(json!("side saw draft 4")));
    let states = lifecycle_states(&events.recorded());
    use Lifecycle::{Complete, Execute, Validate};
    assert_eq!(
        states,
        [
            Execute, Validate, Execute, Validate, Execute, Validate, Complete
        ]
    );
    // Out of checks, the last failure ends the run.
    let (p, _) = feedback_loop(2);
    let record = execute(&p, json!({}), options(4), &Events::recording()).await;
    assert_eq!(record.status, RunStatus::Error);
    assert_eq!(record.steps[2].earlier.len(), 1);
    assert_eq!(record.steps[3].status, StepStatus::NotRun);
}

#[tokio::test]
async fn events_carry_run_id_spans_and_the_lifecycle() {
    let log = Log::default();
    let p = pipeline(vec![spec("a", &[], 0), spec("b", &[0], 0)], &log);
    let events = Events::recording();
    let record = execute(&p, json!({}), options(1), &events).await;
    let recorded = events.recorded();
    assert!(recorded.iter().all(|e| e.run_id == record.run_id));
    let states = lifecycle_states(&recorded);
    assert_eq!(
        states,
        [Lifecycle::Execute, Lifecycle::Validate, Lifecycle::Complete]
    );
    let starts: Vec<_> = recorded
        .iter()
        .filter(|e| matches!(e.data, EventData::StepStart { attempt: 1 }))
        .collect();
    assert_eq!(starts.len(), 2);
    assert!(
        starts
            .iter()
            .all(|e| e.parent_span == Some(events.run_span()))
    );
    assert_eq!(
        record.usage,
        TokenUsage {
            prompt_tokens: 2,
            completion_tokens: 4,
            reasoning_tokens: None,
        }
    );
}

/// Options with no cancellation source and the given parallelism.
fn options(max_parallel: usize) -> RunOptions {
    let (_, cancel) = watch::channel(false);
    RunOptions::new(max_parallel, cancel)
}

/// [`super::execute`] as a run of its own, outside any session, with its events in `events`.
async fn execute(p: &Pipeline, inputs: Value, options: RunOptions, events: &Events) -> RunRecord {
    let run = RunHandle {
        events: events.clone(),
        ledger: Arc::new(RunLedger::new(p.max_cost, None)),
        nesting: crate::orchestrate::session::detached_nesting(),
    };
    super::execute(p, inputs, options, &run).await
}

/// A handler with a bug: it panics.
struct Panics;

impl StepHandler for Panics {
    fn run<'a>(&'a self, _: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async { panic!("the probe's bug") })
    }

    fn render(&self, _: &StepContext) -> Result<Rendered, Failure> {
        Ok(Rendered::Text(String::new()))
    }
}

#[tokio::test(start_paused = true)]
async fn a_step_that_panics_fails_with_its_own_code_and_the_others_still_run() {
    let log = Log::default();
    let mut p = pipeline(vec![spec("buggy", &[], 0), spec("fine", &[], 10)], &log);
    p.steps[0].handler = Arc::new(Panics);
    p.steps[0].continue_on_error = true;
    let record = execute(&p, json!({}), options(2), &Events::recording()).await;
    let buggy = &record.steps[0];
    assert_eq!(buggy.status, StepStatus::Failed);
    let error = buggy
        .error
        .as_ref()
        .expect("the panic is the step's failure");
    assert_eq!(error.code, FailureCode::OrchestrationStepPanicked);
    assert!(
        error.message.contains("the probe's bug"),
        "{}",
        error.message
    );
    assert_eq!(record.steps[1].status, StepStatus::Ok);
    assert_eq!(record.status, RunStatus::Complete);
}
