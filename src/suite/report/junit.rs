//! JUnit XML, which CI systems read: one `<testsuite>` per test file and variant, with its pass
//! rate, repeat statistics and comparison with a baseline as `<properties>`; one `<testcase>` per
//! case, a `<failure>` listing the assertions that failed, and in `<system-out>` how it did over
//! its repeats and against the baseline. Everything taken from runs and files is escaped, and no
//! character XML 1.0 forbids is written (see [`super::escape`]).

use std::fmt::Write;

use super::super::baseline::{Change, VariantComparison};
use super::super::{CaseResult, SuiteResult, VariantResult};
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
            let compared = suite
                .comparison
                .as_ref()
                .and_then(|c| c.variants.iter().find(|v| v.name == variant.name));
            properties(&mut out, variant, compared);
            for case in &variant.cases {
                testcase(&mut out, &file, variant, case, compared);
            }
            out.push_str("  </testsuite>\n");
        }
    }
    out.push_str("</testsuites>\n");
    out
}

/// The variant's pass rate, its repeat statistics, and its regressions against the baseline.
fn properties(out: &mut String, variant: &VariantResult, compared: Option<&VariantComparison>) {
    let mut properties = vec![("pass_rate", format!("{:.4}", variant.pass_rate()))];
    if variant.repeats() > 1 {
        properties.extend([
            ("repeats", variant.repeats().to_string()),
            ("pass_at_k", format!("{:.4}", variant.pass_at_k())),
            (
                "pass_every_time",
                format!("{:.4}", variant.pass_every_time()),
            ),
            ("flaky", variant.flaky_cases().to_string()),
        ]);
    }
    if let Some(compared) = compared {
        properties.push(("baseline_regressions", compared.regressions().to_string()));
    }
    out.push_str("    <properties>\n");
    for (name, value) in properties {
        let _ = writeln!(
            out,
            "      <property name=\"{name}\" value=\"{}\"/>",
            escape(&value)
        );
    }
    out.push_str("    </properties>\n");
}

fn testcase(
    out: &mut String,
    file: &str,
    variant: &VariantResult,
    case: &CaseResult,
    compared: Option<&VariantComparison>,
) {
    let _ = writeln!(
        out,
        "    <testcase classname=\"{}\" name=\"{}\" file=\"{}\" line=\"{}\" time=\"{:.3}\">",
        escape(&format!("{file}.{}", variant.name)),
        escape(&case.name),
        escape(file),
        case.line,
        case.duration_ms / 1000.0
    );
    if !case.passed {
        let mut details: Vec<String> = case
            .assertions
            .iter()
            .filter(|a| !a.passed)
            .map(|a| format!("line {}: {}", a.line, failure_line(a)))
            .collect();
        details.extend(run_failure(case));
        let _ = writeln!(
            out,
            "      <failure message=\"{}\">{}</failure>",
            escape(details.first().map_or("failed", String::as_str)),
            escape(&details.join("\n"))
        );
    }
    let mut notes = Vec::new();
    if case.repeats.is_some() {
        let flaky = if case.flaky() { " (flaky)" } else { "" };
        notes.push(format!(
            "passed {} of {} runs{flaky}",
            case.passed_runs(),
            case.runs()
        ));
    }
    if let Some(change) = compared.and_then(|v| v.cases.iter().find(|c| c.name == case.name)) {
        let what = match change.change {
            Change::Regressed => "regressed",
            Change::Improved => "improved",
            Change::Flaky => "flaky, not counted",
            Change::Unchanged => "unchanged",
        };
        notes.push(format!(
            "baseline: {} {:.2} → {} {:.2} ({what})",
            change.before.status, change.before.score, change.after.status, change.after.score
        ));
    }
    if !notes.is_empty() {
        let _ = writeln!(
            out,
            "      <system-out>{}</system-out>",
            escape(&notes.join("\n"))
        );
    }
    out.push_str("    </testcase>\n");
}
