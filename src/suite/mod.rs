//! Layer 5: test suites — every case of a test file run under every variant of its plan, in
//! one session as `run --batch` runs rows, each run's record (the plan's output, every step's
//! output, latency, tokens, cost, status) scored by the case's assertions.
//!
//! | file | owns |
//! | --- | --- |
//! | `baseline.rs` | reading an earlier run's JSON report and comparing this run with it |
//! | `cases.rs` | the cases: inline ones and one per dataset row; rendering templates |
//! | `score.rs` | scoring one assertion against a run record |
//! | `paths.rs` | the small JSON path of `json_path` |
//! | `graders.rs` | what `similar` embeds with and the judges `judge` runs |
//! | `repeats.rs` | a case run K times as one result: pass@k, pass^k, flakiness, spread |
//! | `report/` | the results as a terminal table, JSON, JUnit XML, GitHub annotations, one HTML file |
//!
//! A case's weighted score is the weighted mean of its assertions' scores (weight 1 unless set);
//! it passes when that reaches its `threshold`, or, without one, when every assertion of weight
//! above 0 passes — and
//! its run completed, unless an assertion expects the failure (`fails_with`, `status`). A suite
//! passes when under every variant the share of passing cases reaches its `min_pass_rate`; with
//! repeats, the share of passing runs of all its cases.

pub mod baseline;
pub mod cases;
pub mod graders;
pub mod paths;
pub mod repeats;
pub mod report;
pub mod score;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::core::{Failure, FailureCode};
use crate::model_store::Notice;
use crate::orchestrate::{FanOut, Job, Pipeline, RunRecord, Session};
use crate::plan::build::BuildOptions;
use crate::plan::suite::{Assertion, Suite, VariantSpec};

use cases::{Case, CaseInputs};
use graders::Graders;
use score::{Scored, Subject};

/// How to run suites.
#[derive(Clone, Default)]
pub struct SuiteOptions {
    /// Cases in flight at once.
    pub concurrency: usize,
    /// Only cases whose name contains this.
    pub filter: Option<String>,
    /// Only this variant.
    pub variant: Option<String>,
    /// Run each case this many times (0 counts as 1).
    pub repeat: u32,
    /// Models, ONNX scorers and side-effecting tools replaced by stand-ins (`--dry-run`).
    pub dry_run: bool,
    /// Where one-time work (pulling, loading a model) is told.
    pub notice: Option<Notice>,
    /// Who approves calls of tools marked `approval: required` (`--approve`).
    pub approvals: crate::orchestrate::tools::Approvals,
}

/// One assertion's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct AssertionResult {
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The step it checked (None: the plan's output or the whole run).
    pub step: Option<String>,
    pub description: Option<String>,
    /// Its line in the test file.
    pub line: usize,
    pub weight: f64,
    pub threshold: f64,
    pub score: f64,
    pub passed: bool,
    pub expected: String,
    pub got: String,
    pub note: Option<String>,
}

/// One step of a case's run, as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct StepResult {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub status: &'static str,
    pub duration_ms: f64,
    pub tokens: u64,
    pub output: Option<Value>,
    pub error: Option<Failure>,
}

/// One case under one variant: one run, or (with repeats) every run of it combined (see
/// [`repeats::combine`]).
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub name: String,
    /// Its line in the test file (a dataset case: the dataset's).
    pub line: usize,
    pub inputs: Value,
    pub passed: bool,
    /// The weighted score of its assertions, 0 to 1.
    pub score: f64,
    pub threshold: Option<f64>,
    /// How the run ended: `complete`, `error`, `cancelled`, or `invalid` (its inputs did not bind).
    pub status: &'static str,
    pub error: Option<Failure>,
    pub output: Option<Value>,
    pub steps: Vec<StepResult>,
    pub assertions: Vec<AssertionResult>,
    pub duration_ms: f64,
    pub tokens: u64,
    pub cost: Option<f64>,
    /// How it did over its repeats (only when it ran more than once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeats: Option<repeats::Repeats>,
    /// Every assertion's score in every run, by metric name (`rerank hit_at_k`): what the
    /// variant's metrics average.
    #[serde(skip)]
    pub metric_scores: Vec<(String, f64)>,
}

