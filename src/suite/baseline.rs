//! Comparing with a baseline (`--baseline FILE`): an earlier run's `--format json` report, read
//! back (bounded, and refused unless it says it is a report of this format and version), and each
//! suite of this run compared with the baseline's suite of the same test file — per variant and
//! case, PASS→FAIL (a regression), FAIL→PASS (an improvement), a flaky case (it passed only some
//! of its repeats, in either run: reported, never counted as either), the score before and after,
//! the cases new in this run or gone from it, and the change of every metric, the pass rate
//! among them, with the drops larger than `--max-drop` counted as regressions too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::repeats::Repeats;
use super::{CaseResult, SuiteResult, VariantResult};
use crate::core::file::{DATA_LIMIT, read_bounded};
use crate::core::{Failure, FailureCode};

/// What the JSON report calls itself, in its `report` field.
pub const REPORT_NAME: &str = "pagantic-test";
/// The version of the JSON report's format, in its `version` field; bumped when a field a
/// comparison reads changes.
pub const REPORT_VERSION: u32 = 1;
/// The metric name under which a variant's pass rate is compared.
pub const PASS_RATE: &str = "pass rate";
/// Differences smaller than this are rounding, not change.
const EPSILON: f64 = 1e-9;

/// A baseline report, as far as a comparison reads it (its name and version checked first).
#[derive(Debug, Deserialize)]
struct Report {
    suites: Vec<BaselineSuite>,
}

#[derive(Debug, Deserialize)]
struct BaselineSuite {
    file: PathBuf,
    variants: Vec<BaselineVariant>,
}

#[derive(Debug, Deserialize)]
struct BaselineVariant {
    name: String,
    pass_rate: f64,
    metrics: BTreeMap<String, f64>,
    cases: Vec<BaselineCase>,
}

#[derive(Debug, Deserialize)]
struct BaselineCase {
    name: String,
    passed: bool,
    score: f64,
    #[serde(default)]
    repeats: Option<Repeats>,
}

/// An earlier run's results, read from its JSON report.
#[derive(Debug)]
pub struct Baseline {
    path: PathBuf,
    suites: Vec<BaselineSuite>,
}

/// How a case did in one run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Outcome {
    /// `pass` (every run passed), `fail` (none did) or `flaky` (some did).
    pub status: &'static str,
    /// Its weighted score (the mean over its repeats).
    pub score: f64,
    /// The share of its runs that passed.
    pub pass_rate: f64,
}

/// What a comparison makes of one case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// It passed in the baseline and fails now.
    Regressed,
    /// It failed in the baseline and passes now.
    Improved,
    /// It passed only some of its repeats, in the baseline or now: neither of the above.
    Flaky,
    /// Its verdict is the one it had (its score may differ).
    Unchanged,
}

/// One case of both runs.
#[derive(Debug, Clone, Serialize)]
pub struct CaseChange {
    pub name: String,
    /// Its line in the test file.
    pub line: usize,
    pub change: Change,
    pub before: Outcome,
    pub after: Outcome,
}

/// One metric of a variant in either run.
#[derive(Debug, Clone, Serialize)]
pub struct MetricChange {
    pub name: String,
    pub before: Option<f64>,
    pub after: Option<f64>,
    /// It dropped by more than `--max-drop`: a regression.
    pub dropped_too_far: bool,
}

/// One variant of this run against the baseline's variant of its name.
#[derive(Debug, Clone, Serialize)]
pub struct VariantComparison {
    pub name: String,
    /// The baseline has a variant of this name (without one, nothing below is filled).
    pub in_baseline: bool,
    /// It could not be built in this run (its cases are all gone): a regression.
    pub broken: bool,
    /// The cases of both runs, in this run's order.
    pub cases: Vec<CaseChange>,
    /// Cases of this run the baseline does not have.
    pub new_cases: Vec<String>,
    /// Cases of the baseline this run does not have.
    pub gone_cases: Vec<String>,
    pub metrics: Vec<MetricChange>,
}

impl VariantComparison {
    /// Its cases that changed as `change` says.
    pub fn with_change(&self, change: Change) -> impl Iterator<Item = &CaseChange> {
        self.cases.iter().filter(move |c| c.change == change)
    }

