//! `pagantic test FILES…` — run test files (`*.test.yaml`): every case under every variant of
//! the plan (each `--repeat` times), scored by its assertions, compared with a baseline when one
//! is named; a report for people (a table, one HTML file, a Markdown summary) and for tools
//! (JSON, JUnit XML, GitHub annotations). Every file — test files and the baseline — is checked
//! before anything runs.

use std::fs::OpenOptions;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use clap::ValueEnum;

use crate::core::text::terminal_safe;
use crate::core::{Failure, FailureCode};
use crate::orchestrate::SessionOptions;
use crate::plan::Diagnostic;
use crate::plan::suite::{Suite, load_suite};
use crate::suite::baseline::Baseline;
use crate::suite::{self, CaseResult, SuiteOptions, SuiteResult, report};

use super::common::{
    ApproveArgs, CacheArgs, ConcurrencyArgs, Outcome, TraceArgs, invalid, open_session,
    stderr_notice,
};
use super::report::{self as diagnostics, Format};
use super::validate::expand;
use super::{EXIT_FAILED, EXIT_INVALID, EXIT_OK};

/// The environment variable naming the file GitHub Actions shows as a job's summary.
const STEP_SUMMARY: &str = "GITHUB_STEP_SUMMARY";

/// How the results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// A table: cases × variants, pass rates, metrics, then every failure.
    Text,
    /// One JSON document with every case, assertion and step (what --baseline reads).
    Json,
    /// JUnit XML, for CI systems.
    Junit,
    /// GitHub Actions annotations on the test files' lines.
    Github,
    /// A compact Markdown summary (at most 64 KiB), for a pull request or a job summary.
    Markdown,
}

/// What makes the command exit 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    /// A suite below its pass rate under some variant.
    Failure,
    /// A regression against --baseline: a case that passed there and fails now (flaky cases
    /// are not counted), a metric that dropped more than --max-drop, a variant that cannot be
    /// built; whatever the pass rate.
    Regression,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Test files (`*.test.yaml`); quoted glob patterns are expanded.
    #[arg(required = true, value_name = "FILES")]
    files: Vec<String>,
    /// Run only the cases whose name contains CASE.
    #[arg(long, value_name = "CASE")]
    filter: Option<String>,
    #[command(flatten)]
    jobs: ConcurrencyArgs,
    /// Run only this variant.
    #[arg(long, value_name = "NAME")]
    variant: Option<String>,
    /// Run each case K times, each run a sample of its own (temperature above 0 is not answered
    /// from the cache of another repeat): the report shows pass@k, pass^k and the flaky cases,
    /// and the pass rate a suite needs is over all runs.
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeat: u32,
    /// Compare with an earlier run's `--format json` report: cases PASS→FAIL and FAIL→PASS,
    /// flaky, new and gone cases, score and metric changes, shown in every report.
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// What exits 1: `failure`, a suite below its pass rate; `regression`, a regression against
    /// --baseline (needs it), whatever the pass rate.
    #[arg(long, value_enum, value_name = "WHAT", default_value_t = FailOn::Failure)]
    fail_on: FailOn,
    /// With --baseline: a metric (the pass rate too) that drops by more than this fraction is a
    /// regression, e.g. 0.05 (default: metric drops are reported, not counted).
    #[arg(long, value_name = "FRACTION", requires = "baseline", value_parser = fraction)]
    max_drop: Option<f64>,
    /// How to print the results. Whatever it is, when $GITHUB_STEP_SUMMARY names a file the
    /// Markdown summary is appended to it.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    format: ReportFormat,
    /// Write the results to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Also write one self-contained HTML report to FILE (the Markdown summary links to it).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Replace every model with a scripted echo, ONNX scorers with the keyword scorer, and tools
    /// with side effects with a stand-in (as `run --dry-run`); judges answer from the echo.
    #[arg(long)]
    dry_run: bool,
    /// No progress lines on stderr.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    approve: ApproveArgs,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    trace: TraceArgs,
}

/// A number from 0 to 1.
fn fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if (0.0..=1.0).contains(&value) => Ok(value),
        _ => Err(format!("`{text}` is not a fraction from 0 to 1")),
    }
}