/// Every case under one variant.
#[derive(Debug, Clone, Serialize)]
pub struct VariantResult {
    pub name: String,
    pub description: Option<String>,
    /// The fields the variant sets.
    pub set: BTreeMap<String, Value>,
    pub cases: Vec<CaseResult>,
    /// The variant's pipeline could not be built (no case ran).
    pub error: Option<Failure>,
}

impl VariantResult {
    /// The cases that passed (every time, with repeats).
    pub fn passed_cases(&self) -> usize {
        self.cases.iter().filter(|c| c.passed).count()
    }

    /// The runs of all its cases (the cases, without repeats).
    pub fn runs(&self) -> usize {
        self.cases.iter().map(CaseResult::runs).sum()
    }

    /// The runs that passed (the passing cases, without repeats).
    pub fn passed_runs(&self) -> usize {
        self.cases.iter().map(CaseResult::passed_runs).sum()
    }

    /// The share of passing runs: of passing cases without repeats (0 when none ran).
    pub fn pass_rate(&self) -> f64 {
        match self.runs() {
            0 => 0.0,
            runs => self.passed_runs() as f64 / runs as f64,
        }
    }

    pub fn tokens(&self) -> u64 {
        self.cases.iter().map(|c| c.tokens).sum()
    }

    /// The mean duration of a case's run, in milliseconds.
    pub fn mean_ms(&self) -> f64 {
        if self.cases.is_empty() {
            return 0.0;
        }
        self.cases.iter().map(|c| c.duration_ms).sum::<f64>() / self.cases.len() as f64
    }

    /// The mean score of each kind of assertion (per step), e.g. `rerank hit_at_k` → 0.92:
    /// retrieval metrics, similarity, and the pass rate of every other kind; over every run.
    pub fn metrics(&self) -> BTreeMap<String, f64> {
        let mut sums: BTreeMap<String, (f64, usize)> = BTreeMap::new();
        for (key, score) in self.cases.iter().flat_map(|c| &c.metric_scores) {
            let entry = sums.entry(key.clone()).or_default();
            entry.0 += score;
            entry.1 += 1;
        }
        sums.into_iter()
            .map(|(key, (sum, n))| (key, sum / n as f64))
            .collect()
    }
}

/// A test file's results.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteResult {
    pub file: PathBuf,
    pub plan: PathBuf,
    pub description: Option<String>,
    pub min_pass_rate: f64,
    pub variants: Vec<VariantResult>,
    /// Ctrl-C or SIGTERM stopped it.
    pub cancelled: bool,
    /// How it compares with the baseline (`--baseline`), once compared.
    pub comparison: Option<baseline::Comparison>,
}

impl SuiteResult {
    /// Every variant reached the pass rate (and the run was not cancelled).
    pub fn passed(&self) -> bool {
        !self.cancelled
            && !self.variants.is_empty()
            && self
                .variants
                .iter()
                .all(|v| v.error.is_none() && v.pass_rate() >= self.min_pass_rate)
    }
}

/// Hears of each run of a case as it is scored: the variant, the repeat (from 0), the result.
pub type Done<'a> = dyn Fn(&str, usize, &CaseResult) + Sync + 'a;

/// Runs every suite in `session`, in order, each through [`run_suite`]; stops after a suite
/// that a cancellation stopped. `starting` hears of each suite before it runs. An unknown
/// `--variant` or a `--filter` that keeps no case of any suite is invalid input: nothing runs.
/// Every suite's cases (datasets read) are known before the first runs.
pub async fn run_suites(
    session: &Session,
    suites: &[Suite],
    options: &SuiteOptions,
    starting: &dyn Fn(&Suite),
    done: &Done<'_>,
) -> Result<Vec<SuiteResult>, Failure> {
    check_variant(suites, options)?;
    let cases = suites
        .iter()
        .map(|suite| cases::expand(suite, options.filter.as_deref()))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(filter) = &options.filter
        && cases.iter().all(Vec::is_empty)
    {
        return Err(Failure::new(
            FailureCode::ConfigInvalidInput,
            format!("no case name contains `{filter}`"),
        )
        .with_help(
            "--filter keeps the cases whose name contains it (a dataset case is named FILE:ID)",
        ));
    }
    let mut results = Vec::new();
    for (suite, cases) in suites.iter().zip(&cases) {
        starting(suite);
        let result = run_suite(session, suite, cases, options, done).await?;
        let cancelled = result.cancelled;
        results.push(result);
        if cancelled {
            break;
        }
    }
    Ok(results)
}

