//! [`CacheError`]: every reason the cache's database cannot be opened, read or written. The
//! cache reports one of these once and the run goes on uncached; the `cache` command shows it
//! as its failure.

use std::path::PathBuf;

/// Why the cache's database cannot be used.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum CacheError {
    /// The directory that holds the database could not be created.
    #[error("cannot create {}: {source}", dir.display())]
    #[diagnostic(
        code(cache::create_dir_failed),
        help("check that the directory is writable, or move the cache with PAGANTIC_CACHE_DIR")
    )]
    CreateDir {
        dir: PathBuf,
        source: std::io::Error,
    },

    /// SQLite failed: the file is not a database or is corrupt, another process held its lock
    /// past the busy timeout, or the disk is full.
    #[error("{0}")]
    #[diagnostic(code(cache::database_failed))]
    Database(#[from] rusqlite::Error),

    /// The database would not switch to write-ahead logging, which sharing it between
    /// processes relies on.
    #[error("the database would not switch to WAL mode ({mode})")]
    #[diagnostic(
        code(cache::not_wal),
        help("keep the cache on a local file system that SQLite can use WAL mode on")
    )]
    NotWal { mode: String },

    /// The thread that commits queued writes could not be started.
    #[error("cannot start the cache's writer: {0}")]
    #[diagnostic(code(cache::writer_not_started))]
    WriterNotStarted(#[source] std::io::Error),

    /// A thread panicked while it held the database's connection, which may be mid-transaction.
    #[error("a thread failed while it held the cache's connection")]
    #[diagnostic(code(cache::connection_poisoned))]
    ConnectionPoisoned,

    /// The database's schema version is one this build does not know: a newer pagantic wrote
    /// it. It is left as it is.
    #[error(
        "its schema version is {found}, which this build does not know (it reads version {known}): \
         a newer pagantic wrote it"
    )]
    #[diagnostic(
        code(cache::unknown_schema_version),
        help("use the newer pagantic, or point this one at another cache directory")
    )]
    UnknownSchemaVersion { found: i64, known: i64 },

    /// A database from before schema versions whose tables are not the layout this build
    /// knows, so it cannot be taken as version 1. It is left as it is.
    #[error(
        "its table `{table}` has the columns ({found}), not the ones this build knows ({expected})"
    )]
    #[diagnostic(
        code(cache::unknown_layout),
        help("point pagantic at another cache directory, or delete this one")
    )]
    UnknownLayout {
        table: &'static str,
        found: String,
        expected: String,
    },

    /// `cache merge`: the directory named holds no cache database.
    #[error("there is no call cache at {}", path.display())]
    #[diagnostic(
        code(cache::no_database),
        help("name a directory that a run used as its cache (`--cache DIR`), holding `cache.db`")
    )]
    NoDatabase { path: PathBuf },

    /// `cache merge`: the directory named is the cache being merged into.
    #[error("{} is the cache being merged into", path.display())]
    #[diagnostic(
        code(cache::merge_into_itself),
        help("name the other caches' directories, and this one with --cache")
    )]
    MergeIntoItself { path: PathBuf },

    /// `cache merge`: a database whose `entries` is not a plain table (a view, a virtual table,
    /// or missing); nothing is merged from it.
    #[error("{} is not a call cache: its `entries` is {found}, not a table", path.display())]
    #[diagnostic(
        code(cache::not_a_cache_table),
        help("merge only the cache directories pagantic runs wrote (`--cache DIR`)")
    )]
    NotACacheTable { path: PathBuf, found: String },

    /// `cache merge`: a database that yields more rows or bytes than its file holds (what no
    /// plain table does); nothing is merged from it.
    #[error(
        "{} yields more entries than its file holds; nothing is merged from it",
        path.display()
    )]
    #[diagnostic(
        code(cache::merge_too_large),
        help("merge only the cache directories pagantic runs wrote (`--cache DIR`)")
    )]
    MergeTooLarge { path: PathBuf },

    /// `cache merge`: a database whose layout is not this build's; nothing is merged from it.
    #[error(
        "{} has schema version {found}, and this build merges only version {known}",
        path.display()
    )]
    #[diagnostic(
        code(cache::other_schema_version),
        help(
            "merge it with the pagantic that wrote it, or open it once with this one (`pagantic cache stats --cache DIR`) if it is older"
        )
    )]
    OtherSchemaVersion {
        path: PathBuf,
        found: i64,
        known: i64,
    },
}
