//! One self-contained HTML page of the results: no script, no external stylesheet, font or
//! image, so it opens anywhere (a CI artifact, an email) and shows the same. It has the verdict
//! of each suite, the variants side by side (pass rate, tokens, latency, every metric; with
//! repeats pass@k, pass^k and the flaky cases), the comparison with a baseline (the cases whose
//! verdict changed, the flaky ones, the new and gone ones, every metric before and after), and
//! every case under every variant with its inputs, each assertion's result, and each step's
//! output (collapsible) and timing. Everything taken from runs and files is escaped.

use std::fmt::Write;

use serde_json::Value;

use super::super::baseline::{Change, Comparison};
use super::super::{CaseResult, SuiteResult, VariantResult};
use super::{escape, failure_line, metric_names, metric_value, run_failure};

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#1d2330;background:#fff}\
h1{font-size:1.5em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ccd}\
h3{font-size:1.05em;margin:1.2em 0 .4em}\
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccd;padding:.25em .6em;text-align:left;vertical-align:top}\
th{background:#eef0f6}.pass{color:#116b2e;font-weight:600}.fail{color:#b3261e;font-weight:600}\
pre{background:#f5f6fa;padding:.5em;white-space:pre-wrap;word-break:break-word;margin:.3em 0;max-height:30em;overflow:auto}\
details{margin:.2em 0}summary{cursor:pointer}.case{border:1px solid #ccd;border-radius:6px;padding:.4em .9em;margin:.8em 0}\
.bar{display:inline-block;height:.7em;background:#5b7bd5;vertical-align:middle}.muted{color:#667}";

/// Every suite on one page; see the module docs.
pub fn html(suites: &[SuiteResult]) -> String {
    let mut out = String::new();
    let passed = suites.iter().all(SuiteResult::passed);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>pagantic test: {}</title><style>{STYLE}</style></head><body>\n\
         <h1>pagantic test — <span id=\"verdict\" class=\"{}\">{}</span></h1>\n",
        if passed { "passed" } else { "failed" },
        mark_class(passed),
        if passed { "PASSED" } else { "FAILED" },
    );
    out.push_str("<table id=\"summary\"><tr><th>test file</th><th>plan</th><th>variants</th><th>pass rate needed</th><th>result</th></tr>\n");
    for suite in suites {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.0}%</td><td class=\"{}\">{}</td></tr>",
            escape(&suite.file.display().to_string()),
            escape(&suite.plan.display().to_string()),
            suite.variants.len(),
            suite.min_pass_rate * 100.0,
            mark_class(suite.passed()),
            if suite.passed() { "pass" } else { "fail" }
        );
    }
    out.push_str("</table>\n");
    for suite in suites {
        suite_section(&mut out, suite);
    }
    out.push_str("</body></html>\n");
    out
}

fn suite_section(out: &mut String, suite: &SuiteResult) {
    let _ = writeln!(
        out,
        "<h2>{} <span class=\"muted\">(plan {})</span></h2>",
        escape(&suite.file.display().to_string()),
        escape(&suite.plan.display().to_string())
    );
    if let Some(description) = &suite.description {
        let _ = writeln!(out, "<p>{}</p>", escape(description));
    }
    comparison(out, suite);
    if let Some(compared) = &suite.comparison {
        baseline_section(out, compared);
    }
    let names: Vec<&str> = suite
        .variants
        .iter()
        .flat_map(|v| v.cases.iter().map(|c| c.name.as_str()))
        .fold(Vec::new(), |mut names, name| {
            if !names.contains(&name) {
                names.push(name);
            }
            names
        });
    for name in names {
        let _ = writeln!(out, "<div class=\"case\"><h3>{}</h3>", escape(name));
        for variant in &suite.variants {
            if let Some(case) = variant.cases.iter().find(|c| c.name == name) {
                case_section(out, variant, case);
            }
        }
        out.push_str("</div>\n");
    }
}

/// The variants side by side.
fn comparison(out: &mut String, suite: &SuiteResult) {
    out.push_str("<table class=\"comparison\"><tr><th></th>");
    for variant in &suite.variants {
        let _ = write!(out, "<th>{}</th>", escape(&variant.name));
    }
    out.push_str("</tr>\n<tr><th>changes</th>");
    for variant in &suite.variants {
        let set: Vec<String> = variant
            .set
            .iter()
            .map(|(k, v)| format!("{k}: {}", shown(v)))
            .collect();
        let text = if set.is_empty() {
            "the plan as written".to_string()
        } else {
            set.join("\n")
        };
        let _ = write!(out, "<td><pre>{}</pre></td>", escape(&text));
    }
    out.push_str("</tr>\n<tr><th>pass rate</th>");
    for variant in &suite.variants {
        let ok = variant.error.is_none() && variant.pass_rate() >= suite.min_pass_rate;
        let _ = write!(
            out,
            "<td class=\"{}\">{}/{} ({:.0}%)</td>",
            mark_class(ok),
            variant.passed_runs(),
            variant.runs(),
            variant.pass_rate() * 100.0
        );
    }
    let repeats = suite.variants.iter().map(VariantResult::repeats).max();
    if let Some(k) = repeats.filter(|k| *k > 1) {
        let rows: [(String, VariantCell); 3] = [
            (format!("pass@{k}"), |v| {
                format!("{:.0}%", v.pass_at_k() * 100.0)
            }),
            (format!("pass^{k}"), |v| {
                format!("{:.0}%", v.pass_every_time() * 100.0)
            }),
            ("flaky cases".into(), |v| v.flaky_cases().to_string()),
        ];
        for (label, cell) in rows {
            let _ = write!(out, "</tr>\n<tr><th>{}</th>", escape(&label));
            for variant in &suite.variants {
                let _ = write!(out, "<td>{}</td>", cell(variant));
            }
        }
    }
    out.push_str("</tr>\n<tr><th>tokens</th>");
    for variant in &suite.variants {
        let _ = write!(out, "<td>{}</td>", variant.tokens());
    }
    out.push_str("</tr>\n<tr><th>mean latency</th>");
    for variant in &suite.variants {
        let _ = write!(out, "<td>{:.0} ms</td>", variant.mean_ms());
    }
    out.push_str("</tr>\n");
    for metric in metric_names(suite) {
        let _ = write!(out, "<tr><th>{}</th>", escape(&metric));
        for variant in &suite.variants {
            let value = metric_value(variant.metrics().get(&metric).copied());
            let _ = write!(out, "<td>{value}</td>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// The comparison with the baseline: each case whose verdict changed or that is flaky, then
/// every metric before and after, per variant.
fn baseline_section(out: &mut String, compared: &Comparison) {
    let _ = writeln!(
        out,
        "<h3 id=\"baseline\">Compared with {} — {} regression(s)</h3>",
        escape(&compared.baseline.display().to_string()),
        compared.regressions()
    );
    if !compared.in_baseline {
        out.push_str("<p class=\"muted\">The baseline has no results of this test file.</p>\n");
        return;
    }
    out.push_str("<table class=\"baseline\"><tr><th>variant</th><th>case</th><th>change</th><th>before</th><th>after</th></tr>\n");
    for variant in &compared.variants {
        let changed = variant
            .cases
            .iter()
            .filter(|c| c.change != Change::Unchanged);
        for case in changed {
            let (class, label) = match case.change {
                Change::Regressed => ("fail", "PASS→FAIL"),
                Change::Improved => ("pass", "FAIL→PASS"),
                _ => ("muted", "flaky (not counted)"),
            };
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td class=\"{class}\">{label}</td><td>{} {:.2}</td><td>{} {:.2}</td></tr>",
                escape(&variant.name),
                escape(&case.name),
                case.before.status,
                case.before.score,
                case.after.status,
                case.after.score
            );
        }
        let listed = [("new", &variant.new_cases), ("gone", &variant.gone_cases)];
        for (label, names) in listed {
            for name in names.iter() {
                let _ = writeln!(
                    out,
                    "<tr><td>{}</td><td>{}</td><td class=\"muted\">{label}</td><td></td><td></td></tr>",
                    escape(&variant.name),
                    escape(name)
                );
            }
        }
        for metric in &variant.metrics {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td></tr>",
                escape(&variant.name),
                escape(&metric.name),
                if metric.dropped_too_far {
                    "fail"
                } else {
                    "muted"
                },
                if metric.dropped_too_far {
                    "dropped too far"
                } else {
                    "metric"
                },
                metric_value(metric.before),
                metric_value(metric.after)
            );
        }
    }
    out.push_str("</table>\n");
}

fn case_section(out: &mut String, variant: &VariantResult, case: &CaseResult) {
    let _ = writeln!(
        out,
        "<details class=\"variant\" open><summary><span class=\"{}\">{}</span> {} — score {:.2}, {:.0} ms, {} tokens, run {}{}</summary>",
        mark_class(case.passed),
        match (case.passed, case.flaky()) {
            (true, _) => "✓ pass",
            (false, true) => "~ flaky",
            (false, false) => "✗ fail",
        },
        escape(&variant.name),
        case.score,
        case.duration_ms,
        case.tokens,
        escape(case.status),
        case.repeats.as_ref().map_or(String::new(), |r| format!(
            "; passed {} of {} runs, details of run {}",
            case.passed_runs(),
            r.runs,
            r.shown
        ))
    );
    let _ = writeln!(
        out,
        "<p>inputs</p><pre class=\"inputs\">{}</pre>",
        escape(&serde_json::to_string_pretty(&case.inputs).unwrap_or_default())
    );
    if let Some(why) = run_failure(case) {
        let _ = writeln!(out, "<p class=\"fail\">{}</p>", escape(&why));
    }
    if !case.assertions.is_empty() {
        out.push_str("<table class=\"assertions\"><tr><th></th><th>assertion</th><th>step</th><th>expected</th><th>got</th><th>score</th></tr>\n");
        for assertion in &case.assertions {
            let _ = writeln!(
                out,
                "<tr><td class=\"{}\">{}</td><td>{} <span class=\"muted\">line {}</span></td><td>{}</td><td><pre>{}</pre></td><td><pre>{}</pre>{}</td><td>{:.2} / {:.2}</td></tr>",
                mark_class(assertion.passed),
                if assertion.passed { "✓" } else { "✗" },
                escape(assertion.kind),
                assertion.line,
                escape(assertion.step.as_deref().unwrap_or("output")),
                escape(&assertion.expected),
                escape(&assertion.got),
                assertion.note.as_ref().map_or(String::new(), |n| format!(
                    "<div class=\"muted\">{}</div>",
                    escape(n)
                )),
                assertion.score,
                assertion.threshold,
            );
        }
        out.push_str("</table>\n");
        let failed: Vec<String> = case
            .assertions
            .iter()
            .filter(|a| !a.passed)
            .map(failure_line)
            .collect();
        if !failed.is_empty() {
            let _ = writeln!(out, "<p class=\"fail\">{}</p>", escape(&failed.join("; ")));
        }
    }
    let longest = case
        .steps
        .iter()
        .map(|s| s.duration_ms)
        .fold(0.0_f64, f64::max)
        .max(1.0);
    out.push_str("<table class=\"steps\"><tr><th>step</th><th>type</th><th>status</th><th>time</th><th>tokens</th></tr>\n");
    for step in &case.steps {
        let width = (step.duration_ms / longest * 120.0).round();
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><span class=\"bar\" style=\"width:{width}px\"></span> {:.1} ms</td><td>{}</td></tr>",
            escape(&step.name),
            escape(step.kind),
            escape(step.status),
            step.duration_ms,
            step.tokens
        );
    }
    out.push_str("</table>\n");
    for step in &case.steps {
        let body = match (&step.output, &step.error) {
            (_, Some(error)) => format!("{}: {}", error.code, error.message),
            (Some(output), None) => shown_pretty(output),
            (None, None) => "(no output)".into(),
        };
        let _ = writeln!(
            out,
            "<details class=\"step\"><summary>step {} output</summary><pre>{}</pre></details>",
            escape(&step.name),
            escape(&body)
        );
    }
    out.push_str("</details>\n");
}

/// What one cell of a variant's column shows.
type VariantCell = fn(&VariantResult) -> String;

fn mark_class(passed: bool) -> &'static str {
    if passed { "pass" } else { "fail" }
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn shown_pretty(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}
