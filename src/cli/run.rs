//! `pagantic run PLAN` — check, build and run a plan; the result on stdout, progress on stderr.
//! With `--batch` the built plan goes to [`run_batch`], which runs it over the input's rows.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::ValueEnum;
use serde_json::{Map, Value};

use crate::core::text::terminal_safe;
use crate::inference::TokenSink;
use crate::orchestrate::{
    AgentOutcome, Event, EventData, Observer, RunRecord, RunStatus, SessionOptions, SkipReason,
    StepOutcome,
};
use crate::plan::build::BuildOptions;

use super::common::{
    ApproveArgs, CacheArgs, Outcome, PlanInputs, TraceArgs, bind, build, check_lock, for_stdout,
    load_checked, open_session, print_failure, stderr_notice,
};
use super::run_batch::{self, BatchArgs};
use super::{EXIT_FAILED, EXIT_OK, EXIT_TEMPFAIL};

/// How the result is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// The plan's output alone (text as is, other values as JSON).
    Text,
    /// The whole run record: run id, status, output, every step's status, attempts, duration,
    /// output and usage, and the error if any.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan file.
    plan: PathBuf,
    #[command(flatten)]
    given: PlanInputs,
    /// How to print the result.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    format: OutputFormat,
    /// Write every event (lifecycle, steps, model and tool calls) to FILE as JSON Lines.
    #[arg(long, value_name = "FILE")]
    events: Option<PathBuf>,
    /// Replace every model with a scripted echo, ONNX scorers with the keyword scorer, and tools
    /// with side effects with a stand-in that reports the call.
    #[arg(long)]
    dry_run: bool,
    /// Most steps running at once.
    #[arg(long, default_value_t = 4, value_name = "N")]
    max_parallel: usize,
    /// No progress lines on stderr.
    #[arg(long, short)]
    quiet: bool,
    /// Say more on stderr: which tools are hidden from models, and why; when an openai model
    /// falls back to another response format.
    #[arg(long, short)]
    verbose: bool,
    /// Print the answer token by token as the model writes it (when the plan's last step is an
    /// `infer`, `agent` or `route` step). On by default when stdout is a terminal.
    #[arg(long, conflicts_with = "no_stream")]
    stream: bool,
    /// Never stream, even to a terminal.
    #[arg(long)]
    no_stream: bool,
    /// Refuse to run (exit 2) when the plan's models, prompt, schema or sub-plan files differ
    /// from its lockfile (`PLAN.lock`, written by `pagantic lock`).
    #[arg(long)]
    locked: bool,
    #[command(flatten)]
    approve: ApproveArgs,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    trace: TraceArgs,
    #[command(flatten)]
    batch: BatchArgs,
}

pub fn run(args: &Args) -> Outcome {
    let batch = args.batch.batch.is_some();
    // Whether a streamed answer left stdout mid-line: at a terminal, a step's progress line then
    // starts a line of its own instead of running on from the answer.
    let open_line = Arc::new(AtomicBool::new(false));
    // A batch shows its own progress line; one run shows a line per step.
    let observer: Option<Observer> = (!args.quiet && !batch).then(|| {
        let open_line = Arc::clone(&open_line);
        Box::new(move |event: &Event| {
            if io::stdout().is_terminal() && open_line.swap(false, Ordering::Relaxed) {
                let _ = writeln!(io::stdout());
            }
            progress(event);
        }) as Observer
    });
    let session = open_session(SessionOptions {
        events_file: args.events.clone(),
        observer,
        max_parallel: args.max_parallel,
        chat_session: None,
        cache: args.cache.settings(args.quiet),
        tracer: args.trace.tracer(if batch { "batch" } else { "run" }),
    })?;
    let plan = load_checked(&session, &args.plan, &args.given)?;
    if args.locked {
        check_lock(&session, &plan)?;
    }
    let streaming = !batch
        && (args.stream
            || (!args.no_stream
                && args.format == OutputFormat::Text
                && io::stdout().is_terminal()));
    let streamed = Arc::new(AtomicBool::new(false));
    let stream: Option<TokenSink> = streaming.then(|| {
        let streamed = Arc::clone(&streamed);
        let open_line = Arc::clone(&open_line);
        Arc::new(move |piece: &str| {
            streamed.store(true, Ordering::Relaxed);
            let mut stdout = io::stdout().lock();
            let _ = stdout.write_all(for_stdout(piece).as_bytes());
            let _ = stdout.flush();
            if !piece.is_empty() {
                open_line.store(!piece.ends_with('\n'), Ordering::Relaxed);
            }
        }) as TokenSink
    });
    let pipeline = build(
        &session,
        &plan,
        BuildOptions {
            dry_run: args.dry_run,
            notice: (!args.quiet).then(stderr_notice),
            verbose: args.verbose,
            stream,
            approvals: args.approve.approvals(),
            ..BuildOptions::default()
        },
    )?;
    if batch {
        return run_batch::run(
            &args.batch,
            &session,
            &plan,
            pipeline,
            args.dry_run,
            args.quiet,
        );
    }
    let inputs = bind(&session, &pipeline, &args.given)?;
    let record = session.run(&pipeline, inputs, Map::new());
    if streamed.load(Ordering::Relaxed) {
        // The answer is already on stdout; end its line (unless a progress line did).
        if open_line.load(Ordering::Relaxed) {
            writeln!(io::stdout())?;
        }
        print_failure_and_completed(&record, args.format)?;
    } else {
        print_record(&record, args.format)?;
    }
    Ok(run_exit_code(&record))
}