    /// Its regressions: cases that passed and fail, metrics that dropped too far, and being
    /// broken.
    pub fn regressions(&self) -> usize {
        self.with_change(Change::Regressed).count()
            + self.metrics.iter().filter(|m| m.dropped_too_far).count()
            + usize::from(self.broken)
    }
}

/// A suite of this run against the baseline's suite of the same test file.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The baseline report.
    pub baseline: PathBuf,
    /// The baseline has this test file (without it, there are no variants below).
    pub in_baseline: bool,
    /// The largest drop of a metric that is not a regression (`--max-drop`); None: any drop.
    pub max_drop: Option<f64>,
    pub variants: Vec<VariantComparison>,
}

impl Comparison {
    /// Regressions under every variant.
    pub fn regressions(&self) -> usize {
        self.variants
            .iter()
            .map(VariantComparison::regressions)
            .sum()
    }
}

impl Baseline {
    /// Reads the JSON report at `path`; refuses one that cannot be read, is not JSON, or is not
    /// a report of this format and version (CONFIG_FILE_ERROR).
    pub fn read(path: &Path) -> Result<Baseline, Failure> {
        let text = read_bounded(path, DATA_LIMIT)?;
        Baseline::parse(path, &text)
    }

    fn parse(path: &Path, text: &str) -> Result<Baseline, Failure> {
        let refuse = |why: String| {
            Failure::new(
                FailureCode::ConfigFileError,
                format!("--baseline {}: {why}", path.display()),
            )
            .with_help("name the file an earlier `pagantic test --format json --out FILE` wrote")
        };
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| refuse(format!("not a JSON document ({e})")))?;
        let name = value.get("report").and_then(|r| r.as_str());
        if name != Some(REPORT_NAME) {
            return Err(refuse(format!(
                "not a `pagantic test` JSON report (no `\"report\": \"{REPORT_NAME}\"`)"
            )));
        }
        let version = value.get("version").and_then(|v| v.as_u64());
        if version != Some(u64::from(REPORT_VERSION)) {
            return Err(refuse(format!(
                "a report of version {}, and this pagantic reads version {REPORT_VERSION}",
                version.map_or_else(|| "(none)".to_string(), |v| v.to_string())
            )));
        }
        let report: Report = serde_json::from_value(value)
            .map_err(|e| refuse(format!("a field of the report is missing or wrong: {e}")))?;
        Ok(Baseline {
            path: path.to_path_buf(),
            suites: report.suites,
        })
    }

    /// `suite` against the baseline's suite of the same test file (else of the same file name);
    /// metrics that drop by more than `max_drop` are regressions.
    pub fn compare(&self, suite: &SuiteResult, max_drop: Option<f64>) -> Comparison {
        let earlier = self
            .suites
            .iter()
            .find(|s| s.file == suite.file)
            .or_else(|| {
                let name = suite.file.file_name();
                self.suites.iter().find(|s| s.file.file_name() == name)
            });
        Comparison {
            baseline: self.path.clone(),
            in_baseline: earlier.is_some(),
            max_drop,
            variants: earlier.map_or_else(Vec::new, |earlier| {
                suite
                    .variants
                    .iter()
                    .map(|variant| {
                        let before = earlier.variants.iter().find(|v| v.name == variant.name);
                        compare_variant(variant, before, max_drop)
                    })
                    .collect()
            }),
        }
    }
}

