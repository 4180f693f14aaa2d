//! JUnit XML, which CI systems read: one `<testsuite>` per test file and variant, one
//! `<testcase>` per case, a `<failure>` listing the assertions that failed.

use std::fmt::Write;

use super::super::SuiteResult;
use super::{escape, failure_line, run_failure};

/// Every suite as one JUnit XML document.
pub fn junit(suites: &[SuiteResult]) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n");
    for suite in suites {
        let file = suite.file.display().to_string();
        for variant in &suite.variants {
            let failures = variant.cases.len() - variant.passed_cases();
            let seconds: f64 = variant.cases.iter().map(|c| c.duration_ms).sum::<f64>() / 1000.0;
            let _ = writeln!(
                out,
                "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"{}\" time=\"{seconds:.3}\">",
                escape(&format!("{file} [{}]", variant.name)),
                variant.cases.len(),
                u8::from(variant.error.is_some()),
            );
            for case in &variant.cases {
                let _ = write!(
                    out,
                    "    <testcase classname=\"{}\" name=\"{}\" file=\"{}\" line=\"{}\" time=\"{:.3}\"",
                    escape(&format!("{file}.{}", variant.name)),
                    escape(&case.name),
                    escape(&file),
                    case.line,
                    case.duration_ms / 1000.0
                );
                if case.passed {
                    out.push_str("/>\n");
                    continue;
                }
                let mut details: Vec<String> = case
                    .assertions
                    .iter()
                    .filter(|a| !a.passed)
                    .map(|a| format!("line {}: {}", a.line, failure_line(a)))
                    .collect();
                details.extend(run_failure(case));
                let _ = writeln!(
                    out,
                    ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                    escape(details.first().map_or("failed", String::as_str)),
                    escape(&details.join("\n"))
                );
            }
            out.push_str("  </testsuite>\n");
        }
    }
    out.push_str("</testsuites>\n");
    out
}