/// 0 when the run completed; 75 when it was stopped or failed for a reason that may pass (a
/// scheduler runs it again); 1 when it failed for good.
fn run_exit_code(record: &RunRecord) -> u8 {
    match record.status {
        RunStatus::Complete => EXIT_OK,
        RunStatus::Cancelled => EXIT_TEMPFAIL,
        RunStatus::Error if record.error.as_ref().is_some_and(|e| e.transient()) => EXIT_TEMPFAIL,
        RunStatus::Error => EXIT_FAILED,
    }
}

fn print_record(record: &RunRecord, format: OutputFormat) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    match format {
        OutputFormat::Json => {
            let text = serde_json::to_string_pretty(record).map_err(io::Error::other)?;
            writeln!(stdout, "{text}")?;
        }
        OutputFormat::Text => {
            if let Some(output) = &record.output {
                match output {
                    Value::String(text) => writeln!(stdout, "{}", for_stdout(text.trim_end()))?,
                    other => writeln!(
                        stdout,
                        "{}",
                        serde_json::to_string_pretty(other).map_err(io::Error::other)?
                    )?,
                }
            }
        }
    }
    stdout.flush()?;
    drop(stdout);
    print_failure_and_completed(record, format)
}

/// The run's error (with its code) and, in text mode, the outputs of the steps that completed.
fn print_failure_and_completed(record: &RunRecord, format: OutputFormat) -> io::Result<()> {
    if let Some(error) = &record.error {
        print_failure(error)?;
        if format == OutputFormat::Text {
            let mut stderr = io::stderr().lock();
            let completed: Vec<_> = record.steps.iter().filter(|s| s.output.is_some()).collect();
            if !completed.is_empty() {
                writeln!(stderr, "completed steps:")?;
                for step in completed {
                    let output = step.output.as_ref().map(short).unwrap_or_default();
                    writeln!(stderr, "  {}: {}", step.name, terminal_safe(&output))?;
                }
            }
        }
    }
    Ok(())
}

/// A one-line preview of a value.
fn short(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let line = text.replace('\n', " ");
    if line.chars().count() > 120 {
        format!("{}…", line.chars().take(120).collect::<String>())
    } else {
        line
    }
}

/// One line on stderr per finished, skipped or retried step, and per check that sends the run
/// back to a model step.
fn progress(event: &Event) {
    // A sub-plan's steps (a route's plan agent) are shown inside the route step that ran them.
    let nested = if event.parent_run_id.is_some() {
        "    "
    } else {
        ""
    };
    let step = event.step.as_deref().unwrap_or("");
    let line = match &event.data {
        EventData::StepEnd {
            outcome: StepOutcome::Ok { .. },
            duration_ms,
            ..
        } => format!("  ✓ {step} ({duration_ms:.0} ms)"),
        EventData::StepEnd {
            outcome: StepOutcome::Failed { error },
            ..
        } => format!("  ✗ {step}: {}: {}", error.code, error.message),
        EventData::StepEnd {
            outcome: StepOutcome::Cancelled,
            ..
        } => format!("  ✗ {step}: cancelled"),
        EventData::StepFeedback {
            to,
            next_attempt,
            max_attempts,
            ..
        } => format!(
            "  ↺ {step}: back to `{to}` with what failed (check {next_attempt} of {max_attempts})"
        ),
        EventData::StepRetry {
            next_attempt,
            delay_ms,
            ..
        } => format!("  ↻ {step}: retrying (attempt {next_attempt}) in {delay_ms} ms"),
        EventData::StepSkipped(SkipReason::When(_)) => {
            format!("  ↷ {step}: skipped (`when` is false)")
        }
        EventData::StepSkipped(SkipReason::StandbyFor(owner)) => {
            format!("  ↷ {step}: on standby for `{owner}` (runs only when it hands over)")
        }
        data => match route_progress(step, data) {
            Some(line) => line,
            None => return,
        },
    };
    let _ = writeln!(io::stderr(), "{nested}{}", terminal_safe(&line));
}

/// A route step's lines: its decision, then each agent as it starts and ends.
fn route_progress(step: &str, data: &EventData) -> Option<String> {
    Some(match data {
        EventData::RouteDecision {
            mode,
            agents,
            rationale,
        } => {
            let why = rationale
                .as_deref()
                .map(|r| format!(" — {r}"))
                .unwrap_or_default();
            format!("  ⇢ {step}: {mode} route to {}{why}", agents.join(", "))
        }
        EventData::AgentStart { agent, .. } => format!("    → {step} › {agent}"),
        EventData::AgentEnd {
            agent,
            outcome,
            duration_ms,
            ..
        } => match outcome {
            AgentOutcome::Ok { .. } => format!("    ✓ {step} › {agent} ({duration_ms:.0} ms)"),
            AgentOutcome::Failed { error } => {
                format!("    ✗ {step} › {agent}: {}: {}", error.code, error.message)
            }
            AgentOutcome::Skipped { after } => {
                format!("    ↷ {step} › {agent}: not run (`{after}` before it failed)")
            }
            AgentOutcome::Cancelled => format!("    ✗ {step} › {agent}: cancelled"),
        },
        _ => return None,
    })
}