pub fn run(args: &Args) -> Outcome {
    let annotate = if args.format == ReportFormat::Github {
        Format::Github
    } else {
        Format::Human
    };
    let (suites, problems) = load(args);
    if !problems.is_empty() {
        diagnostics::print(&problems, annotate)?;
        return Ok(EXIT_INVALID);
    }
    let baseline = match baseline(args) {
        Ok(baseline) => baseline,
        Err(failure) => return invalid(&failure),
    };
    // The session every case runs in, as `run --batch` rows do.
    let session = open_session(SessionOptions {
        max_parallel: 4,
        cache: args.cache.settings(args.quiet),
        tracer: args.trace.tracer("test"),
        ..SessionOptions::default()
    })?;
    let options = SuiteOptions {
        concurrency: args.jobs.concurrency,
        filter: args.filter.clone(),
        variant: args.variant.clone(),
        repeat: args.repeat,
        dry_run: args.dry_run,
        notice: (!args.quiet).then(stderr_notice),
        approvals: args.approve.approvals(),
    };
    let show = !args.quiet;
    let counter = Mutex::new(0usize);
    let progress = |variant: &str, repeat: usize, case: &CaseResult| {
        if show {
            let mut done = counter.lock().unwrap_or_else(|p| p.into_inner());
            *done += 1;
            progress_line(args.repeat, *done, variant, repeat, case);
        }
    };
    let starting = |suite: &Suite| {
        if show {
            let _ = writeln!(
                io::stderr(),
                "{}:",
                terminal_safe(&suite.path.display().to_string())
            );
        }
    };
    let run = suite::run_suites(&session, &suites, &options, &starting, &progress);
    let mut results = match session.block_on(run) {
        Ok(results) => results,
        Err(failure) => {
            session.fail();
            session.finish();
            return invalid(&failure);
        }
    };
    if let Some(baseline) = &baseline {
        for result in &mut results {
            result.comparison = Some(baseline.compare(result, args.max_drop));
        }
    }
    let passed = results.len() == suites.len() && gate(args.fail_on, &results);
    if !passed {
        session.fail();
    }
    session.finish();
    write_reports(args, &results)?;
    Ok(if passed { EXIT_OK } else { EXIT_FAILED })
}

/// Every test file, checked; and every problem found.
fn load(args: &Args) -> (Vec<Suite>, Vec<Diagnostic>) {
    let (files, unmatched) = expand(&args.files);
    let mut problems = unmatched;
    let mut suites: Vec<Suite> = Vec::new();
    for file in &files {
        match load_suite(file) {
            Ok(suite) => suites.push(suite),
            Err(found) => problems.extend(found),
        }
    }
    (suites, problems)
}

/// The baseline, read and checked; `--fail-on regression` needs one.
fn baseline(args: &Args) -> Result<Option<Baseline>, Failure> {
    match (&args.baseline, args.fail_on) {
        (Some(path), _) => Baseline::read(path).map(Some),
        (None, FailOn::Regression) => Err(Failure::new(
            FailureCode::ConfigInvalidInput,
            "--fail-on regression compares with a baseline, and none was given",
        )
        .with_help("add --baseline FILE, a report an earlier `pagantic test --format json` wrote")),
        (None, FailOn::Failure) => Ok(None),
    }
}

/// Whether the results pass the gate `fail_on` names.
fn gate(fail_on: FailOn, results: &[SuiteResult]) -> bool {
    match fail_on {
        FailOn::Failure => results.iter().all(SuiteResult::passed),
        FailOn::Regression => results.iter().all(|suite| {
            !suite.cancelled
                && suite
                    .comparison
                    .as_ref()
                    .is_none_or(|c| c.regressions() == 0)
        }),
    }
}

/// One finished run of a case, on stderr.
fn progress_line(repeats: u32, done: usize, variant: &str, repeat: usize, case: &CaseResult) {
    let mark = if case.passed { "✓" } else { "✗" };
    let run = if repeats > 1 {
        format!(" run {}/{repeats}", repeat + 1)
    } else {
        String::new()
    };
    let count = if io::stderr().is_terminal() {
        format!(" — {done} done")
    } else {
        String::new()
    };
    let line = format!(
        "  {mark} {} [{variant}]{run} {:.2} ({:.0} ms){count}",
        case.name, case.score, case.duration_ms
    );
    let _ = writeln!(io::stderr(), "{}", terminal_safe(&line));
}

/// The report in `--format` (to `--out` or stdout), the HTML page (`--html`), and the Markdown
/// summary appended to `$GITHUB_STEP_SUMMARY` when it is set.
fn write_reports(args: &Args, results: &[SuiteResult]) -> Outcome<()> {
    let html = args.html.as_deref();
    let text = match args.format {
        ReportFormat::Text => report::text(results),
        ReportFormat::Json => report::json(results),
        ReportFormat::Junit => report::junit(results),
        ReportFormat::Github => report::github(results),
        ReportFormat::Markdown => report::markdown(results, html),
    };
    match &args.out {
        Some(path) => crate::core::file::write_atomic(path, text.as_bytes())?,
        None => {
            let mut stdout = io::stdout().lock();
            stdout.write_all(text.as_bytes())?;
            stdout.flush()?;
        }
    }
    if let Some(path) = html {
        crate::core::file::write_atomic(path, report::html(results).as_bytes())?;
        if !args.quiet {
            writeln!(io::stderr(), "wrote {}", path.display())?;
        }
    }
    if let Some(summary) = std::env::var_os(STEP_SUMMARY).filter(|s| !s.is_empty()) {
        append(Path::new(&summary), &report::markdown(results, html))?;
    }
    Ok(())
}

/// Appends `text` to the file at `path` (created if missing).
fn append(path: &Path, text: &str) -> io::Result<()> {
    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
    file.write_all(text.as_bytes())?;
    file.flush()
}