fn compare_variant(
    now: &VariantResult,
    before: Option<&BaselineVariant>,
    max_drop: Option<f64>,
) -> VariantComparison {
    let mut comparison = VariantComparison {
        name: now.name.clone(),
        in_baseline: before.is_some(),
        broken: now.error.is_some(),
        cases: Vec::new(),
        new_cases: Vec::new(),
        gone_cases: Vec::new(),
        metrics: Vec::new(),
    };
    let Some(before) = before else {
        return comparison;
    };
    for case in &now.cases {
        match before.cases.iter().find(|c| c.name == case.name) {
            Some(earlier) => comparison.cases.push(compare_case(case, earlier)),
            None => comparison.new_cases.push(case.name.clone()),
        }
    }
    comparison.gone_cases = before
        .cases
        .iter()
        .filter(|c| !now.cases.iter().any(|n| n.name == c.name))
        .map(|c| c.name.clone())
        .collect();
    let mut after = now.metrics();
    after.insert(PASS_RATE.into(), now.pass_rate());
    let mut earlier = before.metrics.clone();
    earlier.insert(PASS_RATE.into(), before.pass_rate);
    let mut names: Vec<&String> = after.keys().chain(earlier.keys()).collect();
    names.sort();
    names.dedup();
    comparison.metrics = names
        .into_iter()
        .map(|name| {
            let (before, after) = (earlier.get(name).copied(), after.get(name).copied());
            let drop = before.zip(after).map(|(b, a)| b - a);
            MetricChange {
                name: name.clone(),
                before,
                after,
                dropped_too_far: max_drop
                    .zip(drop)
                    .is_some_and(|(max, drop)| drop > max + EPSILON),
            }
        })
        .collect();
    comparison
}

fn compare_case(now: &CaseResult, earlier: &BaselineCase) -> CaseChange {
    let before = baseline_outcome(earlier);
    let after = Outcome {
        status: status(now.passed, now.flaky()),
        score: now.score,
        pass_rate: now.passed_runs() as f64 / now.runs() as f64,
    };
    let change = match (before.status, after.status) {
        ("flaky", _) | (_, "flaky") => Change::Flaky,
        ("pass", "fail") => Change::Regressed,
        ("fail", "pass") => Change::Improved,
        _ => Change::Unchanged,
    };
    CaseChange {
        name: now.name.clone(),
        line: now.line,
        change,
        before,
        after,
    }
}

fn baseline_outcome(case: &BaselineCase) -> Outcome {
    let (flaky, pass_rate) = match &case.repeats {
        Some(repeats) if repeats.runs > 0 => {
            let passed = repeats.passes.iter().filter(|p| **p).count();
            (repeats.flaky, passed as f64 / repeats.runs as f64)
        }
        _ => (false, f64::from(u8::from(case.passed))),
    };
    Outcome {
        status: status(case.passed, flaky),
        score: case.score,
        pass_rate,
    }
}

