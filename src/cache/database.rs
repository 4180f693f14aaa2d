//! The cache's SQLite database: its tables, lookups on the caller's thread, and writes on a
//! thread of their own.
//!
//! WAL mode lets readers go on while one process writes, and the busy timeout makes a writer
//! wait its turn rather than fail, so batch workers and several processes can share one file.
//! Writes are queued and committed in batches (one transaction per batch), so storing an answer
//! costs its caller only a channel send. Any failure comes back as a [`CacheError`] for the
//! cache to report once.
//!
//! The layout carries a version (`PRAGMA user_version`). A database made before versions
//! existed (version 0) is taken as version 1 in place when its tables are today's; a version
//! this build does not know (a newer pagantic's) is refused before anything is written, so the
//! file is never changed by a build that cannot read it.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};
use serde::Serialize;

use super::{CacheError, Key};

/// How long a statement waits for another process's lock before it gives up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Most queued writes committed in one transaction.
const WRITE_BATCH: usize = 512;

/// The layout this build reads and writes, as `PRAGMA user_version` records it.
const SCHEMA_VERSION: i64 = 1;

/// The tables of [`SCHEMA_VERSION`] and their columns, in order: what a database from before
/// schema versions must have (for each table it has) to be taken as that version.
const TABLES: [(&str, &[&str]); 3] = [
    (
        "entries",
        &[
            "key",
            "kind",
            "value",
            "tokens",
            "duration_ms",
            "created_at",
            "used_at",
        ],
    ),
    (
        "runs",
        &["finished_at", "hits", "misses", "tokens_saved", "ms_saved"],
    ),
    ("file_hashes", &["path", "size", "modified_ns", "sha256"]),
];

/// The tables of [`SCHEMA_VERSION`], created where missing.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS entries (
    key BLOB PRIMARY KEY,
    kind TEXT NOT NULL,
    value TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    duration_ms REAL NOT NULL,
    created_at INTEGER NOT NULL,
    used_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_used_at ON entries (used_at);
CREATE TABLE IF NOT EXISTS runs (
    finished_at INTEGER NOT NULL,
    hits INTEGER NOT NULL,
    misses INTEGER NOT NULL,
    tokens_saved INTEGER NOT NULL,
    ms_saved REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS file_hashes (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    modified_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL
) WITHOUT ROWID;
";

/// A stored value, its kind, and what producing it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub kind: String,
    pub value: String,
    /// The tokens the model call used (0 for other kinds).
    pub tokens: u64,
    pub duration_ms: f64,
}

/// One entry under its key: what a cassette line, an import and a merge carry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: Key,
    pub stored: Stored,
}

/// What loading entries into the database did with them (`cache import`, `cache merge`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Imported {
    /// Entries it did not hold, now stored.
    pub added: u64,
    /// Entries it already held, the same.
    pub present: u64,
    /// Entries under a key it already held with another value: the one it held is kept.
    pub conflicting: u64,
    /// Entries that could not be read (a row of another database whose fields are not what
    /// they should be) or stored: left out, the others loaded.
    pub failed: u64,
}

/// A negotiated dialect's entry as `stats` lists it; None for one of another layout.
fn negotiated_stats(value: &str) -> Option<NegotiatedStats> {
    let value: serde_json::Value = serde_json::from_str(value).ok()?;
    let text = |field: &str| value.get(field)?.as_str().map(str::to_string);
    Some(NegotiatedStats {
        base_url: text("base_url")?,
        model: text("model")?,
        remembered: text("remembered"),
        pending: text("pending"),
        expires_at_s: value.get("expires_at_s")?.as_u64()?,
    })
}

