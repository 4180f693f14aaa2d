//! The terminal table: cases down, variants across, each cell the case's mark and score; then
//! per variant the pass rate, tokens, mean latency and metrics; then every failure with the
//! assertion, its step, what was expected and what was got; then the verdict.

use std::fmt::Write;

use super::super::SuiteResult;
use super::{failure_line, metric_names, run_failure};

/// Every suite as a table (see the module docs).
pub fn text(suites: &[SuiteResult]) -> String {
    let mut out = String::new();
    for suite in suites {
        suite_table(&mut out, suite);
    }
    out
}

fn suite_table(out: &mut String, suite: &SuiteResult) {
    let _ = writeln!(
        out,
        "{} (plan {})",
        suite.file.display(),
        suite.plan.display()
    );
    let names: Vec<&str> = suite
        .variants
        .first()
        .map(|v| v.cases.iter().map(|c| c.name.as_str()).collect())
        .unwrap_or_default();
    let metrics = metric_names(suite);
    let first = names
        .iter()
        .copied()
        .chain(metrics.iter().map(String::as_str))
        .chain(["case", "pass rate", "mean latency"])
        .map(|label| label.chars().count())
        .max()
        .unwrap_or(4);
    let width = suite
        .variants
        .iter()
        .map(|v| v.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(16);
    let row = |out: &mut String, label: &str, cells: Vec<String>| {
        let _ = write!(out, "  {label:<first$}");
        for cell in cells {
            let _ = write!(out, " │ {cell:<width$}");
        }
        out.push('\n');
    };
    row(
        out,
        "case",
        suite.variants.iter().map(|v| v.name.clone()).collect(),
    );
    let _ = writeln!(
        out,
        "  {}",
        "─".repeat(first + suite.variants.len() * (width + 3))
    );
    for name in &names {
        let cells = suite
            .variants
            .iter()
            .map(|v| match v.cases.iter().find(|c| &c.name == name) {
                Some(case) => format!(
                    "{} {:.2} {:>6.0} ms",
                    if case.passed { "✓" } else { "✗" },
                    case.score,
                    case.duration_ms
                ),
                None => "—".into(),
            })
            .collect();
        row(out, name, cells);
    }
    let _ = writeln!(
        out,
        "  {}",
        "─".repeat(first + suite.variants.len() * (width + 3))
    );
    row(
        out,
        "pass rate",
        suite
            .variants
            .iter()
            .map(|v| {
                format!(
                    "{}/{} {:.0}%",
                    v.passed_cases(),
                    v.cases.len(),
                    v.pass_rate() * 100.0
                )
            })
            .collect(),
    );
    row(
        out,
        "tokens",
        suite
            .variants
            .iter()
            .map(|v| v.tokens().to_string())
            .collect(),
    );
    row(
        out,
        "mean latency",
        suite
            .variants
            .iter()
            .map(|v| format!("{:.0} ms", v.mean_ms()))
            .collect(),
    );
    for metric in metrics {
        row(
            out,
            &metric,
            suite
                .variants
                .iter()
                .map(|v| {
                    v.metrics()
                        .get(&metric)
                        .map_or("—".into(), |m| format!("{m:.2}"))
                })
                .collect(),
        );
    }
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
            let _ = writeln!(
                failures,
                "  ✗ {} [{}] ({}:{})",
                case.name,
                variant.name,
                suite.file.display(),
                case.line
            );
            for assertion in case.assertions.iter().filter(|a| !a.passed) {
                let _ = writeln!(
                    failures,
                    "      line {}: {}",
                    assertion.line,
                    failure_line(assertion)
                );
            }
            if let Some(why) = run_failure(case) {
                let _ = writeln!(failures, "      {why}");
            }
        }
    }
    if !failures.is_empty() {
        let _ = writeln!(out, "failures:\n{failures}");
    }
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
