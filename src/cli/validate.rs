//! `pagantic validate FILES…` — check plans and test files the way CI should: every error at
//! once, no model loaded. A test file (`*.test.yaml`) is checked with the plan it names.

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Instant;

use crate::orchestrate::Standalone;
use crate::plan::lock::{Lock, lock_path};
use crate::plan::suite::{is_test_file, load_suite};
use crate::plan::{self, Diagnostic, PlanError};

use super::common::print_failure;
use super::report::{self, Format};
use super::{EXIT_INVALID, EXIT_OK};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Plan files to check; quoted glob patterns (e.g. 'plans/*.yaml') are expanded.
    #[arg(required = true, value_name = "FILES")]
    files: Vec<String>,
    /// A policy file whose limits apply on top of each plan's own (it can only tighten them).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// How to print diagnostics.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Print only diagnostics, no per-file or summary lines.
    #[arg(long, short)]
    quiet: bool,
    /// Also refuse a plan whose models, prompt, schema or sub-plan files differ from its
    /// lockfile (`PLAN.lock`, written by `pagantic lock`).
    #[arg(long)]
    locked: bool,
}

pub fn run(args: &Args) -> io::Result<u8> {
    let started = Instant::now();
    let policy = match &args.policy {
        Some(path) => match plan::load_policy(path) {
            Ok(policy) => Some(policy),
            Err(diagnostics) => {
                report::print(&diagnostics, args.format)?;
                return Ok(EXIT_INVALID);
            }
        },
        None => None,
    };
    let (files, unmatched) = expand(&args.files);
    let human = args.format == Format::Human && !args.quiet;
    let mut invalid = 0;
    let mut errors = unmatched.len();
    report::print(&unmatched, args.format)?;
    let mut tests = 0;
    // What checking a lockfile reaches (MCP servers, model files' hashes), started once.
    let standalone = match args.locked.then(Standalone::start).transpose() {
        Ok(standalone) => standalone,
        Err(failure) => {
            print_failure(&failure)?;
            return Ok(EXIT_INVALID);
        }
    };
    for file in &files {
        if is_test_file(file) {
            tests += 1;
            match load_suite(file) {
                Ok(suite) => {
                    if human {
                        let cases = suite.cases.len();
                        writeln!(
                            io::stderr(),
                            "ok: {} ({cases} {}{}, {} {})",
                            file.display(),
                            plural(cases, "case"),
                            if suite.dataset.is_some() {
                                " and a dataset"
                            } else {
                                ""
                            },
                            suite.variants.len(),
                            plural(suite.variants.len(), "variant")
                        )?;
                    }
                }
                Err(diagnostics) => {
                    invalid += 1;
                    errors += diagnostics.len();
                    report::print(&diagnostics, args.format)?;
                }
            }
            continue;
        }
        match plan::load_plan(file, policy.as_ref()) {
            Ok(plan) => {
                if let Some(standalone) = &standalone
                    && let Err(failure) =
                        Lock::check(&plan, &lock_path(file), standalone.resources())
                {
                    invalid += 1;
                    errors += 1;
                    print_failure(&failure)?;
                    continue;
                }
                if human {
                    let steps = plan.raw.steps.len();
                    writeln!(
                        io::stderr(),
                        "ok: {} ({steps} {})",
                        file.display(),
                        plural(steps, "step")
                    )?;
                }
            }
            Err(diagnostics) => {
                invalid += 1;
                errors += diagnostics.len();
                report::print(&diagnostics, args.format)?;
            }
        }
    }
    if human {
        let plans = files.len() - tests;
        let test_files = if tests > 0 {
            format!(", {tests} test {}", plural(tests, "file"))
        } else {
            String::new()
        };
        writeln!(
            io::stderr(),
            "{plans} {}{test_files} checked in {} ms: {} valid, {invalid} invalid ({errors} {})",
            plural(plans, "plan"),
            started.elapsed().as_millis(),
            files.len() - invalid,
            plural(errors, "error"),
        )?;
    }
    Ok(if errors == 0 { EXIT_OK } else { EXIT_INVALID })
}

fn plural(count: usize, word: &str) -> String {
    if count == 1 {
        word.to_string()
    } else {
        format!("{word}s")
    }
}

/// Expands glob patterns; an argument matching nothing is reported as unreadable.
pub fn expand(arguments: &[String]) -> (Vec<PathBuf>, Vec<Diagnostic>) {
    let mut files = Vec::new();
    let mut missing = Vec::new();
    for argument in arguments {
        let literal = PathBuf::from(argument);
        let is_pattern = argument.contains(['*', '?', '[']);
        if literal.exists() || !is_pattern {
            files.push(literal);
            continue;
        }
        let matched: Vec<PathBuf> = glob::glob(argument)
            .map(|paths| paths.filter_map(Result::ok).collect())
            .unwrap_or_default();
        if matched.is_empty() {
            missing.push(Diagnostic::new(PlanError::ReadFailed {
                path: argument.clone(),
                reason: "the pattern matches no file".into(),
            }));
        }
        files.extend(matched);
    }
    (files, missing)
}