/// A count (tokens, hits, a size) as the database holds it: SQLite's INTEGER is 64-bit signed,
/// so a count past it (a server's 2^64-1 tokens) is stored as the largest it holds.
fn stored_count(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// A duration as the database holds it: a finite, non-negative number (SQLite stores NaN as
/// NULL, which the column refuses).
fn stored_duration(duration_ms: f64) -> f64 {
    if duration_ms.is_nan() {
        0.0
    } else {
        duration_ms.clamp(0.0, f64::MAX)
    }
}

/// The token count in column `index` of `row`, whatever the row holds: a negative count is 0.
fn read_tokens(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<u64> {
    Ok(u64::try_from(row.get::<_, i64>(index)?).unwrap_or(0))
}

/// Whether `error`, from storing one entry, is about that entry alone (a value SQLite cannot
/// hold, a constraint it breaks): the entry fails and the others go on. Any other (a full
/// disk, a lost lock, a corrupt file) fails the whole write.
fn fails_the_entry_only(error: &rusqlite::Error) -> bool {
    match error {
        rusqlite::Error::ToSqlConversionFailure(_) => true,
        rusqlite::Error::SqliteFailure(error, _) => matches!(
            error.code,
            rusqlite::ErrorCode::TooBig
                | rusqlite::ErrorCode::ConstraintViolation
                | rusqlite::ErrorCode::TypeMismatch
        ),
        _ => false,
    }
}

/// How stale an entry's last-used time may get before a hit records the new one: re-runs of a
/// cached batch then read without writing, and `prune --older-than` is exact to within a day.
const TOUCH_AFTER_SECS: i64 = 86_400;

/// One run's use of the cache, kept for `pagantic cache stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RunStats {
    pub hits: u64,
    pub misses: u64,
    pub tokens_saved: u64,
    pub ms_saved: f64,
}

/// The entries of one kind (`call`, `embedding`, `score`, `tool`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindStats {
    pub kind: String,
    pub entries: u64,
    /// Bytes of stored values.
    pub bytes: u64,
}

/// A server's dialect an `openai` model negotiated and keeps (an entry of kind `negotiated`),
/// as `stats` shows it: the fields its engine writes in words.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NegotiatedStats {
    pub base_url: String,
    pub model: String,
    /// What the next run starts from (confirmed by a 4xx or a refusal that came again).
    pub remembered: Option<String>,
    /// What one refusal taught and none has confirmed yet (not started from).
    pub pending: Option<String>,
    /// When it stops being recalled, in Unix seconds.
    pub expires_at_s: u64,
}

/// Most negotiated dialects `stats` lists.
const NEGOTIATED_LISTED: u32 = 100;

/// What `pagantic cache stats` shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheStats {
    pub path: PathBuf,
    /// The database's files on disk (with its write-ahead log).
    pub file_bytes: u64,
    pub kinds: Vec<KindStats>,
    /// The servers' dialects kept, at most [`NEGOTIATED_LISTED`].
    pub negotiated: Vec<NegotiatedStats>,
    /// The runs counted in `recent` (the latest, at most [`RECENT_RUNS`]).
    pub recent_runs: u64,
    /// Their hits, misses and savings together.
    pub recent: RunStats,
}

/// How many of the latest runs `stats` sums up.
pub const RECENT_RUNS: u32 = 20;

enum Write {
    Put {
        key: Key,
        kind: &'static str,
        value: String,
        tokens: u64,
        duration_ms: f64,
    },
    Touch(Key),
    FileHash {
        path: String,
        size: u64,
        modified_ns: i64,
        sha256: String,
    },
    Run(RunStats),
    Flush(Sender<()>),
}

/// Consecutive hits share one read transaction, a snapshot of the database, for at most this
/// long and [`SNAPSHOT_LOOKUPS`] lookups: beginning and ending a transaction costs more than the
/// lookup itself, and a re-run answered from the cache is a stream of hits. No lookup reads a
/// snapshot older than this, so what this process and others write is seen at most this much
/// later. A miss ends the transaction (the model is called next) and so does a flush (the end
/// of a run), so one is not left open while nothing is looked up.
const SNAPSHOT_FOR: Duration = Duration::from_millis(100);

/// Most lookups one read transaction serves.
const SNAPSHOT_LOOKUPS: u32 = 256;

/// The connection lookups read through, and the read transaction consecutive hits share.
struct Reader {
    connection: Connection,
    /// When the open read transaction began, and how many lookups it has served.
    snapshot: Option<(Instant, u32)>,
}

impl Reader {
    /// Begins a read transaction unless one is open and still within its bounds.
    fn snapshot(&mut self) -> Result<(), CacheError> {
        match self.snapshot {
            Some((began, lookups))
                if began.elapsed() < SNAPSHOT_FOR
                    && lookups < SNAPSHOT_LOOKUPS
                    && !self.connection.is_autocommit() =>
            {
                Ok(())
            }
            _ => {
                self.end_snapshot()?;
                self.connection.execute_batch("BEGIN")?;
                self.snapshot = Some((Instant::now(), 0));
                Ok(())
            }
        }
    }

    /// Ends the read transaction, if one is open.
    fn end_snapshot(&mut self) -> Result<(), CacheError> {
        self.snapshot = None;
        if self.connection.is_autocommit() {
            return Ok(());
        }
        Ok(self.connection.execute_batch("COMMIT")?)
    }
}

