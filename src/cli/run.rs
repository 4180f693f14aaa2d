//! `pagantic run PLAN` — check, build and run a plan; the result on stdout, progress on stderr.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Map, Value};

use crate::core::text::terminal_safe;
use crate::inference::TokenSink;
use crate::orchestrate::{
    AgentOutcome, Event, EventData, Observer, RunRecord, RunStatus, Session, SessionOptions,
    SkipReason, StepOutcome,
};
use crate::plan::Plan;
use crate::plan::build::BuildOptions;

use super::common::{
    ApproveArgs, CacheArgs, ConcurrencyArgs, Outcome, PlanInputs, TraceArgs, bind, build,
    check_lock, for_stdout, invalid, load_checked, open_session, print_failure, refuse, split_pair,
    stderr_notice, write_messages,
};
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

/// Batch mode: one run per input row.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Batch")]
pub struct BatchArgs {
    /// Run the plan once per row of INPUT: JSON Lines, CSV with a header, a directory or glob of
    /// text files (one row per file: `path`, `content`), or `-` for JSON Lines on stdin.
    #[arg(long, value_name = "INPUT")]
    batch: Option<String>,
    /// Where the rows go: one JSON line per row (row id, input, status, output or error, usage,
    /// timings), written as each row finishes; `{shard}` and `{shards}` in the name become the
    /// shard's index and count. What wrote it is kept beside it in OUTPUT.meta.json. Default:
    /// stdout.
    #[arg(long, value_name = "OUTPUT", requires = "batch")]
    out: Option<PathBuf>,
    #[command(flatten)]
    jobs: ConcurrencyArgs,
    /// Skip the rows OUTPUT already holds (after a crash, Ctrl-C or a requeue), running again
    /// those that failed retryably; refused (exit 2) when another shard, input or plan wrote it,
    /// or when it holds rows and has no record (OUTPUT.meta.json) of what wrote them.
    #[arg(long, requires = "out")]
    resume: bool,
    /// With --resume: take an OUTPUT another shard wrote as this shard's.
    #[arg(long, requires = "resume")]
    reshard: bool,
    /// With --resume: run the rows that failed again (their old lines are removed).
    #[arg(long, requires = "resume")]
    retry_errors: bool,
    /// Stop at the first failed row (rows in flight still finish).
    #[arg(long, requires = "batch")]
    fail_fast: bool,
    /// Run at most K rows.
    #[arg(long, value_name = "K", requires = "batch")]
    limit: Option<usize>,
    /// Run only rows whose index ≡ I mod N; `env` takes I and N from Kubernetes Indexed Jobs
    /// (JOB_COMPLETION_INDEX) or AWS Batch array jobs (AWS_BATCH_JOB_ARRAY_INDEX), with
    /// PAGANTIC_SHARDS, or Slurm arrays (SLURM_ARRAY_TASK_ID/COUNT).
    #[arg(long, value_name = "I/N", value_parser = crate::batch::parse_shard, requires = "batch")]
    shard: Option<crate::batch::Shard>,
    /// Bind a plan input to a differently named column, as INPUT=COLUMN (repeatable).
    #[arg(long = "map", value_name = "INPUT=COLUMN", value_parser = split_pair, requires = "batch")]
    map: Vec<(String, String)>,
    /// The column holding each row's id (default: line number, record number, or file path).
    #[arg(long = "id", value_name = "COLUMN", requires = "batch")]
    id_column: Option<String>,
    /// Write rows in input order rather than as they finish.
    #[arg(long, requires = "batch")]
    ordered: bool,
    /// Most bytes one input row may have (a JSON Lines line, the field text of a CSV record, a
    /// file of a directory input); a longer row fails on its own and the rest go on.
    #[arg(long, value_name = "BYTES", default_value_t = crate::batch::input::DEFAULT_MAX_ROW_BYTES, requires = "batch")]
    max_row_bytes: u64,
    /// Also write the end-of-run summary as JSON to FILE, atomically, once the batch ends
    /// (`{shard}` and `{shards}` as in --out).
    #[arg(long, value_name = "FILE", requires = "batch")]
    summary: Option<PathBuf>,
    /// Reduce: group the rows by KEY (a path such as `product` or `output.label`, or a template
    /// such as "{{ row.input.product }}") and run the plan once per group, with the group's rows
    /// as its input `rows` and the key as `group`; one line per group. Shards split by group.
    #[arg(long, value_name = "KEY", requires = "batch", conflicts_with_all = ["map", "id_column"])]
    group_by: Option<String>,
    /// With --group-by: leave rows without the key out (default: they form the `null` group).
    #[arg(long, requires = "group_by")]
    skip_missing_key: bool,
    /// With --group-by: reduce a group of more than N rows in chunks of N, then the partial
    /// results again in chunks of N until one is left (`fold_level` tells the plan which).
    #[arg(long, value_name = "N", requires = "group_by")]
    fold: Option<u64>,
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
    if batch {
        return run_batch(args, &session, &plan);
    }
    let streaming = args.stream
        || (!args.no_stream && args.format == OutputFormat::Text && io::stdout().is_terminal());
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

/// The exit code a batch that ended this way gives its scheduler.
fn batch_exit_code(end: crate::batch::End) -> u8 {
    use crate::batch::End;
    match end {
        End::Complete => EXIT_OK,
        End::Preempted | End::Retry => EXIT_TEMPFAIL,
        End::Failed => EXIT_FAILED,
    }
}

/// `run --batch`: the plan over every row of the input, each row a run of `session`.
fn run_batch(args: &Args, session: &Session, plan: &Plan) -> Outcome {
    let batch = &args.batch;
    if args.dry_run && batch.out.is_some() {
        // Lines of stand-ins' answers in a file would read as done rows to a later `--resume`.
        return refuse(
            session,
            &crate::core::Failure::new(
                crate::core::FailureCode::ConfigInvalidInput,
                "--dry-run writes no --out file: its lines are the stand-ins' answers, which a \
                 later --resume would take as rows already done",
            )
            .with_help("drop --out: a dry run writes its lines to stdout"),
        );
    }
    let build_options = || BuildOptions {
        dry_run: args.dry_run,
        notice: (!args.quiet).then(stderr_notice),
        verbose: args.verbose,
        approvals: args.approve.approvals(),
        ..BuildOptions::default()
    };
    let pipeline = Arc::new(build(session, plan, build_options())?);
    let options = crate::batch::BatchOptions {
        input: batch.batch.clone().unwrap_or_default(),
        id_column: batch.id_column.clone(),
        max_row_bytes: batch.max_row_bytes,
        out: batch
            .out
            .as_deref()
            .map(|out| crate::batch::shard::expand(out, batch.shard.as_ref())),
        concurrency: batch.jobs.concurrency,
        resume: batch.resume,
        retry_errors: batch.retry_errors,
        fail_fast: batch.fail_fast,
        limit: batch.limit,
        shard: batch.shard.clone(),
        reshard: batch.reshard,
        plan_sha256: crate::plan::lock::plan_sha256(plan, session.resources()),
        map: batch.map.clone(),
        ordered: batch.ordered,
    };
    let shape = match (&batch.group_by, &pipeline.reduce) {
        (Some(key), _) => BatchShape::Reduce(grouping(
            session,
            key,
            batch.skip_missing_key,
            batch.fold,
            &options,
        )?),
        (None, Some(reduce)) => map_then_reduce(session, reduce, &options)?,
        (None, None) => BatchShape::Map,
    };
    // The preview reads the first rows itself: not from stdin, which the run reads once.
    if args.dry_run && !matches!(shape, BatchShape::Reduce(_)) && options.input != "-" {
        let previews = session.block_on(crate::batch::preview(session, &pipeline, &options, 2));
        match previews {
            Ok(previews) => print_previews(&previews)?,
            Err(failure) => return invalid(&failure),
        }
    }
    let show = !args.quiet && io::stderr().is_terminal();
    let bar = show.then(batch_bar);
    let report = |p: &crate::batch::Progress| {
        if let Some(bar) = &bar {
            show_batch_progress(bar, p);
        }
    };
    let summary = session.block_on(async {
        match shape {
            BatchShape::Map => crate::batch::run(session, pipeline, options, &report).await,
            BatchShape::Reduce(grouping) => {
                crate::batch::group::run(session, pipeline, grouping, &report).await
            }
            BatchShape::MapThenReduce(reduce, grouping) => {
                let map_sha256 = options.plan_sha256;
                crate::batch::group::map_then_reduce(
                    session, pipeline, reduce, grouping, map_sha256, &report,
                )
                .await
            }
        }
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let paced = match &summary {
        Ok(summary) if args.dry_run && !args.quiet => {
            paced_estimates(plan, summary.model_calls, summary.usage.total())
        }
        _ => Vec::new(),
    };
    let outcome = finish_batch(args, session, summary);
    for line in paced {
        eprintln!("{line}");
    }
    outcome
}

/// For a dry run: how long the real run's model calls take at least at each rate-limited
/// model's `rate_limit`, were they all its calls (they are when the plan has one model).
fn paced_estimates(plan: &Plan, calls: u64, tokens: u64) -> Vec<String> {
    use crate::plan::models::ModelSpec;
    plan.raw
        .models
        .iter()
        .filter_map(|(name, spec)| match spec {
            ModelSpec::Openai(model) => model
                .paced_at_least(calls, tokens)
                .map(|least| (name, least)),
            _ => None,
        })
        .map(|(name, least)| {
            format!(
                "dry run: at model `{name}`'s rate_limit, {calls} model calls of about {tokens} \
                 tokens take at least {} (the stand-in's token count is rough)",
                clock(least)
            )
        })
        .collect()
}

/// What a batch runs: the plan once per row, once per group (`--group-by`), or once per row and
/// then its `reduce:` plan once per group of the rows' lines.
enum BatchShape {
    Map,
    Reduce(crate::batch::group::GroupOptions),
    MapThenReduce(
        Arc<crate::orchestrate::Pipeline>,
        crate::batch::group::GroupOptions,
    ),
}

/// A plan with `reduce:`: its reduce plan, built with it, and the reduce's options (exit 2 when
/// the key is not valid).
fn map_then_reduce(
    session: &Session,
    reduce: &crate::orchestrate::Reduce,
    options: &crate::batch::BatchOptions,
) -> Outcome<BatchShape> {
    let reduce_options = crate::batch::BatchOptions {
        plan_sha256: (reduce.plan_sha256)(session.resources()),
        ..options.clone()
    };
    let group_by = &reduce.group_by;
    let grouping = grouping(
        session,
        &group_by.key,
        group_by.skip_missing_key,
        group_by.fold,
        &reduce_options,
    )?;
    Ok(BatchShape::MapThenReduce(
        Arc::clone(&reduce.pipeline),
        grouping,
    ))
}

/// A reduce's options: the batch's, grouped by `key` (refused, exit 2, when it is not a key),
/// with the grouping folded into the plan's SHA-256.
fn grouping(
    session: &Session,
    key: &str,
    skip_missing_key: bool,
    fold: Option<u64>,
    options: &crate::batch::BatchOptions,
) -> Outcome<crate::batch::group::GroupOptions> {
    Ok(crate::batch::group::GroupOptions {
        key: crate::batch::group::key::GroupKey::parse(key)
            .or_else(|failure| refuse(session, &failure))?,
        skip_missing_key,
        fold,
        batch: crate::batch::BatchOptions {
            plan_sha256: reduce_sha256(&options.plan_sha256, key, fold, skip_missing_key),
            ..options.clone()
        },
    })
}

/// The plan's SHA-256 with the grouping folded in, so a reduce's output (and its partial
/// results) is resumed only by the same key, fold and choice of rows without the key.
fn reduce_sha256(
    plan_sha256: &str,
    key: &str,
    fold: Option<u64>,
    skip_missing_key: bool,
) -> String {
    use sha2::{Digest, Sha256};
    let mut text = format!("{plan_sha256}\ngroup-by {key}\nfold {fold:?}");
    if skip_missing_key {
        text.push_str("\nskip-missing-key");
    }
    crate::model_store::hex(&Sha256::digest(text.as_bytes()))
}

/// Ends a batch's session and prints (and with `--summary` writes) how it went.
fn finish_batch(
    args: &Args,
    session: &Session,
    summary: Result<crate::batch::Summary, crate::core::Failure>,
) -> Outcome {
    let batch = &args.batch;
    let mut summary = match summary {
        Ok(summary) => summary,
        Err(failure) => {
            session.fail();
            session.finish();
            return invalid(&failure);
        }
    };
    session.finish();
    summary.trace_spans_dropped = session.finish_traces();
    if !args.quiet {
        print_summary(&summary, args.dry_run)?;
    }
    let code = batch_exit_code(summary.end);
    if let Some(path) = &batch.summary {
        let path = crate::batch::shard::expand(path, batch.shard.as_ref());
        let mut json = serde_json::to_value(&summary).map_err(io::Error::other)?;
        json["exit_code"] = code.into();
        let text = serde_json::to_string_pretty(&json).map_err(io::Error::other)?;
        crate::core::file::write_atomic(&path, format!("{text}\n").as_bytes())?;
    }
    Ok(code)
}

/// The end-of-batch summary on stderr.
fn print_summary(summary: &crate::batch::Summary, dry_run: bool) -> io::Result<()> {
    use crate::batch::End;
    if let Some(map) = &summary.map {
        print_summary(map, dry_run)?;
    }
    let mut stderr = io::stderr().lock();
    let retryably = match summary.rows_failed_retryably {
        0 => String::new(),
        n => format!(" ({n} retryably)"),
    };
    let failed_earlier = match summary.rows_skipped_failed {
        0 => String::new(),
        n => format!(" ({n} failed earlier)"),
    };
    let items = if summary.grouped.is_some() {
        "groups"
    } else {
        "rows"
    };
    writeln!(
        stderr,
        "{} {items} ok, {} failed{retryably}, {} skipped{failed_earlier} in {:.1} s ({:.1} {items}/s, {} tokens{}){}",
        summary.rows_ok,
        summary.rows_failed,
        summary.rows_skipped,
        summary.wall_ms / 1000.0,
        summary.rows_per_s,
        summary.usage.total(),
        summary
            .cost
            .map(|cost| format!(", cost {cost}"))
            .unwrap_or_default(),
        match summary.end {
            End::Preempted => " — cancelled; --resume continues",
            End::Retry => " — some rows may pass later; --resume runs them again",
            End::Failed | End::Complete => "",
        }
    )?;
    let cache = &summary.cache;
    if cache.hits + cache.misses > 0 {
        writeln!(
            stderr,
            "call cache: {} hits, {} misses; {} model calls made; saved {} tokens and {:.1} s of model time",
            cache.hits,
            cache.misses,
            summary.model_calls,
            cache.tokens_saved,
            cache.ms_saved / 1000.0
        )?;
    }
    if summary.rate_limit_wait_ms > 0.0 || summary.rate_limited > 0 {
        writeln!(
            stderr,
            "rate limits: {:.1} s spent waiting (all calls together), {} requests answered 429",
            summary.rate_limit_wait_ms / 1000.0,
            summary.rate_limited
        )?;
    }
    if let Some(grouped) = &summary.grouped {
        writeln!(
            stderr,
            "reduce: {} input rows ({:.0} rows/s) in {} groups{}; {} runs of the plan ({} made now)",
            grouped.input_rows,
            grouped.input_rows_per_s,
            grouped.groups,
            match grouped.rows_without_key {
                0 => String::new(),
                n => format!(", {n} rows without the key left out"),
            },
            grouped.planned_runs,
            grouped.runs
        )?;
    }
    if dry_run {
        writeln!(
            stderr,
            "dry run: {} model calls for {} {items}; the real run makes at least as many (retries, \
             repairs and tool rounds can add more)",
            summary.model_calls,
            summary.rows_ok + summary.rows_failed
        )?;
    }
    for (step, times) in &summary.steps {
        writeln!(
            stderr,
            "  {step}: p50 {:.0} ms, p95 {:.0} ms",
            times.p50_ms, times.p95_ms
        )?;
    }
    Ok(())
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

/// The line once the input is counted; a spinner shows until then. The message is cut at the
/// terminal's width, so the line never wraps: the counts and ETA lead it, the rates end it.
const BAR_TEMPLATE: &str = "  [{bar:20}] {pos}/{len} {wide_msg}";
const SPINNER_TEMPLATE: &str = "  {spinner} {pos} rows {wide_msg}";

/// A batch's progress line on stderr: a spinner that turns into a bar once the rows are counted.
fn batch_bar() -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(batch_style(SPINNER_TEMPLATE));
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

fn batch_style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .map(|style| style.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

/// Rows done (of the total once known), the counts, the ETA and the rates.
fn show_batch_progress(bar: &ProgressBar, p: &crate::batch::Progress) {
    if let Some(total) = p.total
        && bar.length().is_none()
    {
        bar.set_style(batch_style(BAR_TEMPLATE));
        bar.set_length(total as u64);
    }
    bar.set_position((p.ok + p.failed + p.skipped) as u64);
    let seconds = p.elapsed.as_secs_f64().max(1e-9);
    let eta = p
        .eta()
        .map(|eta| format!(", ETA {}", clock(eta)))
        .unwrap_or_default();
    let paced = if p.rate_limit_wait.is_zero() && p.rate_limited == 0 {
        String::new()
    } else {
        format!(
            ", waited {:.0} s for rate limits ({} × 429)",
            p.rate_limit_wait.as_secs_f64(),
            p.rate_limited
        )
    };
    bar.set_message(format!(
        "— {} ok, {} failed, {} skipped{eta} — {:.1} rows/s, {:.0} tok/s{paced}",
        p.ok,
        p.failed,
        p.skipped,
        (p.ok + p.failed) as f64 / seconds,
        p.tokens as f64 / seconds
    ));
}

/// `h:mm:ss` (or `m:ss`) for the ETA.
fn clock(duration: std::time::Duration) -> String {
    let seconds = duration.as_secs();
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// The `--dry-run` preview of a batch: what the model would be sent for the first rows.
fn print_previews(previews: &[crate::batch::RowPreview]) -> io::Result<()> {
    let mut stderr = io::stderr().lock();
    for preview in previews {
        writeln!(stderr, "=== row {} ===", terminal_safe(&preview.row))?;
        for (step, messages) in &preview.calls {
            write_messages(&mut stderr, Some(step), messages, terminal_safe)?;
        }
        if let Some(failure) = &preview.error {
            writeln!(
                stderr,
                "  cannot preview: {}",
                terminal_safe(&failure.message)
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_progress_templates_parse() {
        for template in [BAR_TEMPLATE, SPINNER_TEMPLATE] {
            assert!(ProgressStyle::with_template(template).is_ok(), "{template}");
        }
    }

    #[test]
    fn the_batch_line_turns_from_spinner_to_bar_once_the_rows_are_counted() {
        let bar = ProgressBar::hidden();
        let mut progress = crate::batch::Progress {
            ok: 3,
            failed: 1,
            skipped: 2,
            tokens: 400,
            elapsed: Duration::from_secs(4),
            ..crate::batch::Progress::default()
        };
        show_batch_progress(&bar, &progress);
        assert_eq!((bar.position(), bar.length()), (6, None));
        assert_eq!(
            bar.message(),
            "— 3 ok, 1 failed, 2 skipped — 1.0 rows/s, 100 tok/s"
        );
        progress.total = Some(10);
        show_batch_progress(&bar, &progress);
        assert_eq!(bar.length(), Some(10));
        // 4 rows took 4 s; 4 of the 10 are left.
        assert_eq!(
            bar.message(),
            "— 3 ok, 1 failed, 2 skipped, ETA 0:04 — 1.0 rows/s, 100 tok/s"
        );
    }
}
