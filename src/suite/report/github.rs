//! GitHub Actions annotations: one `::error` per failed assertion, on the assertion's line of
//! the test file, so the pull request shows it where the assertion is written; against a
//! baseline, one `::error` per case that passed there and fails now and a `::warning` per flaky
//! case, on the case's line; a `::notice` per suite with its pass rates. Each command stays one
//! line whatever a model answered: line breaks are escaped as the runner reads them, and control
//! characters shown as `\u{…}`.

use std::fmt::Write;

use super::super::SuiteResult;
use super::super::baseline::{Change, Comparison};
use super::{failure_line, run_failure, visible};
use crate::core::text::{workflow_data as data, workflow_property as property};

/// Every failure as a workflow command, then one summary line per suite.
pub fn github(suites: &[SuiteResult]) -> String {
    let mut out = String::new();
    for suite in suites {
        let file = property(&suite.file.display().to_string());
        if let Some(comparison) = &suite.comparison {
            compared(&mut out, &file, comparison);
        }
        for variant in &suite.variants {
            if let Some(error) = &variant.error {
                let _ = writeln!(
                    out,
                    "::error file={file},line=1,title={}::{}",
                    property(&format!("variant {} cannot be built", variant.name)),
                    data(&format!("{}: {}", error.code, error.message))
                );
            }
            for case in variant.cases.iter().filter(|c| !c.passed) {
                let title = property(&format!("{} [{}]", case.name, variant.name));
                let mut any = false;
                for assertion in case.assertions.iter().filter(|a| !a.passed) {
                    any = true;
                    let _ = writeln!(
                        out,
                        "::error file={file},line={},title={title}::{}",
                        assertion.line,
                        data(&failure_line(assertion))
                    );
                }
                if let Some(why) = run_failure(case).filter(|_| !any) {
                    let _ = writeln!(
                        out,
                        "::error file={file},line={},title={title}::{}",
                        case.line,
                        data(&why)
                    );
                }
            }
        }
        let rates: Vec<String> = suite
            .variants
            .iter()
            .map(|v| {
                let flaky = match v.flaky_cases() {
                    0 => String::new(),
                    n => format!(", {n} flaky"),
                };
                format!(
                    "{} {}/{} ({:.0}%){flaky}",
                    v.name,
                    v.passed_runs(),
                    v.runs(),
                    v.pass_rate() * 100.0
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "::notice file={file},line=1,title={}::{}",
            property(if suite.passed() {
                "tests passed"
            } else {
                "tests failed"
            }),
            data(&format!(
                "{}; needs {:.0}%",
                rates.join(", "),
                suite.min_pass_rate * 100.0
            ))
        );
    }
    visible(&out)
}

/// An `::error` on each case that regressed, a `::warning` on each flaky one, and one on each
/// metric that dropped too far.
fn compared(out: &mut String, file: &str, comparison: &Comparison) {
    let baseline = comparison.baseline.display();
    for variant in &comparison.variants {
        let marked = [
            (
                Change::Regressed,
                "error",
                "PASS→FAIL",
                "passed in the baseline, fails now",
            ),
            (
                Change::Flaky,
                "warning",
                "flaky",
                "not counted as a regression",
            ),
        ];
        for (change, level, label, what) in marked {
            for case in variant.with_change(change) {
                let _ = writeln!(
                    out,
                    "::{level} file={file},line={},title={}::{}",
                    case.line,
                    property(&format!("{} [{}] {label}", case.name, variant.name)),
                    data(&format!(
                        "{what} ({baseline}): {} {:.2} → {} {:.2}",
                        case.before.status, case.before.score, case.after.status, case.after.score
                    ))
                );
            }
        }
        for metric in variant.metrics.iter().filter(|m| m.dropped_too_far) {
            let _ = writeln!(
                out,
                "::error file={file},line=1,title={}::{}",
                property(&format!("{} [{}] dropped", metric.name, variant.name)),
                data(&format!(
                    "{} fell from {:.2} to {:.2}, more than --max-drop {:.2} ({baseline})",
                    metric.name,
                    metric.before.unwrap_or_default(),
                    metric.after.unwrap_or_default(),
                    comparison.max_drop.unwrap_or_default()
                ))
            );
        }
    }
}
