//! `pagantic run PLAN --batch INPUT` — the batch flags handed to [`crate::batch::run`], which
//! decides what the batch runs; its progress line, `--dry-run` previews and end-of-batch summary
//! on stderr, and its exit code.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::batch::{Batch, BatchOptions, End, Progress, RowPreview, Summary, clock};
use crate::core::text::terminal_safe;
use crate::core::{Failure, FailureCode};
use crate::orchestrate::{GroupBy, Pipeline, Session};
use crate::plan::Plan;

use super::common::{ConcurrencyArgs, Outcome, invalid, refuse, split_pair, write_messages};
use super::{EXIT_FAILED, EXIT_OK, EXIT_TEMPFAIL};

/// Batch mode: one run per input row.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Batch")]
pub struct BatchArgs {
    /// Run the plan once per row of INPUT: JSON Lines, CSV with a header, a directory or glob of
    /// text files (one row per file: `path`, `content`), or `-` for JSON Lines on stdin.
    #[arg(long, value_name = "INPUT")]
    pub batch: Option<String>,
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

impl BatchArgs {
    /// The batch's options as the flags give them.
    fn options(&self) -> BatchOptions {
        BatchOptions {
            input: self.batch.clone().unwrap_or_default(),
            id_column: self.id_column.clone(),
            max_row_bytes: self.max_row_bytes,
            out: self
                .out
                .as_deref()
                .map(|out| crate::batch::shard::expand(out, self.shard.as_ref())),
            concurrency: self.jobs.concurrency,
            resume: self.resume,
            retry_errors: self.retry_errors,
            fail_fast: self.fail_fast,
            limit: self.limit,
            shard: self.shard.clone(),
            reshard: self.reshard,
            map: self.map.clone(),
            ordered: self.ordered,
        }
    }

    /// `--group-by` with its companions, when given.
    fn group_by(&self) -> Option<GroupBy> {
        self.group_by.as_ref().map(|key| GroupBy {
            key: key.clone(),
            skip_missing_key: self.skip_missing_key,
            fold: self.fold,
        })
    }
}

/// Runs the batch of `plan`, built as `pipeline` (a dry run's when `dry_run`), in `session`;
/// with `quiet`, no progress line and no summary.
pub fn run(
    args: &BatchArgs,
    session: &Session,
    plan: &Plan,
    pipeline: Pipeline,
    dry_run: bool,
    quiet: bool,
) -> Outcome {
    if dry_run && args.out.is_some() {
        // Lines of stand-ins' answers in a file would read as done rows to a later `--resume`.
        let failure = Failure::new(
            FailureCode::ConfigInvalidInput,
            "--dry-run writes no --out file: its lines are the stand-ins' answers, which a later \
             --resume would take as rows already done",
        )
        .with_help("drop --out: a dry run writes its lines to stdout");
        return refuse(session, &failure);
    }
    let batch = Batch::new(
        session,
        plan,
        Arc::new(pipeline),
        args.options(),
        args.group_by().as_ref(),
    )
    .or_else(|failure| refuse(session, &failure))?;
    // The preview reads the first rows itself: not from stdin, which the run reads once.
    if dry_run && !batch.reads_stdin() {
        match session.block_on(batch.preview(session, 2)) {
            Ok(previews) => print_previews(&previews)?,
            Err(failure) => return invalid(&failure),
        }
    }
    let bar = (!quiet && io::stderr().is_terminal()).then(batch_bar);
    let report = |p: &Progress| {
        if let Some(bar) = &bar {
            show_batch_progress(bar, p);
        }
    };
    let summary = session.block_on(crate::batch::run(session, batch, &report));
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let paced = match &summary {
        Ok(summary) if dry_run && !quiet => crate::batch::paced_estimates(plan, summary),
        _ => Vec::new(),
    };
    let outcome = finish(args, session, summary, dry_run, quiet);
    for line in paced {
        eprintln!("{line}");
    }
    outcome
}

/// The exit code a batch that ended this way gives its scheduler.
fn exit_code(end: End) -> u8 {
    match end {
        End::Complete => EXIT_OK,
        End::Preempted | End::Retry => EXIT_TEMPFAIL,
        End::Failed => EXIT_FAILED,
    }
}

/// Ends a batch's session and prints (and with `--summary` writes) how it went.
fn finish(
    args: &BatchArgs,
    session: &Session,
    summary: Result<Summary, Failure>,
    dry_run: bool,
    quiet: bool,
) -> Outcome {
    let mut summary = match summary {
        Ok(summary) => summary,
        Err(failure) => return refuse(session, &failure),
    };
    session.finish();
    summary.trace_spans_dropped = session.finish_traces();
    if !quiet {
        print_summary(&summary, dry_run)?;
    }
    let code = exit_code(summary.end);
    if let Some(path) = &args.summary {
        let path = crate::batch::shard::expand(path, args.shard.as_ref());
        let mut json = serde_json::to_value(&summary).map_err(io::Error::other)?;
        json["exit_code"] = code.into();
        let text = serde_json::to_string_pretty(&json).map_err(io::Error::other)?;
        crate::core::file::write_atomic(&path, format!("{text}\n").as_bytes())?;
    }
    Ok(code)
}

/// The end-of-batch summary on stderr.
fn print_summary(summary: &Summary, dry_run: bool) -> io::Result<()> {
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
fn show_batch_progress(bar: &ProgressBar, p: &Progress) {
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
    let paced = if p.rate_limit.is_none() {
        String::new()
    } else {
        format!(
            ", waited {:.0} s for rate limits ({} × 429)",
            p.rate_limit.waited.as_secs_f64(),
            p.rate_limit.rate_limited
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

/// The `--dry-run` preview of a batch: what the model would be sent for the first rows.
fn print_previews(previews: &[RowPreview]) -> io::Result<()> {
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
        let mut progress = Progress {
            ok: 3,
            failed: 1,
            skipped: 2,
            tokens: 400,
            elapsed: Duration::from_secs(4),
            ..Progress::default()
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
