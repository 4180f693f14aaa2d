//! Repeats (`--repeat K`): each case run K times, each run a sample of its own (its sampled
//! model calls are cached under its repeat number), and the runs combined into one result with
//! the statistics a gate on a model that is not deterministic needs — pass@k (it passed at least
//! once), pass^k (it passed every time), and flakiness (it did both) — and, per variant, the
//! pass rate of each repeat and their spread.

use serde::{Deserialize, Serialize};

use super::{CaseResult, VariantResult};
use crate::core::FailureCode;

/// How a case did over its repeats (present only when it ran more than once).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repeats {
    /// How many times it ran.
    pub runs: usize,
    /// Whether each run passed, in the order of the repeats.
    pub passes: Vec<bool>,
    /// Each run's weighted score, in the same order.
    pub scores: Vec<f64>,
    /// It passed at least once (pass@k).
    pub pass_at_k: bool,
    /// It passed every time (pass^k).
    pub pass_every_time: bool,
    /// It passed some runs and failed others for a reason of their own (a run whose model call
    /// the cache or cassette did not hold is not a sample: see `missed`).
    pub flaky: bool,
    /// How many runs failed only because a model call was not in the cache or cassette replayed
    /// (CACHE_MISS): a cassette recorded without `--repeat` holds the first repeat only.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub missed: usize,
    /// The run (from 1) whose details the case shows: the first that failed, else the first.
    pub shown: usize,
}

/// The runs of one case (in the order of the repeats) as one result: the details of the first
/// run that failed (else the first), passed only when every run passed, its score the mean of the
/// runs', its tokens and cost their totals, its duration their mean. One run is returned as it is.
pub fn combine(mut runs: Vec<CaseResult>) -> Option<CaseResult> {
    if runs.len() <= 1 {
        return runs.pop();
    }
    let count = runs.len();
    let passes: Vec<bool> = runs.iter().map(|run| run.passed).collect();
    let scores: Vec<f64> = runs.iter().map(|run| run.score).collect();
    let shown = passes.iter().position(|passed| !passed).unwrap_or(0);
    let missed = runs.iter().filter(|run| missed_the_cache(run)).count();
    let tokens = runs.iter().map(|run| run.tokens).sum();
    let duration_ms = runs.iter().map(|run| run.duration_ms).sum::<f64>() / count as f64;
    let cost = runs
        .iter()
        .filter_map(|run| run.cost)
        .reduce(|total, cost| total + cost);
    let metric_scores = runs
        .iter()
        .flat_map(|run| run.metric_scores.iter().cloned())
        .collect();
    let mut case = runs.swap_remove(shown);
    let passed_runs = passes.iter().filter(|passed| **passed).count();
    case.passed = passed_runs == count;
    case.score = scores.iter().sum::<f64>() / count as f64;
    case.tokens = tokens;
    case.duration_ms = duration_ms;
    case.cost = cost;
    case.metric_scores = metric_scores;
    case.repeats = Some(Repeats {
        runs: count,
        pass_at_k: passed_runs > 0,
        pass_every_time: passed_runs == count,
        flaky: passed_runs > 0 && passed_runs + missed < count,
        missed,
        passes,
        scores,
        shown: shown + 1,
    });
    Some(case)
}

/// Whether a run failed because a model call was not in the cache or cassette it replayed.
fn missed_the_cache(run: &CaseResult) -> bool {
    run.error
        .as_ref()
        .is_some_and(|error| error.code == FailureCode::CacheMiss)
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}

impl CaseResult {
    /// How many times it ran.
    pub fn runs(&self) -> usize {
        self.repeats.as_ref().map_or(1, |r| r.runs)
    }

    /// How many of its runs passed.
    pub fn passed_runs(&self) -> usize {
        match &self.repeats {
            Some(repeats) => repeats.passes.iter().filter(|passed| **passed).count(),
            None => usize::from(self.passed),
        }
    }

    /// It passed some of its runs and failed others.
    pub fn flaky(&self) -> bool {
        self.repeats.as_ref().is_some_and(|r| r.flaky)
    }
}

