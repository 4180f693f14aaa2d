//! The results of test suites for people and tools: a terminal table (`text.rs`), JSON, JUnit
//! XML (`junit.rs`), GitHub annotations on the test file's lines (`github.rs`), one
//! self-contained HTML page (`html.rs`) and a compact Markdown summary (`markdown.rs`). Each is
//! built as a string; the command prints or writes it. Each shows the comparison with a baseline
//! when there is one, and each writes what a model answered so that its format holds: markup
//! and XML's forbidden characters escaped, control characters shown as `\u{…}` instead of
//! reaching a terminal.

mod github;
mod html;
mod junit;
mod markdown;
mod text;

pub use github::github;
pub use html::html;
pub use junit::junit;
pub use markdown::{MARKDOWN_LIMIT, markdown};
pub use text::text;

use serde_json::json;

use super::baseline::{REPORT_NAME, REPORT_VERSION};
use super::{AssertionResult, CaseResult, SuiteResult};
use crate::core::text::terminal_safe;

/// Every suite's results as one JSON document (named and versioned, so that `--baseline` can
/// read it back): per suite its file, plan, pass rate needed, whether it passed, its comparison
/// with a baseline, and per variant its pass rate, repeat statistics, metrics and every case.
pub fn json(suites: &[SuiteResult]) -> String {
    let suites: Vec<serde_json::Value> = suites
        .iter()
        .map(|suite| {
            let variants: Vec<serde_json::Value> = suite
                .variants
                .iter()
                .map(|v| {
                    json!({
                        "name": v.name,
                        "description": v.description,
                        "set": v.set,
                        "passed": v.passed_cases(),
                        "total": v.cases.len(),
                        "pass_rate": v.pass_rate(),
                        "runs": v.runs(),
                        "passed_runs": v.passed_runs(),
                        "repeats": v.repeats(),
                        "pass_at_k": v.pass_at_k(),
                        "pass_every_time": v.pass_every_time(),
                        "flaky": v.flaky_cases(),
                        "repeat_pass_rates": v.repeat_pass_rates(),
                        "pass_rate_spread": v.pass_rate_spread(),
                        "tokens": v.tokens(),
                        "mean_ms": v.mean_ms(),
                        "metrics": v.metrics(),
                        "error": v.error,
                        "cases": v.cases,
                    })
                })
                .collect();
            json!({
                "file": suite.file,
                "plan": suite.plan,
                "description": suite.description,
                "min_pass_rate": suite.min_pass_rate,
                "passed": suite.passed(),
                "cancelled": suite.cancelled,
                "comparison": suite.comparison,
                "variants": variants,
            })
        })
        .collect();
    let passed = suites.iter().all(|s| s["passed"] == true);
    let report = json!({
        "report": REPORT_NAME,
        "version": REPORT_VERSION,
        "passed": passed,
        "suites": suites,
    });
    let mut text = serde_json::to_string_pretty(&report).unwrap_or_default();
    text.push('\n');
    text
}

/// One line saying why an assertion failed: its type and step, expected and got.
pub fn failure_line(assertion: &AssertionResult) -> String {
    let on = assertion
        .step
        .as_ref()
        .map_or_else(String::new, |s| format!(" on step `{s}`"));
    let mut line = format!(
        "{}{on}: expected {}, got {}",
        assertion.kind,
        quoted(&assertion.expected),
        quoted(&assertion.got)
    );
    if (assertion.score > 0.0 && assertion.score < 1.0) || assertion.threshold < 1.0 {
        line.push_str(&format!(
            " (score {:.2}, needs {:.2})",
            assertion.score, assertion.threshold
        ));
    }
    if let Some(note) = &assertion.note {
        line.push_str(&format!(" — {note}"));
    }
    line
}

/// Why a case failed when no assertion says so: its run did not complete.
pub fn run_failure(case: &CaseResult) -> Option<String> {
    case.error
        .as_ref()
        .map(|e| format!("the run ended {}: {}: {}", case.status, e.code, e.message))
}

/// A metric's value to two places, or `—` when there is none.
fn metric_value(value: Option<f64>) -> String {
    value.map_or("—".to_string(), |v| format!("{v:.2}"))
}

/// Every metric name any variant of `suite` reports, sorted.
fn metric_names(suite: &SuiteResult) -> Vec<String> {
    let mut names: Vec<String> = suite
        .variants
        .iter()
        .flat_map(|v| v.metrics().into_keys())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Text safe inside XML and HTML elements and quoted attributes: markup escaped, line breaks
/// kept as character references, and every character XML 1.0 cannot hold (C0 controls but tab
/// and line breaks, U+FFFE, U+FFFF) or that a terminal would act on (DEL, C1, bidirectional
/// overrides) shown as a visible `\u{…}` escape.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            c => out.push_str(&visible(c.encode_utf8(&mut [0; 4]))),
        }
    }
    out
}

/// `text` with every character a terminal would act on (see [`terminal_safe`]) and the
/// noncharacters U+FFFE and U+FFFF (which XML cannot hold and some readers take for a byte-order
/// mark) shown as visible `\u{…}` escapes.
fn visible(text: &str) -> String {
    terminal_safe(text)
        .replace('\u{fffe}', "\\u{fffe}")
        .replace('\u{ffff}', "\\u{ffff}")
}

/// Text shortened to one line of at most 80 characters, in quotes.
fn quoted(text: &str) -> String {
    let line = text.trim().replace('\n', " ");
    let short: String = line.chars().take(80).collect();
    if short.len() < line.len() {
        format!("\"{short}…\"")
    } else {
        format!("\"{short}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn markup_and_control_characters_are_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&'\u{1}\n</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;\\u{1}&#10;&lt;/a&gt;"
        );
        assert_eq!(
            escape("\u{fffe}\u{ffff}\u{1b}[2J\u{9b}\r\té\u{fffd}"),
            "\\u{fffe}\\u{ffff}\\u{1b}[2J\\u{9b}&#13;\té\u{fffd}"
        );
    }
}
