//! `pagantic test FILES…` — run test files (`*.test.yaml`): every case under every variant of
//! the plan, scored by its assertions; a report for people (a table, one HTML file) and for tools
//! (JSON, JUnit XML, GitHub annotations). Every file is checked before anything runs.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Mutex;

use clap::ValueEnum;

use crate::orchestrate::SessionOptions;
use crate::plan::suite::{Suite, load_suite};
use crate::suite::{self, CaseResult, SuiteOptions, SuiteResult, report};

use super::common::{CacheArgs, ConcurrencyArgs, Outcome, invalid, open_session, stderr_notice};
use super::report::{self as diagnostics, Format};
use super::validate::expand;
use super::{EXIT_FAILED, EXIT_INVALID, EXIT_OK};

/// How the results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// A table: cases × variants, pass rates, metrics, then every failure.
    Text,
    /// One JSON document with every case, assertion and step.
    Json,
    /// JUnit XML, for CI systems.
    Junit,
    /// GitHub Actions annotations on the test files' lines.
    Github,
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
    /// How to print the results.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    format: ReportFormat,
    /// Write the results to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Also write one self-contained HTML report to FILE.
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
    cache: CacheArgs,
}

pub fn run(args: &Args) -> Outcome {
    let (files, unmatched) = expand(&args.files);
    let mut problems = unmatched;
    let mut suites: Vec<Suite> = Vec::new();
    for file in &files {
        match load_suite(file) {
            Ok(suite) => suites.push(suite),
            Err(found) => problems.extend(found),
        }
    }
    let annotate = if args.format == ReportFormat::Github {
        Format::Github
    } else {
        Format::Human
    };
    if !problems.is_empty() {
        diagnostics::print(&problems, annotate)?;
        return Ok(EXIT_INVALID);
    }
    // The session every case runs in, as `run --batch` rows do.
    let session = open_session(SessionOptions {
        max_parallel: 4,
        cache: args.cache.settings(),
        ..SessionOptions::default()
    })?;
    let options = SuiteOptions {
        concurrency: args.jobs.concurrency,
        filter: args.filter.clone(),
        variant: args.variant.clone(),
        dry_run: args.dry_run,
        notice: (!args.quiet).then(stderr_notice),
    };
    let show = !args.quiet;
    let counter = Mutex::new(0usize);
    let progress = |variant: &str, case: &CaseResult| {
        if !show {
            return;
        }
        let mut done = counter.lock().unwrap_or_else(|p| p.into_inner());
        *done += 1;
        let mark = if case.passed { "✓" } else { "✗" };
        let _ = writeln!(
            io::stderr(),
            "  {mark} {} [{variant}] {:.2} ({:.0} ms){}",
            case.name,
            case.score,
            case.duration_ms,
            if io::stderr().is_terminal() {
                format!(" — {} done", *done)
            } else {
                String::new()
            }
        );
    };
    let starting = |suite: &Suite| {
        if show {
            let _ = writeln!(io::stderr(), "{}:", suite.path.display());
        }
    };
    let run = suite::run_suites(&session, &suites, &options, &starting, &progress);
    let results = match session.block_on(run) {
        Ok(results) => results,
        Err(failure) => {
            session.fail();
            session.finish();
            return invalid(&failure);
        }
    };
    let passed = results.len() == suites.len() && results.iter().all(SuiteResult::passed);
    if !passed {
        session.fail();
    }
    session.finish();
    let text = match args.format {
        ReportFormat::Text => report::text(&results),
        ReportFormat::Json => report::json(&results),
        ReportFormat::Junit => report::junit(&results),
        ReportFormat::Github => report::github(&results),
    };
    match &args.out {
        Some(path) => std::fs::write(path, text)?,
        None => {
            let mut stdout = io::stdout().lock();
            stdout.write_all(text.as_bytes())?;
            stdout.flush()?;
        }
    }
    if let Some(path) = &args.html {
        std::fs::write(path, report::html(&results))?;
        if show {
            writeln!(io::stderr(), "wrote {}", path.display())?;
        }
    }
    Ok(if passed { EXIT_OK } else { EXIT_FAILED })
}
