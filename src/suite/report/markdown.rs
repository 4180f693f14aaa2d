//! A compact Markdown summary, for a pull request or a CI job's summary page
//! (`$GITHUB_STEP_SUMMARY`): per suite its verdict, a table of the variants (pass rate, with
//! repeats pass@k, pass^k and the flaky cases, tokens, latency), its metrics, the failed cases
//! with the first reason each failed, and the comparison with a baseline; then a link to the
//! HTML report when one was written. It never exceeds [`MARKDOWN_LIMIT`]: a longer summary is cut
//! at a line, with a note saying so. Text from runs is escaped so it stays inside its table cell
//! and shows as text, never as markup or control characters.

use std::fmt::Write;
use std::path::Path;

use super::super::baseline::{Change, Comparison};
use super::super::{SuiteResult, VariantResult};
use super::{failure_line, metric_names, metric_value, run_failure, visible};

/// The most bytes of Markdown written (GitHub shows at most 1 MiB of a job's summaries, all
/// steps together).
pub const MARKDOWN_LIMIT: usize = 64 * 1024;

/// The longest text a table cell shows, in characters.
const CELL_CHARS: usize = 160;

/// Every suite as Markdown (see the module docs); `html` is the HTML report to link to.
pub fn markdown(suites: &[SuiteResult], html: Option<&Path>) -> String {
    let passed = suites.iter().all(SuiteResult::passed);
    let mut out = format!(
        "## pagantic test — {}\n\n",
        if passed { "passed" } else { "failed" }
    );
    for suite in suites {
        suite_summary(&mut out, suite);
    }
    if let Some(html) = html {
        let _ = writeln!(
            out,
            "The full report: [{}](<{}>)\n",
            cell(&html.display().to_string()),
            html.display().to_string().replace(['<', '>'], "")
        );
    }
    bounded(out, MARKDOWN_LIMIT)
}

fn suite_summary(out: &mut String, suite: &SuiteResult) {
    let _ = writeln!(
        out,
        "### {} {} (plan {})\n\n{}: needs a pass rate of {:.0}% under every variant{}\n",
        if suite.passed() { "✅" } else { "❌" },
        cell(&suite.file.display().to_string()),
        cell(&suite.plan.display().to_string()),
        if suite.passed() { "PASS" } else { "FAIL" },
        suite.min_pass_rate * 100.0,
        if suite.cancelled {
            " — cancelled"
        } else {
            ""
        }
    );
    variants_table(out, suite);
    metrics_table(out, suite);
    failed_cases(out, suite);
    if let Some(comparison) = &suite.comparison {
        compared(out, comparison);
    }
}

/// A row per variant: its pass rate (with repeats pass@k, pass^k, flaky cases), tokens, latency.
fn variants_table(out: &mut String, suite: &SuiteResult) {
    let k = suite
        .variants
        .iter()
        .map(VariantResult::repeats)
        .max()
        .unwrap_or(1);
    let repeated = k > 1;
    out.push_str("| variant | pass rate |");
    if repeated {
        let _ = write!(out, " pass@{k} | pass^{k} | flaky | spread |");
    }
    out.push_str(" tokens | mean latency |\n| --- | --- |");
    if repeated {
        out.push_str(" --- | --- | --- | --- |");
    }
    out.push_str(" --- | --- |\n");
    for variant in &suite.variants {
        let state = match &variant.error {
            Some(error) => format!(" (cannot be built: {})", error.code),
            None => String::new(),
        };
        let _ = write!(
            out,
            "| {}{state} | {}/{} ({:.0}%) |",
            cell(&variant.name),
            variant.passed_runs(),
            variant.runs(),
            variant.pass_rate() * 100.0
        );
        if repeated {
            let spread = variant.pass_rate_spread();
            let _ = write!(
                out,
                " {:.0}% | {:.0}% | {} | {:.2} ± {:.2} |",
                variant.pass_at_k() * 100.0,
                variant.pass_every_time() * 100.0,
                variant.flaky_cases(),
                spread.mean,
                spread.std_dev
            );
        }
        let _ = writeln!(out, " {} | {:.0} ms |", variant.tokens(), variant.mean_ms());
    }
    out.push('\n');
}

/// A row per metric, a column per variant.
fn metrics_table(out: &mut String, suite: &SuiteResult) {
    let metrics = metric_names(suite);
    if metrics.is_empty() {
        return;
    }
    out.push_str("| metric |");
    for variant in &suite.variants {
        let _ = write!(out, " {} |", cell(&variant.name));
    }
    out.push_str("\n| --- |");
    out.push_str(&" --- |".repeat(suite.variants.len()));
    out.push('\n');
    for metric in metrics {
        let _ = write!(out, "| {} |", cell(&metric));
        for variant in &suite.variants {
            let value = metric_value(variant.metrics().get(&metric).copied());
            let _ = write!(out, " {value} |");
        }
        out.push('\n');
    }
    out.push('\n');
}

