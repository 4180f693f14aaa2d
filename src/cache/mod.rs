//! Layer 2: the persistent call cache, so that a re-run costs only what changed.
//!
//! A model call's answer is stored under the SHA-256 of everything that decides it — the
//! engine's identity (model file or embedded model, server and model name, the settings that
//! change answers) and the exact request (messages, tools, constraint, sampling and seed,
//! `max_tokens`, and for a sampled call its candidate number) — in an SQLite database (WAL, a
//! busy timeout), so that any number of batch workers and processes can share it. A
//! [`CachedEngine`] stands in front of any engine: it answers from the cache when it can and
//! stores what the model answers otherwise.
//!
//! The cache never costs a run: a database that is corrupt, locked past its timeout or on a
//! full disk is reported once (through the settings' `warn`) and the run goes on uncached.
//! Writes happen on a thread of their own, in batches, so storing an answer never holds up the
//! row that produced it.
//!
//! Entries also travel as cassettes (JSON Lines): a command records the entries it used
//! (`--record`), replays from a cassette instead of the database (`--cassette`), and a cassette
//! or another cache directory is loaded into the database (`cache import`, `cache merge`).

mod call_cache;
mod cassette;
mod database;
mod engine;
mod error;
mod key;

use std::path::PathBuf;

pub use call_cache::CallCache;
pub use cassette::CassetteError;
pub use database::{CacheStats, Database, Entry, Imported, KindStats, RunStats, Stored};
pub use engine::CachedEngine;
pub use error::CacheError;
pub use key::Key;

use crate::model_store::{self, Notice};

/// The environment variable that moves the cache (e.g. to a local disk the workers of one
/// machine share; see docs/cache.md for several machines).
pub const CACHE_DIR_VAR: &str = "PAGANTIC_CACHE_DIR";

/// The database's file name inside the cache directory.
pub const DATABASE_FILE: &str = "cache.db";

/// How a run uses the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheMode {
    /// Neither read nor written.
    #[default]
    Off,
    /// Answers are read from it and new ones stored (the default of the commands).
    ReadWrite,
    /// Every answer must come from it: a call it has not seen fails with `CACHE_MISS`.
    Only,
}

/// Where the cache is and how to use it.
#[derive(Clone, Default)]
pub struct CacheSettings {
    pub mode: CacheMode,
    /// The directory holding the database; None: [`default_dir`].
    pub dir: Option<PathBuf>,
    /// Where the one warning about a cache that cannot be used goes (stderr in the CLI), and
    /// why a record could not be written.
    pub warn: Option<Notice>,
    /// Where what a record says when it is written goes (stderr in the CLI, none under `-q`).
    pub notice: Option<Notice>,
    /// Answer from this cassette instead of the database (with the mode [`CacheMode::Only`]).
    pub cassette: Option<PathBuf>,
    /// Write every entry the command read or stored to this cassette when it ends.
    pub record: Option<PathBuf>,
    /// With `record`: tool results too.
    pub record_tools: bool,
}

impl CacheSettings {
    /// The directory in use: the one given, else [`default_dir`].
    pub fn directory(&self) -> PathBuf {
        self.dir.clone().unwrap_or_else(default_dir)
    }
}

/// `$PAGANTIC_CACHE_DIR`, else `cache/` in the model store's home (`$PAGANTIC_HOME`, else the
/// user's cache directory).
pub fn default_dir() -> PathBuf {
    match std::env::var_os(CACHE_DIR_VAR) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => model_store::home().join("cache"),
    }
}

/// Writes `entries` to `path` as a cassette, sorted by key as `--record` writes one; how many
/// it holds (a key given twice is written once, its last value).
pub fn write_cassette(
    path: &std::path::Path,
    entries: impl IntoIterator<Item = Entry>,
) -> Result<usize, CassetteError> {
    cassette::write(
        path,
        entries.into_iter().map(|entry| (entry.key, entry.stored)),
    )
}

/// The entries of the cassette at `path`, as [`Entry`] values to import (every line checked).
pub fn read_cassette(path: &std::path::Path) -> Result<Vec<Entry>, CassetteError> {
    Ok(cassette::read(path)?
        .into_iter()
        .map(|(key, stored)| Entry { key, stored })
        .collect())
}