/// Refuses a `--variant` some suite lacks.
fn check_variant(suites: &[Suite], options: &SuiteOptions) -> Result<(), Failure> {
    let Some(name) = &options.variant else {
        return Ok(());
    };
    match suites
        .iter()
        .find(|s| !s.variants.iter().any(|v| &v.name == name))
    {
        Some(suite) => {
            let known: Vec<&str> = suite.variants.iter().map(|v| v.name.as_str()).collect();
            Err(Failure::new(
                FailureCode::ConfigInvalidInput,
                format!("{} has no variant `{name}`", suite.path.display()),
            )
            .with_help(format!("its variants: {}", known.join(", "))))
        }
        None => Ok(()),
    }
}

/// Runs `cases` of `suite` under each of its variants (or only `options.variant`) in
/// `session`; `done` hears of each case as it is scored.
async fn run_suite(
    session: &Session,
    suite: &Suite,
    cases: &[Case<'_>],
    options: &SuiteOptions,
    done: &Done<'_>,
) -> Result<SuiteResult, Failure> {
    let mut result = SuiteResult {
        file: suite.path.clone(),
        plan: suite.plan.path.clone(),
        description: suite.description.clone(),
        min_pass_rate: suite.min_pass_rate,
        variants: Vec::new(),
        cancelled: false,
        comparison: None,
    };
    let chosen = suite
        .variants
        .iter()
        .filter(|v| options.variant.as_ref().is_none_or(|name| &v.name == name));
    for variant in chosen {
        let (outcome, cancelled) = run_variant(session, variant, cases, options, done).await?;
        result.variants.push(outcome);
        if cancelled {
            result.cancelled = true;
            break;
        }
    }
    Ok(result)
}

/// Every case under one variant; true when a cancellation stopped it.
async fn run_variant(
    session: &Session,
    variant: &VariantSpec,
    cases: &[Case<'_>],
    options: &SuiteOptions,
    done: &Done<'_>,
) -> Result<(VariantResult, bool), Failure> {
    let build_options = BuildOptions {
        dry_run: options.dry_run,
        notice: options.notice.clone(),
        cache: session.cache(),
        approvals: options.approvals.clone(),
        ..BuildOptions::default()
    };
    let mut outcome = VariantResult {
        name: variant.name.clone(),
        description: variant.description.clone(),
        set: variant.set.iter().cloned().collect(),
        cases: Vec::new(),
        error: None,
    };
    let resources = session.resources();
    let pipeline = match session.prepare(|| variant.plan.build(resources, build_options.clone())) {
        Ok(pipeline) => Arc::new(pipeline),
        Err(failure) => {
            session.fail();
            outcome.error = Some(failure);
            return Ok((outcome, false));
        }
    };
    let runner = session.runner();
    let graders = Graders::new(
        runner.clone(),
        &variant.plan,
        resources.clone(),
        build_options,
    );
    let repeat = options.repeat.max(1) as usize;
    let mut work = CaseRuns {
        pipeline,
        cases,
        repeat,
        next: 0,
        runs: vec![vec![None; repeat]; cases.len()],
        graders: &graders,
        variant: &variant.name,
        done,
    };
    let cancelled = runner
        .run_many(&mut work, options.concurrency, runner.cancellation())
        .await?;
    outcome.cases = work
        .runs
        .into_iter()
        .filter_map(|runs| repeats::combine(runs.into_iter().flatten().collect()))
        .collect();
    Ok((outcome, cancelled))
}

/// A variant's cases as the fan-out sees them: each case's repeats handed out as runs (a case's
/// runs one after another), scored as they end.
struct CaseRuns<'a, 'c> {
    pipeline: Arc<Pipeline>,
    cases: &'a [Case<'c>],
    /// How many times each case runs.
    repeat: usize,
    /// The next run: case `next / repeat`, repeat `next % repeat`.
    next: usize,
    /// By case, in the test file's order, then by repeat.
    runs: Vec<Vec<Option<CaseResult>>>,
    graders: &'a Graders,
    variant: &'a str,
    done: &'a Done<'a>,
}

impl FanOut for CaseRuns<'_, '_> {
    /// The case's number, the repeat's, and the case's bound inputs.
    type Tag = (usize, usize, Value);

    fn trace_attributes(&self, (case, repeat, _): &Self::Tag) -> Vec<(&'static str, String)> {
        let name = self.cases.get(*case).map(|case| case.name.clone());
        vec![
            ("pagantic.test.case", name.unwrap_or_default()),
            ("pagantic.test.variant", self.variant.to_string()),
            ("pagantic.test.repeat", repeat.saturating_add(1).to_string()),
        ]
    }

    fn next(&mut self) -> Result<Option<Job<Self::Tag>>, Failure> {
        while self.next < self.cases.len() * self.repeat {
            let (index, repeat) = (self.next / self.repeat, self.next % self.repeat);
            self.next += 1;
            let case = &self.cases[index];
            match bind(&self.pipeline, case) {
                Ok(inputs) => {
                    let globals = case
                        .row
                        .as_ref()
                        .map(|row| Map::from_iter([("row".into(), Value::Object(row.clone()))]))
                        .unwrap_or_default();
                    return Ok(Some(Job {
                        pipeline: Arc::clone(&self.pipeline),
                        inputs: inputs.clone(),
                        globals,
                        // The first repeat shares its cache entries with a run without repeats.
                        sample: u32::try_from(repeat).ok().filter(|r| *r > 0),
                        tag: (index, repeat, inputs),
                    }));
                }
                // Inputs that do not bind fail every repeat, without running.
                Err(failure) => {
                    let result = unbound(case, failure);
                    (self.done)(self.variant, repeat, &result);
                    self.runs[index] = vec![Some(result); self.repeat];
                    self.next = (index + 1) * self.repeat;
                }
            }
        }
        Ok(None)
    }

    async fn finished(
        &mut self,
        (index, repeat, inputs): Self::Tag,
        record: RunRecord,
    ) -> Result<(), Failure> {
        let result = score_case(&self.cases[index], inputs, &record, self.graders).await;
        (self.done)(self.variant, repeat, &result);
        self.runs[index][repeat] = Some(result);
        Ok(())
    }
}

/// The case's inputs bound to the pipeline's declarations.
fn bind(pipeline: &Pipeline, case: &Case<'_>) -> Result<Value, Failure> {
    let row = case.row.clone().unwrap_or_default();
    match &case.inputs {
        CaseInputs::Given(inputs) => pipeline.bind_object(&Value::Object(inputs.clone())),
        CaseInputs::Columns => pipeline.bind_row(&row, &[]),
        CaseInputs::Templates(templates) => {
            let rendered =
                cases::render(&Value::Object(templates.clone()), &json!({ "row": row }))?;
            pipeline.bind_object(&rendered)
        }
        CaseInputs::Broken(failure) => Err(failure.clone()),
    }
}

/// A case whose inputs could not be bound: it fails without running.
fn unbound(case: &Case<'_>, failure: Failure) -> CaseResult {
    CaseResult {
        name: case.name.clone(),
        line: case.line,
        inputs: case.row.clone().map_or(Value::Null, Value::Object),
        passed: false,
        score: 0.0,
        threshold: case.threshold,
        status: "invalid",
        error: Some(failure),
        output: None,
        steps: Vec::new(),
        assertions: Vec::new(),
        duration_ms: 0.0,
        tokens: 0,
        cost: None,
        repeats: None,
        metric_scores: Vec::new(),
    }
}

/// Each step of `record`, as the report shows it.
fn step_results(record: &RunRecord) -> Vec<StepResult> {
    record
        .steps
        .iter()
        .map(|step| {
            let view = Subject::of(record, Some(&step.name));
            StepResult {
                name: step.name.clone(),
                kind: step.kind,
                status: view.as_ref().map_or("not_run", |s| s.status),
                duration_ms: step.duration_ms,
                tokens: step.total_usage().total(),
                output: step.output.clone(),
                error: step.error.clone(),
            }
        })
        .collect()
}

/// Scores every assertion of `case` against its run's `record`.
async fn score_case(
    case: &Case<'_>,
    inputs: Value,
    record: &RunRecord,
    graders: &Graders,
) -> CaseResult {
    let context =
        json!({ "inputs": inputs, "row": case.row.clone().map_or(Value::Null, Value::Object) });
    let mut assertions = Vec::new();
    let mut expects_failure = false;
    for spec in &case.assertions {
        let common = spec.parsed.common();
        let rendered = cases::render(&spec.json, &context).and_then(|json| {
            serde_json::from_value::<Assertion>(json).map_err(|e| {
                Failure::new(
                    FailureCode::ConfigTemplateError,
                    format!("the rendered assertion does not fit its type: {e}"),
                )
            })
        });
        let step = common.step.clone();
        let scored = match (&rendered, Subject::of(record, step.as_deref())) {
            (Ok(assertion), Some(subject)) => {
                expects_failure |= assertion.expects_failure();
                score::score(assertion, &subject, &inputs, graders).await
            }
            (Err(failure), _) => Scored {
                score: 0.0,
                expected: String::new(),
                got: String::new(),
                note: Some(failure.message.clone()),
            },
            (Ok(_), None) => Scored {
                score: 0.0,
                expected: String::new(),
                got: String::new(),
                note: Some(format!(
                    "no step `{}` in the run",
                    step.clone().unwrap_or_default()
                )),
            },
        };
        let threshold = common
            .threshold
            .unwrap_or_else(|| spec.parsed.default_threshold());
        assertions.push(AssertionResult {
            kind: spec.parsed.name(),
            step,
            description: common.description.clone(),
            line: spec.line,
            weight: common.weight.unwrap_or(1.0),
            threshold,
            passed: scored.score >= threshold,
            score: scored.score,
            expected: scored.expected,
            got: scored.got,
            note: scored.note,
        });
    }
    let total_weight: f64 = assertions.iter().map(|a| a.weight).sum();
    let score = if total_weight > 0.0 {
        assertions.iter().map(|a| a.weight * a.score).sum::<f64>() / total_weight
    } else {
        f64::from(u8::from(record.error.is_none()))
    };
    let completed = record.error.is_none();
    let assertions_pass = match case.threshold {
        Some(threshold) => score >= threshold,
        // An assertion of weight 0 is reported (and counted in the metrics), not scored.
        None => assertions
            .iter()
            .filter(|a| a.weight > 0.0)
            .all(|a| a.passed),
    };
    let subject = Subject::of(record, None);
    let metric_scores = assertions
        .iter()
        .map(|a| match &a.step {
            Some(step) => (format!("{step} {}", a.kind), a.score),
            None => (a.kind.to_string(), a.score),
        })
        .collect();
    CaseResult {
        name: case.name.clone(),
        line: case.line,
        inputs,
        passed: assertions_pass && (completed || expects_failure),
        score,
        threshold: case.threshold,
        status: subject.as_ref().map_or("error", |s| s.status),
        error: record.error.clone(),
        output: record.output.clone(),
        steps: step_results(record),
        assertions,
        duration_ms: record.duration_ms,
        tokens: record.usage.total(),
        cost: record.cost.map(|c| c.amount()),
        repeats: None,
        metric_scores,
    }
}

/// A case's result for unit tests: one run of `name`, passed or not, with `score` (also its one
/// `contains` metric) and `output` as its output.
#[cfg(test)]
pub(crate) fn case_result(name: &str, passed: bool, score: f64) -> CaseResult {
    CaseResult {
        name: name.into(),
        line: 3,
        inputs: Value::Null,
        passed,
        score,
        threshold: None,
        status: "complete",
        error: None,
        output: Some(Value::String(format!("{name} {passed}"))),
        steps: Vec::new(),
        assertions: Vec::new(),
        duration_ms: 10.0,
        tokens: 5,
        cost: Some(0.5),
        repeats: None,
        metric_scores: vec![("contains".into(), score)],
    }
}