/// An open cache database.
pub struct Database {
    path: PathBuf,
    reader: Mutex<Reader>,
    writes: Mutex<Option<Sender<Write>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

/// Seconds since the epoch.
fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Opens (creating if needed) the database file `path`, in WAL mode with the busy timeout; a
/// database of a schema version this build does not know is refused before anything is
/// written to it.
fn connect(path: &Path) -> Result<Connection, CacheError> {
    let connection = Connection::open(path)?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    // Reading the version is what first touches the file: a file that is not a database fails
    // here, before any run depends on it.
    let version = schema_version(&connection)?;
    if !(0..=SCHEMA_VERSION).contains(&version) {
        return Err(CacheError::UnknownSchemaVersion {
            found: version,
            known: SCHEMA_VERSION,
        });
    }
    let mode: String = connection.query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(CacheError::NotWal { mode });
    }
    connection.execute_batch("PRAGMA synchronous=NORMAL;")?;
    Ok(connection)
}

/// Opens the cache database at `path` to merge it into the one at `own`, read-only: refused when
/// it is missing, is `own` itself, or has another schema version than this build's.
fn open_other(path: &Path, own: &Path) -> Result<Connection, CacheError> {
    if !path.is_file() {
        return Err(CacheError::NoDatabase {
            path: path.to_path_buf(),
        });
    }
    if std::fs::canonicalize(path).ok() == std::fs::canonicalize(own).ok() {
        return Err(CacheError::MergeIntoItself {
            path: path.to_path_buf(),
        });
    }
    let connection = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    match schema_version(&connection)? {
        SCHEMA_VERSION => {}
        found => {
            return Err(CacheError::OtherSchemaVersion {
                path: path.to_path_buf(),
                found,
                known: SCHEMA_VERSION,
            });
        }
    }
    // What `entries` is: a plain table of this layout, not a view (which could be endless) or
    // a virtual table.
    let defined: Option<(String, String)> = connection
        .query_row(
            "SELECT type, COALESCE(sql, '') FROM sqlite_master WHERE name = 'entries'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()?;
    match defined {
        Some((kind, sql)) if kind == "table" && !sql.to_ascii_uppercase().contains("VIRTUAL") => {
            Ok(connection)
        }
        other => Err(CacheError::NotACacheTable {
            path: path.to_path_buf(),
            found: other.map_or_else(|| "nothing".to_string(), |(kind, _)| format!("a {kind}")),
        }),
    }
}

/// How much a merge may read from another database: no more bytes than its files hold (with a
/// little room for SQLite's own encoding) and no more rows than entries of the least size fit
/// in them. A plain table cannot yield more; a source that does is refused.
struct MergeBound {
    rows_left: u64,
    bytes_left: u64,
}

/// The fewest bytes an entry takes: its 32-byte key.
const LEAST_ENTRY_BYTES: u64 = 32;

impl MergeBound {
    fn of(path: &Path) -> Self {
        let size = |suffix: &str| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::fs::metadata(name).map_or(0, |m| m.len())
        };
        let bytes = size("")
            .saturating_add(size("-wal"))
            .saturating_add(1 << 20);
        MergeBound {
            rows_left: bytes / LEAST_ENTRY_BYTES,
            bytes_left: bytes,
        }
    }

    /// The entry of `row` (None: its fields are not an entry's), counted against the bound.
    fn read(&mut self, path: &Path, row: &rusqlite::Row<'_>) -> Result<Option<Entry>, CacheError> {
        let entry = entry_of_row(row);
        let bytes = match &entry {
            Ok(entry) => (entry.stored.kind.len() + entry.stored.value.len()) as u64,
            Err(_) => 0,
        };
        match (
            self.rows_left.checked_sub(1),
            self.bytes_left
                .checked_sub(bytes.saturating_add(LEAST_ENTRY_BYTES)),
        ) {
            (Some(rows_left), Some(bytes_left)) => {
                self.rows_left = rows_left;
                self.bytes_left = bytes_left;
                Ok(entry.ok())
            }
            _ => Err(CacheError::MergeTooLarge {
                path: path.to_path_buf(),
            }),
        }
    }
}

/// Runs `attempt` again while SQLite answers "busy" or "locked" at once, which it does (without
/// waiting for the busy timeout) where waiting could deadlock: two processes that open one new
/// file together, one switching it to WAL while the other reads it. A few tries, a little apart.
fn retrying_busy<T>(mut attempt: impl FnMut() -> Result<T, CacheError>) -> Result<T, CacheError> {
    const TRIES: u32 = 50;
    let mut tries = 1;
    loop {
        match attempt() {
            Err(CacheError::Database(rusqlite::Error::SqliteFailure(error, _)))
                if tries < TRIES
                    && matches!(
                        error.code,
                        rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                    ) =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            result => return result,
        }
    }
}