/// A row per failed case: where it is and the first reason it failed.
fn failed_cases(out: &mut String, suite: &SuiteResult) {
    let failed: Vec<_> = suite
        .variants
        .iter()
        .flat_map(|v| v.cases.iter().filter(|c| !c.passed).map(move |c| (v, c)))
        .collect();
    if failed.is_empty() {
        return;
    }
    out.push_str("| failed case | variant | line | why |\n| --- | --- | --- | --- |\n");
    for (variant, case) in failed {
        let why = case
            .assertions
            .iter()
            .find(|a| !a.passed)
            .map(failure_line)
            .or_else(|| run_failure(case))
            .unwrap_or_default();
        let runs = if case.repeats.is_some() {
            format!(" ({}/{} runs passed)", case.passed_runs(), case.runs())
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "| {}{runs} | {} | {} | {} |",
            cell(&case.name),
            cell(&variant.name),
            case.line,
            cell(&why)
        );
    }
    out.push('\n');
}

/// The cases whose verdict changed or that are flaky, the new and gone ones, the metrics that
/// dropped too far.
fn compared(out: &mut String, comparison: &Comparison) {
    let _ = writeln!(
        out,
        "**Compared with {}: {} regression(s).**\n",
        cell(&comparison.baseline.display().to_string()),
        comparison.regressions()
    );
    if !comparison.in_baseline {
        out.push_str("The baseline has no results of this test file.\n\n");
        return;
    }
    let mut rows = Vec::new();
    for variant in &comparison.variants {
        let name = cell(&variant.name);
        if !variant.in_baseline {
            rows.push(format!("| — | {name} | not in the baseline | | |"));
        }
        for case in variant
            .cases
            .iter()
            .filter(|c| c.change != Change::Unchanged)
        {
            let label = match case.change {
                Change::Regressed => "❌ PASS→FAIL",
                Change::Improved => "✅ FAIL→PASS",
                _ => "〰️ flaky (not counted)",
            };
            rows.push(format!(
                "| {} | {name} | {label} | {} {:.2} | {} {:.2} |",
                cell(&case.name),
                case.before.status,
                case.before.score,
                case.after.status,
                case.after.score
            ));
        }
        for (label, cases) in [("new", &variant.new_cases), ("gone", &variant.gone_cases)] {
            rows.extend(
                cases
                    .iter()
                    .map(|case| format!("| {} | {name} | {label} | | |", cell(case))),
            );
        }
        for metric in variant.metrics.iter().filter(|m| m.dropped_too_far) {
            rows.push(format!(
                "| {} | {name} | ❌ dropped too far | {:.2} | {:.2} |",
                cell(&metric.name),
                metric.before.unwrap_or_default(),
                metric.after.unwrap_or_default()
            ));
        }
    }
    if rows.is_empty() {
        out.push_str("No case changed its verdict.\n\n");
        return;
    }
    out.push_str("| case | variant | change | before | after |\n| --- | --- | --- | --- | --- |\n");
    for row in rows {
        out.push_str(&row);
        out.push('\n');
    }
    out.push('\n');
}

/// Text for one table cell: one line, at most [`CELL_CHARS`] characters, control characters
/// shown as `\u{…}`, and what Markdown or HTML would read as markup escaped.
fn cell(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut short: String = line.chars().take(CELL_CHARS).collect();
    if short.len() < line.len() {
        short.push('…');
    }
    let safe = visible(&short);
    let mut out = String::with_capacity(safe.len());
    for c in safe.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '|' => out.push_str("\\|"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '#' | '~' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// `text` cut at a line so that it and a note saying so fit in `limit` bytes.
fn bounded(text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let note =
        "\n> The summary was cut here at 64 KiB; the JSON and HTML reports have every case.\n";
    let mut end = limit - note.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let end = text[..end].rfind('\n').map_or(0, |at| at + 1);
    let mut cut = text[..end].to_string();
    cut.push_str(note);
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_stay_one_line_of_text() {
        assert_eq!(
            cell("a | b\n<script>*x*</script> `c` \u{1b}[2J \u{fffe}"),
            "a \\| b &lt;script&gt;\\*x\\*&lt;/script&gt; \\`c\\` \\\\u{1b}\\[2J \\\\u{fffe}"
        );
        assert_eq!(cell(&"x".repeat(500)).chars().count(), CELL_CHARS + 1);
    }

    #[test]
    fn a_long_summary_is_cut_at_a_line_with_a_note() {
        let long: String = (0..10_000).map(|i| format!("| row {i} | é |\n")).collect();
        let cut = bounded(long.clone(), MARKDOWN_LIMIT);
        assert!(cut.len() <= MARKDOWN_LIMIT && long.len() > MARKDOWN_LIMIT);
        assert!(cut.ends_with("have every case.\n"));
        let kept = cut.lines().filter(|l| l.starts_with("| row")).count();
        assert!(
            cut.lines()
                .filter(|l| l.starts_with("| row"))
                .all(|l| l.ends_with("é |"))
        );
        assert!(kept > 1000, "{kept}");
        assert_eq!(bounded("short\n".into(), MARKDOWN_LIMIT), "short\n");
    }
}
