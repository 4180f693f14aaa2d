//! GitHub Actions annotations: one `::error` per failed assertion, on the assertion's line of
//! the test file, so the pull request shows it where the assertion is written; a `::notice` per
//! suite with its pass rates.

use std::fmt::Write;

use super::super::SuiteResult;
use super::{failure_line, run_failure};
use crate::core::text::{workflow_data as data, workflow_property as property};

/// Every failure as a workflow command, then one summary line per suite.
pub fn github(suites: &[SuiteResult]) -> String {
    let mut out = String::new();
    for suite in suites {
        let file = property(&suite.file.display().to_string());
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
                format!(
                    "{} {}/{} ({:.0}%)",
                    v.name,
                    v.passed_cases(),
                    v.cases.len(),
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
    out
}