/// The database's `PRAGMA user_version`: 0 for a new file and for one from before versions.
fn schema_version(connection: &Connection) -> Result<i64, CacheError> {
    Ok(connection.pragma_query_value(None, "user_version", |row| row.get(0))?)
}

/// Brings the database to [`SCHEMA_VERSION`]: creates the tables of a new file, and takes a
/// file from before versions (version 0) as the current version when the tables it has are
/// today's. Done under the write lock, so processes opening one new file at once set it up once.
fn migrate(connection: &Connection) -> Result<(), CacheError> {
    if schema_version(connection)? == SCHEMA_VERSION {
        return Ok(());
    }
    let transaction = Transaction::new_unchecked(connection, TransactionBehavior::Immediate)?;
    match schema_version(&transaction)? {
        0 => {
            check_unversioned_layout(&transaction)?;
            transaction.execute_batch(SCHEMA)?;
            transaction.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        }
        found if found == SCHEMA_VERSION => {}
        found => {
            return Err(CacheError::UnknownSchemaVersion {
                found,
                known: SCHEMA_VERSION,
            });
        }
    }
    Ok(transaction.commit()?)
}

/// Checks that every table of [`TABLES`] that a version-0 database has holds exactly the
/// columns this build knows; the ones it lacks are created afterwards.
fn check_unversioned_layout(connection: &Connection) -> Result<(), CacheError> {
    for (table, expected) in TABLES {
        let mut statement = connection.prepare("SELECT name FROM pragma_table_info(?1)")?;
        let found = statement
            .query_map([table], |row| row.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        if !found.is_empty() && found != expected {
            return Err(CacheError::UnknownLayout {
                table,
                found: found.join(", "),
                expected: expected.join(", "),
            });
        }
    }
    Ok(())
}

/// Every entry, as [`entry_of_row`] reads it.
const SELECT_ENTRIES: &str = "SELECT key, kind, value, tokens, duration_ms FROM entries";

fn entry_of_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Entry> {
    Ok(Entry {
        key: Key(row.get(0)?),
        stored: Stored {
            kind: row.get(1)?,
            value: row.get(2)?,
            tokens: read_tokens(row, 3)?,
            duration_ms: row.get(4)?,
        },
    })
}

impl Database {
    /// Opens the database file `path` (its directory is created), with a writer thread; the
    /// thread reports a failed write through `failed`.
    pub fn open(
        path: &Path,
        failed: impl Fn(CacheError) + Send + 'static,
    ) -> Result<Arc<Database>, CacheError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| CacheError::CreateDir {
                dir: dir.to_path_buf(),
                source,
            })?;
        }
        let reader = retrying_busy(|| {
            let reader = connect(path)?;
            migrate(&reader)?;
            Ok(reader)
        })?;
        let writer = retrying_busy(|| connect(path))?;
        let (sender, receiver) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("pagantic-cache".into())
            .spawn(move || write_loop(&writer, &receiver, &failed))
            .map_err(CacheError::WriterNotStarted)?;
        Ok(Arc::new(Database {
            path: path.to_path_buf(),
            reader: Mutex::new(Reader {
                connection: reader,
                snapshot: None,
            }),
            writes: Mutex::new(Some(sender)),
            writer: Mutex::new(Some(thread)),
        }))
    }

    /// The value stored under `key`, if any; a hit on an entry last used over a day ago
    /// queues marking it used now (what `prune --older-than` goes by).
    pub fn get(&self, key: &Key) -> Result<Option<Stored>, CacheError> {
        let found = {
            let mut reader = self
                .reader
                .lock()
                .map_err(|_| CacheError::ConnectionPoisoned)?;
            reader.snapshot()?;
            let found = reader
                .connection
                .prepare_cached(
                    "SELECT kind, value, tokens, duration_ms, used_at FROM entries WHERE key = ?1",
                )
                .and_then(|mut statement| {
                    statement
                        .query_row([&key.0[..]], |row| {
                            let stored = Stored {
                                kind: row.get(0)?,
                                value: row.get(1)?,
                                tokens: read_tokens(row, 2)?,
                                duration_ms: row.get(3)?,
                            };
                            Ok((stored, row.get::<_, i64>(4)?))
                        })
                        .optional()
                })
                .map_err(CacheError::from);
            let hit = matches!(found, Ok(Some(_)));
            if hit && let Some((_, lookups)) = &mut reader.snapshot {
                // A count read from the database: it saturates, whatever the row held.
                *lookups = lookups.saturating_add(1);
            } else if let Err(reason) = reader.end_snapshot()
                && found.is_ok()
            {
                return Err(reason);
            }
            found?
        };
        Ok(found.map(|(stored, used_at)| {
            // `used_at` is whatever the row holds (i64::MIN included): its age saturates.
            if now().saturating_sub(used_at) > TOUCH_AFTER_SECS {
                self.send(Write::Touch(*key));
            }
            stored
        }))
    }

    /// Queues `value` to be stored under `key` (replacing what is there).
    pub fn put(&self, key: Key, kind: &'static str, value: String, tokens: u64, duration_ms: f64) {
        self.send(Write::Put {
            key,
            kind,
            value,
            tokens,
            duration_ms,
        });
    }

    /// Queues a run's tally for `stats`.
    pub fn record_run(&self, run: RunStats) {
        self.send(Write::Run(run));
    }

    /// The SHA-256 recorded for the file at `path` when it had this size and modification time.
    pub fn file_hash(&self, path: &str, size: u64, modified_ns: i64) -> Option<String> {
        let reader = self.reader.lock().ok()?;
        reader
            .connection
            .query_row(
                "SELECT sha256 FROM file_hashes WHERE path = ?1 AND size = ?2 AND modified_ns = ?3",
                params![path, stored_count(size), modified_ns],
                |row| row.get(0),
            )
            .optional()
            .ok()
            .flatten()
    }

    /// Queues recording a file's SHA-256 at its size and modification time.
    pub fn record_file_hash(&self, path: String, size: u64, modified_ns: i64, sha256: String) {
        self.send(Write::FileHash {
            path,
            size,
            modified_ns,
            sha256,
        });
    }

    /// Waits until every write queued so far is committed (or has failed), and lets lookups
    /// see them.
    pub fn flush(&self) {
        let (done, wait) = mpsc::channel();
        self.send(Write::Flush(done));
        let _ = wait.recv();
        if let Ok(mut reader) = self.reader.lock() {
            // A read transaction that cannot end is one the connection no longer has.
            let _ = reader.end_snapshot();
        }
    }

    /// Commits what is queued and stops the writer.
    pub fn close(&self) {
        if let Ok(mut writes) = self.writes.lock() {
            writes.take();
        }
        if let Ok(mut writer) = self.writer.lock()
            && let Some(thread) = writer.take()
        {
            let _ = thread.join();
        }
    }

    fn send(&self, write: Write) {
        if let Ok(writes) = self.writes.lock()
            && let Some(sender) = writes.as_ref()
        {
            // The writer only stops when the database closes; a send after that has nowhere to go.
            let _ = sender.send(write);
        }
    }

    /// What `pagantic cache stats` shows.
    pub fn stats(&self) -> Result<CacheStats, CacheError> {
        let mut reader = self
            .reader
            .lock()
            .map_err(|_| CacheError::ConnectionPoisoned)?;
        reader.end_snapshot()?;
        let reader = &reader.connection;
        let mut statement = reader
            .prepare(
                "SELECT kind, COUNT(*), COALESCE(SUM(LENGTH(value)), 0) FROM entries GROUP BY kind ORDER BY kind",
            )?;
        let kinds = statement
            .query_map([], |row| {
                Ok(KindStats {
                    kind: row.get(0)?,
                    entries: row.get(1)?,
                    bytes: row.get(2)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        // `TOTAL` sums as a float: counts from cache rows may be absurd, and SQLite's integer
        // `SUM` fails on overflow; the float converts back saturating.
        let (recent_runs, hits, misses, tokens_saved, ms_saved): (_, f64, f64, f64, f64) = reader
            .query_row(
            "SELECT COUNT(*), TOTAL(hits), TOTAL(misses), TOTAL(tokens_saved), TOTAL(ms_saved)
             FROM (SELECT * FROM runs ORDER BY rowid DESC LIMIT ?1)",
            [RECENT_RUNS],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            },
        )?;
        let negotiated = reader
            .prepare("SELECT value FROM entries WHERE kind = 'negotiated' LIMIT ?1")?
            .query_map([NEGOTIATED_LISTED], |row| row.get::<_, String>(0))?
            .filter_map(|value| negotiated_stats(&value.ok()?))
            .collect();
        let file_bytes = ["", "-wal"]
            .iter()
            .filter_map(|suffix| {
                let mut name = self.path.clone().into_os_string();
                name.push(suffix);
                std::fs::metadata(name).ok().map(|m| m.len())
            })
            .sum();
        Ok(CacheStats {
            path: self.path.clone(),
            file_bytes,
            kinds,
            negotiated,
            recent_runs,
            recent: RunStats {
                hits: hits as u64,
                misses: misses as u64,
                tokens_saved: tokens_saved as u64,
                ms_saved,
            },
        })
    }

    /// Deletes the entries no run has used for `unused_for` seconds; how many.
    pub fn prune(&self, unused_for: u64) -> Result<u64, CacheError> {
        let before = now().saturating_sub(i64::try_from(unused_for).unwrap_or(i64::MAX));
        self.flush();
        let reader = self
            .reader
            .lock()
            .map_err(|_| CacheError::ConnectionPoisoned)?;
        let deleted = reader
            .connection
            .execute("DELETE FROM entries WHERE used_at < ?1", [before])?;
        Ok(deleted as u64)
    }

    /// Stores the `entries` it does not hold, in one transaction (`cache import`); an entry under
    /// a key it holds is left as it is, counted as present or conflicting.
    pub fn import(&self, entries: impl IntoIterator<Item = Entry>) -> Result<Imported, CacheError> {
        self.load(entries.into_iter().map(|entry| Ok(Some(entry))))
    }

    /// Stores the entries of the cache database at `other` that it does not hold, as
    /// [`import`](Database::import) does (`cache merge`). `other` is only read; a database of
    /// another schema version is refused before anything is stored.
    ///
    /// Only a plain table is read (an `entries` that is a view, which could be endless, is
    /// refused), and no more rows and bytes than the file holds: a source that yields more is
    /// refused and nothing of it is stored. A row that does not read as an entry fails alone.
    pub fn merge(&self, other: &Path) -> Result<Imported, CacheError> {
        let source = open_other(other, &self.path)?;
        let mut bound = MergeBound::of(other);
        let mut statement = source.prepare(SELECT_ENTRIES)?;
        let mut rows = statement.query([])?;
        let entries = std::iter::from_fn(|| {
            let row = match rows.next() {
                Ok(Some(row)) => row,
                Ok(None) => return None,
                Err(error) => return Some(Err(CacheError::from(error))),
            };
            Some(bound.read(other, row))
        });
        self.load(entries)
    }

    /// Every entry it holds (what a cassette of the whole cache is made of).
    pub fn entries(&self) -> Result<Vec<Entry>, CacheError> {
        self.flush();
        let reader = self
            .reader
            .lock()
            .map_err(|_| CacheError::ConnectionPoisoned)?;
        let mut statement = reader.connection.prepare(SELECT_ENTRIES)?;
        let rows = statement.query_map([], entry_of_row)?;
        rows.map(|row| row.map_err(CacheError::from)).collect()
    }

    fn load(
        &self,
        entries: impl Iterator<Item = Result<Option<Entry>, CacheError>>,
    ) -> Result<Imported, CacheError> {
        self.flush();
        let reader = self
            .reader
            .lock()
            .map_err(|_| CacheError::ConnectionPoisoned)?;
        let transaction =
            Transaction::new_unchecked(&reader.connection, TransactionBehavior::Immediate)?;
        let now = now();
        let mut imported = Imported::default();
        for entry in entries {
            let Some(Entry { key, stored }) = entry? else {
                imported.failed += 1;
                continue;
            };
            let added = transaction
                .prepare_cached(
                    "INSERT INTO entries (key, kind, value, tokens, duration_ms, created_at, used_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) ON CONFLICT (key) DO NOTHING",
                )?
                .execute(params![
                    &key.0[..],
                    stored.kind,
                    stored.value,
                    stored_count(stored.tokens),
                    stored_duration(stored.duration_ms),
                    now
                ]);
            let added = match added {
                Ok(added) => added,
                Err(error) if fails_the_entry_only(&error) => {
                    imported.failed += 1;
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            if added == 1 {
                imported.added += 1;
                continue;
            }
            let held: (String, String) = transaction
                .prepare_cached("SELECT kind, value FROM entries WHERE key = ?1")?
                .query_row([&key.0[..]], |row| Ok((row.get(0)?, row.get(1)?)))?;
            if held == (stored.kind, stored.value) {
                imported.present += 1;
            } else {
                imported.conflicting += 1;
            }
        }
        transaction.commit()?;
        Ok(imported)
    }

    /// Deletes every entry, run tally and file hash, and gives the space back; how many entries.
    pub fn clear(&self) -> Result<u64, CacheError> {
        self.flush();
        let reader = self
            .reader
            .lock()
            .map_err(|_| CacheError::ConnectionPoisoned)?;
        let reader = &reader.connection;
        let deleted = reader.execute("DELETE FROM entries", [])?;
        reader.execute_batch("DELETE FROM runs; DELETE FROM file_hashes; VACUUM;")?;
        Ok(deleted as u64)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        self.close();
    }
}

/// Commits queued writes in batches until the database closes.
fn write_loop(connection: &Connection, queue: &Receiver<Write>, failed: &impl Fn(CacheError)) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < WRITE_BATCH {
            match queue.try_recv() {
                Ok(write) => batch.push(write),
                Err(_) => break,
            }
        }
        let mut flushed = Vec::new();
        if let Err(error) = commit(connection, batch, &mut flushed) {
            failed(error);
        }
        for done in flushed {
            let _ = done.send(());
        }
    }
}

fn commit(
    connection: &Connection,
    batch: Vec<Write>,
    flushed: &mut Vec<Sender<()>>,
) -> Result<(), CacheError> {
    let now = now();
    let transaction = connection.unchecked_transaction()?;
    for write in batch {
        match write {
            Write::Put {
                key,
                kind,
                value,
                tokens,
                duration_ms,
            } => {
                let stored = transaction
                    .prepare_cached(
                        "INSERT OR REPLACE INTO entries (key, kind, value, tokens, duration_ms, created_at, used_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
                    )
                    .and_then(|mut s| {
                        s.execute(params![
                            &key.0[..],
                            kind,
                            value,
                            stored_count(tokens),
                            stored_duration(duration_ms),
                            now
                        ])
                    });
                // An entry SQLite cannot hold is not cached; the batch's others still are.
                match stored {
                    Err(error) if !fails_the_entry_only(&error) => return Err(error.into()),
                    _ => {}
                }
            }
            Write::Touch(key) => {
                transaction
                    .prepare_cached("UPDATE entries SET used_at = ?2 WHERE key = ?1")
                    .and_then(|mut s| s.execute(params![&key.0[..], now]))?;
            }
            Write::FileHash {
                path,
                size,
                modified_ns,
                sha256,
            } => {
                transaction
                    .execute(
                        "INSERT OR REPLACE INTO file_hashes (path, size, modified_ns, sha256) VALUES (?1, ?2, ?3, ?4)",
                        params![path, stored_count(size), modified_ns, sha256],
                    )?;
            }
            Write::Run(run) => {
                transaction
                    .execute(
                        "INSERT INTO runs (finished_at, hits, misses, tokens_saved, ms_saved) VALUES (?1, ?2, ?3, ?4, ?5)",
                        params![
                            now,
                            stored_count(run.hits),
                            stored_count(run.misses),
                            stored_count(run.tokens_saved),
                            stored_duration(run.ms_saved)
                        ],
                    )?;
            }
            Write::Flush(done) => flushed.push(done),
        }
    }
    Ok(transaction.commit()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: i32) -> CacheError {
        CacheError::Database(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(code),
            None,
        ))
    }

    #[test]
    fn busy_and_locked_answers_are_tried_again_and_other_failures_are_not() {
        let mut calls = 0;
        let opened = retrying_busy(|| {
            calls += 1;
            match calls {
                1 => Err(sqlite(rusqlite::ffi::SQLITE_BUSY)),
                2 => Err(sqlite(rusqlite::ffi::SQLITE_LOCKED)),
                _ => Ok("opened"),
            }
        });
        assert_eq!((opened.expect("third try"), calls), ("opened", 3));
        let mut calls = 0;
        let refused = retrying_busy(|| -> Result<(), CacheError> {
            calls += 1;
            Err(sqlite(rusqlite::ffi::SQLITE_NOTADB))
        });
        assert!(refused.is_err());
        assert_eq!(calls, 1, "a file that is not a database is not tried again");
    }

    fn open(path: &Path) -> Arc<Database> {
        Database::open(path, |reason| panic!("write failed: {reason}")).expect("opens")
    }

    fn key(n: u8) -> Key {
        Key([n; 32])
    }

    /// Two connections to one database: the first has just been answered from it (so its
    /// snapshot is open), and the second has since stored entry 2.
    fn reader_after_a_hit() -> (tempfile::TempDir, Arc<Database>, Arc<Database>) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cache.db");
        let (reader, writer) = (open(&path), open(&path));
        writer.put(key(1), "call", "one".into(), 1, 1.0);
        writer.flush();
        assert!(reader.get(&key(1)).expect("reads").is_some());
        writer.put(key(2), "call", "two".into(), 1, 1.0);
        writer.flush();
        (dir, reader, writer)
    }

    #[test]
    fn hits_share_a_snapshot_and_a_miss_ends_it() {
        let (_dir, reader, writer) = reader_after_a_hit();
        // Written by another connection while the reader's snapshot is open: not seen yet...
        assert_eq!(reader.get(&key(2)).expect("reads"), None);
        // ...but the miss ended the snapshot, so the next lookup sees it.
        let found = reader.get(&key(2)).expect("reads").expect("found");
        assert_eq!(found.value, "two");
        // A flush ends it too: what was written before it is seen after it.
        writer.put(key(3), "call", "three".into(), 1, 1.0);
        writer.flush();
        reader.flush();
        assert!(reader.get(&key(3)).expect("reads").is_some());
    }

    /// A database as pagantic made it before schema versions: today's tables, version 0, one
    /// entry under key 7, and `version` written as its `user_version`.
    fn unversioned_database(path: &Path, version: i64) {
        let connection = Connection::open(path).expect("opens");
        connection.execute_batch(SCHEMA).expect("tables");
        connection
            .execute(
                "INSERT INTO entries (key, kind, value, tokens, duration_ms, created_at, used_at)
                 VALUES (?1, 'call', 'kept', 3, 12.5, ?2, ?2)",
                params![&key(7).0[..], now()],
            )
            .expect("an entry");
        connection
            .pragma_update(None, "user_version", version)
            .expect("version");
    }

    fn version_of(path: &Path) -> i64 {
        let connection = Connection::open(path).expect("opens");
        schema_version(&connection).expect("a version")
    }

    #[test]
    fn a_new_database_gets_the_current_schema_version() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cache.db");
        let database = open(&path);
        database.put(key(1), "call", "one".into(), 1, 1.0);
        database.flush();
        assert_eq!(version_of(&path), SCHEMA_VERSION);
        assert_eq!(
            database.get(&key(1)).expect("reads").expect("found").value,
            "one"
        );
    }

    #[test]
    fn a_database_from_before_versions_is_migrated_in_place_with_its_entries() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cache.db");
        unversioned_database(&path, 0);
        let database = open(&path);
        assert_eq!(version_of(&path), SCHEMA_VERSION);
        assert_eq!(
            database.get(&key(7)).expect("reads"),
            Some(Stored {
                kind: "call".into(),
                value: "kept".into(),
                tokens: 3,
                duration_ms: 12.5
            })
        );
        let stats = database.stats().expect("stats");
        assert_eq!(stats.kinds.len(), 1);
        assert_eq!(stats.kinds[0].entries, 1);
        drop(database);
        // Opened again, it is simply the current version.
        assert!(open(&path).get(&key(7)).expect("reads").is_some());
    }

    #[test]
    fn a_newer_schema_version_is_refused_and_the_file_left_as_it_is() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cache.db");
        unversioned_database(&path, SCHEMA_VERSION + 1);
        let before = std::fs::read(&path).expect("the file");
        let refused = Database::open(&path, |reason| panic!("write failed: {reason}"))
            .err()
            .expect("refused");
        assert!(
            matches!(
                refused,
                CacheError::UnknownSchemaVersion { found, known }
                    if found == SCHEMA_VERSION + 1 && known == SCHEMA_VERSION
            ),
            "{refused:?}"
        );
        assert!(
            refused.to_string().contains("a newer pagantic"),
            "{refused}"
        );
        assert_eq!(std::fs::read(&path).expect("the file"), before);
        assert_eq!(version_of(&path), SCHEMA_VERSION + 1);
    }

    #[test]
    fn an_unversioned_database_with_other_tables_is_refused_and_left_as_it_is() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cache.db");
        Connection::open(&path)
            .and_then(|c| c.execute_batch("CREATE TABLE entries (key BLOB, answer TEXT);"))
            .expect("a foreign table");
        let refused = Database::open(&path, |reason| panic!("write failed: {reason}"))
            .err()
            .expect("refused");
        assert!(
            matches!(&refused, CacheError::UnknownLayout { table: "entries", found, .. } if found == "key, answer"),
            "{refused:?}"
        );
        assert_eq!(version_of(&path), 0);
        let connection = Connection::open(&path).expect("opens");
        let tables: i64 = connection
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'",
                [],
                |row| row.get(0),
            )
            .expect("counted");
        assert_eq!(tables, 1, "nothing was created beside the foreign table");
    }

    #[test]
    fn a_snapshot_ends_after_its_time() {
        let (_dir, reader, _writer) = reader_after_a_hit();
        std::thread::sleep(SNAPSHOT_FOR + Duration::from_millis(20));
        assert!(reader.get(&key(2)).expect("reads").is_some());
    }
}
