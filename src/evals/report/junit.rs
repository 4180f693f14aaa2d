//! JUnit XML, which CI systems read: one `<testsuite>` per test file and variant, one
//! `<testcase>` per case, a `<failure>` listing the assertions that failed.

use std::fmt::Write;

use super::super::SuiteResult;
use super::{failure_line, run_failure};

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

/// Text safe inside XML attributes and elements; characters XML 1.0 cannot hold are dropped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn markup_and_control_characters_are_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&'\u{1}\n"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&apos;&#10;"
        );
    }
}