/// A mean with its spread.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub mean: f64,
    /// The sample standard deviation (0 for fewer than two values).
    pub std_dev: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (all 0 when there are none).
    pub fn of(values: &[f64]) -> Spread {
        if values.is_empty() {
            return Spread {
                mean: 0.0,
                std_dev: 0.0,
                min: 0.0,
                max: 0.0,
            };
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let std_dev = if values.len() < 2 {
            0.0
        } else {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        };
        Spread {
            mean,
            std_dev,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

impl VariantResult {
    /// The most times any case ran (1 without `--repeat`).
    pub fn repeats(&self) -> usize {
        self.cases.iter().map(CaseResult::runs).max().unwrap_or(1)
    }

    /// The cases that passed some runs and failed others.
    pub fn flaky_cases(&self) -> usize {
        self.cases.iter().filter(|c| c.flaky()).count()
    }

    /// The runs that failed because the cache or cassette replayed did not hold a call.
    pub fn missed_runs(&self) -> usize {
        self.cases
            .iter()
            .filter_map(|c| c.repeats.as_ref())
            .map(|r| r.missed)
            .sum()
    }

    /// The share of cases that passed at least once (pass@k).
    pub fn pass_at_k(&self) -> f64 {
        share(&self.cases, |c| c.passed_runs() > 0)
    }

    /// The share of cases that passed every time (pass^k).
    pub fn pass_every_time(&self) -> f64 {
        share(&self.cases, |c| c.passed)
    }

    /// Each repeat's pass rate (the share of cases whose run of that repeat passed), in order.
    pub fn repeat_pass_rates(&self) -> Vec<f64> {
        (0..self.repeats())
            .map(|repeat| {
                share(&self.cases, |case| match &case.repeats {
                    Some(repeats) => repeats.passes.get(repeat).copied().unwrap_or(false),
                    None => case.passed,
                })
            })
            .collect()
    }

    /// The spread of the repeats' pass rates.
    pub fn pass_rate_spread(&self) -> Spread {
        Spread::of(&self.repeat_pass_rates())
    }
}

/// The share of `cases` that `test` holds for (0 when there are none).
fn share(cases: &[CaseResult], test: impl Fn(&CaseResult) -> bool) -> f64 {
    if cases.is_empty() {
        0.0
    } else {
        cases.iter().filter(|c| test(c)).count() as f64 / cases.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn run(name: &str, passed: bool, score: f64) -> CaseResult {
        super::super::case_result(name, passed, score)
    }

    fn variant(cases: Vec<CaseResult>) -> VariantResult {
        VariantResult {
            name: "plan".into(),
            description: None,
            set: Default::default(),
            cases,
            error: None,
        }
    }

    #[test]
    fn one_run_is_returned_as_it_is() {
        let single = combine(vec![run("a", true, 1.0)]).expect("a case");
        assert_eq!(
            (
                single.repeats.is_none(),
                single.runs(),
                single.passed_runs()
            ),
            (true, 1, 1)
        );
        assert!(combine(Vec::new()).is_none());
    }

    #[test]
    fn runs_that_pass_and_fail_make_a_flaky_case_showing_its_first_failure() {
        let runs = [true, false, true, false]
            .iter()
            .map(|&passed| run("coin", passed, if passed { 1.0 } else { 0.0 }))
            .collect();
        let case = combine(runs).expect("a case");
        let repeats = case.repeats.clone().expect("repeats");
        assert!(repeats.flaky && repeats.pass_at_k && !repeats.pass_every_time);
        assert_eq!((repeats.runs, repeats.shown), (4, 2));
        assert_eq!(case.output, Some(Value::String("coin false".into())));
        assert!(!case.passed, "passed means passed every time");
        assert_eq!((case.score, case.tokens, case.duration_ms), (0.5, 20, 10.0));
        assert_eq!(case.cost, Some(2.0));
        assert_eq!((case.passed_runs(), case.metric_scores.len()), (2, 4));
    }

    /// Replaying a cassette recorded without `--repeat`: the later repeats miss the cassette.
    /// Such a case fails (its answer is not there) but is not flaky: the misses are no samples.
    #[test]
    fn runs_that_missed_the_cassette_are_not_flaky() {
        let mut missed = run("m", false, 0.0);
        missed.error = Some(crate::core::Failure::new(
            FailureCode::CacheMiss,
            "no cached answer",
        ));
        let case = combine(vec![run("m", true, 1.0), missed.clone(), missed]).expect("a case");
        let repeats = case.repeats.clone().expect("repeats");
        assert!(!case.passed && !case.flaky(), "{repeats:?}");
        assert_eq!((repeats.missed, repeats.shown), (2, 2));
        let mut failed = run("m", false, 0.0);
        failed.error = None;
        let mut missed = run("m", false, 0.0);
        missed.error = Some(crate::core::Failure::new(FailureCode::CacheMiss, "none"));
        let mixed = combine(vec![run("m", true, 1.0), failed, missed]).expect("a case");
        assert!(
            mixed.flaky(),
            "a run that failed on its own still makes it flaky"
        );
    }

    #[test]
    fn always_and_never_are_not_flaky() {
        let always = combine(vec![run("a", true, 1.0), run("a", true, 1.0)]).expect("a case");
        let never = combine(vec![run("n", false, 0.0), run("n", false, 0.0)]).expect("a case");
        assert!(always.passed && !always.flaky());
        assert!(!never.passed && !never.flaky());
        assert_eq!(
            never.repeats.map(|r| (r.pass_at_k, r.shown)),
            Some((false, 1))
        );
    }

    #[test]
    fn a_variant_reports_pass_at_k_pass_every_time_and_each_repeats_pass_rate() {
        let coin = combine(vec![run("c", true, 1.0), run("c", false, 0.0)]).expect("a case");
        let sure = combine(vec![run("s", true, 1.0), run("s", true, 1.0)]).expect("a case");
        let never = combine(vec![run("n", false, 0.0), run("n", false, 0.0)]).expect("a case");
        let variant = variant(vec![coin, sure, never]);
        assert_eq!(variant.repeats(), 2);
        assert_eq!(variant.flaky_cases(), 1);
        assert_eq!(variant.passed_runs(), 3);
        assert_eq!(variant.pass_rate(), 0.5, "3 of 6 runs");
        assert!((variant.pass_at_k() - 2.0 / 3.0).abs() < 1e-9);
        assert!((variant.pass_every_time() - 1.0 / 3.0).abs() < 1e-9);
        let rates = variant.repeat_pass_rates();
        assert!((rates[0] - 2.0 / 3.0).abs() < 1e-9 && (rates[1] - 1.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn spread_is_the_sample_standard_deviation() {
        let spread = Spread::of(&[0.5, 0.75, 1.0]);
        assert_eq!((spread.mean, spread.min, spread.max), (0.75, 0.5, 1.0));
        assert!((spread.std_dev - 0.25).abs() < 1e-9);
        assert_eq!(Spread::of(&[0.4]).std_dev, 0.0);
        assert_eq!(Spread::of(&[]).mean, 0.0);
    }
}