fn status(passed: bool, flaky: bool) -> &'static str {
    match (passed, flaky) {
        (true, _) => "pass",
        (false, true) => "flaky",
        (false, false) => "fail",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn case(name: &str, passed: bool, score: f64) -> CaseResult {
        super::super::case_result(name, passed, score)
    }

    fn flaky(name: &str) -> CaseResult {
        super::super::repeats::combine(vec![case(name, true, 1.0), case(name, false, 0.0)])
            .expect("a case")
    }

    fn suite(cases: Vec<CaseResult>) -> SuiteResult {
        SuiteResult {
            file: "t.test.yaml".into(),
            plan: "t.yaml".into(),
            description: None,
            min_pass_rate: 1.0,
            variants: vec![VariantResult {
                name: "plan".into(),
                description: None,
                set: BTreeMap::new(),
                cases,
                error: None,
            }],
            cancelled: false,
            comparison: None,
        }
    }

    /// A baseline: `t.test.yaml`, variant `plan`, these cases (name, passed, score).
    fn baseline(cases: &[(&str, bool, f64)]) -> Baseline {
        let cases: Vec<Value> = cases
            .iter()
            .map(|(name, passed, score)| json!({"name": name, "passed": passed, "score": score}))
            .collect();
        let passed = cases.iter().filter(|c| c["passed"] == true).count();
        let report = json!({
            "report": REPORT_NAME, "version": REPORT_VERSION,
            "suites": [{"file": "t.test.yaml", "variants": [{
                "name": "plan", "pass_rate": passed as f64 / cases.len() as f64,
                "metrics": {"contains": 0.75}, "cases": cases,
            }]}],
        });
        Baseline::parse(Path::new("base.json"), &report.to_string()).expect("a baseline")
    }

    fn names(variant: &VariantComparison, change: Change) -> Vec<&str> {
        variant
            .with_change(change)
            .map(|c| c.name.as_str())
            .collect()
    }

    #[test]
    fn pass_to_fail_is_a_regression_and_fail_to_pass_an_improvement() {
        let base = baseline(&[("a", true, 1.0), ("b", true, 1.0), ("c", false, 0.0)]);
        let now = suite(vec![
            case("a", false, 0.0),
            case("b", true, 0.9),
            case("c", true, 1.0),
        ]);
        let comparison = base.compare(&now, None);
        let variant = &comparison.variants[0];
        assert_eq!(names(variant, Change::Regressed), ["a"]);
        assert_eq!(names(variant, Change::Improved), ["c"]);
        assert_eq!(names(variant, Change::Unchanged), ["b"]);
        assert_eq!(
            variant.cases[1].before.score - variant.cases[1].after.score,
            0.09999999999999998
        );
        assert_eq!(
            comparison.regressions(),
            1,
            "a metric drop counts only with --max-drop"
        );
    }

    #[test]
    fn flaky_cases_are_neither_regressions_nor_improvements() {
        let base = baseline(&[("a", true, 1.0), ("b", false, 0.0)]);
        let comparison = base.compare(&suite(vec![flaky("a"), flaky("b")]), None);
        assert_eq!(names(&comparison.variants[0], Change::Flaky), ["a", "b"]);
        assert_eq!(comparison.regressions(), 0);
    }

    #[test]
    fn new_and_gone_cases_are_listed_not_counted() {
        let base = baseline(&[("a", true, 1.0), ("gone", true, 1.0)]);
        let comparison = base.compare(
            &suite(vec![case("a", true, 1.0), case("new", false, 0.0)]),
            None,
        );
        let variant = &comparison.variants[0];
        assert_eq!(
            (variant.new_cases.as_slice(), variant.gone_cases.as_slice()),
            (&["new".to_string()][..], &["gone".to_string()][..])
        );
        assert_eq!(comparison.regressions(), 0);
    }

    #[test]
    fn a_metric_that_drops_further_than_max_drop_is_a_regression() {
        let base = baseline(&[("a", true, 1.0), ("b", true, 1.0)]);
        // Both still pass; `contains` drops from 0.75 to 0.6.
        let now = suite(vec![case("a", true, 0.6), case("b", true, 0.6)]);
        let within = base.compare(&now, Some(0.2));
        assert_eq!(within.regressions(), 0);
        let beyond = base.compare(&now, Some(0.1));
        assert_eq!(beyond.regressions(), 1);
        let contains = beyond.variants[0]
            .metrics
            .iter()
            .find(|m| m.name == "contains")
            .expect("contains");
        assert!(contains.dropped_too_far);
        assert_eq!((contains.before, contains.after), (Some(0.75), Some(0.6)));
    }

    #[test]
    fn a_suite_or_variant_missing_from_the_baseline_is_only_noted() {
        let base = baseline(&[("a", true, 1.0)]);
        let mut other = suite(vec![case("a", false, 0.0)]);
        other.file = "elsewhere/other.test.yaml".into();
        let missing = base.compare(&other, Some(0.0));
        assert!(!missing.in_baseline && missing.variants.is_empty());
        let mut renamed = suite(vec![case("a", false, 0.0)]);
        renamed.variants[0].name = "v2".into();
        let comparison = base.compare(&renamed, Some(0.0));
        assert!(!comparison.variants[0].in_baseline);
        assert_eq!(comparison.regressions(), 0);
    }

    #[test]
    fn a_foreign_or_unreadable_baseline_is_refused_with_a_reason() {
        let refused = |text: &str| {
            Baseline::parse(Path::new("b.json"), text)
                .expect_err("refused")
                .message
        };
        assert!(refused("{not json").contains("not a JSON document"));
        assert!(
            refused(r#"{"passed": true, "suites": []}"#)
                .contains("not a `pagantic test` JSON report")
        );
        assert!(
            refused(r#"{"report": "pagantic-test", "version": 9, "suites": []}"#)
                .contains("version 9")
        );
        assert!(
            refused(r#"{"report": "pagantic-test", "version": 1, "suites": [{}]}"#)
                .contains("missing")
        );
        let failure = Baseline::read(Path::new("/nonexistent/b.json")).expect_err("refused");
        assert_eq!(failure.code, FailureCode::ConfigFileError);
    }
}
