//! The terminal table: cases down, variants across, each cell the case's mark and score; then
//! per variant the pass rate, tokens, mean latency and metrics (with repeats: pass@k, pass^k,
//! the flaky cases and the spread of the repeats' pass rates); then every failure with the
//! assertion, its step, what was expected and what was got; then the comparison with the
//! baseline; then the verdict. Control characters in it (a model's answer can hold any) are
//! shown as `\u{…}`, never sent to the terminal.

use std::fmt::Write;

use super::super::baseline::{Change, Comparison, VariantComparison};
use super::super::{CaseResult, SuiteResult, VariantResult};
use super::{failure_line, metric_names, metric_value, run_failure, visible};

/// Every suite as a table (see the module docs).
pub fn text(suites: &[SuiteResult]) -> String {
    let mut out = String::new();
    for suite in suites {
        suite_table(&mut out, suite);
    }
    visible(&out)
}

/// One suite: its title, the table, its failures and its verdict.
fn suite_table(out: &mut String, suite: &SuiteResult) {
    let _ = writeln!(
        out,
        "{} (plan {})",
        suite.file.display(),
        suite.plan.display()
    );
    let table = Table::new(suite);
    table.header(out);
    table.case_rows(out);
    table.rule(out);
    table.summary_rows(out);
    let failed = failures(suite);
    if !failed.is_empty() {
        let _ = writeln!(out, "failures:\n{failed}");
    }
    if let Some(comparison) = &suite.comparison {
        compared(out, comparison);
    }
    verdict(out, suite);
}

/// The table's layout: its rows' labels and the width of its columns.
struct Table<'a> {
    suite: &'a SuiteResult,
    /// The cases, as the first variant lists them.
    cases: Vec<&'a str>,
    /// The metrics any variant reports.
    metrics: Vec<String>,
    /// The width of the label column.
    label_width: usize,
    /// The width of each variant's column.
    cell_width: usize,
    /// The most runs of a case (1 without repeats).
    repeats: usize,
}

impl<'a> Table<'a> {
    fn new(suite: &'a SuiteResult) -> Self {
        let cases: Vec<&str> = suite
            .variants
            .first()
            .map(|v| v.cases.iter().map(|c| c.name.as_str()).collect())
            .unwrap_or_default();
        let metrics = metric_names(suite);
        let label_width = cases
            .iter()
            .copied()
            .chain(metrics.iter().map(String::as_str))
            .chain(["case", "pass rate", "mean latency", "pass rate spread"])
            .map(|label| label.chars().count())
            .max()
            .unwrap_or(4);
        let repeats = suite
            .variants
            .iter()
            .map(VariantResult::repeats)
            .max()
            .unwrap_or(1);
        let cell_width = suite
            .variants
            .iter()
            .map(|v| v.name.chars().count())
            .max()
            .unwrap_or(0)
            .max(if repeats > 1 { 22 } else { 16 });
        Table {
            suite,
            cases,
            metrics,
            label_width,
            cell_width,
            repeats,
        }
    }

    /// One row: its label, then a cell per variant.
    fn row(&self, out: &mut String, label: &str, cells: impl IntoIterator<Item = String>) {
        let (first, width) = (self.label_width, self.cell_width);
        let _ = write!(out, "  {label:<first$}");
        for cell in cells {
            let _ = write!(out, " │ {cell:<width$}");
        }
        out.push('\n');
    }

    /// A row whose cell for each variant is `cell` of it.
    fn variant_row(&self, out: &mut String, label: &str, cell: impl Fn(&VariantResult) -> String) {
        self.row(out, label, self.suite.variants.iter().map(cell));
    }

    /// A horizontal line across the table.
    fn rule(&self, out: &mut String) {
        let length = self.label_width + self.suite.variants.len() * (self.cell_width + 3);
        let _ = writeln!(out, "  {}", "─".repeat(length));
    }

    /// The variants' names, underlined.
    fn header(&self, out: &mut String) {
        self.variant_row(out, "case", |v| v.name.clone());
        self.rule(out);
    }

    /// A row per case: under each variant its mark, score and latency.
    fn case_rows(&self, out: &mut String) {
        for name in &self.cases {
            self.variant_row(out, name, |v| {
                v.cases
                    .iter()
                    .find(|c| &c.name == name)
                    .map_or_else(|| "—".into(), case_cell)
            });
        }
    }

    /// Per variant: the pass rate (of runs, with repeats: then pass@k, pass^k, the flaky cases
    /// and the spread), the tokens, the mean latency and each metric.
    fn summary_rows(&self, out: &mut String) {
        self.variant_row(out, "pass rate", |v| {
            format!(
                "{}/{} {:.0}%",
                v.passed_runs(),
                v.runs(),
                v.pass_rate() * 100.0
            )
        });
        if self.repeats > 1 {
            let k = self.repeats;
            self.variant_row(out, &format!("pass@{k}"), |v| percent(v.pass_at_k()));
            self.variant_row(out, &format!("pass^{k}"), |v| percent(v.pass_every_time()));
            self.variant_row(out, "flaky", |v| v.flaky_cases().to_string());
            if self.suite.variants.iter().any(|v| v.missed_runs() > 0) {
                // Runs a replay could not answer: a cassette recorded without `--repeat K`.
                self.variant_row(out, "runs not in the cache", |v| {
                    v.missed_runs().to_string()
                });
            }
            self.variant_row(out, "pass rate spread", |v| {
                let spread = v.pass_rate_spread();
                format!("{:.2} ± {:.2}", spread.mean, spread.std_dev)
            });
        }
        self.variant_row(out, "tokens", |v| v.tokens().to_string());
        self.variant_row(out, "mean latency", |v| format!("{:.0} ms", v.mean_ms()));
        for metric in &self.metrics {
            self.variant_row(out, metric, |v| {
                metric_value(v.metrics().get(metric).copied())
            });
        }
    }
}

fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// A case's cell: ✓, ✗ or ~ (flaky), its score and its latency; with repeats, the runs it passed.
fn case_cell(case: &CaseResult) -> String {
    let mark = match (case.passed, case.flaky()) {
        (true, _) => "✓",
        (false, true) => "~",
        (false, false) => "✗",
    };
    let runs = match case.repeats {
        Some(_) => format!(" {}/{}", case.passed_runs(), case.runs()),
        None => String::new(),
    };
    format!(
        "{mark} {:.2} {:>6.0} ms{runs}",
        case.score, case.duration_ms
    )
}

/// Every variant that could not be built and every failed case, with its failed assertions and
/// why its run did not complete.
fn failures(suite: &SuiteResult) -> String {
    let mut failures = String::new();
    for variant in &suite.variants {
        if let Some(error) = &variant.error {
            let _ = writeln!(
                failures,
                "  ✗ [{}] cannot be built: {}: {}",
                variant.name, error.code, error.message
            );
        }
        for case in variant.cases.iter().filter(|c| !c.passed) {
            failed_case(&mut failures, suite, variant, case);
        }
    }
    failures
}

/// A failed case: where it is, then each failed assertion and why its run did not complete.
fn failed_case(out: &mut String, suite: &SuiteResult, variant: &VariantResult, case: &CaseResult) {
    let _ = writeln!(
        out,
        "  ✗ {} [{}] ({}:{})",
        case.name,
        variant.name,
        suite.file.display(),
        case.line
    );
    for assertion in case.assertions.iter().filter(|a| !a.passed) {
        let _ = writeln!(
            out,
            "      line {}: {}",
            assertion.line,
            failure_line(assertion)
        );
    }
    if let Some(why) = run_failure(case) {
        let _ = writeln!(out, "      {why}");
    }
}

/// The comparison with the baseline: per variant the cases that changed verdict, the flaky ones,
/// the new and gone ones, the scores and metrics that changed, then the count of regressions.
fn compared(out: &mut String, comparison: &Comparison) {
    let _ = writeln!(
        out,
        "compared with baseline {}:",
        comparison.baseline.display()
    );
    if !comparison.in_baseline {
        let _ = writeln!(out, "  (the baseline has no results of this test file)");
    }
    for variant in &comparison.variants {
        compared_variant(out, variant, comparison.max_drop);
    }
    let _ = writeln!(
        out,
        "  {} regression{}\n",
        comparison.regressions(),
        if comparison.regressions() == 1 {
            ""
        } else {
            "s"
        }
    );
}

fn compared_variant(out: &mut String, variant: &VariantComparison, max_drop: Option<f64>) {
    let name = &variant.name;
    if !variant.in_baseline {
        let _ = writeln!(out, "  [{name}] not in the baseline");
        return;
    }
    if variant.broken {
        let _ = writeln!(
            out,
            "  [{name}] cannot be built (it could be in the baseline)"
        );
    }
    let listed = [
        (Change::Regressed, "PASS→FAIL"),
        (Change::Improved, "FAIL→PASS"),
        (Change::Flaky, "flaky (not counted)"),
    ];
    for (change, label) in listed {
        for case in variant.with_change(change) {
            let _ = writeln!(
                out,
                "  [{name}] {label}: {} (line {}) {} {:.2} → {} {:.2}",
                case.name,
                case.line,
                case.before.status,
                case.before.score,
                case.after.status,
                case.after.score
            );
        }
    }
    for case in variant
        .with_change(Change::Unchanged)
        .filter(|c| (c.after.score - c.before.score).abs() >= 0.005)
    {
        let _ = writeln!(
            out,
            "  [{name}] score: {} {:.2} → {:.2}",
            case.name, case.before.score, case.after.score
        );
    }
    for (label, cases) in [("new", &variant.new_cases), ("gone", &variant.gone_cases)] {
        if !cases.is_empty() {
            let _ = writeln!(out, "  [{name}] {label}: {}", cases.join(", "));
        }
    }
    for metric in &variant.metrics {
        let (Some(before), Some(after)) = (metric.before, metric.after) else {
            continue;
        };
        if (after - before).abs() < 0.005 && !metric.dropped_too_far {
            continue;
        }
        let over = match (metric.dropped_too_far, max_drop) {
            (true, Some(max)) => format!(" — dropped more than {max:.2}"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "  [{name}] {}: {before:.2} → {after:.2} ({:+.2}){over}",
            metric.name,
            after - before
        );
    }
}

/// PASS or FAIL, with the pass rate the suite needs.
fn verdict(out: &mut String, suite: &SuiteResult) {
    let verdict = if suite.passed() { "PASS" } else { "FAIL" };
    let _ = writeln!(
        out,
        "{verdict}: {} (needs a pass rate of {:.0}% under every variant){}\n",
        suite.file.display(),
        suite.min_pass_rate * 100.0,
        if suite.cancelled {
            " — cancelled"
        } else {
            ""
        }
    );
}
