//! The results of test suites for people and tools: a terminal table (`text.rs`), JSON, JUnit
//! XML (`junit.rs`), GitHub annotations on the test file's lines (`github.rs`), and one
//! self-contained HTML page (`html.rs`). Each is built as a string; the command prints or writes it.

mod github;
mod html;
mod junit;
mod text;

pub use github::github;
pub use html::html;
pub use junit::junit;
pub use text::text;

use serde_json::json;

use super::{AssertionResult, CaseResult, SuiteResult};

/// Every suite's results as one JSON document: per suite its file, plan, pass rate needed,
/// whether it passed, and per variant its pass rate, metrics and every case.
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
                "variants": variants,
            })
        })
        .collect();
    let passed = suites.iter().all(|s| s["passed"] == true);
    let mut text = serde_json::to_string_pretty(&json!({ "passed": passed, "suites": suites }))
        .unwrap_or_default();
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

/// Text safe inside XML and HTML elements and quoted attributes; control characters XML 1.0
/// cannot hold are dropped, line breaks kept as character references.
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
            '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
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
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&#10;&lt;/a&gt;"
        );
    }
}
