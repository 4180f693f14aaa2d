//! `pagantic cache stats|prune|clear|import|merge`: look after the call cache, and fill it from
//! cassettes or other cache directories.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use crate::cache::{self, CacheError, CacheStats, CallCache, Entry, Imported};
use crate::core::duration::{DurationSpec, LONGEST};
use crate::core::text::terminal_safe;
use crate::core::{Failure, FailureCode, Timestamp};

use super::EXIT_OK;
use super::common::{Outcome, invalid};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
    /// The call cache's directory (default: $PAGANTIC_CACHE_DIR, else $PAGANTIC_HOME/cache,
    /// else ~/.cache/pagantic/cache).
    #[arg(long = "cache", value_name = "DIR", global = true)]
    cache_dir: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Entries and their size by kind, the file's size, and the hits and misses of recent runs.
    #[command(after_help = "Example:\n  pagantic cache stats --format json")]
    Stats {
        /// `text`, or `json` for scripts.
        #[arg(long, value_enum, default_value_t = StatsFormat::Text)]
        format: StatsFormat,
    },
    /// Delete the entries no run has used for a while.
    #[command(after_help = "Example:\n  pagantic cache prune --older-than 30d")]
    Prune {
        /// Delete entries unused for this long: `30d`, `12h`, `90m`, `1h30m`.
        #[arg(long, value_name = "AGE", value_parser = parse_age)]
        older_than: u64,
    },
    /// Delete every entry.
    #[command(after_help = "Example:\n  pagantic cache clear --cache /tmp/pagantic-cache")]
    Clear,
    /// Load the entries of cassettes (written by --record) that the cache does not hold; an
    /// entry under a key it holds with another value is counted, and the held one kept.
    #[command(after_help = "Example:\n  pagantic cache import plans/classify.cassette.jsonl")]
    Import {
        /// Cassette files; every one is checked before any is loaded.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Load the entries of other cache directories (one per node or worker, say) that the cache
    /// does not hold, as import does; they are only read.
    #[command(
        after_help = "Example:\n  pagantic cache merge node-0/ node-1/ --cache ~/.cache/pagantic/cache"
    )]
    Merge {
        /// Cache directories (or their cache.db files) of the same schema version.
        #[arg(required = true, value_name = "DIR")]
        dirs: Vec<PathBuf>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StatsFormat {
    Text,
    Json,
}

/// An age in seconds from `30d` (days), or any duration a plan may write (`12h`, `1h30m`).
fn parse_age(text: &str) -> Result<u64, String> {
    if let Some(days) = text.strip_suffix('d') {
        return days
            .parse::<u64>()
            .ok()
            .and_then(|days| days.checked_mul(86_400))
            .filter(|seconds| *seconds <= LONGEST.as_secs())
            .ok_or_else(|| {
                format!("`{text}` is not a number of days such as `30d` (at most 36500d)")
            });
    }
    DurationSpec::parse(text)
        .map(|d| d.get().as_secs())
        .map_err(|e| e.to_string())
}

pub fn run(args: &Args) -> Outcome {
    let dir = args.cache_dir.clone().unwrap_or_else(cache::default_dir);
    let cassettes = match &args.action {
        Action::Import { files } => read_cassettes(files)?,
        _ => Vec::new(),
    };
    let database = match CallCache::maintain(&dir) {
        Ok(database) => database,
        Err(reason) => {
            // The cache's own advice where it has some (a newer pagantic's file, a foreign
            // layout); otherwise the file is not a database this command can repair.
            let help = miette::Diagnostic::help(&reason).map_or_else(
                || "`pagantic cache clear` cannot repair a file that is not a database: delete the directory instead".to_string(),
                |help| help.to_string(),
            );
            return invalid(
                &Failure::new(
                    FailureCode::ConfigFileError,
                    format!("cannot open the call cache in {}: {reason}", dir.display()),
                )
                .with_help(help),
            );
        }
    };
    let mut stdout = io::stdout().lock();
    let done = match &args.action {
        Action::Stats { format } => database.stats().map(|stats| match format {
            StatsFormat::Json => serde_json::to_string_pretty(&stats).unwrap_or_default(),
            StatsFormat::Text => describe(&stats),
        }),
        Action::Prune { older_than } => database
            .prune(*older_than)
            .map(|n| format!("pruned {n} entries unused since {}", age(*older_than))),
        Action::Clear => database.clear().map(|n| format!("cleared {n} entries")),
        Action::Import { .. } => load(&mut stdout, cassettes, |entries| database.import(entries)),
        Action::Merge { dirs } => {
            let sources = dirs.iter().map(|dir| (dir.clone(), cache_file(dir)));
            load(&mut stdout, sources, |file| database.merge(&file))
        }
    };
    match done {
        Ok(text) => {
            if !text.is_empty() {
                writeln!(stdout, "{text}")?;
            }
            Ok(EXIT_OK)
        }
        Err(reason) => {
            let failure = Failure::new(
                FailureCode::ConfigFileError,
                format!("the call cache in {}: {reason}", dir.display()),
            );
            invalid(&match miette::Diagnostic::help(&reason) {
                Some(help) => failure.with_help(help.to_string()),
                None => failure,
            })
        }
    }
}

/// The entries of every cassette in `files`, each checked (exit 2 at the first that is not a
/// cassette, before anything is loaded).
fn read_cassettes(files: &[PathBuf]) -> Outcome<Vec<(PathBuf, Vec<Entry>)>> {
    files
        .iter()
        .map(|file| match cache::read_cassette(file) {
            Ok(entries) => Ok((file.clone(), entries)),
            Err(reason) => invalid(&Failure::from(reason)),
        })
        .collect()
}

/// The database file of a cache directory (or the file itself, when named).
fn cache_file(dir: &Path) -> PathBuf {
    if dir.is_file() {
        dir.to_path_buf()
    } else {
        dir.join(cache::DATABASE_FILE)
    }
}

/// Loads each source into the cache with `into`, saying on `out` what came of each as soon as
/// it is done (so a failure later leaves the earlier ones said); nothing more to print after.
fn load<T>(
    out: &mut impl Write,
    sources: impl IntoIterator<Item = (PathBuf, T)>,
    into: impl Fn(T) -> Result<Imported, CacheError>,
) -> Result<String, CacheError> {
    for (name, source) in sources {
        let imported = into(source)?;
        let _ = writeln!(out, "{}", describe_import(&name, imported));
    }
    Ok(String::new())
}

fn describe_import(source: &Path, imported: Imported) -> String {
    let Imported {
        added,
        present,
        conflicting,
        failed,
    } = imported;
    let kept = if conflicting > 0 {
        " (the entries already held are kept)"
    } else {
        ""
    };
    let failed = if failed > 0 {
        format!(", {failed} failed (not read as entries, or not storable: left out)")
    } else {
        String::new()
    };
    format!(
        "{}: {} entries: {added} added, {present} already held, {conflicting} conflicting{kept}{failed}",
        source.display(),
        added
            .saturating_add(present)
            .saturating_add(conflicting)
            .saturating_add(imported.failed)
    )
}

fn age(seconds: u64) -> String {
    match seconds {
        s if s % 86_400 == 0 => format!("{} days ago", s / 86_400),
        s => format!("{s} s ago"),
    }
}

fn describe(stats: &CacheStats) -> String {
    let mut lines = vec![format!(
        "{} ({:.1} MB)",
        stats.path.display(),
        stats.file_bytes as f64 / 1e6
    )];
    if stats.kinds.is_empty() {
        lines.push("no entries".into());
    }
    for kind in &stats.kinds {
        lines.push(format!(
            "{}: {} entries, {:.1} MB",
            kind.kind,
            kind.entries,
            kind.bytes as f64 / 1e6
        ));
    }
    for server in &stats.negotiated {
        let expires = Timestamp::at(
            UNIX_EPOCH + Duration::from_secs(server.expires_at_s.min(LONGEST.as_secs())),
        );
        let mut said = Vec::new();
        if let Some(remembered) = &server.remembered {
            said.push(format!("remembered: {remembered}"));
        }
        if let Some(pending) = &server.pending {
            said.push(format!(
                "unconfirmed (not used until the server refuses again): {pending}"
            ));
        }
        lines.push(
            terminal_safe(&format!(
                "negotiated with {} for model `{}`: {} (until {expires})",
                server.base_url,
                server.model,
                said.join("; ")
            ))
            .into_owned(),
        );
    }
    let recent = &stats.recent;
    let asked = recent.hits + recent.misses;
    if asked > 0 {
        lines.push(format!(
            "last {} runs: {} hits, {} misses ({:.0}% hit rate); saved {} tokens and {:.1} s of model time",
            stats.recent_runs,
            recent.hits,
            recent.misses,
            100.0 * recent.hits as f64 / asked as f64,
            recent.tokens_saved,
            recent.ms_saved / 1000.0
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_days_or_durations() {
        assert_eq!(parse_age("30d"), Ok(30 * 86_400));
        assert_eq!(parse_age("1h30m"), Ok(5_400));
        assert!(parse_age("xd").is_err());
        assert!(parse_age("soon").is_err());
    }
}
