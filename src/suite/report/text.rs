//! The terminal table: cases down, variants across, each cell the case's mark and score; then
//! per variant the pass rate, tokens, mean latency and metrics; then every failure with the
//! assertion, its step, what was expected and what was got; then the verdict.

use std::fmt::Write;

use super::super::{CaseResult, SuiteResult, VariantResult};
use super::{failure_line, metric_names, run_failure};

/// Every suite as a table (see the module docs).
pub fn text(suites: &[SuiteResult]) -> String {
    let mut out = String::new();
    for suite in suites {
        suite_table(&mut out, suite);
    }
    out
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
            .chain(["case", "pass rate", "mean latency"])
            .map(|label| label.chars().count())
            .max()
            .unwrap_or(4);
        let cell_width = suite
            .variants
            .iter()
            .map(|v| v.name.chars().count())
            .max()
            .unwrap_or(0)
            .max(16);
        Table {
            suite,
            cases,
            metrics,
            label_width,
            cell_width,
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

    /// Per variant: the pass rate, the tokens, the mean latency and each metric.
    fn summary_rows(&self, out: &mut String) {
        self.variant_row(out, "pass rate", |v| {
            format!(
                "{}/{} {:.0}%",
                v.passed_cases(),
                v.cases.len(),
                v.pass_rate() * 100.0
            )
        });
        self.variant_row(out, "tokens", |v| v.tokens().to_string());
        self.variant_row(out, "mean latency", |v| format!("{:.0} ms", v.mean_ms()));
        for metric in &self.metrics {
            self.variant_row(out, metric, |v| {
                v.metrics()
                    .get(metric)
                    .map_or("—".into(), |m| format!("{m:.2}"))
            });
        }
    }
}

/// A case's cell: ✓ or ✗, its score and its latency.
fn case_cell(case: &CaseResult) -> String {
    format!(
        "{} {:.2} {:>6.0} ms",
        if case.passed { "✓" } else { "✗" },
        case.score,
        case.duration_ms
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
